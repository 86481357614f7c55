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


def test_block_products_compute_only_wanted_blocks_and_never_depend_on_them():
    from memlab.memory.vectors import BLOCK_ROWS, block_products

    rng = np.random.default_rng(7)
    n = 2 * BLOCK_ROWS + 37  # two full blocks and a short one
    matrix = rng.standard_normal((n, 16)).astype(np.float32)
    q = rng.standard_normal(16).astype(np.float32)
    full = block_products(matrix, q)
    np.testing.assert_allclose(full, matrix @ q, rtol=1e-5, atol=1e-5)
    wanted = np.zeros(n, dtype=bool)
    wanted[BLOCK_ROWS + 3] = True  # one row of the second block
    some = block_products(matrix, q, wanted)
    second = slice(BLOCK_ROWS, 2 * BLOCK_ROWS)
    assert np.array_equal(some[second], full[second])  # bit for bit
    assert np.isneginf(some[:BLOCK_ROWS]).all() and np.isneginf(some[2 * BLOCK_ROWS:]).all()
    assert np.isneginf(block_products(matrix, q, np.zeros(n, dtype=bool))).all()


def test_similarities_of_wanted_rows_equal_the_full_ones():
    from memlab.memory.vectors import BLOCK_ROWS

    index = ExactIndex()
    rng = np.random.default_rng(1)
    n = BLOCK_ROWS + 100
    for row in range(n):
        index.set(row, rng.standard_normal(8))
    q = rng.standard_normal(8)
    wanted = np.zeros(n, dtype=bool)
    wanted[3] = True
    some, every = index.similarities(q, wanted=wanted), index.similarities(q)
    assert np.array_equal(some[:BLOCK_ROWS], every[:BLOCK_ROWS])
    assert np.isneginf(some[BLOCK_ROWS:]).all()
    assert np.isfinite(every).all()
