"""Tests of memlab.eval.metrics.scope_violation: namespace violations, exact counts."""

import sys
from pathlib import Path

import polars as pl

from memlab.eval.metrics import evaluate

if str(Path(__file__).parent) not in sys.path:  # --import-mode=importlib: helpers by path
    sys.path.insert(0, str(Path(__file__).parent))
from _frames import make_rankings, values  # noqa: E402


def test_scope_violation_counts_unreadable_memories() -> None:
    memories = pl.DataFrame(
        {
            "mem_id": ["t", "a", "h", "p", "z", "n"],
            "scope": ["team", "agent:atlas", "agent:hera", "project:apollo", "project:zeus",
                      None],
        }
    )
    rankings = make_rankings(
        {"q1": ["t", "h", "z", "a"], "q2": ["p", "z", "n"], "q3": ["h", "z"]}
    )
    queries = pl.DataFrame(
        {
            "qid": ["q1", "q2", "q3", "q4"],
            "agent": ["atlas", "atlas", None, "hera"],
            "projects": [[], ["apollo"], [], []],
        }
    )
    got = evaluate(rankings, None, ["scope_violation@2", "scope_violation@4"], queries=queries,
                   memories=memories)
    # q1: hera's and zeus's memories; q2: zeus only (apollo is assigned, null = team);
    # q3 is a human (no row); q4 has no ranking.
    assert values(got, "scope_violation@2") == {"q1": 1.0, "q2": 1.0, "q4": 0.0}
    assert values(got, "scope_violation@4") == {"q1": 2.0, "q2": 1.0, "q4": 0.0}
