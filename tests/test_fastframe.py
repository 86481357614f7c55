"""The fast polars paths give exactly what the public API gives, on either path."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from memlab import fastframe


@pytest.fixture(params=[True, False], ids=["direct", "public"])
def path(request, monkeypatch):
    """Run each test with the direct calls and with the public fallback."""
    if request.param and not fastframe.FAST:
        pytest.skip("the direct calls disagree with this polars: only the fallback is used")
    monkeypatch.setattr(fastframe, "FAST", request.param)
    return request.param


def test_direct_calls_in_use_on_the_pinned_polars():
    assert fastframe.FAST is True


def test_take_gathers_in_order_with_repeats_and_nulls(path):
    s = pl.Series("mem_id", ["a", None, "c", "d"], dtype=pl.String)
    out = fastframe.take(s, np.array([3, 1, 0, 3], dtype=np.int64))
    assert out.name == "mem_id"
    assert out.dtype == pl.String
    assert out.to_list() == ["d", None, "a", "d"]


def test_take_of_nothing_is_empty_with_the_type(path):
    out = fastframe.take(pl.Series("x", [1.5, 2.5]), np.zeros(0, dtype=np.int64))
    assert out.len() == 0
    assert out.dtype == pl.Float64


def test_take_out_of_bounds_raises(path):
    with pytest.raises(pl.exceptions.OutOfBoundsError):
        fastframe.take(pl.Series("x", [1, 2, 3]), np.array([3]))


def test_take_rows_keeps_every_column_and_type(path):
    frame = pl.DataFrame({
        "qid": ["q", "q", "q"],
        "score": [0.5, float("nan"), -1.0],
        "row": [10, 11, 12],
        "tag": [None, "x", "y"],
    })
    out = fastframe.take_rows(frame, np.array([2, 0], dtype=np.int64))
    assert out.schema == frame.schema
    assert out.to_dict(as_series=False) == {
        "qid": ["q", "q"], "score": [-1.0, 0.5], "row": [12, 10], "tag": ["y", None],
    }


def test_f64_series_keeps_nan_apart_from_null(path):
    out = fastframe.f64_series("score", np.array([1.0, np.nan, -0.0]))
    assert out.name == "score"
    assert out.dtype == pl.Float64
    assert out.null_count() == 0
    assert out.is_nan().to_list() == [False, True, False]


def test_f64_series_converts_integers(path):
    assert fastframe.f64_series("s", np.array([1, 2], dtype=np.int32)).to_list() == [1.0, 2.0]


def test_i64_series(path):
    out = fastframe.i64_series("row", np.array([2**40, -3, 0], dtype=np.int64))
    assert out.dtype == pl.Int64
    assert out.to_list() == [2**40, -3, 0]


def test_f64_series_turns_nan_into_null_when_asked(path):
    out = fastframe.f64_series("s", np.array([1.0, np.nan, 2.0]), nan_to_null=True)
    assert out.to_list() == [1.0, None, 2.0]
    assert out.is_nan().to_list() == [False, None, False]
