"""Fast paths for the few polars calls a query makes hundreds of times.

A candidate frame holds ~100 rows, so polars' per-call work in Python dominates the cost of
building it: ``series[np_array]`` checks for negative indices and converts the array (60-90 µs
for 100 rows, against 3 µs for the gather itself), ``DataFrame.gather`` plans a query, and
``pl.Series(name, array)`` inspects the array's type on every call (~20 µs, against ~4 µs).
The helpers here call polars' own constructors and gathers directly, for inputs whose types
are known: non-negative integer positions, ``float64``/``int64`` arrays.

The column helpers (:func:`with_series`, :func:`drop_columns`, :func:`select_columns`,
:func:`keep_rows`, :func:`by_rank`) do what ``with_columns``, ``drop``, ``select``, ``filter``
and ``sort("rank")`` do for plain Series and names, with polars' eager calls (a shallow
``clone`` and in-place column edits): the public methods plan and run a lazy query each time
(~170-310 µs for a 100-row frame, against a few µs).

They are checked against the public API when this module is imported (:data:`FAST`); on a
polars whose internals differ, every helper falls back to the public call, so results never
depend on which path ran.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

__all__ = [
    "FAST",
    "by_rank",
    "drop_columns",
    "f64_series",
    "f64_values",
    "i64_series",
    "keep_rows",
    "select_columns",
    "take",
    "take_rows",
    "with_series",
]

_IDX = pl.get_index_type()
_IDX_NP = np.uint64 if _IDX == pl.UInt64 else np.uint32
_PySeries: Any = type(pl.Series("x", [0.0])._s)
_PyDataFrame: Any = type(pl.DataFrame({"x": [0.0]})._df)


def _index(idx: np.ndarray) -> Any:
    """The positions as polars' index ``PySeries`` (caller guarantees ``0 <= idx < len``)."""
    arr = np.ascontiguousarray(idx, dtype=_IDX_NP)
    return (_PySeries.new_u64 if _IDX_NP is np.uint64 else _PySeries.new_u32)("", arr, True)


def _fast_take(series: pl.Series, idx: np.ndarray) -> pl.Series:
    return pl.Series._from_pyseries(series._s.gather_with_series(_index(idx)))


def _fast_take_rows(frame: pl.DataFrame, idx: np.ndarray) -> pl.DataFrame:
    index = _index(idx)
    columns = [s._s.gather_with_series(index) for s in frame.iter_columns()]
    return pl.DataFrame._from_pydf(_PyDataFrame(columns))


def _fast_f64(name: str, values: np.ndarray, nan_to_null: bool = False) -> pl.Series:
    arr = np.ascontiguousarray(values, dtype=np.float64)
    return pl.Series._from_pyseries(_PySeries.new_f64(name, arr, nan_to_null))


def _fast_i64(name: str, values: np.ndarray) -> pl.Series:
    arr = np.ascontiguousarray(values, dtype=np.int64)
    return pl.Series._from_pyseries(_PySeries.new_i64(name, arr, True))


def _public_take(series: pl.Series, idx: np.ndarray) -> pl.Series:
    return series.gather(pl.Series(np.asarray(idx, dtype=np.int64)))


def _public_take_rows(frame: pl.DataFrame, idx: np.ndarray) -> pl.DataFrame:
    return frame.gather(pl.Series(np.asarray(idx, dtype=np.int64)))


def _public_f64(name: str, values: np.ndarray, nan_to_null: bool = False) -> pl.Series:
    return pl.Series(name, np.asarray(values, dtype=np.float64), dtype=pl.Float64,
                     nan_to_null=nan_to_null)


def _public_i64(name: str, values: np.ndarray) -> pl.Series:
    return pl.Series(name, np.asarray(values, dtype=np.int64), dtype=pl.Int64)


def _fast_paths_agree() -> bool:
    """Whether the direct calls exist here and give what the public API gives."""
    try:
        s = pl.Series("mem_id", ["a", "b", None, "d"], dtype=pl.String)
        frame = pl.DataFrame([s, pl.Series("score", [0.5, float("nan"), 1.0, -2.0])])
        idx = np.array([3, 0, 0, 2], dtype=np.int64)
        values = np.array([1.5, float("nan"), -0.0, 2.0])
        ints = np.array([7, -1, 0, 2**40], dtype=np.int64)
        return (
            _fast_take(s, idx).equals(_public_take(s, idx))
            and _fast_take(s, idx).name == "mem_id"
            and _fast_take_rows(frame, idx).equals(_public_take_rows(frame, idx))
            and _fast_take_rows(frame, idx[:0]).schema == frame.schema
            and _fast_f64("score", values).equals(_public_f64("score", values))
            and _fast_f64("score", values).is_nan().to_list() == [False, True, False, False]
            and _fast_f64("score", values, True).equals(_public_f64("score", values, True))
            and _fast_f64("score", values, True).null_count() == 1
            and _fast_i64("row", ints).equals(_public_i64("row", ints))
        )
    except Exception:  # noqa: BLE001 - any difference in polars' internals: public calls
        return False


#: Whether the direct calls are in use (they agreed with the public API at import).
FAST: bool = _fast_paths_agree()


def take(series: pl.Series, idx: np.ndarray) -> pl.Series:
    """``series`` at positions ``idx`` (integers, each ``0 <= i < len(series)``; not checked),
    keeping its name and type."""
    return _fast_take(series, idx) if FAST else _public_take(series, idx)


def take_rows(frame: pl.DataFrame, idx: np.ndarray) -> pl.DataFrame:
    """The rows of ``frame`` at positions ``idx`` (each ``0 <= i < frame.height``; not
    checked), every column gathered once, in order."""
    return _fast_take_rows(frame, idx) if FAST else _public_take_rows(frame, idx)


def f64_series(name: str, values: np.ndarray, *, nan_to_null: bool = False) -> pl.Series:
    """A ``Float64`` Series of ``values``: NaN stays NaN, or becomes null with
    ``nan_to_null``."""
    if FAST:
        return _fast_f64(name, values, nan_to_null)
    return _public_f64(name, values, nan_to_null)


def i64_series(name: str, values: np.ndarray) -> pl.Series:
    """An ``Int64`` Series of ``values``."""
    return _fast_i64(name, values) if FAST else _public_i64(name, values)


def with_series(frame: pl.DataFrame, *series: pl.Series) -> pl.DataFrame:
    """``frame.with_columns(*series)`` for Series of ``frame.height`` rows: a column of the same
    name is replaced where it stands, a new one is appended, in argument order; ``frame`` is
    left as it was."""
    out = frame.clone()
    for col in series:
        if col.name in out.columns:
            out.replace_column(out.get_column_index(col.name), col)
        else:
            out.insert_column(out.width, col)
    return out


def drop_columns(frame: pl.DataFrame, *names: str) -> pl.DataFrame:
    """``frame.drop(*names, strict=False)``: the columns named that exist are left out."""
    out = frame.clone()
    for name in names:
        if name in out.columns:
            out.drop_in_place(name)
    return out


def select_columns(frame: pl.DataFrame, names: list[str] | tuple[str, ...]) -> pl.DataFrame:
    """``frame.select(names)`` for plain column names (each must exist; no repeats)."""
    return pl.DataFrame([frame.get_column(n) for n in names])


def keep_rows(frame: pl.DataFrame, mask: np.ndarray) -> pl.DataFrame:
    """``frame.filter(mask)`` for a boolean numpy mask of ``frame.height`` entries."""
    mask = np.asarray(mask, dtype=bool)
    if len(mask) != frame.height:
        raise ValueError(f"keep_rows: a mask of {len(mask)} for {frame.height} rows")
    if mask.all():
        return frame
    return take_rows(frame, np.flatnonzero(mask))


def by_rank(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame.sort("rank")``; a frame whose ranks already increase strictly (as every stage
    leaves them) is returned as it is."""
    ranks = frame.get_column("rank")
    if ranks.null_count() == 0:
        r = ranks.to_numpy()
        if bool((r[1:] > r[:-1]).all()):
            return frame
    return frame.sort("rank")


def f64_values(series: pl.Series, null: float = float("nan")) -> np.ndarray:
    """``series.cast(pl.Float64).fill_null(null).to_numpy()``, read only; a ``Float64``
    series without nulls is read as it is."""
    if series.dtype == pl.Float64 and series.null_count() == 0:
        return series.to_numpy()
    return series.cast(pl.Float64).fill_null(null).to_numpy()
