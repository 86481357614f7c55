import sys
from pathlib import Path

import polars as pl
import pytest

from memlab.memory.store import MemoryStore
from memlab.stages.base import QueryContext
from memlab.stages.neighbors import Neighbors

if str(Path(__file__).parent) not in sys.path:  # --import-mode=importlib: helpers by path
    sys.path.insert(0, str(Path(__file__).parent))
from _candidates import frame  # noqa: E402

T0 = 1_767_225_600.0


@pytest.fixture
def conv():
    store = MemoryStore()
    # client x: a stream t0..t0+3, then a pause of two hours, then e; client y interleaved
    for mid, client, t in [
        ("a", "x", 0), ("b", "x", 1), ("y1", "y", 1.5), ("c", "x", 2), ("d", "x", 3),
        ("e", "x", 7203),
    ]:
        store.store(f"turn {mid}", client_id=client, source_agent="s", now=T0 + t, id=mid)
    return store


def ctx(store):
    return QueryContext(qid="q", text="", store=store, now=T0 + 10_000)


def test_scores_flow_to_the_same_clients_neighbours_within_the_gap(conv):
    out = Neighbors(weight=0.5).transform(frame([("b", 1.0), ("d", 0.4), ("e", 2.0)]), ctx(conv))
    got = dict(zip(out["mem_id"], out["score"], strict=True))
    # b: 1.0 + 0.5·(a:0 + c:0); c (added): 0.5·(b 1.0 + d 0.4); a (added): 0.5·1.0;
    # d: 0.4 + 0.5·(c:0 + e: too far) ; e: 2.0 alone (two-hour pause); y1 is another client
    assert got == pytest.approx({"e": 2.0, "b": 1.0, "c": 0.5 * 1.4, "a": 0.5, "d": 0.4})
    assert out["mem_id"].to_list() == ["e", "b", "c", "a", "d"]
    assert out.filter(pl.col("mem_id") == "c")["neighbor_score"].item() == pytest.approx(1.4)


def test_window_two_and_no_additions(conv):
    out = Neighbors(weight=1.0, window=2, add_missing=False).transform(
        frame([("a", 1.0), ("d", 3.0)]), ctx(conv)
    )
    got = dict(zip(out["mem_id"], out["score"], strict=True))
    # a's two right neighbours are b and c (not d); d's two left neighbours are c and b
    assert got == {"a": 1.0, "d": 3.0}
    out = Neighbors(weight=1.0, window=3, add_missing=False).transform(
        frame([("a", 1.0), ("d", 3.0)]), ctx(conv)
    )
    assert dict(zip(out["mem_id"], out["score"], strict=True)) == {"a": 4.0, "d": 4.0}


def test_invisible_neighbours_are_not_added(conv):
    conv.forget("c", "wrong", now=T0 + 5000)
    out = Neighbors(weight=0.5).transform(frame([("b", 1.0)]), ctx(conv))
    assert sorted(out["mem_id"].to_list()) == ["a", "b"]
