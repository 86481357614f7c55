"""Consolidation without an LLM (seed 000's engine, seed 002's Hebbian upkeep).

* event TTL cleanup: active events never accessed, of medium or low importance, older than
  ``event_ttl_days`` → ``active=False``, ``expired_at=now``;
* merged facts go through exact (content hash) and semantic (cosine ≥ 0.92) dedup before they
  are stored, and supersede their sources;
* ``general`` knowledge categories are reclassified by keyword rules (never a specific one);
* Hebbian graph upkeep: entities co-occurring in the memories processed this cycle strengthen
  their edges; all co-occurrence edges decay.

An LLM-backed merge plugs in through :class:`Merger`; :class:`memlab.memory.merge.ClusterMerger`
is one (seed 003: cluster similar memories, summarise each cluster with a generator).
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

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
    """Seed 000's ``cleanupOldEvents``; returns the ids it soft-deleted (in row order)."""
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
    with store.batch():
        for idx in candidates:
            rec = store.record_at(int(idx))
            if rec.importance not in importance_levels:
                continue
            store.retire(rec.id, "expired", now=t_now, expired_at=t_now)
            expired.append(rec.id)
    return expired


class Merger(Protocol):
    """Proposes merged facts from a batch of memories (e.g. an LLM through a generator)."""

    def merge(self, texts: Sequence[str]) -> list[tuple[str, list[int]]]:
        """Return (merged fact text, indices into ``texts`` it merges)."""
        ...


@dataclass
class ConsolidationReport:
    """What one consolidation cycle did."""

    expired: list[str] = field(default_factory=list)
    reclassified: dict[str, str] = field(default_factory=dict)
    merged: list[str] = field(default_factory=list)
    skipped_duplicates: int = 0
    processed: int = 0
    hebbian_edges: int = 0


class Consolidator:
    """One consolidation cycle over the unconsolidated memories of a store.

    Args:
        event_ttl_days: Event TTL (seed 000 ``EVENT_TTL_DAYS`` = 30).
        semantic_dedup_threshold: Cosine at or above which a merged fact is a duplicate
            (seed 000 ``SEMANTIC_DEDUP_THRESHOLD`` = 0.92).
        category_keywords: Keyword rules for reclassifying ``general`` memories; ``None`` uses
            ``DEFAULT_CATEGORY_KEYWORDS``.
        hebbian_rate: Strength added to an edge whose entities co-occur in a processed memory.
        hebbian_decay: Multiplicative decay of every co-occurrence edge per cycle (seed 002).
        hebbian_floor: Edges that decay below this strength are dropped.
        merger: Optional merge proposer; without one no merged facts are created.
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
    ) -> None:
        self.event_ttl_days = event_ttl_days
        self.semantic_dedup_threshold = semantic_dedup_threshold
        self.category_keywords = category_keywords
        self.hebbian_rate = hebbian_rate
        self.hebbian_decay = hebbian_decay
        self.hebbian_floor = hebbian_floor
        self.merger = merger

    def classify(self, text: str) -> str | None:
        """The first category whose keywords appear in ``text`` (word-bounded), else ``None``."""
        rules = self.category_keywords or DEFAULT_CATEGORY_KEYWORDS
        lowered = text.lower()
        best: tuple[int, str] | None = None
        for name, words in rules.items():
            hits = sum(1 for w in words if re.search(rf"\b{re.escape(w)}\b", lowered))
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
    ) -> WriteResult | None:
        """Store a merged fact unless an exact or semantic duplicate is active (then ``None``).

        The new fact supersedes its sources, in one all-or-nothing write.
        """
        with store.batch():
            return self._store_merged_fact(
                store, text, sources, client_id=client_id, now=now, key=key, embedding=embedding
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
    ) -> WriteResult | None:
        scrubbed, _ = store.prepare_text(text)
        h = content_hash(scrubbed)
        mask = store.visible_mask(client_id=client_id, now=now)
        rows = np.flatnonzero(mask)
        if any(store.record_at(int(i)).content_hash == h for i in rows):
            return None
        vec = embedding
        if vec is None and store.embedder is not None:
            vec = store.embedder.embed([scrubbed])[0]
        if vec is not None and len(rows):
            sims = store.vectors.similarities(np.asarray(vec))[rows]
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

    def run(self, store: MemoryStore, *, now: float | str | None = None) -> ConsolidationReport:
        """Run one cycle and mark the processed memories ``consolidated``.

        The cycle is one batch: if any step fails, none of its writes (reclassification,
        merged facts, Hebbian edges, expiry) is kept, in SQLite or in memory.
        """
        t_now = coerce_ts(now, field="now") if now is not None else time.time()
        with store.batch():
            return self._run(store, t_now)

    def _run(self, store: MemoryStore, t_now: float) -> ConsolidationReport:
        report = ConsolidationReport()
        active = store.column("active")
        todo = [
            i
            for i in range(len(store))
            if active[i] and not store.record_at(i).consolidated
        ]
        report.processed = len(todo)
        co_activated: list[list[int]] = []
        with store.batch():
            for i in todo:
                rec = store.record_at(i)
                if rec.knowledge_category == "general":
                    found = self.classify(rec.text)
                    if found is not None:
                        rec.knowledge_category = found
                        report.reclassified[rec.id] = found
                rec.consolidated = True
                store.save(rec.id, "consolidated", now=t_now)
                ents = store.graph.entities_of(i)
                if len(ents) > 1:
                    co_activated.append(list(ents))
        if self.merger is not None:
            by_client: dict[str, list[int]] = {}
            for i in todo:
                by_client.setdefault(store.record_at(i).client_id, []).append(i)
            for client, rows in sorted(by_client.items()):
                texts = [store.record_at(i).text for i in rows]
                for merged_text, picks in self.merger.merge(texts):
                    valid = [rows[p] for p in picks if 0 <= p < len(rows)]
                    res = self.store_merged_fact(
                        store,
                        merged_text,
                        [store.record_at(i).id for i in valid],
                        client_id=client,
                        now=t_now,
                    )
                    if res is None:
                        report.skipped_duplicates += 1
                    else:
                        report.merged.append(res.id)
        report.hebbian_edges = store.graph.n_edges
        store.graph.hebbian_update(
            co_activated,
            learning_rate=self.hebbian_rate,
            decay=self.hebbian_decay,
            floor=self.hebbian_floor,
        )
        store.persist_relations()
        report.expired = expire_events(store, now=t_now, event_ttl_days=self.event_ttl_days)
        return report
