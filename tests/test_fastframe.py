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


# ---------------------------------------------------------------- eager column helpers
def _frame() -> pl.DataFrame:
    return pl.DataFrame(
        {
            "qid": ["q", "q", "q"],
            "mem_id": ["m1", "m2", "m3"],
            "score": [0.9, None, 0.1],
            "rank": [1, 2, 3],
            "extra": [1.0, 2.0, 3.0],
        }
    )


def test_with_series_replaces_in_place_and_appends_in_order():
    f = _frame()
    out = fastframe.with_series(
        f, pl.Series("new", [7, 8, 9]), pl.Series("score", [0.5, 0.25, 0.0]),
    )
    assert out.columns == ["qid", "mem_id", "score", "rank", "extra", "new"]
    assert out["score"].to_list() == [0.5, 0.25, 0.0]
    assert out["new"].to_list() == [7, 8, 9]
    assert f["score"].to_list() == [0.9, None, 0.1]  # the input is left as it was
    public = f.with_columns(pl.Series("new", [7, 8, 9]), pl.Series("score", [0.5, 0.25, 0.0]))
    assert out.equals(public)


def test_with_series_of_the_wrong_length_raises():
    with pytest.raises(pl.exceptions.ShapeError):
        fastframe.with_series(_frame(), pl.Series("new", [1, 2]))


def test_drop_columns_skips_missing_names_and_keeps_the_input():
    f = _frame()
    out = fastframe.drop_columns(f, "extra", "absent")
    assert out.columns == ["qid", "mem_id", "score", "rank"]
    assert f.columns == ["qid", "mem_id", "score", "rank", "extra"]


def test_select_columns_orders_by_the_names_given():
    out = fastframe.select_columns(_frame(), ["rank", "mem_id"])
    assert out.columns == ["rank", "mem_id"]
    assert out["mem_id"].to_list() == ["m1", "m2", "m3"]


def test_keep_rows_filters_by_a_mask(path):
    f = _frame()
    assert fastframe.keep_rows(f, np.array([True, False, True]))["mem_id"].to_list() == ["m1", "m3"]
    assert fastframe.keep_rows(f, np.array([False, False, False])).height == 0
    assert fastframe.keep_rows(f, np.array([False, False, False])).schema == f.schema
    with pytest.raises(ValueError, match="a mask of 2 for 3 rows"):
        fastframe.keep_rows(f, np.array([True, False]))


def test_by_rank_sorts_only_what_is_out_of_order():
    f = _frame()
    assert fastframe.by_rank(f) is f  # 1, 2, 3: already in order
    shuffled = f.with_columns(pl.Series("rank", [3, 1, 2]))
    assert fastframe.by_rank(shuffled)["mem_id"].to_list() == ["m2", "m3", "m1"]
    tied = f.with_columns(pl.Series("rank", [2, 1, 1]))
    assert fastframe.by_rank(tied)["rank"].to_list() == [1, 1, 2]


def test_f64_values_reads_floats_and_fills_nulls():
    assert fastframe.f64_values(pl.Series("s", [0.5, float("nan")])).tolist()[0] == 0.5
    filled = fastframe.f64_values(pl.Series("s", [1, None, 3]), float("-inf"))
    assert filled.dtype == np.float64
    assert filled.tolist() == [1.0, float("-inf"), 3.0]
    assert np.isnan(fastframe.f64_values(pl.Series("s", [None, 2.0]))[0])
