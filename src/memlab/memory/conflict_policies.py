"""Conflict resolution as policies: what to do when a new memory contradicts an existing one.

Design §D1.3's paths, one small class each:

============================  =====================================================
name                          outcome
============================  =====================================================
``supersede``                 automatic update: the old one is retired, the new one links it
                              (``supersedes``, ``metadata.previous_version_id``)
``merge``                     one merged memory is stored, both are retired
``reject``                    the incoming one is not kept when it is of lower quality
                              (authority, then confidence); otherwise an automatic update
``keep_both``                 both stay, linked as versions of each other
``recency_weight``            cross-user recency: the older claim's confidence is weighted
                              down when the newer is much newer
``confidence_weight``         cross-user confidence: the lower-confidence claim is weighted
                              down when the gap is large
``clarify``                   a clarification question, surfaced on the next recall that
                              touches either memory
``review``                    both go into the tenant's review queue
============================  =====================================================

and docs/design.md §D3.8's order, ``authority``: the more recent wins when the two are further apart
than ``close_days``; otherwise the higher source authority (``human > verified_agent >
unverified_agent > inferred``); otherwise the clearly higher confidence; otherwise a
``conflicts_with`` link is flagged on both for review (``flag`` does only that).

Every policy is called as ``policy.resolve(store, new_id, old_id, now=…)`` after the new memory
was written, and returns a :class:`ConflictEvent` for the replay's log. Decisions are immutable:
a policy that would retire one flags the pair instead.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Protocol

from memlab.memory.records import AUTHORITY_LEVELS, DecisionImmutableError
from memlab.registry import Registry
from memlab.timeutil import SECONDS_PER_DAY

if TYPE_CHECKING:
    from memlab.memory.store import MemoryStore

__all__ = [
    "CONFLICT_POLICIES",
    "ConflictEvent",
    "ConflictPolicy",
    "authority_rank",
    "make_policy",
]


@dataclass(frozen=True, slots=True)
class ConflictEvent:
    """What a policy did with one contradicting pair.

    Attributes:
        at: Replay clock (epoch seconds).
        policy: Policy name.
        action: ``superseded``, ``rejected``, ``merged``, ``kept``, ``weighted``,
            ``clarify``, ``queued`` or ``flagged``.
        new_id: The incoming memory.
        old_id: The existing memory it contradicts.
        winner: The memory that stays authoritative, if the policy chose one.
        created: A memory the policy wrote (``merge``).
        rule: Why (the deciding criterion, or the detector's rule).
    """

    at: float
    policy: str
    action: str
    new_id: str
    old_id: str
    winner: str | None = None
    created: str | None = None
    rule: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The event as a plain dict."""
        return asdict(self)


class ConflictPolicy(Protocol):
    """Resolves one contradicting pair."""

    name: str

    def resolve(
        self, store: MemoryStore, new_id: str, old_id: str, *, now: float
    ) -> ConflictEvent:
        """Apply the policy to ``(new_id, old_id)`` and report what it did."""
        ...


CONFLICT_POLICIES: Registry[type[Any]] = Registry("conflict policy")
"""Policy classes by name."""


def make_policy(name: str, **params: Any) -> ConflictPolicy:
    """Build a registered policy with its constants."""
    return CONFLICT_POLICIES.lookup(name)(**params)


def authority_rank(authority: str) -> int:
    """Higher is more authoritative (``human`` = 3 … ``inferred`` = 0)."""
    return len(AUTHORITY_LEVELS) - 1 - AUTHORITY_LEVELS.index(authority)


def _link(store: MemoryStore, memory_id: str, other: str, now: float, field: str) -> None:
    rec = store.get(memory_id)
    links = list(rec.metadata.get(field, []))
    if other not in links:
        links.append(other)
    rec.metadata = {**rec.metadata, field: links}
    store.save(memory_id, field, now=now)


def _flag(store: MemoryStore, new_id: str, old_id: str, now: float) -> None:
    _link(store, new_id, old_id, now, "conflicts_with")
    _link(store, old_id, new_id, now, "conflicts_with")


def _retire(store: MemoryStore, loser: str, winner: str, now: float, change: str) -> bool:
    """Retire ``loser`` in favour of ``winner``; False when ``loser`` is a decision."""
    try:
        store.retire(
            loser, change, now=now, superseded_by=winner, superseded_at=now, valid_to=now
        )
    except DecisionImmutableError:
        return False
    rec = store.get(winner)
    rec.supersedes = loser
    rec.metadata = {**rec.metadata, "previous_version_id": loser}
    store.save(winner, "supersedes", now=now)
    return True


def _win(
    store: MemoryStore, policy: str, new_id: str, old_id: str, winner: str, now: float, rule: str
) -> ConflictEvent:
    """Retire the loser of the pair; flag the pair when the loser is a decision."""
    loser = old_id if winner == new_id else new_id
    change = "superseded" if loser == old_id else "rejected"
    if _retire(store, loser, winner, now, change):
        return ConflictEvent(now, policy, change, new_id, old_id, winner=winner, rule=rule)
    _flag(store, new_id, old_id, now)
    return ConflictEvent(now, policy, "flagged", new_id, old_id, rule=f"{rule}; decision")


@CONFLICT_POLICIES.register("supersede")
class AutomaticUpdate:
    """Design §D1.3 "automatic update": the new memory supersedes the old one."""

    name = "supersede"

    def resolve(self, store: MemoryStore, new_id: str, old_id: str, *, now: float) -> ConflictEvent:
        """Retire ``old_id``; ``new_id`` links it as its previous version."""
        return _win(store, self.name, new_id, old_id, new_id, now, "newer")


@CONFLICT_POLICIES.register("flag")
class Flag:
    """Only flag a ``conflicts_with`` link on both memories (resolution pending)."""

    name = "flag"

    def resolve(self, store: MemoryStore, new_id: str, old_id: str, *, now: float) -> ConflictEvent:
        """Link both ways under ``metadata.conflicts_with``."""
        _flag(store, new_id, old_id, now)
        return ConflictEvent(now, self.name, "flagged", new_id, old_id, rule="pending")


def _quality(store: MemoryStore, memory_id: str) -> tuple[int, float]:
    rec = store.get(memory_id)
    return authority_rank(rec.authority), rec.confidence


@CONFLICT_POLICIES.register("reject")
class Reject:
    """Design §D1.3 "reject": an incoming memory of lower quality is not kept.

    Quality is source authority, then confidence. A better or equal incoming memory is an
    automatic update instead.
    """

    name = "reject"

    def resolve(self, store: MemoryStore, new_id: str, old_id: str, *, now: float) -> ConflictEvent:
        """Reject ``new_id`` when it is worse than ``old_id``, else supersede ``old_id``."""
        if _quality(store, new_id) < _quality(store, old_id):
            return _win(store, self.name, new_id, old_id, old_id, now, "lower quality")
        return _win(store, self.name, new_id, old_id, new_id, now, "not lower quality")


@CONFLICT_POLICIES.register("keep_both")
class KeepBoth:
    """Design §D1.3 "keep both": both stay active, linked as versions of each other."""

    name = "keep_both"

    def resolve(self, store: MemoryStore, new_id: str, old_id: str, *, now: float) -> ConflictEvent:
        """Link ``metadata.versions`` both ways."""
        _link(store, new_id, old_id, now, "versions")
        _link(store, old_id, new_id, now, "versions")
        return ConflictEvent(now, self.name, "kept", new_id, old_id)


@CONFLICT_POLICIES.register("merge")
class Merge:
    """Design §D1.3 "merge": one memory states both (``new (earlier: old)``), both are retired.

    Args:
        template: Text of the merged memory, with ``{new}`` and ``{old}`` fields.
    """

    name = "merge"

    def __init__(self, template: str = "{new} (earlier: {old})") -> None:
        self.template = template

    def resolve(self, store: MemoryStore, new_id: str, old_id: str, *, now: float) -> ConflictEvent:
        """Store the merged text as a fact that supersedes both."""
        new, old = store.get(new_id), store.get(old_id)
        if "decision" in (new.type, old.type):
            _flag(store, new_id, old_id, now)
            return ConflictEvent(now, self.name, "flagged", new_id, old_id, rule="decision")
        res = store.store(
            self.template.format(new=new.text, old=old.text),
            "fact",
            source_agent="conflict-merge",
            client_id=new.client_id,
            scope=new.scope,  # derived memories stay where their sources are (same scope)
            importance=new.importance,
            authority=new.authority,
            confidence=max(new.confidence, old.confidence),
            metadata={"merged_from": [old_id, new_id]},
            now=now,
        )
        for mid in (old_id, new_id):
            if store.get(mid).active and mid != res.id:
                store.retire(
                    mid, "merged", now=now, superseded_by=res.id, superseded_at=now, valid_to=now
                )
        return ConflictEvent(now, self.name, "merged", new_id, old_id, res.id, res.id)


def _check_number(
    value: object, field: str, *, low: float, high: float | None = None, open_low: bool = False
) -> float:
    """A policy's constant, checked where it is set: a real number in its range."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"field '{field}' must be a number, got {type(value).__name__}")
    v = float(value)
    too_low = v <= low if open_low else v < low
    if v != v or too_low or (high is not None and v > high):
        bounds = f"{'(' if open_low else '['}{low:g}, {'inf' if high is None else f'{high:g}'}]"
        raise ValueError(f"field '{field}' must be in {bounds}, got {value!r}")
    return value  # type: ignore[return-value]  # stored verbatim


def _weight(store: MemoryStore, memory_id: str, factor: float, now: float) -> None:
    rec = store.get(memory_id)
    rec.confidence = float(rec.confidence) * factor
    store.save(memory_id, "weighted", now=now)


@CONFLICT_POLICIES.register("recency_weight")
class RecencyWeight:
    """Design §D1.3 "cross-user recency": a much newer claim weights the older one down.

    Args:
        min_gap_days: The newer claim must be at least this much newer.
        factor: The older claim's confidence is multiplied by this.
    """

    name = "recency_weight"

    def __init__(self, min_gap_days: float = 7.0, factor: float = 0.5) -> None:
        self.min_gap_days = _check_number(min_gap_days, "min_gap_days", low=0.0)
        self.factor = _check_number(factor, "factor", low=0.0, high=1.0, open_low=True)

    def resolve(self, store: MemoryStore, new_id: str, old_id: str, *, now: float) -> ConflictEvent:
        """Weight the older claim down when the gap is large enough, else keep both."""
        gap = (store.get(new_id).created_at - store.get(old_id).created_at) / SECONDS_PER_DAY
        if abs(gap) < self.min_gap_days:
            return ConflictEvent(now, self.name, "kept", new_id, old_id, rule="gap too small")
        older, newer = (old_id, new_id) if gap > 0 else (new_id, old_id)
        _weight(store, older, self.factor, now)
        return ConflictEvent(now, self.name, "weighted", new_id, old_id, newer, rule="newer")


@CONFLICT_POLICIES.register("confidence_weight")
class ConfidenceWeight:
    """Design §D1.3 "cross-user confidence": a much more confident claim weights the other down.

    Args:
        min_margin: The confidences must differ by at least this.
        factor: The lower claim's confidence is multiplied by this.
    """

    name = "confidence_weight"

    def __init__(self, min_margin: float = 0.2, factor: float = 0.5) -> None:
        self.min_margin = _check_number(min_margin, "min_margin", low=0.0, high=1.0)
        self.factor = _check_number(factor, "factor", low=0.0, high=1.0, open_low=True)

    def resolve(self, store: MemoryStore, new_id: str, old_id: str, *, now: float) -> ConflictEvent:
        """Weight the lower-confidence claim down when the margin is large enough."""
        cn, co = store.get(new_id).confidence, store.get(old_id).confidence
        if abs(cn - co) < self.min_margin:
            return ConflictEvent(now, self.name, "kept", new_id, old_id, rule="margin too small")
        lower, higher = (new_id, old_id) if cn < co else (old_id, new_id)
        _weight(store, lower, self.factor, now)
        return ConflictEvent(now, self.name, "weighted", new_id, old_id, higher, rule="confidence")


@CONFLICT_POLICIES.register("clarify")
class Clarify:
    """Design §D1.3 "user clarification": a question surfaced on the next recall touching either.

    Both memories stay; each gets ``metadata.clarification_question`` (pending). The replay
    reports the question with the first query whose top hits include either memory.

    Args:
        template: The question, with ``{old}`` and ``{new}`` fields.
    """

    name = "clarify"

    def __init__(self, template: str = "Which is current: “{old}” or “{new}”?") -> None:
        self.template = template

    def resolve(self, store: MemoryStore, new_id: str, old_id: str, *, now: float) -> ConflictEvent:
        """Attach the pending question to both memories."""
        question = self.template.format(old=store.get(old_id).text, new=store.get(new_id).text)
        for mid in (new_id, old_id):
            rec = store.get(mid)
            rec.metadata = {**rec.metadata, "clarification_question": question}
            store.save(mid, "clarify", now=now)
        _flag(store, new_id, old_id, now)
        return ConflictEvent(now, self.name, "clarify", new_id, old_id, rule=question)


@CONFLICT_POLICIES.register("review")
class TenantReview:
    """Design §D1.3 "tenant review": the pair joins the tenant's review queue (both stay)."""

    name = "review"

    def resolve(self, store: MemoryStore, new_id: str, old_id: str, *, now: float) -> ConflictEvent:
        """Flag the pair and mark both ``metadata.review = "pending"``."""
        for mid in (new_id, old_id):
            rec = store.get(mid)
            rec.metadata = {**rec.metadata, "review": "pending"}
            store.save(mid, "review", now=now)
        _flag(store, new_id, old_id, now)
        return ConflictEvent(now, self.name, "queued", new_id, old_id)


@CONFLICT_POLICIES.register("authority")
class AuthorityOrder:
    """Design §D3.8: timestamp, then source authority, then confidence, else flag.

    Args:
        close_days: Writes closer than this are "close in time": the timestamp does not decide.
        confidence_margin: Confidence decides when the two differ by at least this.
    """

    name = "authority"

    def __init__(self, close_days: float = 1.0, confidence_margin: float = 0.1) -> None:
        self.close_days = close_days
        self.confidence_margin = confidence_margin

    def resolve(self, store: MemoryStore, new_id: str, old_id: str, *, now: float) -> ConflictEvent:
        """Pick the winner by the design's order and retire the loser; flag a tie."""
        new, old = store.get(new_id), store.get(old_id)
        gap = (new.created_at - old.created_at) / SECONDS_PER_DAY
        if abs(gap) >= self.close_days:
            winner = new_id if gap > 0 else old_id
            return _win(store, self.name, new_id, old_id, winner, now, "timestamp")
        ra, rb = authority_rank(new.authority), authority_rank(old.authority)
        if ra != rb:
            winner = new_id if ra > rb else old_id
            return _win(store, self.name, new_id, old_id, winner, now, "authority")
        if abs(new.confidence - old.confidence) >= self.confidence_margin:
            winner = new_id if new.confidence > old.confidence else old_id
            return _win(store, self.name, new_id, old_id, winner, now, "confidence")
        _flag(store, new_id, old_id, now)
        return ConflictEvent(now, self.name, "flagged", new_id, old_id, rule="no clear winner")
