"""Consolidation without an LLM (design §D0.10's engine, design §D2.6's Hebbian upkeep).

* event TTL cleanup: active events never accessed, of medium or low importance, older than
  ``event_ttl_days`` → ``active=False``, ``expired_at=now``;
* merged facts go through exact (content hash) and semantic (cosine ≥ 0.92) dedup before they
  are stored, and supersede their sources;
* ``general`` knowledge categories are reclassified by keyword rules (never a specific one);
* Hebbian graph upkeep (docs/design.md §D2.6): co-activated entities strengthen their edges, every
  co-occurrence edge decays. The activation that counts is what was retrieved since the last
  cycle when the caller passes it (a replay does), else the memories processed this cycle;
* contradiction flagging (docs/design.md §D3.8), with a detector: each processed memory's candidates
  (:func:`memlab.memory.conflicts.contradiction_candidates`) that the detector calls
  contradictory get a ``conflicts_with`` link (resolution pending);
* archival (design §D3.7), with a threshold: active memories whose ``decay_score`` is below it
  move to the cold tier (``archived_at``); those back above it leave it.

An LLM-backed merge plugs in through :class:`Merger`; :class:`memlab.memory.merge.ClusterMerger`
is one (docs/design.md §D3.6: cluster similar memories, summarise each cluster with a generator).
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from memlab.memory.conflicts import ContradictionDetector, contradiction_candidates
from memlab.memory.decay import decay_score
from memlab.memory.scopes import TEAM
from memlab.memory.store import MemoryStore, WriteResult, content_hash
from memlab.timeutil import SECONDS_PER_DAY, coerce_ts

DEFAULT_CATEGORY_KEYWORDS: Mapping[str, tuple[str, ...]] = {
    "technical": (
        "deploy", "server", "database", "api", "bug", "cms", "seo", "hosting", "infrastructure",
        "code", "migration", "latency", "kubernetes", "postgres", "redis", "error", "build",
    ),
    "meeting": ("meeting", "call", "agenda", "action item", "standup", "sync", "minutes"),
    "brand": ("brand", "voice", "logo", "guideline", "tone", "visual identity", "palette"),
    "strategy": ("strategy", "campaign", "positioning", "roadmap", "competitor", "plan", "okr"),
    "content": ("blog", "article", "newsletter", "editorial", "published", "content", "post"),
    "relationship": ("contact", "prefers", "preference", "email", "phone", "likes", "manager"),
}


def expire_events(
    store: MemoryStore,
    *,
    now: float | str | None = None,
    event_ttl_days: float = 30.0,
    importance_levels: Sequence[str] = ("medium", "low"),
) -> list[str]:
    """Design §D0.10's ``cleanupOldEvents``; returns the ids it soft-deleted (in row order)."""
    t_now = coerce_ts(now, field="now") if now is not None else time.time()
    n = len(store)
    if n == 0:
        return []
    types = store.column("type")
    candidates = np.flatnonzero(
        (types == "event")
        & store.column("active")
        & (store.column("access_count") == 0)
        & (store.column("created_at") < t_now - event_ttl_days * SECONDS_PER_DAY)
    )
    expired: list[str] = []
    if len(candidates) == 0:
        return expired
    with store.batch():
        for idx in candidates:
            rec = store.record_at(int(idx))
            if rec.importance not in importance_levels:
                continue
            store.retire(rec.id, "expired", now=t_now, expired_at=t_now)
            expired.append(rec.id)
    return expired


def consolidate_scope(
    store: MemoryStore,
    *,
    now: float | str | None = None,
    client_id: str | None = None,
    scope: str | None = None,
    since: float | str | None = None,
    event_ttl_days: float = 30.0,
) -> ConsolidationReport:
    """One consolidation cycle without a merger over a slice of the store (docs/design.md §D3.6
    ``consolidate(scope, since)``): the memories of ``client_id`` (not those of ``global``,
    which belong to every client: a cycle for ``global`` itself processes them), of ``scope``
    only when given, created at or after ``since`` when given. A live server and a replay of its
    recording both call this.

    The entity graph is shared by every scope and every client: a cycle over one client or one
    scope leaves its co-occurrence strengths alone (no Hebbian decay or strengthening), so that
    consolidating one tenant's or one agent's memories never moves the edges that other
    principals' graph stages rank with. Only a cycle over the whole store (no client, no
    scope) runs the Hebbian upkeep, as :class:`Consolidator` does.

    ``event_ttl_days`` is the TTL of the cycle's cleanup: a live server's ``ttl_days``, or a
    replay's (``ReplayConfig.ttl_days``), as their scheduled cycles take it.
    """
    mask = store.visible_mask(client_id=client_id, now=now)
    if client_id is not None:  # its own memories: those of 'global' belong to every client
        mask &= store.column("client") == store.client_code(client_id)
    if scope is not None:
        mask &= store.column("scope") == store.scope_code(scope)
    if since is not None:
        mask &= store.column("created_at") >= coerce_ts(since, field="since")
    whole = client_id is None and scope is None
    cycle = (
        Consolidator(event_ttl_days=event_ttl_days)
        if whole
        else Consolidator(event_ttl_days=event_ttl_days, hebbian_rate=0.0, hebbian_decay=1.0)
    )
    return cycle.run(store, now=now, rows=np.flatnonzero(mask))


class Merger(Protocol):
    """Proposes merged facts from a batch of memories (e.g. an LLM through a generator)."""

    def merge(self, texts: Sequence[str]) -> list[tuple[str, list[int]]]:
        """Return (merged fact text, indices into ``texts`` it merges)."""
        ...


@dataclass
class ConsolidationReport:
    """What one consolidation cycle did (memory ids throughout).

    Attributes:
        at: The cycle's clock (epoch seconds).
        expired: Events the TTL cleanup retired.
        reclassified: Memory id → its new knowledge category.
        merged: Merged facts created.
        merged_from: Merged fact → the memories it merged (and retired).
        skipped_duplicates: Merge proposals dropped by the exact or semantic dedup.
        processed: Memories processed (unconsolidated before the cycle).
        hebbian_edges: Co-occurrence edges before the upkeep.
        strengthened: Entity-name pairs whose edge was strengthened.
        dropped_edges: Edges that decayed below the floor.
        flagged: Pairs newly linked ``conflicts_with``.
        archived: Memories moved to the cold tier.
        unarchived: Memories that left it.
    """

    at: float = 0.0
    expired: list[str] = field(default_factory=list)
    reclassified: dict[str, str] = field(default_factory=dict)
    merged: list[str] = field(default_factory=list)
    merged_from: dict[str, list[str]] = field(default_factory=dict)
    skipped_duplicates: int = 0
    processed: int = 0
    hebbian_edges: int = 0
    strengthened: list[tuple[str, str]] = field(default_factory=list)
    dropped_edges: int = 0
    flagged: list[tuple[str, str]] = field(default_factory=list)
    archived: list[str] = field(default_factory=list)
    unarchived: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        """A JSON-ready dict (pairs as two-element lists)."""
        return {
            "at": self.at,
            "processed": self.processed,
            "expired": list(self.expired),
            "reclassified": dict(self.reclassified),
            "merged": list(self.merged),
            "merged_from": {k: list(v) for k, v in self.merged_from.items()},
            "skipped_duplicates": self.skipped_duplicates,
            "hebbian_edges": self.hebbian_edges,
            "strengthened": [list(p) for p in self.strengthened],
            "dropped_edges": self.dropped_edges,
            "flagged": [list(p) for p in self.flagged],
            "archived": list(self.archived),
            "unarchived": list(self.unarchived),
        }


@functools.lru_cache(maxsize=8)
def _keyword_patterns(
    rules: tuple[tuple[str, tuple[str, ...]], ...],
) -> tuple[tuple[str, tuple[re.Pattern[str], ...]], ...]:
    """Each category's keywords compiled once, in the rules' order: a keyword matches where it
    is neither preceded nor followed by a word character (``\\b`` for keywords that begin and
    end with one; ``c++`` or ``.net`` match too)."""
    return tuple(
        (name, tuple(re.compile(rf"(?<!\w){re.escape(w.lower())}(?!\w)") for w in words))
        for name, words in rules
    )


class Consolidator:
    """One consolidation cycle over the unconsolidated memories of a store.

    Args:
        event_ttl_days: Event TTL (docs/design.md §D0.10 ``EVENT_TTL_DAYS`` = 30).
        semantic_dedup_threshold: Cosine at or above which a merged fact is a duplicate
            (docs/design.md §D0.10 ``SEMANTIC_DEDUP_THRESHOLD`` = 0.92).
        category_keywords: Keyword rules for reclassifying ``general`` memories; ``None`` uses
            ``DEFAULT_CATEGORY_KEYWORDS``.
        hebbian_rate: Strength added to an edge whose entities co-occur in a processed memory.
        hebbian_decay: Multiplicative decay of every co-occurrence edge per cycle (design §D2.6).
        hebbian_floor: Edges that decay below this strength are dropped.
        merger: Optional merge proposer; without one no merged facts are created.
        detector: Optional contradiction detector; without one nothing is flagged.
        contradiction_threshold: Cosine at which a memory is a contradiction candidate.
        archive_threshold: Design §D3.7 archival threshold of ``decay_score`` (0.1);
            ``None`` archives nothing.
        archive_lambda: λ of the ``decay_score`` used for archival (docs/design.md §D3.7: 0.01).
        reclassify: Reclassify ``general`` memories by keyword rules.
    """

    def __init__(
        self,
        *,
        event_ttl_days: float = 30.0,
        semantic_dedup_threshold: float = 0.92,
        category_keywords: Mapping[str, tuple[str, ...]] | None = None,
        hebbian_rate: float = 1.0,
        hebbian_decay: float = 0.98,
        hebbian_floor: float = 0.0,
        merger: Merger | None = None,
        detector: ContradictionDetector | None = None,
        contradiction_threshold: float = 0.6,
        archive_threshold: float | None = None,
        archive_lambda: float = 0.01,
        reclassify: bool = True,
    ) -> None:
        self.event_ttl_days = event_ttl_days
        self.semantic_dedup_threshold = semantic_dedup_threshold
        self.category_keywords = category_keywords
        self.hebbian_rate = hebbian_rate
        self.hebbian_decay = hebbian_decay
        self.hebbian_floor = hebbian_floor
        self.merger = merger
        self.detector = detector
        self.contradiction_threshold = contradiction_threshold
        self.archive_threshold = archive_threshold
        self.archive_lambda = archive_lambda
        self.reclassify = reclassify

    def classify(self, text: str) -> str | None:
        """The category with the most distinct keywords in ``text`` (each matched outside words,
        case-insensitively; the first in the rules' order on a tie), else ``None``."""
        rules = self.category_keywords or DEFAULT_CATEGORY_KEYWORDS
        lowered = text.lower()
        best: tuple[int, str] | None = None
        key = tuple((name, tuple(words)) for name, words in rules.items())
        for name, patterns in _keyword_patterns(key):
            hits = sum(1 for p in patterns if p.search(lowered))
            if hits and (best is None or hits > best[0]):
                best = (hits, name)
        return None if best is None else best[1]

    def store_merged_fact(
        self,
        store: MemoryStore,
        text: str,
        sources: Sequence[str],
        *,
        client_id: str,
        now: float,
        key: str | None = None,
        embedding: np.ndarray | None = None,
        scope: str = TEAM,
    ) -> WriteResult | None:
        """Store a merged fact in ``scope`` of ``client_id`` unless an exact or semantic
        duplicate is active there (then ``None``).

        The new fact supersedes its sources, in one all-or-nothing write.
        """
        with store.batch():
            return self._store_merged_fact(
                store, text, sources, client_id=client_id, now=now, key=key, embedding=embedding,
                scope=scope,
            )

    def _store_merged_fact(
        self,
        store: MemoryStore,
        text: str,
        sources: Sequence[str],
        *,
        client_id: str,
        now: float,
        key: str | None = None,
        embedding: np.ndarray | None = None,
        scope: str = TEAM,
    ) -> WriteResult | None:
        scrubbed, _ = store.prepare_text(text)
        h = content_hash(scrubbed)
        mask = store.visible_mask(client_id=client_id, now=now)
        mask &= store.column("scope") == store.scope_code(scope)
        rows = np.flatnonzero(mask)
        if any(store.record_at(int(i)).content_hash == h for i in rows):
            return None
        if len(sources) > 1:
            # A fact merged from several memories resembles each of them: the semantic dedup
            # compares it with the memories it does not merge.
            mask = mask.copy()
            mask[[store.idx(sid) for sid in sources]] = False
            rows = np.flatnonzero(mask)
        vec = embedding
        if vec is None and store.embedder is not None:
            vec = store.embedder.embed([scrubbed])[0]
        if vec is not None and len(rows):
            sims = store.vectors.similarities(np.asarray(vec), wanted=mask)[rows]
            if np.any(sims >= self.semantic_dedup_threshold):
                return None
        result = store.store(
            text,
            "fact",
            source_agent="consolidation-engine",
            client_id=client_id,
            key=key,
            now=now,
            embedding=vec,
            metadata={"merged_from": list(sources)},
            scope=scope,
        )
        with store.batch():
            for sid in sources:
                rec = store.get(sid)
                if rec.type == "decision" or not rec.active:
                    continue
                store.retire(
                    sid, "merged", now=now, superseded_by=result.id, superseded_at=now, valid_to=now
                )
        return result

    def run(
        self,
        store: MemoryStore,
        *,
        now: float | str | None = None,
        rows: Sequence[int] | np.ndarray | None = None,
        activated: Sequence[str] | None = None,
    ) -> ConsolidationReport:
        """Run one cycle and mark the processed memories ``consolidated``.

        The cycle is one batch: if any step fails, none of its writes (reclassification,
        merged facts, Hebbian edges, expiry, flags, archival) is kept, in SQLite or in memory.

        Args:
            store: The store, changed in place.
            now: The cycle's clock (default: wall clock).
            rows: Consider only these store rows (default: every row).
            activated: Memory ids retrieved since the last cycle; the entities of each one are
                co-activated for the Hebbian upkeep. ``None`` co-activates the entities of each
                processed memory instead.
        """
        t_now = coerce_ts(now, field="now") if now is not None else time.time()
        with store.batch():
            return self._run(store, t_now, activated, rows)

    def _run(
        self,
        store: MemoryStore,
        t_now: float,
        activated: Sequence[str] | None,
        rows: Sequence[int] | np.ndarray | None = None,
    ) -> ConsolidationReport:
        report = ConsolidationReport(at=t_now)
        active = store.column("active")
        created = store.column("created_at")
        candidates = range(len(store)) if rows is None else sorted(int(r) for r in rows)
        todo = [
            i
            for i in candidates
            if active[i] and created[i] <= t_now and not store.record_at(i).consolidated
        ]
        report.processed = len(todo)
        co_activated: list[list[int]] = []
        with store.batch():
            for i in todo:
                rec = store.record_at(i)
                if self.reclassify and rec.knowledge_category == "general":
                    found = self.classify(rec.text)
                    if found is not None:
                        rec.knowledge_category = found
                        report.reclassified[rec.id] = found
                rec.consolidated = True
                store.save(rec.id, "consolidated", now=t_now)
                if activated is None:
                    ents = store.graph.entities_of(i)
                    if len(ents) > 1:
                        co_activated.append(list(ents))
        if activated is not None:
            for mid in activated:
                ents = store.graph.entities_of(store.idx(mid))
                if len(ents) > 1:
                    co_activated.append(list(ents))
        if self.detector is not None:
            self._flag_contradictions(store, todo, t_now, report)
        if self.merger is not None:
            # Memories merge only with memories of their own client and scope, and the merged
            # fact stays there: a private memory never reaches another scope through a merge.
            by_place: dict[tuple[str, str], list[int]] = {}
            for i in todo:
                rec = store.record_at(i)
                if rec.active:
                    by_place.setdefault((rec.client_id, rec.scope), []).append(i)
            for (client, scope), rows in sorted(by_place.items()):
                texts = [store.record_at(i).text for i in rows]
                for merged_text, picks in self.merger.merge(texts):
                    valid = [rows[p] for p in picks if 0 <= p < len(rows)]
                    sources = [store.record_at(i).id for i in valid]
                    res = self.store_merged_fact(
                        store, merged_text, sources, client_id=client, now=t_now, scope=scope
                    )
                    if res is None:
                        report.skipped_duplicates += 1
                    else:
                        report.merged.append(res.id)
                        report.merged_from[res.id] = [
                            s for s in sources if store.get(s).superseded_by == res.id
                        ]
                        merged = store.get(res.id)
                        merged.consolidated = True
                        store.save(res.id, "consolidated", now=t_now)
        report.hebbian_edges = store.graph.n_edges
        seen: set[tuple[int, int]] = set()
        for group in co_activated:
            uniq = list(dict.fromkeys(group))
            for a_i, a in enumerate(uniq):
                for b in uniq[a_i + 1 :]:
                    pair = (min(a, b), max(a, b))
                    if pair not in seen:
                        seen.add(pair)
                        report.strengthened.append(
                            (store.graph.entity(pair[0]).name, store.graph.entity(pair[1]).name)
                        )
        report.dropped_edges = store.graph.hebbian_update(
            co_activated,
            learning_rate=self.hebbian_rate,
            decay=self.hebbian_decay,
            floor=self.hebbian_floor,
        )
        store.persist_relations()
        report.expired = expire_events(store, now=t_now, event_ttl_days=self.event_ttl_days)
        if self.archive_threshold is not None:
            self._archive(store, t_now, report)
        return report

    def _flag_contradictions(
        self, store: MemoryStore, todo: Sequence[int], t_now: float, report: ConsolidationReport
    ) -> None:
        assert self.detector is not None
        for i in todo:
            rec = store.record_at(i)
            if not rec.active:
                continue
            for other, _ in contradiction_candidates(
                store, rec.id, threshold=self.contradiction_threshold, now=t_now
            ):
                if other in rec.metadata.get("conflicts_with", []):
                    continue
                if self.detector.judge(store.get(other).text, rec.text).contradicts:
                    for a, b in ((rec.id, other), (other, rec.id)):
                        r = store.get(a)
                        r.metadata = {
                            **r.metadata,
                            "conflicts_with": [*r.metadata.get("conflicts_with", []), b],
                        }
                        store.save(a, "conflicts_with", now=t_now)
                    report.flagged.append((other, rec.id))

    def _archive(self, store: MemoryStore, t_now: float, report: ConsolidationReport) -> None:
        n = len(store)
        if n == 0:
            return
        live = store.column("active") & (store.column("created_at") <= t_now)
        score = decay_score(
            store.column("created_at"),
            store.column("access_count"),
            store.column("confidence"),
            t_now,
            lam=self.archive_lambda,
        )
        cold = store.column("archived")
        assert self.archive_threshold is not None
        to_cold = np.flatnonzero(live & ~cold & (score < self.archive_threshold))
        to_hot = np.flatnonzero(live & cold & (score >= self.archive_threshold))
        with store.batch():
            for idx in to_cold:
                rec = store.record_at(int(idx))
                rec.archived_at = t_now
                store.save(rec.id, "archived", now=t_now)
                report.archived.append(rec.id)
            for idx in to_hot:
                rec = store.record_at(int(idx))
                rec.archived_at = None
                store.save(rec.id, "unarchived", now=t_now)
                report.unarchived.append(rec.id)
