import pytest

from memlab.embed import HashingEmbedder
from memlab.memory.conflict_policies import (
    CONFLICT_POLICIES,
    ConfidenceWeight,
    RecencyWeight,
    authority_rank,
    make_policy,
)
from memlab.memory.store import MemoryStore

T0 = 1_767_225_600.0
DAY = 86_400.0


def pair(old_kw=None, new_kw=None, gap=DAY * 3):
    store = MemoryStore(embedder=HashingEmbedder(dim=32))
    old = store.store("Launch is in May", "fact", client_id="c", now=T0, **(old_kw or {})).id
    new = store.store("Launch is not in May", "fact", client_id="c", now=T0 + gap,
                      **(new_kw or {})).id
    return store, old, new


def test_registry_names():
    assert set(CONFLICT_POLICIES) == {
        "supersede", "flag", "reject", "keep_both", "merge", "recency_weight",
        "confidence_weight", "clarify", "review", "authority",
    }
    assert [authority_rank(a) for a in ("human", "verified_agent", "inferred")] == [3, 2, 0]


def test_supersede_links_the_previous_version():
    store, old, new = pair()
    ev = make_policy("supersede").resolve(store, new, old, now=T0 + 4 * DAY)
    assert (ev.action, ev.winner) == ("superseded", new)
    assert not store.get(old).active and store.get(old).superseded_by == new
    assert store.get(new).metadata["previous_version_id"] == old


@pytest.mark.parametrize(
    ("old_kw", "new_kw", "gap", "winner", "rule"),
    [
        ({}, {}, 3 * DAY, "new", "timestamp"),
        ({"authority": "human"}, {"authority": "inferred"}, 0.5 * DAY, "old", "authority"),
        ({"confidence": 0.5}, {"confidence": 0.9}, 0.5 * DAY, "new", "confidence"),
        ({"confidence": 0.9}, {"confidence": 0.85}, 0.5 * DAY, None, "no clear winner"),
    ],
)
def test_authority_order(old_kw, new_kw, gap, winner, rule):
    store, old, new = pair(old_kw, new_kw, gap)
    ev = make_policy("authority").resolve(store, new, old, now=T0 + gap)
    assert ev.rule == rule
    if winner is None:
        assert ev.action == "flagged"
        assert store.get(old).metadata["conflicts_with"] == [new]
        assert store.get(new).metadata["conflicts_with"] == [old]
    else:
        win, lose = (new, old) if winner == "new" else (old, new)
        assert ev.winner == win
        assert store.get(win).active and not store.get(lose).active


def test_reject_lower_quality_incoming():
    store, old, new = pair({"authority": "verified_agent"}, {"authority": "inferred"})
    ev = make_policy("reject").resolve(store, new, old, now=T0 + 3 * DAY)
    assert ev.action == "rejected" and not store.get(new).active and store.get(old).active


def test_weighting_policies():
    store, old, new = pair(gap=10 * DAY)
    make_policy("recency_weight", factor=0.25).resolve(store, new, old, now=T0 + 10 * DAY)
    assert store.get(old).confidence == 0.25 and store.get(new).confidence == 1.0
    store, old, new = pair({"confidence": 0.9}, {"confidence": 0.4})
    make_policy("confidence_weight").resolve(store, new, old, now=T0 + 3 * DAY)
    assert store.get(new).confidence == 0.4 * 0.5


def test_merge_keep_both_clarify_review():
    store, old, new = pair()
    ev = make_policy("merge").resolve(store, new, old, now=T0 + 3 * DAY)
    assert store.get(ev.created).text == "Launch is not in May (earlier: Launch is in May)"
    assert not store.get(old).active and not store.get(new).active
    store, old, new = pair()
    make_policy("keep_both").resolve(store, new, old, now=T0 + 3 * DAY)
    assert store.get(old).metadata["versions"] == [new] and store.get(new).active
    store, old, new = pair()
    make_policy("clarify").resolve(store, new, old, now=T0 + 3 * DAY)
    assert store.get(old).metadata["clarification_question"] == (
        "Which is current: “Launch is in May” or “Launch is not in May”?"
    )
    store, old, new = pair()
    assert make_policy("review").resolve(store, new, old, now=T0 + 3 * DAY).action == "queued"
    assert store.get(new).metadata["review"] == "pending"


def test_merge_writes_the_merged_fact_in_the_scope_of_its_sources():
    store = MemoryStore(embedder=HashingEmbedder(dim=32))
    old = store.store("Launch is in May", "fact", client_id="c", scope="agent:hera", now=T0).id
    new = store.store("Launch is not in May", "fact", client_id="c", scope="agent:hera",
                      now=T0 + DAY).id
    ev = make_policy("merge").resolve(store, new, old, now=T0 + DAY)
    merged = store.get(ev.created)
    assert (merged.client_id, merged.scope) == ("c", "agent:hera")


def test_a_decision_is_flagged_not_retired():
    store = MemoryStore(embedder=HashingEmbedder(dim=32))
    old = store.store("We ship on Fridays", "decision", now=T0).id
    new = store.store("We never ship on Fridays", "fact", now=T0 + 3 * DAY).id
    ev = make_policy("supersede").resolve(store, new, old, now=T0 + 3 * DAY)
    assert ev.action == "flagged" and store.get(old).active


@pytest.mark.parametrize("cls", [RecencyWeight, ConfidenceWeight])
@pytest.mark.parametrize("factor", [0, 0.0, -0.5, 1.5, float("nan")])
def test_a_weighting_factor_outside_zero_to_one_is_refused(cls, factor):
    with pytest.raises(ValueError, match=r"field 'factor' must be in \(0, 1\]"):
        cls(factor=factor)


@pytest.mark.parametrize("cls", [RecencyWeight, ConfidenceWeight])
def test_a_weighting_factor_must_be_a_number_and_is_kept_verbatim(cls):
    with pytest.raises(TypeError, match="field 'factor' must be a number, got bool"):
        cls(factor=True)
    with pytest.raises(TypeError, match="field 'factor' must be a number, got str"):
        cls(factor="0.5")
    assert cls(factor=1).factor == 1 and isinstance(cls(factor=1).factor, int)
    assert cls(factor=0.25).factor == 0.25
