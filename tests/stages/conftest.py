"""A small store shared by the stage tests: 13 memories, two clients, one superseded fact.

Vectors come from ``HashingEmbedder(dim=64, seed=0)``; times are days after ``T0``
(2026-03-01T00:00:00Z) and queries run at ``NOW`` = ``T0`` + 100 days.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from memlab.embed.hashing import HashingEmbedder
from memlab.memory.store import MemoryStore
from memlab.stages.base import QueryContext
from memlab.timeutil import SECONDS_PER_DAY, parse_ts

T0 = parse_ts("2026-03-01T00:00:00Z")
NOW = T0 + 100 * SECONDS_PER_DAY

# (id, client, type, day, text, extra fields)
MEMORIES: tuple[tuple[str, str, str, float, str, dict[str, str]], ...] = (
    ("acme-stack-1", "acme", "fact", 0, "Acme runs its website on Next.js hosted on Vercel",
     {"key": "acme-stack"}),
    ("acme-db", "acme", "decision", 1,
     "We chose PostgreSQL over MongoDB for the Acme billing service", {}),
    ("acme-deploy", "acme", "event", 2, "Deployed the Acme billing service to production", {}),
    ("acme-migration", "acme", "status", 5, "Acme website migration is in progress",
     {"subject": "acme-migration"}),
    ("globex-cms", "globex", "fact", 6, "Globex uses WordPress as its CMS", {"key": "globex-cms"}),
    ("globex-call", "globex", "event", 8, "Globex marketing call about the spring campaign", {}),
    ("globex-blog", "globex", "decision", 9, "Globex will publish two blog posts per week", {}),
    ("brain-sqlite", "global", "fact", 10, "The shared brain stores memories in SQLite",
     {"key": "brain-storage"}),
    ("team-meeting", "global", "event", 12, "Weekly team meeting moved to Thursday", {}),
    ("acme-contact", "acme", "fact", 15, "Jean is the main contact at Acme for the website",
     {"key": "acme-contact"}),
    ("globex-seo", "globex", "status", 18, "Globex SEO audit is complete",
     {"subject": "globex-seo"}),
    ("acme-stack-2", "acme", "fact", 20, "Acme moved its website from Next.js to Astro on Netlify",
     {"key": "acme-stack"}),
    ("acme-pricing", "acme", "event", 25, "Fixed a broken link on the Acme pricing page", {}),
)


def build_store(path: Path | None = None) -> MemoryStore:
    """The fixture store, written through the full write path (persisted under ``path``)."""
    store = MemoryStore(path, embedder=HashingEmbedder(dim=64, seed=0))
    for mid, client, type_, day, text, extra in MEMORIES:
        store.store(
            text,
            type_,
            client_id=client,
            source_agent="tester",
            now=T0 + day * SECONDS_PER_DAY,
            id=mid,
            **extra,
        )
    return store


@pytest.fixture
def store() -> MemoryStore:
    return build_store()


@pytest.fixture
def make_ctx(store: MemoryStore) -> Callable[..., QueryContext]:
    """``make_ctx(text, **fields)``: a query context on the fixture store at ``NOW``."""

    def make(text: str, qid: str = "q1", **fields: object) -> QueryContext:
        fields.setdefault("now", NOW)
        fields.setdefault("embedder", store.embedder)
        return QueryContext(qid=qid, text=text, store=store, **fields)  # type: ignore[arg-type]

    return make


@pytest.fixture
def t0() -> float:
    """The fixture's day 0 (epoch seconds)."""
    return T0


@pytest.fixture
def now() -> float:
    """The fixture's query clock: day 100."""
    return NOW


@pytest.fixture
def store_factory() -> Callable[[Path | None], MemoryStore]:
    """:func:`build_store`, for tests that need a fresh or persisted copy."""
    return build_store
