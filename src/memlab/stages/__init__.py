"""Retrieval stages, one module per method; importing this package registers them all."""

import importlib
import pkgutil

from memlab.stages.base import (
    CANDIDATE_SCHEMA,
    STAGE_COLUMNS,
    STAGES,
    FusionStage,
    QueryContext,
    Stage,
    get_stage_class,
    register_stage,
)

# Every stage module registers its stage; private modules (the numba kernels) load on first use.
for _module in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    if not _module.startswith("_"):
        importlib.import_module(f"{__name__}.{_module}")

__all__ = [
    "CANDIDATE_SCHEMA",
    "STAGE_COLUMNS",
    "STAGES",
    "FusionStage",
    "QueryContext",
    "Stage",
    "get_stage_class",
    "register_stage",
]
