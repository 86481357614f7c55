"""The shipped default dataset: a simulated multi-agent, multi-client team memory.

Five agents (``claude-code``, ``support-bot``, ``ops-agent``, ``sales-agent``,
``consolidation-engine``) write events, facts, decisions and statuses for several clients (plus
``global``) over about six months. Woven into the background noise are scenarios built to
exercise one retrieval path each; every query carries exactly one primary tag naming the path:

``paraphrase``   dense retrieval: the query shares almost no word with the memory, and a decoy
                 memory shares many words with the query but means something else.
``exact-id``     BM25: ids such as ``INC-48213``, ``INV-2025-0412`` or figures like
                 ``$12,437`` among near-identical memories that differ only in the id.
``multi-hop``    graph / LIF: the query names entity A, the relevant memory mentions only B,
                 A and B are linked by a ``relate`` op and/or co-occur in another memory.
``supersession`` facts updated by key: relevant = current version, stale = older ones.
``status``       statuses updated by subject: relevant = latest, stale = earlier ones.
``temporal``     ``at_time`` in the past: relevant = the version valid then.
``ttl``          an old low/medium event nobody touched (stale) next to a high-importance
                 memory on the same topic (relevant).
``dedup``        the same text written again by the same or other agents; relevant = first id.
``scope``        near-identical memories of other clients (stale); leakage is measurable.
``credential``   the memory carries a secret; the answer must not.

Randomness comes only from ``random.Random(seed)`` and no wall-clock time is read, so a seed
always produces byte-identical files.
"""

from __future__ import annotations

import json
import os
import random
import string
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import resources
from typing import Any

from memlab.datasets.format import Dataset, MemoryOp, Query, write_dataset
from memlab.timeutil import SECONDS_PER_DAY, parse_ts

AGENTS: tuple[str, ...] = (
    "claude-code",
    "support-bot",
    "ops-agent",
    "sales-agent",
    "consolidation-engine",
)
PRIMARY_TAGS: tuple[str, ...] = (
    "paraphrase",
    "exact-id",
    "multi-hop",
    "supersession",
    "status",
    "temporal",
    "ttl",
    "dedup",
    "scope",
    "credential",
)
_CATEGORY_OF_TYPE = {
    "event": "episodic",
    "fact": "semantic",
    "decision": "procedural",
    "status": "episodic",
}


@dataclass(frozen=True, slots=True)
class ClientProfile:
    """One simulated client and the entity names its memories use."""

    id: str
    display: str
    domain: str
    partner_domain: str
    brand_site: str
    product: str
    services: tuple[str, str]
    hidden_service: str
    project: str
    queue_tech: str
    stack: tuple[str, ...]
    contact: str
    engineer: str
    competitor: str
    sub_product: str
    liaison: str
    microsite: str
    division: str
    worker: str

    def slots(self) -> dict[str, str]:
        """Template fields of this client."""
        return {
            "cid": self.id,
            "display": self.display,
            "domain": self.domain,
            "partner": self.partner_domain,
            "brand": self.brand_site,
            "product": self.product,
            "svc": self.services[0],
            "svc2": self.services[1],
            "hidden": self.hidden_service,
            "project": self.project,
            "tech": self.queue_tech,
            "contact": self.contact,
            "engineer": self.engineer,
            "competitor": self.competitor,
            "subproduct": self.sub_product,
            "liaison": self.liaison,
            "microsite": self.microsite,
            "division": self.division,
            "worker": self.worker,
        }


# --------------------------------------------------------------------------- scenario content
# The templates are data files shipped with the package (``memlab/datasets/templates/*.json``):
# each holds a ``description``, the ``fields`` of a row and the ``rows``; lists become tuples.
_TEMPLATES = resources.files("memlab.datasets") / "templates"


def _frozen(value: Any) -> Any:
    return tuple(_frozen(v) for v in value) if isinstance(value, list) else value


def _template(name: str) -> dict[str, Any]:
    path = _TEMPLATES / f"{name}.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}:{exc.lineno}: invalid JSON: {exc.msg}") from None


def load_rows(name: str) -> tuple[Any, ...]:
    """The rows of template file ``name``: tuples in the order of its ``fields``, or strings.

    Raises:
        ValueError: If a row lacks a field or has one the file does not declare.
    """
    data = _template(name)
    fields = data.get("fields")
    if fields is None:
        return _frozen(data["rows"])
    rows = []
    for n, row in enumerate(data["rows"]):
        if set(row) != set(fields):
            raise ValueError(
                f"{_TEMPLATES / (name + '.json')}: rows[{n}] has fields {sorted(row)}, "
                f"expected {fields}"
            )
        rows.append(tuple(_frozen(row[f]) for f in fields))
    return tuple(rows)


CLIENT_PROFILES: tuple[ClientProfile, ...] = tuple(
    ClientProfile(*row) for row in load_rows("clients")
)
# paraphrase: (slug, memory, query, decoy, memory type, scope)
PARAPHRASE: tuple[tuple[str, str, str, str, str, str], ...] = load_rows("paraphrase")
# exact-id: (name, id pattern, memory, query, answer); slot pools by name
EXACT_ID: tuple[tuple[str, str, str, str, str], ...] = load_rows("exact_id")
_EXACT_POOLS: dict[str, tuple[str, ...]] = {
    k: _frozen(v) for k, v in _template("exact_pools")["pools"].items()
}
# multi-hop: (pattern, relation, A slot, B slot, memory about B (variants), bridge, query)
MULTI_HOP: tuple[tuple[str, str, str, str, tuple[str, ...], str, str], ...] = load_rows(
    "multi_hop"
)
# facts keyed per client: (slug, text, query now, query at a past date, values, category)
FACTS: tuple[tuple[str, str, str, str, tuple[str, ...], str], ...] = load_rows("facts")
# statuses per client: (slug, text, query now, query at a past date, ordered values, category)
STATUSES: tuple[tuple[str, str, str, str, tuple[str, ...], str], ...] = load_rows("statuses")
# ttl: (slug, old event, important memory, its type, query, answer, category)
TTL: tuple[tuple[str, str, str, str, str, str, str], ...] = load_rows("ttl")
# dedup: (slug, text, type, query, answer, category)
DEDUP: tuple[tuple[str, str, str, str, str, str], ...] = load_rows("dedup")
# scope: (slug, text, query, values, category) -- the texts never name the client
SCOPE: tuple[tuple[str, str, str, tuple[str, ...], str], ...] = load_rows("scope")
# credential: (slug, kind, text with {secret}, query, answer, secret shape)
CREDENTIALS: tuple[tuple[str, str, str, str, str, str], ...] = load_rows("credentials")
# background noise
_CHANGES: tuple[str, ...] = load_rows("changes")
_ISSUES: tuple[tuple[str, str], ...] = load_rows("support_issues")
_SALES_TOPICS: tuple[str, ...] = load_rows("sales_topics")
_DECISIONS: tuple[tuple[str, str], ...] = load_rows("decisions")
_RETRO: tuple[str, ...] = load_rows("retro")
_FORGET_REASONS: tuple[str, ...] = load_rows("forget_reasons")

def _secs(days: float) -> int:
    return int(round(days * SECONDS_PER_DAY))


def _date_text(ts: float) -> str:
    dt = datetime.fromtimestamp(ts, tz=UTC)
    return f"{dt.day} {dt.strftime('%B')} {dt.year}"


@dataclass(slots=True)
class _Mem:
    seq: int
    ts: int
    text: str
    type: str
    fields: dict[str, Any]
    id: str = ""


@dataclass(slots=True)
class _Op:
    seq: int
    ts: int
    kind: str
    target: _Mem | None = None
    reason: str | None = None
    src: str | None = None
    relation: str | None = None
    dst: str | None = None


@dataclass(slots=True)
class _Ask:
    seq: int
    ts: int
    text: str
    client_id: str | None
    relevant: list[_Mem]
    stale: list[_Mem]
    tags: list[str]
    answer: str | None = None
    at_time: int | None = None


class _Plan:
    """Everything the simulation will write, before ids are assigned in time order."""

    def __init__(self) -> None:
        self.items: list[_Mem | _Op] = []
        self.asks: list[_Ask] = []
        self.seq = 0
        self.seen: set[tuple[str, str, str]] = set()
        self.tokens: set[str] = set()

    def _next(self) -> int:
        self.seq += 1
        return self.seq

    def store(
        self, ts: int, text: str, mtype: str, *, duplicate: bool = False, **fields: Any
    ) -> _Mem | None:
        key = (fields.get("client_id", "global"), mtype, text)
        if key in self.seen and not duplicate:
            return None
        self.seen.add(key)
        fields.setdefault("category", _CATEGORY_OF_TYPE[mtype])
        mem = _Mem(self._next(), ts, text, mtype, fields)
        self.items.append(mem)
        return mem

    def must_store(self, ts: int, text: str, mtype: str, **fields: Any) -> _Mem:
        mem = self.store(ts, text, mtype, **fields)
        if mem is None:
            raise RuntimeError(f"generated the same text twice by accident: {text!r}")
        return mem

    def forget(self, ts: int, target: _Mem, reason: str) -> None:
        self.items.append(_Op(self._next(), ts, "forget", target=target, reason=reason))

    def relate(self, ts: int, src: str, relation: str, dst: str) -> None:
        self.items.append(_Op(self._next(), ts, "relate", src=src, relation=relation, dst=dst))

    def ask(
        self, ts: int, text: str, client_id: str | None, relevant: list[_Mem], **kw: Any
    ) -> None:
        kw.setdefault("stale", [])
        self.asks.append(_Ask(self._next(), ts, text, client_id, relevant, **kw))

    def token(self, rng: random.Random, pattern: str) -> str:
        """A fresh id such as ``INC-48213`` never used before in this dataset."""
        while True:
            value = pattern.format(
                d2=rng.randint(11, 98),
                d3=rng.randint(100, 999),
                d4=f"{rng.randint(0, 9999):04d}",
                d5=rng.randint(10000, 99999),
                d6=rng.randint(100000, 999999),
            )
            if value not in self.tokens:
                self.tokens.add(value)
                return value

    @property
    def n_stores(self) -> int:
        return sum(isinstance(i, _Mem) for i in self.items)


class AgentMemorySimulator:
    """Builds the ``agent-memories`` dataset.

    Args:
        n_clients: Number of simulated clients (at most ``len(CLIENT_PROFILES)``).
        months: Length of the simulated timeline (30.5 days per month).
        start: ISO 8601 start of the timeline.
        queries_per_tag: Queries built for each primary tag.
        n_memories: Total store operations; background noise fills up to it.
        event_ttl_days: Event TTL of the reference model (design §D0.10: 30 days). Events that are
            relevant to a non-``ttl`` query are asked about before they reach it.
        max_query_lag_days: Longest wait between the last write a query depends on and the
            query.
        exact_id_family: Memories per ``exact-id`` family (the relevant one and near-identical
            distractors).
        forget_share: Share of ``exact-id`` and ``status`` scenarios that also write a wrong
            memory and forget it.
        noise_forget_share: Share of background memories forgotten later.
        name: Dataset name.
        version: Dataset version.
    """

    def __init__(
        self,
        *,
        n_clients: int = 6,
        months: float = 6,
        start: str = "2025-01-06T08:00:00Z",
        queries_per_tag: int = 32,
        n_memories: int = 2400,
        event_ttl_days: float = 30.0,
        max_query_lag_days: float = 20.0,
        exact_id_family: int = 8,
        forget_share: float = 0.25,
        noise_forget_share: float = 0.015,
        name: str = "agent-memories",
        version: str = "1",
    ) -> None:
        self.n_clients = n_clients
        self.months = months
        self.start = start
        self.queries_per_tag = queries_per_tag
        self.n_memories = n_memories
        self.event_ttl_days = event_ttl_days
        self.max_query_lag_days = max_query_lag_days
        self.exact_id_family = exact_id_family
        self.forget_share = forget_share
        self.noise_forget_share = noise_forget_share
        self.name = name
        self.version = version

    # ------------------------------------------------------------------ helpers
    def _check(self) -> None:
        if not 1 <= self.n_clients <= len(CLIENT_PROFILES):
            raise ValueError(f"n_clients must lie in [1, {len(CLIENT_PROFILES)}]")
        if self.queries_per_tag < 1:
            raise ValueError("queries_per_tag must be at least 1")
        if self.exact_id_family < 2:
            raise ValueError("exact_id_family must be at least 2")
        if self.max_query_lag_days >= self.event_ttl_days - 2:
            raise ValueError("max_query_lag_days must be below event_ttl_days - 2")
        if self.months * 30.5 < self.event_ttl_days + 100:
            raise ValueError("the timeline must be at least event_ttl_days + 100 days long")
        limits = {
            "paraphrase": len(PARAPHRASE),
            "exact-id": len(EXACT_ID) * self.n_clients,
            "multi-hop": len(MULTI_HOP) * self.n_clients,
            "supersession": len(FACTS) * self.n_clients,
            "status": len(STATUSES) * self.n_clients,
            "temporal": (len(FACTS) + len(STATUSES)) * self.n_clients - 2 * self.queries_per_tag,
            "ttl": len(TTL) * self.n_clients,
            "dedup": len(DEDUP) * self.n_clients,
            "scope": len(SCOPE) * self.n_clients,
            "credential": len(CREDENTIALS) * self.n_clients,
        }
        for tag, limit in limits.items():
            if self.queries_per_tag > limit:
                raise ValueError(
                    f"queries_per_tag={self.queries_per_tag} needs more {tag} material than "
                    f"n_clients={self.n_clients} provides"
                )

    def _anchor(self, rng: random.Random, need_days: float) -> int:
        return self.origin_ + rng.randint(0, max(0, self.span_ - _secs(need_days)))

    def _ask_ts(self, rng: random.Random, after: int, *, event: int | None = None) -> int:
        """A query time after ``after``; before ``event`` + TTL - 2 days when given."""
        lo = after + 3600
        hi = after + _secs(self.max_query_lag_days)
        if event is not None:
            hi = min(hi, event + _secs(self.event_ttl_days - 2))
        hi = min(hi, self.origin_ + self.span_)
        if hi < lo:
            raise RuntimeError("no room left on the timeline for a query")
        return rng.randint(lo, hi)

    @staticmethod
    def _agent(rng: random.Random, *choices: str) -> str:
        return rng.choice(choices or AGENTS)

    # ------------------------------------------------------------------ scenarios
    def _paraphrase(
        self, rng: random.Random, plan: _Plan, clients: Sequence[ClientProfile]
    ) -> None:
        picks = rng.sample(range(len(PARAPHRASE)), self.queries_per_tag)
        for index in picks:
            slug, memory, query, decoy, mtype, scope = PARAPHRASE[index]
            client = rng.choice(clients) if scope == "client" else None
            cid = client.id if client else "global"
            t0 = self._anchor(rng, 45) + _secs(12)
            fields: dict[str, Any] = {
                "source_agent": self._agent(rng),
                "client_id": cid,
                "importance": rng.choice(("medium", "high")),
                "knowledge_category": "general",
            }
            if mtype == "fact":
                fields["key"] = f"{cid}-{slug}"
            mem = plan.must_store(t0, memory, mtype, **fields)
            d_ts = t0 + rng.randint(-_secs(10), _secs(10))
            plan.must_store(
                d_ts,
                decoy,
                "event",
                source_agent=self._agent(rng),
                client_id=cid,
                importance="medium",
            )
            ts = self._ask_ts(rng, max(t0, d_ts), event=t0 if mtype == "event" else None)
            plan.ask(
                ts,
                query,
                client.id if client else None,
                [mem],
                tags=["paraphrase", f"client:{cid}"],
                answer=memory,
            )

    def _exact_id(self, rng: random.Random, plan: _Plan, clients: Sequence[ClientProfile]) -> None:
        combos = [(t, c) for t in EXACT_ID for c in clients]
        for template, client in rng.sample(combos, self.queries_per_tag):
            name, pattern, memory, query, answer = template
            slots = client.slots()
            slots["svc"] = rng.choice(client.services)
            t0 = self._anchor(rng, 50)
            target_ts = t0 + _secs(10)

            def categories() -> dict[str, str]:
                return {name: rng.choice(pool) for name, pool in _EXACT_POOLS.items()}

            def fill(ident: str, cats: dict[str, str], s: dict[str, str] = slots) -> dict[str, str]:
                """Slots of one family member: shared categories, its own id and numbers."""
                return {
                    **s,
                    **cats,
                    "id": ident,
                    "minutes": str(rng.randint(4, 95)),
                    "amount": f"${rng.randint(2, 40)},{rng.randint(1, 9)}00",
                    "seats": str(rng.randint(5, 400)),
                    "version": f"{rng.randint(1, 9)}.{rng.randint(0, 30)}.{rng.randint(0, 9)}",
                    "week": str(rng.randint(1, 52)),
                }

            family = categories()
            agent = self._agent(rng, "ops-agent", "support-bot", "sales-agent", "claude-code")
            common = {"source_agent": agent, "client_id": client.id, "importance": "medium"}
            target_id = plan.token(rng, pattern)
            target_slots = fill(target_id, family)
            target = plan.must_store(target_ts, memory.format(**target_slots), "event", **common)
            last = target_ts
            for _ in range(self.exact_id_family - 1):
                ts = t0 + rng.randint(0, _secs(15))
                plan.must_store(
                    ts, memory.format(**fill(plan.token(rng, pattern), family)), "event", **common
                )
                last = max(last, ts)
            ask_ts = self._ask_ts(rng, last, event=target_ts)
            tags = ["exact-id", f"client:{client.id}", f"id:{name}"]
            stale: list[_Mem] = []
            if rng.random() < self.forget_share:
                wrong_slots = fill(target_id, categories())
                while memory.format(**wrong_slots) == target.text:
                    wrong_slots = fill(target_id, categories())
                wrong_ts = target_ts - rng.randint(_secs(1), _secs(5))
                wrong = plan.must_store(wrong_ts, memory.format(**wrong_slots), "event", **common)
                plan.forget(rng.randint(wrong_ts + 3600, ask_ts - 3600), wrong, "wrong details")
                stale.append(wrong)
                tags.append("forget")
            plan.ask(
                ask_ts,
                query.format(**target_slots),
                client.id,
                [target],
                stale=stale,
                tags=tags,
                answer=answer.format(**target_slots),
            )

    def _multi_hop(self, rng: random.Random, plan: _Plan, clients: Sequence[ClientProfile]) -> None:
        combos = [(p, c) for p in MULTI_HOP for c in clients]
        picks = rng.sample(combos, self.queries_per_tag)
        modes = ("relate", "co-occurrence", "both")
        for i, (pattern, client) in enumerate(picks):
            name, relation, a_slot, b_slot, b_texts, bridge, query = pattern
            mode = modes[i % 3]
            slots = client.slots()
            slots |= {"n": str(rng.randint(3, 60)), "pct": str(rng.randint(3, 30))}
            a_name, b_name = slots[a_slot], slots[b_slot]
            t0 = self._anchor(rng, 60)
            b_ts = t0 + rng.randint(_secs(10), _secs(30))
            last = b_ts
            if mode in ("relate", "both"):
                ts = t0 + rng.randint(0, _secs(30))
                plan.relate(ts, a_name, relation, b_name)
                last = max(last, ts)
            if mode in ("co-occurrence", "both"):
                ts = t0 + rng.randint(0, _secs(30))
                plan.must_store(
                    ts,
                    bridge.format(**slots),
                    "fact",
                    source_agent=self._agent(rng, "consolidation-engine", "claude-code"),
                    client_id=client.id,
                    key=f"{client.id}-link-{name}",
                    importance="medium",
                    knowledge_category="relationship",
                )
                last = max(last, ts)
            text = rng.choice(b_texts).format(**slots)
            mem = plan.must_store(
                b_ts,
                text,
                "event",
                source_agent=self._agent(rng, "ops-agent", "sales-agent", "claude-code"),
                client_id=client.id,
                importance="medium",
            )
            plan.ask(
                self._ask_ts(rng, last, event=b_ts),
                query.format(**slots),
                client.id,
                [mem],
                tags=["multi-hop", f"client:{client.id}", f"via:{mode}", f"relation:{relation}"],
                answer=text,
            )

    def _chain(
        self,
        rng: random.Random,
        plan: _Plan,
        client: ClientProfile,
        template: tuple[str, str, str, str, tuple[str, ...], str],
        *,
        status: bool,
        k: int,
        wrong: bool = False,
    ) -> tuple[list[_Mem], list[str], _Mem | None, int]:
        """Versions of a fact key or status subject: (versions, values, wrong one, last ts)."""
        slug, text, _, _, values, category = template
        slots = client.slots()
        if status:
            picks = sorted(rng.sample(range(len(values)), k))
            chosen = [values[i] for i in picks]
        else:
            chosen = rng.sample(values, k)
        gaps = [rng.randint(_secs(6), _secs(22)) for _ in range(k - 1)]
        t = self._anchor(rng, sum(gaps) / SECONDS_PER_DAY + self.max_query_lag_days + 1)
        versions: list[_Mem] = []
        bad: _Mem | None = None
        for i, value in enumerate(chosen):
            if i:
                t += gaps[i - 1]
            fields: dict[str, Any] = {
                "source_agent": self._agent(
                    rng, "sales-agent", "claude-code", "ops-agent", "consolidation-engine"
                ),
                "client_id": client.id,
                "importance": rng.choice(("medium", "high")),
                "knowledge_category": category,
            }
            if status:
                fields |= {"subject": f"{client.id}:{slug}", "status_value": value}
            else:
                fields["key"] = f"{client.id}-{slug}"
            if wrong and i == k - 1:
                gap = gaps[i - 1]
                w_ts = t - gap + rng.randint(3600, gap // 3)
                w_fields = {**fields, "status_value": "cancelled"}
                bad = plan.must_store(
                    w_ts, text.format(**slots, v="cancelled"), "status", **w_fields
                )
                plan.forget(rng.randint(w_ts + 3600, t - 3600), bad, "posted to the wrong subject")
            mtype = "status" if status else "fact"
            versions.append(plan.must_store(t, text.format(**slots, v=value), mtype, **fields))
        return versions, chosen, bad, t

    def _supersession_status_temporal(
        self, rng: random.Random, plan: _Plan, clients: Sequence[ClientProfile]
    ) -> None:
        n = self.queries_per_tag
        facts = rng.sample([(f, c) for f in FACTS for c in clients], len(FACTS) * len(clients))
        statuses = [(s, c) for s in STATUSES for c in clients]
        statuses = rng.sample(statuses, len(statuses))
        n_temporal_status = min(len(statuses) - n, max(n - (len(facts) - n), round(n * 0.4)))
        n_temporal_fact = n - n_temporal_status
        if n_temporal_fact > len(facts) - n:
            raise ValueError(f"queries_per_tag={n}: not enough fact and status chains left")
        for template, client in facts[:n]:
            k = rng.randint(2, 4)
            versions, values, _, last = self._chain(rng, plan, client, template, status=False, k=k)
            plan.ask(
                self._ask_ts(rng, last),
                template[2].format(**client.slots()),
                client.id,
                [versions[-1]],
                stale=versions[:-1],
                tags=["supersession", f"client:{client.id}", f"versions:{len(versions)}"],
                answer=values[-1],
            )
        for template, client in statuses[:n]:
            wrong = rng.random() < self.forget_share
            versions, values, bad, last = self._chain(
                rng, plan, client, template, status=True, k=rng.randint(2, 4), wrong=wrong
            )
            tags = ["status", f"client:{client.id}", f"versions:{len(versions)}"]
            stale = versions[:-1]
            if bad is not None:
                stale = [*stale, bad]
                tags.append("forget")
            plan.ask(
                self._ask_ts(rng, last),
                template[2].format(**client.slots()),
                client.id,
                [versions[-1]],
                stale=stale,
                tags=tags,
                answer=values[-1],
            )
        temporal = [(t, c, False) for t, c in facts[n : n + n_temporal_fact]]
        temporal += [(t, c, True) for t, c in statuses[n : n + n_temporal_status]]
        for template, client, status in temporal:
            versions, values, _, last = self._chain(
                rng, plan, client, template, status=status, k=rng.randint(3, 4)
            )
            i = rng.randint(0, len(versions) - 2)
            at = rng.randint(versions[i].ts + _secs(1), versions[i + 1].ts - _secs(1))
            kind = "status" if status else "fact"
            plan.ask(
                self._ask_ts(rng, last),
                template[3].format(**client.slots(), date=_date_text(at)),
                client.id,
                [versions[i]],
                stale=versions[:i] + versions[i + 1 :],
                tags=["temporal", f"client:{client.id}", f"temporal:{kind}"],
                answer=values[i],
                at_time=at,
            )

    def _ttl(self, rng: random.Random, plan: _Plan, clients: Sequence[ClientProfile]) -> None:
        combos = [(t, c) for t in TTL for c in clients]
        for template, client in rng.sample(combos, self.queries_per_tag):
            slug, event, important, itype, query, answer, category = template
            slots = client.slots()
            age = rng.randint(_secs(self.event_ttl_days + 5), _secs(self.event_ttl_days + 60))
            t_event = self._anchor(rng, age / SECONDS_PER_DAY + 1)
            ask_ts = t_event + age
            old = plan.must_store(
                t_event,
                event.format(**slots),
                "event",
                source_agent=self._agent(rng, "ops-agent", "support-bot", "sales-agent"),
                client_id=client.id,
                importance=rng.choice(("low", "medium")),
                knowledge_category=category,
            )
            lo = max(self.origin_, t_event - _secs(10))
            fields: dict[str, Any] = {
                "source_agent": self._agent(rng, "claude-code", "ops-agent", "sales-agent"),
                "client_id": client.id,
                "importance": "high",
                "knowledge_category": category,
            }
            if itype == "fact":
                fields["key"] = f"{client.id}-{slug}"
            keep = plan.must_store(
                rng.randint(lo, ask_ts - _secs(1)), important.format(**slots), itype, **fields
            )
            plan.ask(
                ask_ts,
                query.format(**slots),
                client.id,
                [keep],
                stale=[old],
                tags=["ttl", f"client:{client.id}"],
                answer=answer,
            )

    def _dedup(self, rng: random.Random, plan: _Plan, clients: Sequence[ClientProfile]) -> None:
        combos = [(t, c) for t in DEDUP for c in clients]
        patterns = ("same-agent", "cross-agent", "both")
        for i, (template, client) in enumerate(rng.sample(combos, self.queries_per_tag)):
            slug, text, mtype, query, answer, category = template
            pattern = patterns[i % 3]
            first_agent = self._agent(rng)
            fields: dict[str, Any] = {
                "client_id": client.id,
                "importance": rng.choice(("medium", "high")),
                "knowledge_category": category,
            }
            if mtype == "fact":
                fields["key"] = f"{client.id}-{slug}"
            body = text.format(**client.slots())
            t0 = self._anchor(rng, 15 + self.max_query_lag_days)
            first = plan.must_store(t0, body, mtype, source_agent=first_agent, **fields)
            others = [a for a in AGENTS if a != first_agent]
            agents: list[str] = []
            if pattern in ("same-agent", "both"):
                agents.append(first_agent)
            if pattern in ("cross-agent", "both"):
                agents += rng.sample(others, rng.randint(1, 2))
            last = t0
            for agent in agents:
                ts = t0 + rng.randint(3600, _secs(12))
                plan.store(ts, body, mtype, duplicate=True, source_agent=agent, **dict(fields))
                last = max(last, ts)
            plan.ask(
                self._ask_ts(rng, last),
                query.format(**client.slots()),
                client.id,
                [first],
                tags=["dedup", f"client:{client.id}", f"dup:{pattern}"],
                answer=answer,
            )

    def _scope(self, rng: random.Random, plan: _Plan, clients: Sequence[ClientProfile]) -> None:
        combos = rng.sample([(s, c) for s in SCOPE for c in clients], self.queries_per_tag)
        written: dict[str, dict[str, _Mem]] = {}
        for topic in SCOPE:
            if not any(t is topic for t, _ in combos):
                continue
            slug, text, _, values, category = topic
            chosen = rng.sample(values, len(clients))
            written[slug] = {}
            for client, value in zip(clients, chosen, strict=True):
                ts = self.origin_ + rng.randint(0, int(self.span_ * 0.75))
                written[slug][client.id] = plan.must_store(
                    ts,
                    text.format(v=value),
                    "fact",
                    source_agent=self._agent(rng, "sales-agent", "claude-code", "support-bot"),
                    client_id=client.id,
                    key=f"{client.id}-{slug}",
                    importance="medium",
                    knowledge_category=category,
                )
        for topic, client in combos:
            slug, _, query, _, _ = topic
            mems = written[slug]
            last = max(m.ts for m in mems.values())
            plan.ask(
                self._ask_ts(rng, last),
                query,
                client.id,
                [mems[client.id]],
                stale=[m for cid, m in mems.items() if cid != client.id],
                tags=["scope", f"client:{client.id}"],
                answer=mems[client.id].text,
            )

    def _credential(
        self, rng: random.Random, plan: _Plan, clients: Sequence[ClientProfile]
    ) -> None:
        combos = [(t, c) for t in CREDENTIALS for c in clients]
        alnum = string.ascii_letters + string.digits
        for template, client in rng.sample(combos, self.queries_per_tag):
            slug, kind, text, query, answer, shape = template
            if shape == "hex":
                secret = "".join(rng.choice("0123456789abcdef") for _ in range(40))
            else:
                size = {"password": 18, "key": 32, "token": 40}[shape]
                secret = "".join(rng.choice(alnum) for _ in range(size))
            slots = client.slots()
            slots["svc_u"] = slots["svc"].replace("-", "_")
            t0 = self._anchor(rng, self.max_query_lag_days + 1)
            mem = plan.must_store(
                t0,
                text.format(**slots, secret=secret),
                "fact",
                source_agent=self._agent(rng, "ops-agent", "claude-code"),
                client_id=client.id,
                key=f"{client.id}-{slug}",
                importance="high",
                knowledge_category="technical",
                metadata={"contains_secret": kind},
            )
            plan.ask(
                self._ask_ts(rng, t0),
                query.format(**slots),
                client.id,
                [mem],
                tags=["credential", f"client:{client.id}", f"secret:{kind}"],
                answer=answer.format(**slots),
            )

    # ------------------------------------------------------------------ background
    def _noise_text(
        self, rng: random.Random, client: ClientProfile | None, counters: Counter[str]
    ) -> tuple[str, str, dict[str, Any]]:
        cid = client.id if client else "global"
        if client is None:
            kind = rng.choice(("retro", "handbook", "decision"))
        else:
            kind = rng.choice(
                ("pr", "merge", "ticket", "deploy", "scale", "cert", "call", "proposal",
                 "merge-notes", "contradiction", "decision")
            )  # fmt: skip
        importance = rng.choice(("low", "medium", "medium", "medium", "high"))
        fields: dict[str, Any] = {"client_id": cid, "importance": importance}
        mtype = "event"
        counters[kind] += 1
        n = counters[kind]
        if kind == "retro":
            text = f"Team retro #{n}: {rng.choice(_RETRO)}."
            agent = "consolidation-engine"
        elif kind == "handbook":
            text = f"Updated section {n} of the on-call handbook: {rng.choice(_RETRO)}."
            agent = self._agent(rng, "ops-agent", "claude-code")
        elif kind == "decision":
            choice, reason = rng.choice(_DECISIONS)
            where = f"for {client.display}" if client else "across the team"
            text = f"Decision {n}: {choice} {where} because {reason}."
            mtype, agent = "decision", self._agent(rng)
        elif kind in ("pr", "merge"):
            assert client is not None
            svc = rng.choice(client.services)
            verb = "Opened" if kind == "pr" else "Merged"
            text = f"{verb} PR #{1000 + n * 7} on `{svc}`: {rng.choice(_CHANGES)}."
            agent = "claude-code"
        elif kind == "ticket":
            assert client is not None
            issue, fix = rng.choice(_ISSUES)
            text = f"Ticket SUP-{20000 + n * 3} from a {client.display} user: {issue}; {fix}."
            agent = "support-bot"
        elif kind == "deploy":
            assert client is not None
            svc = rng.choice(client.services)
            env = rng.choice(("staging", "production", "canary"))
            text = f"Deployed `{svc}` v{rng.randint(1, 4)}.{n}.{rng.randint(0, 9)} to {env}."
            agent = "ops-agent"
        elif kind == "scale":
            assert client is not None
            svc = rng.choice(client.services)
            text = (
                f"Scaled `{svc}` to {rng.randint(2, 12)} replicas for traffic on "
                f"{client.domain} (change {n})."
            )
            agent = "ops-agent"
        elif kind == "cert":
            assert client is not None
            text = f"Rotated the TLS certificate for {client.domain} (rotation {n})."
            agent = "ops-agent"
        elif kind == "call":
            assert client is not None
            text = (
                f"Call {n} with {client.contact} ({client.display}): discussed "
                f"{rng.choice(_SALES_TOPICS)}."
            )
            agent = "sales-agent"
            fields["knowledge_category"] = "meeting"
        elif kind == "proposal":
            assert client is not None
            text = (
                f"Sent proposal {n} to {client.display} for {rng.choice(_SALES_TOPICS)} at "
                f"${rng.randint(2, 30)},{rng.randint(0, 9)}00."
            )
            agent = "sales-agent"
            fields["knowledge_category"] = "strategy"
        elif kind == "merge-notes":
            assert client is not None
            text = (
                f"Merged {rng.randint(2, 9)} notes about {client.display} "
                f"{rng.choice(_SALES_TOPICS)} into one summary (batch {n})."
            )
            agent = "consolidation-engine"
        else:
            assert client is not None
            text = (
                f"Flagged a contradiction between two notes on {client.display} "
                f"{rng.choice(_SALES_TOPICS)} (review {n})."
            )
            agent = "consolidation-engine"
            fields["importance"] = "high"
        fields["source_agent"] = agent
        return text, mtype, fields

    def _noise(self, rng: random.Random, plan: _Plan, clients: Sequence[ClientProfile]) -> None:
        for client in clients:
            plan.relate(self.origin_ + rng.randint(0, _secs(3)), client.id, "uses", client.stack[0])
            plan.relate(
                self.origin_ + rng.randint(0, _secs(3)),
                self._agent(rng, "claude-code", "ops-agent", "sales-agent"),
                "works_on",
                client.id,
            )
        counters: Counter[str] = Counter()
        target = self.n_memories - plan.n_stores
        written = 0
        while written < target:
            client = None if rng.random() < 0.15 else rng.choice(clients)
            text, mtype, fields = self._noise_text(rng, client, counters)
            ts = self.origin_ + rng.randint(0, self.span_)
            mem = plan.store(ts, text, mtype, **fields)
            if mem is None:
                continue
            written += 1
            end = self.origin_ + self.span_
            forgettable = mtype != "decision"  # decisions are an immutable audit trail
            if forgettable and rng.random() < self.noise_forget_share and ts + _secs(2) < end:
                when = min(end, ts + rng.randint(_secs(1), _secs(20)))
                plan.forget(when, mem, rng.choice(_FORGET_REASONS))

    # ------------------------------------------------------------------ assembly
    def simulate(self, seed: int) -> Dataset:
        """Run the simulation; the same seed gives the same dataset.

        Raises:
            ValueError: If the parameters cannot produce ``queries_per_tag`` queries per tag.
        """
        self._check()
        rng = random.Random(seed)
        self.origin_ = int(parse_ts(self.start))
        self.span_ = _secs(self.months * 30.5)
        clients = CLIENT_PROFILES[: self.n_clients]
        plan = _Plan()
        self._paraphrase(rng, plan, clients)
        self._exact_id(rng, plan, clients)
        self._multi_hop(rng, plan, clients)
        self._supersession_status_temporal(rng, plan, clients)
        self._ttl(rng, plan, clients)
        self._dedup(rng, plan, clients)
        self._scope(rng, plan, clients)
        self._credential(rng, plan, clients)
        self._noise(rng, plan, clients)
        return self._assemble(plan, seed)

    def _assemble(self, plan: _Plan, seed: int) -> Dataset:
        items = sorted(plan.items, key=lambda i: (i.ts, i.seq))
        width = max(5, len(str(plan.n_stores)))
        ops: list[MemoryOp] = []
        n = 0
        for item in items:
            if isinstance(item, _Mem):
                n += 1
                item.id = f"m{n:0{width}d}"
                ops.append(MemoryOp.store(item.id, item.ts, item.text, item.type, **item.fields))
            elif item.kind == "forget":
                assert item.target is not None
                ops.append(MemoryOp.forget(item.ts, item.target.id, item.reason))
            else:
                assert item.src and item.relation and item.dst
                ops.append(MemoryOp.relate(item.ts, item.src, item.relation, item.dst))
        asks = sorted(plan.asks, key=lambda a: (a.ts, a.seq))
        qwidth = max(4, len(str(len(asks))))
        queries = [
            Query(
                0,
                f"q{i:0{qwidth}d}",
                float(a.ts),
                a.text,
                a.client_id,
                None if a.at_time is None else float(a.at_time),
                {m.id: 1 for m in a.relevant},
                tuple(m.id for m in a.stale),
                tuple(a.tags),
                a.answer,
            )
            for i, a in enumerate(asks, start=1)
        ]
        meta = {
            "name": self.name,
            "version": self.version,
            "description": (
                "Simulated multi-agent, multi-client team memory: background work plus "
                "scenarios that each exercise one retrieval path (tagged per query)."
            ),
            "license": "Apache-2.0",
            "source": f"memlab.datasets.generate, seed {seed}",
        }
        return Dataset(None, meta, ops, queries)

    # ------------------------------------------------------------------ documentation
    def readme(self, dataset: Dataset, seed: int) -> str:
        """The dataset's README.md, with its counts."""
        stores = dataset.stores()
        ops = Counter(op.op for op in dataset.ops)
        types = Counter(op.type for op in stores)
        agents = Counter(op.fields.get("source_agent") for op in stores)
        client_count = Counter(op.fields.get("client_id") for op in stores)
        tags = Counter(q.tags[0] for q in dataset.queries)
        secondary = Counter(
            t.split(":")[0] + ":" if ":" in t else t for q in dataset.queries for t in q.tags[1:]
        )
        first = min(op.ts for op in dataset.ops)
        last = max(max(op.ts for op in dataset.ops), max(q.ts for q in dataset.queries))
        clients = CLIENT_PROFILES[: self.n_clients]
        lines = [
            f"# {self.name}",
            "",
            "A simulated team memory: five agents write events, facts, decisions and statuses "
            f"for {self.n_clients} clients (plus `global`) over about {self.months:g} months. "
            "Most writes are background work; woven into them are scenarios built so that "
            "one retrieval path should win each query. Every query's first tag names that "
            "path. Format: dataset format v1 (`memlab.datasets.format`).",
            "",
            "Regenerate (byte-identical):",
            "",
            "```",
            f"memlab datasets generate --seed {seed} datasets/{self.name}",
            "```",
            "",
            "## Timeline",
            "",
            f"From {_date_text(first)} to {_date_text(last)}. "
            f"{len(dataset.ops)} operations: {ops['store']} stores, {ops['forget']} forgets, "
            f"{ops['relate']} relates; {len(dataset.queries)} queries interleaved with the "
            "writes (each is asked a short while after the last write it depends on).",
            "",
            "| type | stores |",
            "|---|---|",
            *[f"| {t} | {types[t]} |" for t in ("event", "fact", "decision", "status")],
            "",
            "## Agents",
            "",
            "| agent | stores | writes mostly |",
            "|---|---|---|",
            f"| claude-code | {agents['claude-code']} | pull requests, refactors, config facts |",
            f"| support-bot | {agents['support-bot']} | support tickets and their fixes |",
            f"| ops-agent | {agents['ops-agent']} | deploys, scaling, certificates, incidents |",
            f"| sales-agent | {agents['sales-agent']} | calls, proposals, account facts |",
            f"| consolidation-engine | {agents['consolidation-engine']} | merged notes, "
            "contradictions, links between entities |",
            "",
            "## Clients",
            "",
            "| client_id | domain | product | services | stores |",
            "|---|---|---|---|---|",
            *[
                f"| {c.id} | {c.domain} | {c.product} | `{c.services[0]}`, `{c.services[1]}` "
                f"| {client_count[c.id]} |"
                for c in clients
            ],
            f"| global | | | | {client_count['global']} |",
            "",
            "Entity names are written so the fast-path extractor finds them: technology names "
            "(PostgreSQL, Kafka, Stripe ...), domains (acme-corp.com), services in backticks "
            "(`billing-api`) and capitalised product names (Orion Dashboard).",
            "",
            "## Query tags",
            "",
            "| primary tag | queries | how the queries are built |",
            "|---|---|---|",
            f"| paraphrase | {tags['paraphrase']} | The memory and the query share almost no "
            "word (synonyms throughout); a decoy memory of the same client shares several words "
            "with the query but is about something else. Dense retrieval should win. |",
            f"| exact-id | {tags['exact-id']} | A family of {self.exact_id_family} "
            "near-identical events that differ only in an id (incident, invoice, error code, "
            "order, purchase order, build, CVE) or a dollar figure; the query quotes one id. "
            "BM25 should win. |",
            f"| multi-hop | {tags['multi-hop']} | The query names a rarely mentioned entity A "
            "(sub-product, liaison, microsite, division, engineer, background worker); the "
            "relevant event mentions only entity B. A and B are linked by a `relate` op "
            "(`relation:` tag), by a fact mentioning both, or both (`via:` tag). Graph "
            "retrieval / LIF should win. |",
            f"| supersession | {tags['supersession']} | A fact key rewritten 2-4 times; "
            "relevant = the current version, stale = the older ones. |",
            f"| status | {tags['status']} | A status subject updated 2-4 times; relevant = "
            "the latest, stale = the earlier ones. |",
            f"| temporal | {tags['temporal']} | A fact or status chain of 3-4 versions, asked "
            "with `at_time` between two versions; relevant = the version valid then, stale = "
            "the others. |",
            f"| ttl | {tags['ttl']} | A low/medium event older than {self.event_ttl_days:g} "
            "days that nothing asks about (stale, it should have expired) next to a "
            "high-importance decision or fact on the same topic (relevant). The event names no "
            "entity, so other queries of the client have little reason to touch it (a replay "
            "that counts the top hits of every query as accesses can still keep it alive). |",
            f"| dedup | {tags['dedup']} | The same text stored again by the same agent "
            "(`dup:same-agent`), by other agents (`dup:cross-agent`, corroboration) or both; "
            "relevant = the first id, onto which the later writes map. |",
            f"| scope | {tags['scope']} | Every client has a near-identical fact on the same "
            "topic (the texts never name the client); the query is scoped to one client, the "
            "other clients' facts are stale, so leakage is measurable. |",
            f"| credential | {tags['credential']} | The memory carries a secret (password, "
            "API key, bearer token, connection string, webhook secret; `secret:` tag, "
            "`metadata.contains_secret`); the reference answer never contains it. |",
            "",
            "Secondary tags: "
            + ", ".join(f"`{name}` ({count})" for name, count in sorted(secondary.items()))
            + ". `client:<id>` names the client of the scenario; `forget` marks a query for "
            "which a wrong memory was written and then forgotten (it is stale).",
            "",
            "## Guarantees",
            "",
            "- Every relevant and stale id is stored before its query's `ts`; queries are spread "
            "over the whole timeline.",
            "- Events relevant to a non-`ttl` query are asked about less than "
            f"{self.event_ttl_days:g} days after they are written; `ttl` stale events are older "
            "than that.",
            "- Apart from the `dedup` scenarios no (client, type, text) is written twice.",
            f"- The same seed gives byte-identical files (`random.Random({seed})`, no clock).",
            "",
        ]
        return "\n".join(lines)


def generate_dataset(
    seed: int,
    out_dir: str | os.PathLike[str],
    *,
    n_clients: int = 6,
    months: float = 6,
    queries_per_tag: int = 32,
    n_memories: int = 2400,
    **kwargs: Any,
) -> Dataset:
    """Generate the agent-memories dataset into ``out_dir`` (with its README.md).

    Args:
        seed: Seed of ``random.Random``.
        out_dir: Target directory (written atomically).
        n_clients: Number of simulated clients.
        months: Timeline length.
        queries_per_tag: Queries per primary tag.
        n_memories: Total store operations.
        **kwargs: Further :class:`AgentMemorySimulator` parameters.

    Returns:
        The dataset as written.
    """
    sim = AgentMemorySimulator(
        n_clients=n_clients,
        months=months,
        queries_per_tag=queries_per_tag,
        n_memories=n_memories,
        **kwargs,
    )
    dataset = sim.simulate(seed)
    return write_dataset(dataset, out_dir, extra_files={"README.md": sim.readme(dataset, seed)})
