"""Tests for memlab.memory.vectors (the approximate index)."""

from __future__ import annotations

import numpy as np
import pytest

from memlab.memory.vectors import AnnIndex, ExactIndex, append_rows


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
    assert some[BLOCK_ROWS + 3] == full[BLOCK_ROWS + 3]  # bit for bit
    assert np.isneginf(some[:BLOCK_ROWS]).all() and np.isneginf(some[2 * BLOCK_ROWS:]).all()
    assert np.isneginf(block_products(matrix, q, np.zeros(n, dtype=bool))).all()
    wanted[BLOCK_ROWS:] = True  # most of the rows of two blocks: multiplied in place
    some = block_products(matrix, q, wanted)
    assert np.array_equal(some[BLOCK_ROWS:], full[BLOCK_ROWS:])
    assert np.isneginf(some[:BLOCK_ROWS]).all()


@pytest.mark.parametrize("dim", [384, 17])
def test_a_rows_product_is_the_same_whichever_rows_are_wanted_and_however_long_the_store(dim):
    """Gathered rows, whole blocks and the short last block give each row one value, bit for
    bit: every product is padded, so BLAS never rounds a row through its tail path."""
    from memlab.memory.vectors import BLOCK_ROWS, block_products

    rng = np.random.default_rng(dim)
    n = BLOCK_ROWS + 203
    matrix = rng.standard_normal((n, dim)).astype(np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    q = rng.standard_normal(dim).astype(np.float32)
    full = block_products(matrix, q)
    for size in (1, 2, 3, 6, 7, 50, 99, 130):
        wanted = np.zeros(n, dtype=bool)
        wanted[rng.choice(n, size, replace=False)] = True
        assert np.array_equal(block_products(matrix, q, wanted)[wanted], full[wanted])
    for m in (BLOCK_ROWS + 1, BLOCK_ROWS + 2, BLOCK_ROWS + 3, n - 1):  # a store that was shorter
        assert np.array_equal(block_products(matrix[:m], q), full[:m])


def test_a_blas_that_rounds_rows_by_position_is_only_multiplied_by_blocks(monkeypatch):
    from memlab.memory import vectors

    monkeypatch.setattr(vectors, "_GATHER_EXACT", {16: False})
    taken = []
    real_take = np.take
    monkeypatch.setattr(vectors.np, "take", lambda *a, **k: taken.append(1) or real_take(*a, **k))
    matrix = np.ones((40, 16), dtype=np.float32)
    wanted = np.zeros(40, dtype=bool)
    wanted[3] = True
    out = vectors.block_products(matrix, np.ones(16, dtype=np.float32), wanted)
    assert out.tolist() == [16.0] * 40 and taken == []


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
    assert some[3] == every[3]  # bit for bit
    assert np.isneginf(np.delete(some, 3)).all()  # one wanted row of 612: only it is computed
    assert np.isfinite(every).all()


def test_append_rows_doubles_the_buffer_and_keeps_what_was_written() -> None:
    a = np.arange(6, dtype=np.float32).reshape(3, 2)
    buf = append_rows(None, 0, a)
    assert buf.shape == (1024, 2) and buf[:3].tolist() == a.tolist()
    same = append_rows(buf, 3, a[:1])
    assert same is buf and same[:4].tolist() == [*a.tolist(), [0.0, 1.0]]
    big = np.ones((1500, 2), dtype=np.float32)
    grown = append_rows(same, 4, big)
    assert grown.shape == (2048, 2)  # max(4 + 1500, 2 · 1024)
    assert grown[:4].tolist() == same[:4].tolist() and grown[4:1504].sum() == 3000.0
    with pytest.raises(ValueError, match="rows are in use but there is no buffer"):
        append_rows(None, 2, a)


def test_row_groups_give_each_row_its_best_vector_within_the_wanted_groups():
    from memlab.memory.vectors import RowGroups

    v = np.array([[1, 0], [0, 1], [0.6, 0.8], [-1, 0], [0.8, 0.6]], dtype=np.float32)
    groups = RowGroups()
    # rows 0..3: codes 7, 9, 7, 9; vectors per row 2, 0, 1, 2 (row 1 has none)
    groups.append(np.array([7, 9, 7, 9]), np.array([2, 0, 1, 2]), v)
    q = np.array([1.0, 0.0], dtype=np.float32)
    f = np.float32  # row 0: max(1, 0); row 2: 0.6; row 3: max(-1, 0.8)
    assert groups.best(q, [7, 9], 4).tolist() == [1.0, -np.inf, f(0.6), f(0.8)]
    assert groups.best(q, [9], 4).tolist() == [-np.inf, -np.inf, -np.inf, f(0.8)]
    assert groups.best(q, [5], 4).tolist() == [-np.inf] * 4
    groups.append(np.array([9]), np.array([1]), v[:1])  # row 4
    assert groups.best(q, [9], 5).tolist() == [-np.inf, -np.inf, -np.inf, f(0.8), 1.0]
    assert groups.same_codes(np.array([7, 9, 7, 9, 9, 3]))
    assert not groups.same_codes(np.array([7, 7, 7, 9, 9]))


# ------------------------------------------------------------------ rows grouped by client
def test_similarities_by_client_group_multiply_only_the_wanted_clients() -> None:
    index = ExactIndex()
    for vec in ([1.0, 0.0], [0.0, 1.0], [0.6, 0.8], None):
        index.set(len(index), None if vec is None else np.array(vec))
    codes = np.array([0, 1, 0, 0])
    wanted = np.array([True, False, True, True])
    sims = index.similarities(np.array([2.0, 0.0]), wanted, codes=codes)
    # client 1's row is not multiplied; the row without a vector stays -inf
    assert sims.tolist() == [1.0, -np.inf, np.float32(0.6).item(), -np.inf]
    assert len(index.groups_[1]) == 4


def test_grouped_similarities_equal_the_block_products_bit_for_bit() -> None:
    rng = np.random.default_rng(3)
    index = ExactIndex()
    n = 3_000
    for vec in rng.standard_normal((n, 48)):
        index.set(len(index), vec)
    codes = rng.integers(0, 9, n)  # clients scattered over the blocks
    for client in range(9):
        wanted = codes == client
        q = rng.standard_normal(48)
        grouped = index.similarities(q, wanted, codes=codes)
        blocks = index.similarities(q, wanted)
        assert np.array_equal(grouped[wanted], blocks[wanted])
        assert np.isneginf(grouped[codes != client]).all()


def test_grouped_rows_follow_appends_rewrites_and_changed_codes() -> None:
    index = ExactIndex()
    index.set(0, np.array([1.0, 0.0]))
    codes = np.array([0])
    q = np.array([1.0, 0.0])
    assert index.similarities(q, np.array([True]), codes=codes).tolist() == [1.0]
    index.set(1, np.array([0.0, 1.0]))  # appended: the groups grow
    assert index.similarities(q, np.array([True, True]), codes=np.array([0, 0])).tolist() == [
        1.0, 0.0,
    ]
    index.set(0, np.array([0.0, 3.0]))  # rewritten (a purge, a correction): made again
    assert index.similarities(q, np.array([True, True]), codes=np.array([0, 0])).tolist() == [
        0.0, 0.0,
    ]
    # row 1 moved to client 1: client 0's group no longer holds it
    assert index.similarities(q, np.array([True, False]), codes=np.array([0, 1])).tolist() == [
        0.0, -np.inf,
    ]


def test_a_large_index_multiplies_blocks_instead_of_grouping(monkeypatch) -> None:
    from memlab.memory import vectors

    monkeypatch.setattr(vectors, "GROUP_MAX_ROWS", 2)
    index = ExactIndex()
    for vec in ([1.0, 0.0], [0.0, 1.0], [0.6, 0.8]):
        index.set(len(index), np.array(vec))
    sims = index.similarities(np.array([1.0, 0.0]), np.array([True, False, False]),
                              codes=np.array([0, 1, 2]))
    assert sims[0] == 1.0
    assert getattr(index, "groups_", None) is None


def test_a_query_of_another_dimension_is_refused_naming_both() -> None:
    from memlab.embed import HashingEmbedder
    from memlab.memory.store import MemoryStore

    store = MemoryStore(embedder=HashingEmbedder(dim=64))
    store.store("Acme runs on Postgres", "fact", key="db", now=0.0)
    store.embedder = HashingEmbedder(dim=32)  # as a store reopened with another embedder
    with pytest.raises(ValueError, match=(
        r"^the query vector has dimension 32 but the store's vectors have 64: the store was "
        r"written with another embedder"
    )):
        store.search("Postgres", now=1.0)
