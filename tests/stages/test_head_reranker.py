"""Tests for memlab.stages.base.HeadReranker: the head gets the scores ``rescore`` returns, the
tail keeps its incoming order below the head."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from memlab.embed.hashing import HashingEmbedder
from memlab.memory.store import MemoryStore
from memlab.stages.base import (
    HeadReranker,
    QueryContext,
    check_frame,
    score_column,
)

if str(Path(__file__).parent) not in sys.path:  # --import-mode=importlib: helpers by path
    sys.path.insert(0, str(Path(__file__).parent))
from _candidates import frame  # noqa: E402

T0 = 1_767_225_600.0


class Negate(HeadReranker):
    """Turns the head upside down; records what ``rescore`` was given."""

    stage_name = "negate-test"
    columns = (score_column("negated", "the head's score, negated"),)

    def __init__(self, top_n: int = 2) -> None:
        self.top_n = top_n

    def rescore(self, frame, rows, head_scores, ctx):  # noqa: ANN001, ANN201
        self.seen_ = (frame["mem_id"].to_list(), rows.tolist(), head_scores.tolist())
        return -head_scores, {"negated": -head_scores}


@pytest.fixture
def ctx() -> QueryContext:
    emb = HashingEmbedder(dim=16, seed=0)
    store = MemoryStore(embedder=emb)
    for i in range(4):
        store.store(f"memory number {i}", "event", client_id="c", source_agent="a",
                    now=T0 + i, id=f"m{i}")
    return QueryContext("q", "memory", store, T0 + 10, embedder=emb)


def test_head_rescored_tail_kept_below_in_order(ctx) -> None:
    stage = Negate(top_n=2)
    # given out of order: the stage ranks first, so the head is m0 (4.0) and m1 (3.0)
    out = stage.transform(frame([("m2", 2.0), ("m0", 4.0), ("m3", 1.0), ("m1", 3.0)]), ctx)
    check_frame(out, "negate", {"negated": pl.Float64()})
    assert stage.seen_ == (["m0", "m1", "m2", "m3"], [0, 1], [4.0, 3.0])
    assert out["mem_id"].to_list() == ["m1", "m0", "m2", "m3"]
    # the tail: min(head) - 1 - (first tail score - its score)
    assert out["score"].to_list() == [-3.0, -4.0, -4.0 - 1 - (2.0 - 2.0), -4.0 - 1 - (2.0 - 1.0)]
    assert out["rank"].to_list() == [1, 2, 3, 4]
    assert out["negated"].to_list() == [-3.0, -4.0, None, None]
    assert out["row"].to_list() == [1, 0, 2, 3]


def test_head_longer_than_frame_and_empty_frame(ctx) -> None:
    out = Negate(top_n=10).transform(frame([("m0", 1.0), ("m1", 2.0)]), ctx)
    assert out["mem_id"].to_list() == ["m0", "m1"]
    np.testing.assert_array_equal(out["score"].to_numpy(), [-1.0, -2.0])
    empty = frame([])
    assert Negate().transform(empty, ctx) is empty
