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


def test_similarities_run_on_one_blas_thread_and_restore_the_count() -> None:
    from threadpoolctl import threadpool_info

    from memlab.memory.vectors import single_thread_blas

    def blas_threads() -> list[int]:
        return [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]

    before = blas_threads()
    with single_thread_blas():
        assert set(blas_threads()) <= {1}
        with single_thread_blas():  # nested: the inner block restores one thread
            pass
        assert set(blas_threads()) <= {1}
    assert blas_threads() == before
    exact = ExactIndex()
    exact.set(0, np.array([3.0, 4.0]))
    exact.set(1, None)
    exact.set(2, np.array([0.0, 2.0]))
    sims = exact.similarities(np.array([0.0, 5.0]))
    assert sims.tolist() == [np.float32(4.0 / 5.0).item(), -np.inf, 1.0]
    assert blas_threads() == before
