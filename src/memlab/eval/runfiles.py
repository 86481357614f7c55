"""Reading a finished run directory for ``memlab export`` and ``memlab compare``.

:func:`load_run` is :meth:`~memlab.eval.experiment.ExperimentResult.load` with every way a run
directory can be unreadable turned into one :class:`ValueError` naming the file (and the field)
at fault: a ``metrics.json`` or ``manifest.json`` nested too deeply for the JSON parser, a
parquet file on which polars panics, and fields of the wrong type where these commands read
them (a ``manifest.json`` whose ``dataset`` is a string, a metric whose value is not a number,
a ``rankings.parquet`` without its ``mem_id`` column).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import polars as pl

from memlab.eval.experiment import RUN_TABLES, ExperimentResult
from memlab.io import read_json, read_parquet

#: Fields of ``manifest.json`` that export and compare read, with the types they must have.
MANIFEST_FIELDS: dict[str, tuple[tuple[type, ...], str]] = {
    "dataset": ((dict,), "an object"),
    "metrics": ((list,), "a list"),
    "tests": ((list,), "a list"),
    "alpha": ((int, float), "a number"),
    "correction": ((str, type(None)), "a string"),
    "baseline": ((str, type(None)), "a string"),
    "protocol": ((dict,), "an object"),
    "held_out_split": ((dict,), "an object"),
}

#: Columns a run's tables must have where export reads them (file → column → polars check).
TABLE_COLUMNS: dict[str, dict[str, str]] = {
    "rankings": {"pipeline": "string", "qid": "string", "rank": "integer", "mem_id": "string"},
    "qrels": {"qid": "string", "mem_id": "string", "relevance": "integer"},
    "per_query": {"pipeline": "string", "qid": "string", "metric": "string", "value": "number"},
}


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "boolean", int: "integer", float: "number", str: "string", list: "array",
            dict: "object"}.get(type(value), type(value).__name__)


def check_manifest(manifest: Mapping[str, Any], file: Path) -> None:
    """Refuse a run manifest whose fields export and compare read have the wrong type.

    Raises:
        ValueError: ``FILE: field 'NAME': must be …, got …``.
    """
    for name, (types, what) in MANIFEST_FIELDS.items():
        if name not in manifest:
            continue
        value = manifest[name]
        if isinstance(value, bool) or not isinstance(value, types):
            raise ValueError(f"{file}: field {name!r}: must be {what}, got {_type_name(value)}")
    for name in ("metrics", "tests"):
        for item in manifest.get(name) or []:
            if not isinstance(item, str):
                raise ValueError(
                    f"{file}: field {name!r}: must be a list of strings, got an item of type "
                    f"{_type_name(item)}"
                )


def check_metrics(metrics: Mapping[str, Mapping[str, Any]], file: Path) -> None:
    """Refuse a ``metrics.json`` that names no pipeline or whose values are not numbers.

    Raises:
        ValueError: ``FILE: field 'PIPELINE.METRIC': must be a number, got …``.
    """
    if not metrics:
        raise ValueError(f"{file}: names no pipeline")
    for pipeline, values in metrics.items():
        for metric, value in values.items():
            if value is not None and (isinstance(value, bool)
                                      or not isinstance(value, (int, float))):
                raise ValueError(
                    f"{file}: field '{pipeline}.{metric}': must be a number, got "
                    f"{_type_name(value)}"
                )


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


def _diagnose(path: Path) -> None:
    """Read each file of the run alone, so that the one at fault raises its own message."""
    for name in ("metrics.json", "manifest.json"):
        if (path / name).is_file():
            read_json(path / name)
    for name in RUN_TABLES.values():
        if (path / name).is_file():
            read_parquet(path / name)


def load_run(run_dir: str | Path) -> ExperimentResult:
    """A run directory as :meth:`ExperimentResult.load` reads it, checked where export and
    compare read it (see the module docstring).

    Raises:
        ValueError: Naming the file (and field) at fault.
    """
    from polars.exceptions import PanicException

    path = Path(run_dir)
    try:
        result = ExperimentResult.load(path)
    except (RecursionError, PanicException):  # which file? each alone says
        _diagnose(path)
        raise ValueError(f"{path}: a file of the run cannot be read") from None
    check_metrics(result.metrics, path / "metrics.json")
    check_manifest(result.manifest, path / "manifest.json")
    for attr, columns in TABLE_COLUMNS.items():
        frame = getattr(result, attr)
        if frame.height or frame.width:  # a table that holds anything has its columns
            check_columns(frame, path / RUN_TABLES[attr], columns)
    return result
