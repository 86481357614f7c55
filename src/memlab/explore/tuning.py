"""The tunable pipeline of the tuning app and its metric curves against a baseline.

:func:`tuning_pipeline` is hybrid retrieval followed by the re-rankers whose constants the app
exposes::

    (dense, BM25, graph) --RRF(k)--> lifecycle(decay, boost) --> MMR(λ, top candidates)
        --> entropy gate(token budget)

Its defaults are the seed constants (RRF k = 60, decay 0.98 per day, boost weight 0.3, MMR
λ = 0.7, 2000 tokens), which makes ``tuning_pipeline()`` the baseline the app draws for
reference. :func:`evaluate_pipeline` replays a dataset through a pipeline and scores each query;
:func:`metric_curves` turns ``family@k`` metrics into curves over the cut-off ``k``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import altair as alt
import polars as pl

from memlab.datasets.format import Query
from memlab.eval.metrics import evaluate
from memlab.eval.replay import Replayer, qrels_frame, queries_frame
from memlab.eval.stats import per_tag
from memlab.memory.store import MemoryStore
from memlab.pipeline import Parallel, Pipeline
from memlab.stages.bm25 import BM25
from memlab.stages.dense import Dense
from memlab.stages.entropy_gate import EntropyGate
from memlab.stages.graph import Graph
from memlab.stages.lifecycle import Lifecycle
from memlab.stages.mmr import MMR
from memlab.stages.rrf import RRF
from memlab.tokens import count_tokens

_CUTOFF = re.compile(r"^(?P<family>[A-Za-z_]+)@(?P<k>\d+)$")


def tuning_pipeline(
    *,
    rrf_k: float = 60.0,
    decay_factor: float = 0.98,
    boost_weight: float = 0.3,
    mmr_lambda: float = 0.7,
    token_budget: int = 2000,
    retrieve_k: int = 100,
    mmr_candidates: int = 30,
    name: str = "tuned",
) -> Pipeline:
    """Hybrid retrieval, lifecycle scoring, MMR and the entropy gate with the given constants.

    Args:
        rrf_k: RRF rank offset (Cormack et al. 2009; seed 000: 60).
        decay_factor: Confidence kept per day without access (seed 000: 0.98).
        boost_weight: Weight of ``log2(access_count + 1)`` in the access boost (seed 000: 0.3).
        mmr_lambda: MMR weight of relevance against redundancy (0.7).
        token_budget: Tokens the entropy gate lets through (2000).
        retrieve_k: Candidates each retriever returns.
        mmr_candidates: How many candidates MMR selects for the gate (the gate's cost grows with
            the square of its input, so it sees only these).
        name: The pipeline's name.
    """
    return Pipeline(
        [
            (
                "retrieve",
                Parallel(
                    [
                        ("dense", Dense(top_k=retrieve_k)),
                        ("bm25", BM25(top_k=retrieve_k)),
                        ("graph", Graph(top_k=retrieve_k)),
                    ],
                    fuse=("rrf", RRF(k=rrf_k)),
                ),
            ),
            ("lifecycle", Lifecycle(decay_factor=decay_factor, boost_weight=boost_weight)),
            ("mmr", MMR(lambda_=mmr_lambda, top_k=mmr_candidates)),
            ("entropy_gate", EntropyGate(token_budget=token_budget)),
        ],
        name=name,
        description="hybrid retrieval, lifecycle, MMR and entropy gate with tunable constants",
    )


def cutoff_metrics(
    families: Sequence[str] = ("R_all", "Success", "nDCG"), ks: Sequence[int] = tuple(range(1, 21))
) -> list[str]:
    """``family@k`` for every family and cut-off, family by family."""
    return [f"{f}@{k}" for f in families for k in ks]


def memories_frame(store: MemoryStore) -> pl.DataFrame:
    """``mem_id, client_id, content_hash, text, tokens`` of every record (for memory metrics)."""
    recs = store.records_frame().select(
        pl.col("id").alias("mem_id"), "client_id", "content_hash", "text"
    )
    return recs.with_columns(
        pl.col("text").map_elements(count_tokens, return_dtype=pl.Int64).alias("tokens")
    )


def evaluate_pipeline(
    replayer: Replayer,
    pipeline: Pipeline,
    metrics: Sequence[str],
    *,
    queries: Sequence[Query] | None = None,
    exclude_tags: Sequence[str] = ("adversarial",),
) -> pl.DataFrame:
    """Replay ``replayer.dataset`` through ``pipeline`` and score every evaluated query.

    Args:
        replayer: The replayer (dataset, embedder, replay settings; its caches are reused).
        pipeline: The pipeline.
        metrics: Metric names (``R_all@10``, ``nDCG@5``, ``MRR`` …).
        queries: Evaluate only these queries (every write still happens).
        exclude_tags: Queries with these tags are left out of relevance metrics.

    Returns:
        ``qid, metric, value`` (as :func:`memlab.eval.metrics.evaluate`).
    """
    ds = replayer.dataset
    res = replayer.run(pipeline, queries=queries)
    keep = {q.qid for q in (ds.queries if queries is None else queries)}
    qframe = queries_frame(ds, res.id_map, res).filter(pl.col("qid").is_in(list(keep)))
    drop = {
        qid
        for qid, tags in zip(qframe["qid"], qframe["tags"], strict=True)
        if set(exclude_tags) & set(tags)
    }
    qrels = qrels_frame(ds, res.id_map, res).filter(
        pl.col("qid").is_in(list(keep)) & ~pl.col("qid").is_in(list(drop))
    )
    return evaluate(
        res.rankings.select("qid", "rank", "mem_id", "score"),
        qrels,
        list(metrics),
        queries=qframe,
        memories=memories_frame(res.store),
    )


def metric_curves(
    per_query: Mapping[str, pl.DataFrame],
    families: Sequence[str] = ("R_all", "Success", "nDCG"),
) -> pl.DataFrame:
    """Mean of every ``family@k`` metric of ``families`` per configuration, as curves over ``k``.

    Args:
        per_query: Configuration name → :func:`evaluate_pipeline` output.
        families: Metric families kept (other metrics, and metrics without a cut-off, are
            skipped).

    Returns:
        ``config, family, k, value``, sorted by configuration (in the order given), family,
        ``k``.
    """
    rows: list[tuple[str, str, int, float]] = []
    for config, pq in per_query.items():
        means = pq.group_by("metric").agg(pl.col("value").mean()).sort("metric")
        for metric, value in means.iter_rows():
            m = _CUTOFF.match(metric)
            if m is not None and m["family"] in families:
                rows.append((config, m["family"], int(m["k"]), float(value)))
    order = {c: i for i, c in enumerate(per_query)}
    rows.sort(key=lambda r: (order[r[0]], r[1], r[2]))
    return pl.DataFrame(
        rows,
        schema={"config": pl.String, "family": pl.String, "k": pl.Int64, "value": pl.Float64},
        orient="row",
    )


def summary_table(per_query: Mapping[str, pl.DataFrame], *, baseline: str) -> pl.DataFrame:
    """Mean per metric of every configuration, and each one's difference from ``baseline``.

    Returns:
        ``metric``, one column per configuration, then ``Δ <config>`` for each non-baseline
        configuration; sorted by metric.
    """
    if baseline not in per_query:
        raise ValueError(f"tuning.py: baseline {baseline!r} is not among {list(per_query)}")
    tables = [
        pq.group_by("metric").agg(pl.col("value").mean().alias(config))
        for config, pq in per_query.items()
    ]
    out = tables[0]
    for means in tables[1:]:
        out = out.join(means, on="metric", how="full", coalesce=True)
    deltas = [
        (pl.col(c) - pl.col(baseline)).alias(f"Δ {c}") for c in per_query if c != baseline
    ]
    return out.with_columns(deltas).sort("metric")


def tag_means(
    per_query: Mapping[str, pl.DataFrame], queries: Sequence[Query], metric: str
) -> pl.DataFrame:
    """Mean of ``metric`` per primary query tag and configuration.

    Returns:
        ``config, tag, mean, n`` (see :func:`memlab.eval.stats.per_tag`), sorted by tag, then
        configuration order.
    """
    tags = pl.DataFrame(
        {"qid": [q.qid for q in queries], "tags": [list(q.tags[:1]) for q in queries]},
        schema={"qid": pl.String, "tags": pl.List(pl.String)},
    )
    frames = [
        pq.filter(pl.col("metric") == metric).with_columns(pl.lit(config).alias("pipeline"))
        for config, pq in per_query.items()
    ]
    table = per_tag(pl.concat(frames).select("pipeline", "qid", "metric", "value"), tags)
    order = {c: i for i, c in enumerate(per_query)}
    return (
        table.rename({"pipeline": "config"})
        .select("config", "tag", "mean", "n")
        .with_columns(pl.col("config").replace_strict(order, return_dtype=pl.Int64).alias("_o"))
        .sort("tag", "_o")
        .drop("_o")
    )


def curve_chart(curves: pl.DataFrame, *, baseline: str = "baseline") -> alt.Chart:
    """One panel per metric family: value over the cut-off ``k``; the baseline is dashed."""
    dash = alt.condition(
        alt.datum.config == baseline, alt.value([6, 4]), alt.value([1, 0])
    )
    return (
        alt.Chart(curves)
        .mark_line(point=True, clip=True)
        .encode(
            x=alt.X("k:Q", title="cut-off k"),
            y=alt.Y("value:Q", title="mean over queries", scale=alt.Scale(domain=[0, 1])),
            color=alt.Color("config:N", title=None),
            strokeDash=dash,
            tooltip=["config:N", "family:N", "k:Q", alt.Tooltip("value:Q", format=".4f")],
        )
        .properties(width=230, height=200)
        .facet(column=alt.Column("family:N", title=None))
    )


def tag_chart(table: pl.DataFrame, metric: str) -> alt.Chart:
    """Grouped bars of :func:`tag_means`: one group per tag, one bar per configuration."""
    return (
        alt.Chart(table)
        .mark_bar()
        .encode(
            x=alt.X("config:N", title=None, axis=None),
            y=alt.Y("mean:Q", title=metric),
            color=alt.Color("config:N", title=None),
            column=alt.Column("tag:N", title=None, header=alt.Header(labelAngle=-40,
                                                                     labelAlign="right",
                                                                     labelOrient="bottom")),
            tooltip=["config:N", "tag:N", alt.Tooltip("mean:Q", format=".3f"), "n:Q"],
        )
        .properties(width=26, height=160)
    )


def describe_params(params: Mapping[str, Any]) -> str:
    """``name = value`` pairs joined by commas (floats to 4 significant digits)."""
    def fmt(v: Any) -> str:
        return f"{v:.4g}" if isinstance(v, float) else str(v)

    return ", ".join(f"{k} = {fmt(v)}" for k, v in params.items())
