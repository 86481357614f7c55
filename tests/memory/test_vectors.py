"""Tests for memlab.memory.vectors (the approximate index)."""

from __future__ import annotations

import numpy as np

from memlab.memory.vectors import AnnIndex, ExactIndex


def test_ann_index_follows_appends_and_rebuilds_after_a_rewrite() -> None:
    rng = np.random.default_rng(2)
    exact = ExactIndex()
    for row in range(50):
        exact.set(row, rng.standard_normal(8))
    exact.set(50, None)  # a row without a vector is not indexed
    ann = AnnIndex().sync(exact)
    assert len(ann) == 50
    exact.set(51, rng.standard_normal(8))
    assert len(ann.sync(exact)) == 51
    first = ann.index_
    v = rng.standard_normal(8)
    exact.set(3, v)  # rewrite of an indexed row
    ann.sync(exact)
    assert ann.index_ is not first and len(ann) == 51
    assert ann.search(v, 1).tolist() == [3]
