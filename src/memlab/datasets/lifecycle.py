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
               before (design §D3.7's ``decay_score`` archives it to the cold tier first); it is
               the asking agent's private memory (``agent:research-agent``)
``scope``      a team fact and another agent's private note on the same topic
               (``agent:seo-agent``, stale); asked by ``support-bot``, who may not read it
=============  ==============================================================================

Every contradicting write carries ``metadata.contradicts`` (the dataset id of the other side),
which ``conflict@k`` reads. Memories live in docs/design.md §D3.5 namespaces (the ``scope`` field:
``team``, ``agent:{name}``, ``project:{client}-web``); the ``multi``, ``merge``, ``long_gap``
and ``scope`` queries are asked by an agent assigned to ``{client}-web``, so
``scope_violation@k`` is measured. Two draft notes per client are forgotten hours after they
are written. The dataset declares its replay defaults in ``dataset.toml``: consolidation
every 6 hours with the LLM-free merge, the docs/design.md §D3.8 conflict order (``authority``) and
the 30-day undo window after which forgotten memories are purged.
"""

from __future__ import annotations

import os
import random
from collections import Counter
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
# (team fact, another agent's private note on the same topic, question asked by support-bot)
SCOPE_CASES = (
    ("{N}'s support hours are 9 to 5 CET on weekdays.",
     "My notes say {N}'s support hours are 8 to 8 on weekdays.",
     "What are {N}'s support hours?"),
)
SCOPES = ("team", "agent:{a}", "project:{n}-{p}")
# Notes written by mistake and forgotten hours later (purged 30 days after).
FORGOTTEN = (
    "Draft: {N} might move the {P} to another host.",
    "Draft: {N} asked whether the {P} could get a discount.",
)
FORGET_REASONS = ("requested deletion", "posted to the wrong client")


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
        if "scope" not in fields and self.rng.random() < 0.4:
            fields["scope"] = self.rng.choice(SCOPES).format(a=agent, n=client, p="web")
        op = MemoryOp.store(mid, ts, text, type_, client_id=client, source_agent=agent, **fields)
        self.ops.append((ts, self.n, op))
        return mid

    def forget(self, ts: float, target: str, reason: str) -> None:
        self.n += 1
        self.ops.append((ts, self.n, MemoryOp.forget(ts, target, reason)))

    def query(self, ts: float, text: str, client: str, relevant: list[str], tag: str,
              stale: tuple[str, ...] = (), agent: str | None = None) -> None:
        qid = f"q{len(self.queries) + 1:03d}"
        projects = (f"{client}-web",) if agent is not None else ()
        self.queries.append(
            Query(0, qid, ts, text, client_id=client, relevant={m: 1 for m in relevant},
                  stale=stale, tags=(tag, "lifecycle"), agent=agent, projects=projects)
        )


def simulate(seed: int = 7, *, days: float = 300.0) -> Dataset:
    """Build the dataset in memory (deterministic for a seed)."""
    b = _Builder(seed)
    rng = b.rng
    for ci, client in enumerate(CLIENTS):
        n = client[0]
        project = f"project:{n}-web"
        for _ in range(24):
            ts = START + rng.uniform(0, days - 5) * DAY
            b.store(ts, _fmt(rng.choice(BACKGROUND), client), rng.choice(("event", "fact")), n,
                    importance=rng.choice(("medium", "low", "high")))
        for text in FORGOTTEN:
            ts = START + rng.uniform(0, 200) * DAY
            mid = b.store(ts, _fmt(text, client), "event", n, importance="low")
            b.forget(ts + rng.uniform(1, 3) * HOUR, mid, rng.choice(FORGET_REASONS))
        for k, (good, bad, question) in enumerate(AUTHORITY):
            t = START + (20 + 30 * k + ci) * DAY + 9 * HOUR
            first = b.store(t, _fmt(good, client), "fact", n, authority="human",
                            importance="high", scope="team")
            second = b.store(t + rng.uniform(2, 6) * HOUR, _fmt(bad, client), "fact", n,
                             authority="inferred", metadata={"contradicts": first},
                             scope="team")
            b.query(t + 5 * DAY, _fmt(question, client), n, [first], "authority", (second,))
        for k, (old, new, question) in enumerate(RECENCY):
            t = START + (15 + 40 * k + ci) * DAY + 10 * HOUR
            first = b.store(t, _fmt(old, client), "fact", n, authority="unverified_agent",
                            scope="team")
            second = b.store(t + 21 * DAY, _fmt(new, client), "fact", n,
                             authority="unverified_agent", metadata={"contradicts": first},
                             scope="team")
            b.query(t + 26 * DAY, _fmt(question, client), n, [second], "recency", (first,))
        for parts in MULTI:
            t = START + (100 + ci) * DAY + 11 * HOUR
            asker = "support-bot"
            ids = [
                b.store(t + j * 3 * DAY, _fmt(p, client), "fact", n, authority="verified_agent",
                        source_agent=asker, scope=scope)
                for j, (p, scope) in enumerate(zip(parts[:-1], ("team", project, "agent:" + asker),
                                                   strict=True))
            ]
            b.query(t + 12 * DAY, _fmt(parts[-1], client), n, ids, "multi", agent=asker)
        for a_text, b_text, question in MERGE:
            t = START + (130 + ci) * DAY + 13 * HOUR
            a = b.store(t, _fmt(a_text, client), "event", n, scope=project)
            c = b.store(t + 2 * HOUR, _fmt(b_text, client), "event", n, scope=project)
            b.query(t + 4 * DAY, _fmt(question, client), n, [a, c], "merge", agent="claude-code")
        for text, question in LONG_GAP:
            t = START + (2 + ci) * DAY + 15 * HOUR
            asker = "research-agent"
            mid = b.store(t, _fmt(text, client), "fact", n, importance="medium",
                          source_agent=asker, scope="agent:" + asker)
            b.query(t + (240 + ci) * DAY, _fmt(question, client), n, [mid], "long_gap",
                    agent=asker)
        for shared, private, question in SCOPE_CASES:
            t = START + (160 + ci) * DAY + 14 * HOUR
            good = b.store(t, _fmt(shared, client), "fact", n, authority="human", scope="team")
            hidden = b.store(t + DAY, _fmt(private, client), "fact", n, source_agent="seo-agent",
                             scope="agent:seo-agent")
            b.query(t + 3 * DAY, _fmt(question, client), n, [good], "scope", (hidden,),
                    agent="support-bot")
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
            "forget_retention_days": 30.0,
            "consolidation": {"interval_hours": 6.0, "merge": "extractive",
                              "merge_threshold": 0.6},
        },
    }
    return Dataset(None, meta, ops, queries)


README = """# agent-lifecycle

Generated by `memlab datasets generate-lifecycle --seed 7 datasets/agent-lifecycle`
(`memlab.datasets.lifecycle`; the module docstring describes every scenario). {n_ops} operations
({n_stores} stores, {n_forgets} forgets), {n_q} queries over {n_c} clients, tagged {tags}.

| property (issue 12 §4) | count |
|---|---|
| queries with several relevant memories (`multi`: 3, `merge`: 2) | {n_multi} |
| contradicting writes without a shared key (`metadata.contradicts`, no `key`) | {n_contra} |
| of which conflicting writes from agents of different authority (human vs inferred) | {n_auth} |
| namespaced memories (`scope`): team / `agent:{{name}}` / `project:{{name}}` | {scopes} |
| queries asked by an agent (`agent`, `projects`; `scope_violation@k` must be 0) | {n_agent} |
| queries whose answer one fact holds only after a consolidation merge (`merge`) | {n_merge} |
| queries asked over 230 days after the evidence was written and read (`long_gap`) | {n_gap} |
| forgotten memories (purged 30 days after the forget) | {n_forgets} |

`dataset.toml` declares the replay defaults: a consolidation cycle every 6 simulated hours
(LLM-free extractive merge, cluster cosine 0.6), the docs/design.md §D3.8 conflict order
(`conflict_policy = "authority"`) and design §D3.7's forgetting (`forget_retention_days = 30`: a
forgotten memory can be restored for 30 days, then is purged on the replay clock). Contradicting
writes carry `metadata.contradicts` (read by `conflict@k`); namespaces (design §D3.5) are the
memories' `scope` field; memories without one are in `team`.
"""


def dataset_card_counts(ds: Dataset) -> dict[str, Any]:
    """The counts the README's table reports (each property of issue 12 §4)."""
    stores = {op.id: op for op in ds.ops if op.op == "store"}
    contra = [op for op in stores.values() if op.fields.get("metadata", {}).get("contradicts")]
    scopes = Counter(
        (op.fields.get("scope") or "team").split(":")[0] for op in stores.values()
    )
    tags = Counter(q.tags[0] for q in ds.queries)
    return {
        "n_ops": len(ds.ops),
        "n_stores": len(stores),
        "n_forgets": sum(op.op == "forget" for op in ds.ops),
        "n_q": len(ds.queries),
        "n_c": len({op.fields.get("client_id") for op in stores.values()}),
        "tags": ", ".join(f"`{t}` ({c})" for t, c in tags.items()),
        "n_multi": sum(len(q.relevant) > 1 for q in ds.queries),
        "n_contra": sum(not op.fields.get("key") for op in contra),
        "n_auth": sum(
            op.fields.get("authority")
            != stores[op.fields["metadata"]["contradicts"]].fields.get("authority")
            for op in contra
        ),
        "scopes": " / ".join(str(scopes[k]) for k in ("team", "agent", "project")),
        "n_agent": sum(q.agent is not None for q in ds.queries),
        "n_merge": tags["merge"],
        "n_gap": tags["long_gap"],
    }


def generate_lifecycle_dataset(seed: int, out_dir: str | os.PathLike[str]) -> Dataset:
    """Write the dataset and its README into ``out_dir`` (atomically)."""
    ds = simulate(seed)
    text = README.format(**dataset_card_counts(ds))
    return write_dataset(ds, Path(out_dir), extra_files={"README.md": text})
