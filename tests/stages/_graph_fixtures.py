"""A hand-built store for the graph-based stage tests (graph, lif).

Four memories written by agent ``bot`` in the global scope, one day apart from ``T0``::

    m0  "Next.js talks to PostgreSQL"          bot, Next.js, PostgreSQL
    m1  "PostgreSQL backups go to Amazon S3"   bot, PostgreSQL, Amazon S3
    m2  "Redis caches sessions"                bot, Redis
    m3  "Docker runs everywhere"               bot, Docker

plus the typed relation ``Next.js -uses-> Redis`` (strength 1). Entity indices in write order:
bot 0 (role ``source``), Next.js 1, PostgreSQL 2, Amazon S3 3, Redis 4, Docker 5 (``mentioned``).
Co-occurrence strengths: bot–PostgreSQL 2, every other pair within a memory 1.
"""

from __future__ import annotations

from memlab.memory.store import MemoryStore
from memlab.stages.base import QueryContext
from memlab.timeutil import SECONDS_PER_DAY, parse_ts

T0 = parse_ts("2026-03-01T00:00:00Z")
DAY = SECONDS_PER_DAY

GRAPH_MEMORIES: tuple[tuple[str, str], ...] = (
    ("m0", "Next.js talks to PostgreSQL"),
    ("m1", "PostgreSQL backups go to Amazon S3"),
    ("m2", "Redis caches sessions"),
    ("m3", "Docker runs everywhere"),
)

ENTITY = {"bot": 0, "Next.js": 1, "PostgreSQL": 2, "Amazon S3": 3, "Redis": 4, "Docker": 5}


def build_graph_store() -> MemoryStore:
    """The store described in the module docstring (no embedder: no vectors)."""
    store = MemoryStore()
    for day, (mid, text) in enumerate(GRAPH_MEMORIES):
        store.store(text, "event", source_agent="bot", now=T0 + day * DAY, id=mid)
    store.relate("Next.js", "uses", "Redis", now=T0 + 4 * DAY)
    return store


def graph_ctx(store: MemoryStore, text: str, *, now: float | None = None) -> QueryContext:
    """A query context on ``store`` (default clock: ten days after ``T0``)."""
    return QueryContext(qid="q", text=text, store=store, now=T0 + 10 * DAY if now is None else now)
