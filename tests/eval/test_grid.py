"""Sweep grids: parsing ``stage__param=v1,v2`` expressions, and their points."""

import pytest

from memlab.eval.grid import grid_points, parse_grid, split_point


def test_parse_grid_reads_types():
    assert parse_grid(["rrf__k=10,30", "lifecycle__decay_factor=0.95,0.98", "x__on=true,none"]) == {
        "rrf__k": [10, 30],
        "lifecycle__decay_factor": [0.95, 0.98],
        "x__on": [True, None],
    }


def test_parse_grid_reads_bracketed_tuples():
    assert parse_grid(["combsum__weights=[0.7,0.3],[0.5, 0.5]", "a__b=[1,[2,x]],3"]) == {
        "combsum__weights": [(0.7, 0.3), (0.5, 0.5)],
        "a__b": [(1, (2, "x")), 3],
    }


@pytest.mark.parametrize(
    "expr",
    [
        "rrf_k=10", "rrf__k", "rrf__k=", "rrf__k=,", "=1,2",
        "c__w=[0.7,0.3", "c__w=0.7]", "c__w=a[1]",
    ],
)
def test_parse_grid_rejects_bad_expressions(expr):
    with pytest.raises(ValueError, match="bad grid expression"):
        parse_grid([expr])


def test_grid_points_is_the_product_in_order():
    assert grid_points({"a__x": [1, 2], "b__y": ["u", "v"]}) == [
        {"a__x": 1, "b__y": "u"}, {"a__x": 1, "b__y": "v"},
        {"a__x": 2, "b__y": "u"}, {"a__x": 2, "b__y": "v"},
    ]


def test_split_point_separates_replay_names():
    point = {"rrf__k": 10, "consolidation__merge_threshold": 0.7, "replay__touch_k": 0}
    assert split_point(point) == (
        {"rrf__k": 10}, {"consolidation__merge_threshold": 0.7, "replay__touch_k": 0},
    )
