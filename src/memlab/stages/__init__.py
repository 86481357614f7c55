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

for _module in sorted(m.name for m in pkgutil.iter_modules(__path__)):
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
