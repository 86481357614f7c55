"""One client's memory over time: supersession chains, validity windows, decay, accesses.

:func:`replay_timeline` replays a dataset through a pipeline exactly as an experiment does and
keeps every access the replay made (each query's top ``touch_k`` hits). From the final store and
that access log:

* :func:`supersession_chains` -- facts superseded by ``key`` and statuses by ``subject``, version
  by version;
* :func:`validity_windows` -- when each memory was valid (``valid_from`` to ``valid_to``, or to
  its expiry) and how it ended;
* :func:`decay_curves` -- design §D0.5's ``effective_confidence × access_boost`` through time, with
  the jump at every access (``confidence × decay ** days since last access`` for facts and
  statuses; events and decisions do not decay);
* :func:`access_counts` -- cumulative accesses per memory;
* :func:`retired_memories` and :func:`change_log` -- expired and forgotten memories, and every
  version the store logged;
* :func:`consolidation_log` -- what each consolidation cycle of the replay did (expired, merged,
  strengthened, flagged, archived, with ids), and the conflicts resolved at write time.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import altair as alt
import numpy as np
import polars as pl

from memlab.datasets.format import Dataset, Query
from memlab.eval.replay import Replayer
from memlab.memory.lifecycle import access_boost, effective_confidence
from memlab.memory.records import DECAYING_KINDS
from memlab.memory.store import MemoryStore
from memlab.pipeline import Pipeline
from memlab.stages.base import QueryContext
from memlab.timeutil import SECONDS_PER_DAY

_ACCESS_SCHEMA = {"ts": pl.Float64, "qid": pl.String, "mem_id": pl.String}


@dataclass
class TimelineData:
    """A finished replay and the accesses it made.

    Attributes:
        dataset: The dataset replayed.
        store: The store after the last operation and query.
        accesses: ``ts, qid, mem_id``: one row per access, in replay order.
        horizon: The latest time in the dataset (last write or query).
        consolidation: The replay's consolidation reports (one dict per cycle that did
            something).
        conflicts: The conflict events resolved at write time.
    """

    dataset: Dataset
    store: MemoryStore
    accesses: pl.DataFrame
    horizon: float
    consolidation: list[dict[str, Any]] = field(default_factory=list)
    conflicts: list[dict[str, Any]] = field(default_factory=list)


def dataset_horizon(dataset: Dataset) -> float:
    """The latest ``ts`` of any operation or query (0.0 for an empty dataset)."""
    times = [op.ts for op in dataset.ops] + [q.ts for q in dataset.queries]
    return max(times) if times else 0.0


def replay_timeline(
    replayer: Replayer, pipeline: Pipeline, *, queries: Sequence[Query] | None = None
) -> TimelineData:
    """Replay ``replayer.dataset`` through ``pipeline`` and log the accesses it makes.

    An access is one of a query's top ``replayer.touch_k`` hits (among the ``replayer.depth``
    kept), the rows :meth:`Replayer.run` touches.
    """
    rows: list[tuple[float, str, str]] = []
    touch_k = replayer.touch_k

    def log(q: Query, ctx: QueryContext, frame: pl.DataFrame) -> None:
        if touch_k > 0:
            hits = frame.head(replayer.depth)["mem_id"].head(touch_k).to_list()
            rows.extend((q.ts, q.qid, m) for m in hits)

    res = replayer.run(pipeline, queries=queries, on_query=log)
    accesses = pl.DataFrame(rows, schema=_ACCESS_SCHEMA, orient="row")
    assert res.store is not None
    return TimelineData(
        replayer.dataset,
        res.store,
        accesses,
        dataset_horizon(replayer.dataset),
        consolidation=list(res.consolidation),
        conflicts=list(res.conflicts),
    )


_LOG_SCHEMA = {"at": pl.Float64, "source": pl.String, "action": pl.String, "ids": pl.String}


def consolidation_log(data: TimelineData, client_id: str | None = None) -> pl.DataFrame:
    """``at, source, action, ids``: one row per thing a cycle or a conflict policy did.

    ``source`` is ``consolidation`` or ``conflict``; ``action`` is ``expired``, ``merged``,
    ``strengthened``, ``flagged``, ``archived``, ``unarchived``, ``reclassified`` (cycles) or the
    policy's action; ``ids`` names the memories (``merged → sources``, entity pairs for
    ``strengthened``). With ``client_id``, only rows that touch that client's memories (and
    every ``strengthened`` row) are kept.
    """
    store = data.store
    mine: set[str] | None = None
    if client_id is not None:
        mine = {r.id for r in (store.record_at(i) for i in range(len(store)))
                if r.client_id == client_id}
    rows: list[tuple[float, str, str, str]] = []

    def add(at: float, source: str, action: str, ids: Sequence[str], label: str) -> None:
        if mine is None or action == "strengthened" or mine & set(ids):
            rows.append((at, source, action, label))

    for cycle in data.consolidation:
        at = float(cycle["at"])
        for mid in cycle["expired"]:
            add(at, "consolidation", "expired", [mid], mid)
        for mid, cat in cycle["reclassified"].items():
            add(at, "consolidation", "reclassified", [mid], f"{mid} → {cat}")
        for merged, sources in cycle["merged_from"].items():
            add(at, "consolidation", "merged", [merged, *sources],
                f"{merged} ← {', '.join(sources)}")
        for a, b in cycle["strengthened"]:
            add(at, "consolidation", "strengthened", [], f"{a} — {b}")
        for a, b in cycle["flagged"]:
            add(at, "consolidation", "flagged", [a, b], f"{a} ⟂ {b}")
        for mid in cycle["archived"]:
            add(at, "consolidation", "archived", [mid], mid)
        for mid in cycle["unarchived"]:
            add(at, "consolidation", "unarchived", [mid], mid)
    for ev in data.conflicts:
        ids = [ev["new_id"], ev["old_id"]]
        winner = f" (winner {ev['winner']})" if ev.get("winner") else ""
        add(float(ev["at"]), "conflict", f"{ev['policy']}:{ev['action']}", ids,
            f"{ev['new_id']} vs {ev['old_id']}{winner}")
    return pl.DataFrame(rows, schema=_LOG_SCHEMA, orient="row").sort("at", maintain_order=True)


def client_table(store: MemoryStore) -> pl.DataFrame:
    """``client_id, memories`` for every client, most memories first (ties by name)."""
    recs = store.records_frame()
    if recs.height == 0:
        return pl.DataFrame(schema={"client_id": pl.String, "memories": pl.UInt32})
    return (
        recs.group_by("client_id")
        .agg(pl.len().alias("memories"))
        .sort(["memories", "client_id"], descending=[True, False])
    )


def _label(rec: dict[str, Any], width: int = 48) -> str:
    text = rec["text"] if len(rec["text"]) <= width else rec["text"][: width - 1] + "…"
    tag = rec.get("key") or rec.get("subject")
    return f"{rec['id']} {tag}: {text}" if tag else f"{rec['id']} {text}"


def client_records(store: MemoryStore, client_id: str) -> pl.DataFrame:
    """The client's records (``records_frame`` columns) plus ``state`` and ``label``.

    ``state`` is ``forgotten`` (soft-deleted), ``expired`` (TTL), ``superseded``, ``active``,
    or ``inactive`` (retired otherwise, e.g. a merge). ``label`` is ``id key-or-subject: text``.
    ``kind`` is the type decay reads (:func:`memlab.memory.records.kind_of`).
    """
    recs = store.records_frame().with_columns(
        pl.Series("kind", store.column("kind").tolist(), dtype=pl.String)
    ).filter(pl.col("client_id") == client_id)
    state = (
        pl.when(pl.col("forgotten_reason").is_not_null()).then(pl.lit("forgotten"))
        .when(pl.col("expired_at").is_not_null()).then(pl.lit("expired"))
        .when(pl.col("superseded_by").is_not_null()).then(pl.lit("superseded"))
        .when(pl.col("active")).then(pl.lit("active"))
        .otherwise(pl.lit("inactive"))
    )
    labels = [_label(r) for r in recs.select("id", "text", "key", "subject").iter_rows(named=True)]
    return recs.with_columns(state.alias("state"), pl.Series("label", labels, dtype=pl.String))


def supersession_chains(records: pl.DataFrame) -> pl.DataFrame:
    """Version chains (two or more versions linked by ``supersedes``), oldest version first.

    Returns:
        ``chain, position, mem_id, type, text, created_at, valid_from, valid_to, state``;
        ``chain`` is the ``key`` (facts) or ``subject`` (statuses) of the first version, else its
        id. Sorted by the first version's ``created_at``, then position.
    """
    by_id = {r["id"]: r for r in records.iter_rows(named=True)}
    rows = []
    roots = [
        r for r in by_id.values()
        if r["superseded_by"] is not None and (r["supersedes"] is None
                                               or r["supersedes"] not in by_id)
    ]
    roots.sort(key=lambda r: (r["created_at"], r["id"]))
    for root in roots:
        chain = root.get("key") or root.get("subject") or root["id"]
        rec: dict[str, Any] | None = root
        pos = 0
        while rec is not None:
            rows.append((chain, pos, rec["id"], rec["type"], rec["text"], rec["created_at"],
                         rec["valid_from"], rec["valid_to"], rec.get("state", "")))
            nxt = rec["superseded_by"]
            rec = by_id.get(nxt) if nxt is not None else None
            pos += 1
    return pl.DataFrame(
        rows,
        schema={
            "chain": pl.String, "position": pl.Int64, "mem_id": pl.String, "type": pl.String,
            "text": pl.String, "created_at": pl.Float64, "valid_from": pl.Float64,
            "valid_to": pl.Float64, "state": pl.String,
        },
        orient="row",
    )


def validity_windows(records: pl.DataFrame, *, horizon: float) -> pl.DataFrame:
    """When each memory was valid.

    ``start`` is ``valid_from`` (else ``created_at``); ``end`` is ``valid_to`` when set, else
    ``expired_at``, else ``horizon`` with ``open`` true.

    Returns:
        ``mem_id, type, label, state, start, end, open``, sorted by start, then ``mem_id``.
    """
    return (
        records.select(
            pl.col("id").alias("mem_id"),
            "type",
            "label",
            "state",
            pl.coalesce("valid_from", "created_at").cast(pl.Float64).alias("start"),
            pl.coalesce("valid_to", "expired_at", pl.lit(float(horizon)))
            .cast(pl.Float64).alias("end"),
            (pl.col("valid_to").is_null() & pl.col("expired_at").is_null()).alias("open"),
        )
        .sort("start", "mem_id")
    )


def decay_curves(
    records: pl.DataFrame,
    accesses: pl.DataFrame,
    *,
    until: float,
    n_points: int = 60,
    decay_factor: float = 0.98,
    boost_weight: float = 0.3,
    decaying_types: tuple[str, ...] = DECAYING_KINDS,
) -> pl.DataFrame:
    """Design §D0.5's lifecycle factor of each memory from its creation to ``until``.

    At time ``t`` with ``c`` accesses so far, the last at ``a`` (``created_at`` when none)::

        effective_confidence = confidence × decay_factor ** ((t - a) / 1 day)   (decaying types)
        access_boost         = 1 + boost_weight × log2(c + 1)
        factor               = effective_confidence × access_boost

    A curve ends at ``until`` or where the memory stopped being valid (``valid_to``, else
    ``expired_at``), whichever comes first. Times are ``n_points`` evenly spaced from
    ``created_at`` to that end plus, for every access up to it, a point just before it
    (``phase`` 0) and at it (``phase`` 1), so a line shows the jump.

    Returns:
        ``mem_id, label, ts, phase, accesses, effective_confidence, access_boost, factor``,
        sorted by memory (records order), ``ts``, ``phase``.
    """
    if isinstance(n_points, bool) or not isinstance(n_points, int) or n_points < 2:
        raise ValueError(f"timeline.py: field 'n_points' must be an int >= 2, got {n_points!r}")
    by_mem: dict[str, list[float]] = {}
    for ts, mid in accesses.select("ts", "mem_id").iter_rows():
        by_mem.setdefault(mid, []).append(float(ts))
    rows: list[tuple[str, str, float, int, int, float, float, float]] = []
    kind = "kind" if "kind" in records.columns else "type"  # what decay reads
    cols = ("id", "label", kind, "confidence", "created_at", "valid_to", "expired_at")
    for rec in records.select(*cols).iter_rows(named=True):
        created = float(rec["created_at"])
        ends = [float(rec[c]) for c in ("valid_to", "expired_at") if rec[c] is not None]
        end = min([float(until), *ends])
        if created > end:
            continue
        hits = np.sort(np.asarray(by_mem.get(rec["id"], []), dtype=np.float64))
        hits = hits[hits <= end]
        grid = [(float(t), 1) for t in np.linspace(created, end, n_points)]
        grid += [(float(a), 0) for a in hits] + [(float(a), 1) for a in hits]
        for t, phase in sorted(set(grid)):
            n = int(np.searchsorted(hits, t, side="right" if phase == 1 else "left"))
            last = float(hits[n - 1]) if n else created
            days = (t - last) / SECONDS_PER_DAY
            conf = float(rec["confidence"])
            if rec[kind] in decaying_types:
                eff = float(effective_confidence(conf, days, decay_factor=decay_factor))
            else:
                eff = conf
            boost = float(access_boost(n, boost_weight=boost_weight))
            rows.append((rec["id"], rec["label"], t, phase, n, eff, boost, eff * boost))
    return pl.DataFrame(
        rows,
        schema={
            "mem_id": pl.String, "label": pl.String, "ts": pl.Float64, "phase": pl.Int64,
            "accesses": pl.Int64, "effective_confidence": pl.Float64,
            "access_boost": pl.Float64, "factor": pl.Float64,
        },
        orient="row",
    )


def access_counts(accesses: pl.DataFrame, mem_ids: Sequence[str]) -> pl.DataFrame:
    """Cumulative accesses of each of ``mem_ids``: ``mem_id, ts, count``, one row per access.

    Several accesses at the same moment give one row with the count after all of them. Sorted by
    ``mem_id``, then ``ts``.
    """
    sub = accesses.filter(pl.col("mem_id").is_in(list(mem_ids)))
    return (
        sub.group_by("mem_id", "ts")
        .agg(pl.len().cast(pl.Int64).alias("n"))
        .sort("mem_id", "ts")
        .with_columns(pl.col("n").cum_sum().over("mem_id").alias("count"))
        .select("mem_id", "ts", "count")
    )


def decay_records(
    records: pl.DataFrame,
    accesses: pl.DataFrame,
    chain_ids: Sequence[str],
    *,
    n: int = 6,
    types: Sequence[str] = ("fact", "status"),
) -> pl.DataFrame:
    """The records whose decay curves are drawn: at most ``n`` of ``types``.

    Members of a supersession chain (``chain_ids``) come first, then the most accessed, then
    by id; the rows returned keep ``records`` order.

    Args:
        records: A client's records (:func:`client_records`).
        accesses: The replay's accesses (``ts, qid, mem_id``).
        chain_ids: Ids of the memories in a supersession chain (:func:`supersession_chains`).
        n: How many memories to keep.
        types: The memory types drawn.

    Returns:
        The chosen rows of ``records``, every column kept.
    """
    counts = accesses.group_by("mem_id").agg(pl.len().alias("_n"))
    picked = (
        records.filter(pl.col("type").is_in(list(types)))
        .join(counts, left_on="id", right_on="mem_id", how="left")
        .with_columns(pl.col("_n").fill_null(0))
        .with_columns(pl.col("id").is_in(list(set(chain_ids))).alias("_chain"))
        .sort(["_chain", "_n", "id"], descending=[True, True, False])
        .head(n)
    )
    return records.filter(pl.col("id").is_in(picked["id"].to_list()))


def most_accessed(accesses: pl.DataFrame, records: pl.DataFrame, *, n: int = 8) -> pl.DataFrame:
    """The ``n`` memories of ``records`` accessed most often.

    Args:
        accesses: The replay's accesses (``ts, qid, mem_id``).
        records: A client's records (:func:`client_records`).
        n: How many memories to keep.

    Returns:
        ``mem_id, accesses, type, text``, most accesses first (ties by ``mem_id``); a memory
        never accessed is not listed.
    """
    top = (
        accesses.filter(pl.col("mem_id").is_in(records["id"].to_list()))
        .group_by("mem_id")
        .agg(pl.len().alias("accesses"))
        .sort(["accesses", "mem_id"], descending=[True, False])
        .head(n)
    )
    return top.join(
        records.select(pl.col("id").alias("mem_id"), "type", "text"),
        on="mem_id",
        how="left",
        maintain_order="left",
    )


def retired_memories(records: pl.DataFrame) -> pl.DataFrame:
    """Expired and forgotten memories: ``mem_id, type, importance, state, created_at,
    retired_at, age_days, reason, text``; ``age_days`` is the age when retired. Sorted by
    ``retired_at``, then ``mem_id``."""
    return (
        records.filter(pl.col("state").is_in(["expired", "forgotten"]))
        .select(
            pl.col("id").alias("mem_id"),
            "type",
            "importance",
            "state",
            "created_at",
            pl.col("expired_at").cast(pl.Float64).alias("retired_at"),
            ((pl.col("expired_at") - pl.col("created_at")) / SECONDS_PER_DAY).alias("age_days"),
            pl.col("forgotten_reason").alias("reason"),
            "text",
        )
        .sort("retired_at", "mem_id")
    )


def change_log(store: MemoryStore, mem_ids: Sequence[str]) -> pl.DataFrame:
    """Every version the store logged for ``mem_ids``: ``mem_id, at, change, access_count``.

    ``access_count`` is the record's count when that version was saved. Sorted by ``at``, then
    the log's sequence number.
    """
    rows = []
    for mid in mem_ids:
        hist = store.history(mid)
        for seq, at, change, payload in hist.iter_rows():
            rows.append((seq, mid, float(at), change, int(json.loads(payload)["access_count"])))
    rows.sort(key=lambda r: (r[2], r[0]))
    return pl.DataFrame(
        [r[1:] for r in rows],
        schema={"mem_id": pl.String, "at": pl.Float64, "change": pl.String,
                "access_count": pl.Int64},
        orient="row",
    )


def with_datetimes(frame: pl.DataFrame, *columns: str) -> pl.DataFrame:
    """Replace epoch-second float columns by UTC datetimes (millisecond precision)."""
    return frame.with_columns(
        [
            pl.from_epoch((pl.col(c) * 1000).round(0).cast(pl.Int64), time_unit="ms")
            .dt.replace_time_zone("UTC")
            .alias(c)
            for c in columns
        ]
    )


_STATE_COLORS = alt.Scale(
    domain=["active", "superseded", "expired", "forgotten", "inactive"],
    range=["#2ca02c", "#7f7f7f", "#ff7f0e", "#d62728", "#bcbd22"],
)


def windows_chart(windows: pl.DataFrame, *, title: str = "validity windows") -> alt.Chart:
    """Gantt bars of :func:`validity_windows` (one row per memory), coloured by state."""
    data = with_datetimes(windows, "start", "end")
    order = data["label"].to_list()
    return (
        alt.Chart(data)
        .mark_bar(height=9)
        .encode(
            x=alt.X("start:T", title=None),
            x2="end:T",
            y=alt.Y("label:N", sort=order, title=None, axis=alt.Axis(labelLimit=320)),
            color=alt.Color("state:N", scale=_STATE_COLORS),
            tooltip=["mem_id:N", "type:N", "state:N", "start:T", "end:T", "open:N"],
        )
        .properties(width=520, height=alt.Step(13), title=title)
    )


def chains_chart(chains: pl.DataFrame) -> alt.Chart:
    """Each supersession chain as a row of versions at their ``valid_from``, linked in order."""
    data = with_datetimes(chains.with_columns(pl.coalesce("valid_from", "created_at")
                                              .alias("at")), "at")
    base = alt.Chart(data).encode(
        x=alt.X("at:T", title="valid from"),
        y=alt.Y("chain:N", title=None, axis=alt.Axis(labelLimit=240)),
    )
    return (
        base.mark_line(color="#9aa0a6").encode(detail="chain:N", order="position:Q")
        + base.mark_point(filled=True, size=90).encode(
            color=alt.Color("state:N", scale=_STATE_COLORS),
            tooltip=["chain:N", "position:Q", "mem_id:N", "state:N", "text:N", "at:T"],
        )
    ).properties(width=520, height=alt.Step(22), title="supersession chains")


def decay_chart(curves: pl.DataFrame) -> alt.Chart:
    """Lines of :func:`decay_curves`'s ``factor`` over time, one per memory."""
    data = with_datetimes(curves, "ts")
    return (
        alt.Chart(data)
        .mark_line()
        .encode(
            x=alt.X("ts:T", title=None),
            y=alt.Y("factor:Q", title="effective confidence × access boost"),
            color=alt.Color("label:N", title=None, legend=alt.Legend(labelLimit=320,
                                                                     orient="bottom",
                                                                     columns=1)),
            order="ts:Q",
            tooltip=["mem_id:N", "ts:T", "accesses:Q",
                     alt.Tooltip("effective_confidence:Q", format=".3f"),
                     alt.Tooltip("access_boost:Q", format=".3f"),
                     alt.Tooltip("factor:Q", format=".3f")],
        )
        .properties(width=520, height=220, title="decay and access boost")
    )


def access_chart(counts: pl.DataFrame, *, span: tuple[float, float] | None = None) -> alt.Chart:
    """Step lines of :func:`access_counts`: cumulative accesses over time per memory.

    ``span`` (epoch seconds) fixes the time axis, e.g. to the client's whole history.
    """
    data = with_datetimes(counts, "ts")
    scale = alt.Undefined
    if span is not None:
        ends = with_datetimes(pl.DataFrame({"a": [float(span[0])], "b": [float(span[1])]}),
                              "a", "b")
        scale = alt.Scale(domain=[ends["a"][0].isoformat(), ends["b"][0].isoformat()])
    return (
        alt.Chart(data)
        .mark_line(interpolate="step-after", point=True)
        .encode(
            x=alt.X("ts:T", title=None, scale=scale),
            y=alt.Y("count:Q", title="accesses so far"),
            color=alt.Color("mem_id:N", title=None),
            tooltip=["mem_id:N", "ts:T", "count:Q"],
        )
        .properties(width=520, height=200, title="access counts")
    )


def changes_chart(log: pl.DataFrame) -> alt.Chart:
    """Every logged version as a tick on a time line, one lane per kind of change."""
    data = with_datetimes(log, "at")
    return (
        alt.Chart(data)
        .mark_tick(thickness=2, size=16)
        .encode(
            x=alt.X("at:T", title=None),
            y=alt.Y("change:N", title=None),
            color=alt.Color("change:N", legend=None),
            tooltip=["mem_id:N", "change:N", "at:T", "access_count:Q"],
        )
        .properties(width=520, height=alt.Step(24), title="store changes")
    )
