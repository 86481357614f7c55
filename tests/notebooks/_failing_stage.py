"""A stage that fails on every query, for the apps' error display (imported by path from a
pipeline configuration: ``stage = "_failing_stage:Broken"``)."""

from __future__ import annotations

import polars as pl

from memlab.stages.base import QueryContext, Stage


class Broken(Stage):
    """Raises ``KeyError`` naming ``missing`` (not a ``ValueError``: the apps must show any
    failure)."""

    def __init__(self, missing: str = "m-404") -> None:
        self.missing = missing

    def transform(self, frame: pl.DataFrame, ctx: QueryContext) -> pl.DataFrame:
        raise KeyError(f"memory {self.missing} is not in the store")
