"""Datasets: format v1 (write log + timed queries), validation, importers and the generator."""

from memlab.datasets import (  # noqa: F401  (importing registers each importer)
    import_log,
    import_markdown,
    import_mcp_memory,
    locomo,
    longmemeval,
)
from memlab.datasets.format import (
    Dataset,
    DatasetError,
    MemoryOp,
    Query,
    load_dataset,
    write_dataset,
)
from memlab.datasets.importers import IMPORTERS, ImportReport, register_importer, run_importer
from memlab.datasets.validate import Problem, main_validate, validate_dataset

__all__ = [
    "IMPORTERS",
    "Dataset",
    "DatasetError",
    "ImportReport",
    "MemoryOp",
    "Problem",
    "Query",
    "load_dataset",
    "main_validate",
    "register_importer",
    "run_importer",
    "validate_dataset",
    "write_dataset",
]
