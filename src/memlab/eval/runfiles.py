"""Reading a finished run directory for ``memlab export`` and ``memlab compare``.

:func:`load_run` is :meth:`~memlab.eval.experiment.ExperimentResult.load` (which turns every
way a run's file can be unreadable, a field of the wrong type included, into one
:class:`ValueError` naming the file and the field) with the checks these commands need on
top: ``metrics.json`` names at least one pipeline, and the tables hold the columns they read
(a ``rankings.parquet`` without its ``mem_id`` column is named).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import polars as pl

from memlab.eval.experiment import (
    MANIFEST_FIELDS,
    RUN_TABLES,
    ExperimentResult,
    check_manifest_fields,
    check_metric_values,
)

__all__ = [
    "MANIFEST_FIELDS",
    "TABLE_COLUMNS",
    "check_columns",
    "check_manifest",
    "check_metrics",
    "load_run",
]

#: Columns a run's tables must have where export reads them (file → column → polars check).
TABLE_COLUMNS: dict[str, dict[str, str]] = {
    "rankings": {"pipeline": "string", "qid": "string", "rank": "integer", "mem_id": "string"},
    "qrels": {"qid": "string", "mem_id": "string", "relevance": "integer"},
    "per_query": {"pipeline": "string", "qid": "string", "metric": "string", "value": "number"},
}


def check_manifest(manifest: Mapping[str, Any], file: Path) -> None:
    """Refuse a run manifest whose fields export and compare read have the wrong type
    (:func:`memlab.eval.experiment.check_manifest_fields`).

    Raises:
        ValueError: ``FILE: field 'NAME': must be …, got …``.
    """
    check_manifest_fields(manifest, file)


def check_metrics(metrics: Mapping[str, Mapping[str, Any]], file: Path) -> None:
    """Refuse a ``metrics.json`` that names no pipeline or whose values are not numbers.

    Raises:
        ValueError: ``FILE: names no pipeline`` or ``FILE: field 'PIPELINE.METRIC': must be a
            number, got …``.
    """
    if not metrics:
        raise ValueError(f"{file}: names no pipeline")
    check_metric_values(metrics, file)


def check_columns(frame: pl.DataFrame, file: Path, columns: Mapping[str, str]) -> None:
    """Refuse a run table without ``columns`` of the right kind (``string``, ``integer``).

    Raises:
        ValueError: ``FILE: missing column 'NAME'`` or ``FILE: column 'NAME': must be …``.
    """
    for name, kind in columns.items():
        if name not in frame.columns:
            raise ValueError(f"{file}: missing column {name!r}")
        dtype = frame.schema[name]
        if kind == "integer":
            ok = dtype.is_integer()
        elif kind == "number":
            ok = dtype.is_numeric() or dtype == pl.Null
        else:
            ok = dtype == pl.String
        if not ok:
            raise ValueError(f"{file}: column {name!r}: must hold {kind}s, got {dtype}")


def load_run(run_dir: str | Path) -> ExperimentResult:
    """A run directory as :meth:`ExperimentResult.load` reads it, checked where export and
    compare read it (see the module docstring).

    Raises:
        ValueError: Naming the file (and field) at fault.
    """
    path = Path(run_dir)
    result = ExperimentResult.load(path)
    check_metrics(result.metrics, path / "metrics.json")
    for attr, columns in TABLE_COLUMNS.items():
        frame = getattr(result, attr)
        if frame.height or frame.width:  # a table that holds anything has its columns
            check_columns(frame, path / RUN_TABLES[attr], columns)
    return result
