"""The agent-lifecycle dataset: a small write log that exercises the whole memory lifecycle.

``memlab datasets generate-lifecycle --seed 7 datasets/agent-lifecycle`` writes it. Per client,
besides background notes, it plants one scenario of each kind (the query's primary tag):

=============  ==============================================================================
tag            what it exercises
=============  ==============================================================================
``authority``  a human states a fact; hours later an ``inferred`` agent writes a contradiction
               without a shared key (the human's is relevant, the inferred one stale)
``recency``    an agent states a fact; weeks later another agent contradicts it (the newer is
               relevant, the older stale)
``multi``      three facts on one topic written on different days, all relevant
``merge``      two halves of an answer written within one consolidation window; asked days
               later, both are relevant (one merged fact carries both after a cycle)
``long_gap``   a fact asked about more than 230 days after it was written and never asked about
               before (seed 003's ``decay_score`` archives it to the cold tier first)
=============  ==============================================================================

Every contradicting write carries ``metadata.contradicts`` (the dataset id of the other side),
which ``conflict@k`` reads, and several memories carry a seed 003 namespace in
``metadata.scope`` (``team``, ``agent:{name}``, ``project:{name}``). The dataset declares its
replay defaults in ``dataset.toml``: consolidation every 6 hours with the LLM-free merge and
the seed 003 §6.4 conflict order (``authority``).
"""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

from memlab.datasets.format import Dataset, MemoryOp, Query, write_dataset

DAY = 86_400.0
HOUR = 3_600.0
START = 1_767_225_600.0  # 2026-01-01T00:00:00Z

CLIENTS: tuple[tuple[str, str, str], ...] = (
    ("acme", "Acme", "storefront"),
    ("globex", "Globex", "analytics portal"),
    ("initech", "Initech", "billing API"),
    ("umbrella", "Umbrella", "patient app"),
)
AGENTS = ("claude-code", "support-bot", "seo-agent", "research-agent")

# (statement, contradiction, question) — the contradiction shares no key with the statement.
AUTHORITY = (
    ("{N}'s {P} supports guest checkout.", "{N}'s {P} does not support guest checkout.",
     "Can customers check out as guests on {N}'s {P}?"),
    ("Two-factor login is enabled for {N}'s admin panel.",
     "Two-factor login is disabled for {N}'s admin panel.",
     "Is two-factor login on for the {N} admin panel?"),
)
RECENCY = (
    ("The {N} API rate limit is 500 requests per minute.",
     "The {N} API rate limit is 2000 requests per minute.",
     "What is the rate limit of the {N} API?"),
    ("{N}'s release freeze is on Fridays.", "{N}'s release freeze is no longer on Fridays.",
     "Does {N} still freeze releases on Fridays?"),
)
MULTI = (
    ("{N}'s {P} is hosted on AWS in eu-west-1.", "{N}'s {P} uses Postgres 16 for orders.",
     "{N}'s {P} caches pages in Redis for ten minutes.",
     "What infrastructure does {N}'s {P} run on?"),
)
MERGE = (
    ("The {N} {P} relaunch is owned by Dana Okafor.",
     "The {N} {P} relaunch goes live on the 14th.",
     "Who owns the {N} {P} relaunch and when does it go live?"),
)
LONG_GAP = (
    ("{N}'s invoices go to accounts@{n}.example with a PO number.",
     "Where do {N}'s invoices have to be sent?"),
)
BACKGROUND = (
    "Synced with {N} about the weekly report format.",
    "{N} asked for the {P} changelog to be shared every Monday.",
    "Reviewed {N}'s {P} error logs; nothing unusual.",
    "{N}'s brand voice is friendly and short.",
    "Sent {N} the monthly SEO summary.",
    "{N}'s marketing lead prefers email over calls.",
    "Fixed a typo on {N}'s pricing page.",
    "{N} wants dark mode on the {P} next quarter.",
)
SCOPES = ("team", "agent:{a}", "project:{n}-{p}")


def _fmt(template: str, client: tuple[str, str, str]) -> str:
    n, name, product = client
    return template.format(N=name, n=n, P=product)


class _Builder:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.ops: list[tuple[float, int, MemoryOp]] = []
        self.queries: list[Query] = []
        self.n = 0

    def store(self, ts: float, text: str, type_: str, client: str, **fields: Any) -> str:
        self.n += 1
        mid = f"m{self.n:04d}"
        agent = fields.pop("source_agent", self.rng.choice(AGENTS))
        if self.rng.random() < 0.4 and "metadata" not in fields:
            scope = self.rng.choice(SCOPES).format(a=agent, n=client, p="web")
            fields["metadata"] = {"scope": scope}
        op = MemoryOp.store(mid, ts, text, type_, client_id=client, source_agent=agent, **fields)
        self.ops.append((ts, self.n, op))
        return mid

    def query(self, ts: float, text: str, client: str, relevant: list[str], tag: str,
              stale: tuple[str, ...] = ()) -> None:
        qid = f"q{len(self.queries) + 1:03d}"
        self.queries.append(
            Query(0, qid, ts, text, client_id=client, relevant={m: 1 for m in relevant},
                  stale=stale, tags=(tag, "lifecycle"))
        )


def simulate(seed: int = 7, *, days: float = 300.0) -> Dataset:
    """Build the dataset in memory (deterministic for a seed)."""
    b = _Builder(seed)
    rng = b.rng
    for ci, client in enumerate(CLIENTS):
        n = client[0]
        for _ in range(24):
            ts = START + rng.uniform(0, days - 5) * DAY
            b.store(ts, _fmt(rng.choice(BACKGROUND), client), rng.choice(("event", "fact")), n,
                    importance=rng.choice(("medium", "low", "high")))
        for k, (good, bad, question) in enumerate(AUTHORITY):
            t = START + (20 + 30 * k + ci) * DAY + 9 * HOUR
            first = b.store(t, _fmt(good, client), "fact", n, authority="human",
                            importance="high")
            second = b.store(t + rng.uniform(2, 6) * HOUR, _fmt(bad, client), "fact", n,
                             authority="inferred", metadata={"contradicts": first})
            b.query(t + 5 * DAY, _fmt(question, client), n, [first], "authority", (second,))
        for k, (old, new, question) in enumerate(RECENCY):
            t = START + (15 + 40 * k + ci) * DAY + 10 * HOUR
            first = b.store(t, _fmt(old, client), "fact", n, authority="unverified_agent")
            second = b.store(t + 21 * DAY, _fmt(new, client), "fact", n,
                             authority="unverified_agent", metadata={"contradicts": first})
            b.query(t + 26 * DAY, _fmt(question, client), n, [second], "recency", (first,))
        for parts in MULTI:
            t = START + (100 + ci) * DAY + 11 * HOUR
            ids = [
                b.store(t + j * 3 * DAY, _fmt(p, client), "fact", n, authority="verified_agent")
                for j, p in enumerate(parts[:-1])
            ]
            b.query(t + 12 * DAY, _fmt(parts[-1], client), n, ids, "multi")
        for a_text, b_text, question in MERGE:
            t = START + (130 + ci) * DAY + 13 * HOUR
            a = b.store(t, _fmt(a_text, client), "event", n)
            c = b.store(t + 2 * HOUR, _fmt(b_text, client), "event", n)
            b.query(t + 4 * DAY, _fmt(question, client), n, [a, c], "merge")
        for text, question in LONG_GAP:
            t = START + (2 + ci) * DAY + 15 * HOUR
            mid = b.store(t, _fmt(text, client), "fact", n, importance="medium")
            b.query(t + (240 + ci) * DAY, _fmt(question, client), n, [mid], "long_gap")
    ops = [op for _, _, op in sorted(b.ops, key=lambda x: (x[0], x[1]))]
    queries = sorted(b.queries, key=lambda q: (q.ts, q.qid))
    meta = {
        "name": "agent-lifecycle",
        "version": "1",
        "description": (
            "Conflicting writes of different authority without shared keys, multi-memory "
            "answers, answers that exist after a consolidation merge, long gaps, namespaces."
        ),
        "license": "Apache-2.0",
        "source": f"memlab.datasets.lifecycle, seed {seed}",
        "replay": {
            "conflict_policy": "authority",
            "consolidation": {"interval_hours": 6.0, "merge": "extractive",
                              "merge_threshold": 0.6},
        },
    }
    return Dataset(None, meta, ops, queries)


README = """# agent-lifecycle

Generated by `memlab datasets generate-lifecycle --seed 7 datasets/agent-lifecycle`
(`memlab.datasets.lifecycle`; the module docstring describes every scenario). {n_ops} store
operations, {n_q} queries over {n_c} clients, tagged `authority`, `recency`, `multi`, `merge` and
`long_gap`.

`dataset.toml` declares the replay defaults: a consolidation cycle every 6 simulated hours
(LLM-free extractive merge, cluster cosine 0.6) and the seed 003 §6.4 conflict order
(`conflict_policy = "authority"`). Contradicting writes carry `metadata.contradicts`;
namespaces (seed 003 §5) are in `metadata.scope`.
"""


def generate_lifecycle_dataset(seed: int, out_dir: str | os.PathLike[str]) -> Dataset:
    """Write the dataset and its README into ``out_dir`` (atomically)."""
    ds = simulate(seed)
    n_ops = sum(1 for op in ds.ops if op.op == "store")
    text = README.format(n_ops=n_ops, n_q=len(ds.queries), n_c=len(CLIENTS))
    return write_dataset(ds, Path(out_dir), extra_files={"README.md": text})
