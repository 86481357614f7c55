"""Tune any pipeline's constants on a dataset: cached replays, train and held-out scores, a paired
test against the defaults, and the chosen settings saved as a configuration.

:class:`TuningSession` holds a prepared :class:`~memlab.eval.replay.Replayer` (every text is
embedded once) and a cache of the retrievers' outputs (:class:`Memo`). Accesses make the
visible rows differ between replays with different constants (an event nobody retrieved expires
after its TTL), so a retriever whose ranking does not depend on visibility (BM25, the graph,
exact dense search) ranks every row once per query and store size; each replay keeps the rows
visible to it and cuts at ``top_k``, which is what the retriever computes. Other ``cacheable``
stages are computed once per query, store state, visible rows, parameters and input. A change to
a re-ranker's constant (RRF k, decay, boost, MMR λ) therefore replays the writes and re-runs
only the stages after the retrievers; a change to a retriever's own constant re-ranks with that
retriever once. Scoring is eval's own
(:func:`memlab.eval.experiment.score_rankings`), the split eval's
(:func:`memlab.eval.experiment.split_queries`) and the test eval's
(:func:`memlab.eval.stats.paired_test`).

:func:`tunable_params` lists a pipeline's numeric constants from ``get_params`` with the ranges
their stages declare (:mod:`memlab.stages.constraints`). :func:`tuning_pipeline` is the
hybrid-retrieval pipeline with re-rankers the app offered first. :func:`metric_curves` turns
``family@k`` metrics into curves over the cut-off ``k``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from numbers import Integral, Real
from pathlib import Path
from typing import Any

import altair as alt
import numpy as np
import polars as pl

from memlab.datasets.format import Query
from memlab.eval.experiment import (
    fit_learned_stages,
    memories_frame,
    score_rankings,
    split_queries,
)
from memlab.eval.replay import Replayer
from memlab.eval.stats import paired_test, per_tag
from memlab.fastframe import i64_series, take_rows
from memlab.memory.store import MemoryStore
from memlab.pipeline import Parallel, Pipeline
from memlab.stages.base import (
    ROW_COLUMN,
    QueryContext,
    Stage,
    empty_candidates,
    stage_reference,
)
from memlab.stages.bm25 import BM25
from memlab.stages.constraints import Interval
from memlab.stages.dense import Dense
from memlab.stages.entropy_gate import EntropyGate
from memlab.stages.graph import Graph
from memlab.stages.lifecycle import Lifecycle
from memlab.stages.mmr import MMR
from memlab.stages.rrf import RRF

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
        rrf_k: RRF rank offset (Cormack et al. 2009; docs/design.md §D0.7: 60).
        decay_factor: Confidence kept per day without access (docs/design.md §D0.5: 0.98).
        boost_weight: Weight of ``log2(access_count + 1)`` in the access boost (design §D0.6: 0.3).
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


SUMMARY_METRICS = (
    "R_all@10", "Success@10", "nDCG@10", "MRR", "stale@10", "leak@10", "dup@10", "tokens@10"
)
"""The metrics the app tabulates at k = 10 (``stale``, ``leak``, ``dup``, ``tokens``: lower is
better)."""


CURVE_CUTOFFS = (1, 2, 3, 5, 7, 10, 15, 20)
"""The cut-offs the app's curves are drawn at (scoring is per metric: every cut-off drawn costs
one more trec_eval pass per family after each change)."""


def app_metrics() -> list[str]:
    """What the app scores per query: :func:`cutoff_metrics` at :data:`CURVE_CUTOFFS` and
    :data:`SUMMARY_METRICS`."""
    return list(dict.fromkeys([*cutoff_metrics(ks=CURVE_CUTOFFS), *SUMMARY_METRICS]))


# ---------------------------------------------------------------------- tunable constants
@dataclass(frozen=True)
class ParamSpec:
    """One numeric constant of a pipeline and the range a control offers for it.

    Attributes:
        name: ``stage__param`` (what :meth:`Pipeline.set_params` takes).
        default: Its value in the pipeline as loaded.
        low: Lower end (the stage's declared bound, else 0).
        high: Upper end (the declared bound, else four times the default, at least
            ``low + 1``).
        step: Control step (1 for integers; for reals a power of ten near a hundredth of the
            range that divides the default).
        integer: Whether the constant is an integer.
    """

    name: str
    default: float | int
    low: float | int
    high: float | int
    step: float | int
    integer: bool


def _interval(stage: Stage, param: str) -> Interval | None:
    for c in type(stage)._parameter_constraints.get(param, []):
        if isinstance(c, Interval):
            return c
    return None


def _decimal_step(span: float, default: float) -> float:
    """A power of ten near a hundredth of ``span`` that divides ``default`` (so a control can
    show the default exactly), at least 1e-6."""
    step = 10.0 ** math.floor(math.log10(span / 100)) if span > 0 else 0.01
    while step > 1e-6 and abs(round(default / step) * step - default) > step * 1e-6:
        step /= 10
    return float(f"{step:.0e}")


def tunable_params(pipeline: Pipeline) -> list[ParamSpec]:
    """Every numeric (int or float, not bool, not ``None``) constant of ``pipeline``'s stages,
    read from ``get_params`` in pipeline order, with the range its stage's constraints allow."""
    out: list[ParamSpec] = []
    for sname, stage in pipeline.named_stages():
        if isinstance(stage, (Pipeline, Parallel)):
            continue
        for pname, value in stage.get_params(deep=False).items():
            if isinstance(value, bool) or not isinstance(value, (Integral, Real)):
                continue
            integer = isinstance(value, Integral)
            iv = _interval(stage, pname)
            low = iv.left if iv is not None and iv.left is not None else min(0, value)
            high = iv.right if iv is not None and iv.right is not None else None
            if high is None or not math.isfinite(float(high)):
                high = max(float(value) * 4, float(low) + 1)
            if integer:
                low, high = int(math.ceil(low)), int(math.floor(high))
                step: float | int = 1
            else:
                low, high = float(low), float(high)
                step = _decimal_step(high - low, float(value))
            out.append(ParamSpec(f"{sname}__{pname}", value, low, high, step, integer))
    return out


def changed_params(specs: Sequence[ParamSpec], values: Mapping[str, Any]) -> dict[str, Any]:
    """The values that differ from the defaults, cast to each constant's type, in spec order.

    Raises:
        ValueError: Naming the constant whose value is not a number.
    """
    out: dict[str, Any] = {}
    for spec in specs:
        if spec.name not in values or values[spec.name] is None:
            continue
        raw = values[spec.name]
        try:
            value: Any = int(raw) if spec.integer else float(raw)
        except (TypeError, ValueError):
            raise ValueError(f"tuning: field {spec.name!r}: {raw!r} is not a number") from None
        if value != spec.default:
            out[spec.name] = value
    return out


# ---------------------------------------------------------------------- cached evaluation
def _separable(stage: Stage, store_rows: int) -> tuple[str, ...] | None:
    """The parameters that do not change ``stage``'s ranking of every row, when it is
    *separable*; else ``None``.

    A separable stage ranks every visible row by a score that does not depend on which rows
    are visible, keeping those that pass a per-row test, ties by ``mem_id``, cut at ``top_k``.
    Its output under any visibility is then its output with every row visible, restricted to
    the visible rows and cut at ``top_k`` (:class:`Memo` relies on this). True for
    :class:`~memlab.stages.bm25.BM25` (corpus statistics cover every memory written, active
    or not), :class:`~memlab.stages.graph.Graph` (activation spreads over the entity graph;
    visibility is applied afterwards) and :class:`~memlab.stages.dense.Dense` when it searches
    exactly (``backend`` and ``ann_min_rows`` then change nothing; a usearch search
    over-fetches in proportion to the visible share, so its result depends on it).
    """
    if isinstance(stage, (BM25, Graph)):
        return ("top_k",)
    if isinstance(stage, Dense) and (
        stage.backend == "exact" or (stage.backend == "auto" and store_rows < stage.ann_min_rows)
    ):
        return ("top_k", "backend", "ann_min_rows")
    return None


@dataclass
class _EveryRowVisible(QueryContext):
    """A query context in which every store row is visible (what :class:`Memo` ranks once)."""

    def visible_mask(self, *, relaxed: bool = False) -> np.ndarray:
        mask = np.ones(len(self.store), dtype=bool)
        mask.flags.writeable = False
        return mask


def _every_row_visible(ctx: QueryContext) -> _EveryRowVisible:
    """``ctx`` with every row visible; the cache and the trace are shared with ``ctx``."""
    return _EveryRowVisible(
        **{f.name: getattr(ctx, f.name) for f in dataclasses.fields(QueryContext) if f.init}
    )


_STATES: weakref.WeakKeyDictionary[MemoryStore, tuple[int, str]] = weakref.WeakKeyDictionary()


def store_state(store: MemoryStore) -> tuple[int, str]:
    """The store's size and a digest of its memory ids in row order (rows are only appended,
    so the digest is extended with the ids written since the last call)."""
    n = len(store)
    seen, digest = _STATES.get(store, (0, ""))
    if seen != n:
        if seen > n:  # not the store this digest was computed on
            seen, digest = 0, ""
        ids = [store.record_at(i).id for i in range(seen, n)]
        start = digest
        digest = hashlib.blake2b(
            (start + "\0" + "\0".join(ids)).encode(), digest_size=16
        ).hexdigest()
        _STATES[store] = (n, digest)
    return n, digest


class Memo(Stage):
    """Runs a ``cacheable`` stage once per query and store state, and reuses its output.

    Nothing is reused when the replay merges or resolves conflicts (its rows then differ from
    one replay to the next); :class:`TuningSession` does not wrap stages then.

    Two keys, both exact:

    * a *separable* retriever (:func:`_separable`: BM25, the graph, exact dense search) ranks
      every row of the store once per query, store size and configuration (``top_k`` aside);
      each call then keeps the rows visible to it and cuts at ``top_k``. Accesses make
      visibility differ between replays (an event nobody retrieved expires after its TTL), so
      a key on the visible rows would miss; this one does not depend on them. When no visible
      row is left the stage itself runs (its empty frame may differ from a filtered one);
    * any other stage is computed once per query, store size, visible rows and input frame
      (the key of the replay's own prefix cache, plus the input).

    The store state is its size and a digest of its memory ids (writes happen in the same
    order in every replay; a write deduplicated in one replay and not in another changes
    them). ``ctx.query_vector`` is restored with the output.

    Args:
        inner: The stage (its declared columns are this stage's).
        cache: Where outputs are kept (shared between evaluations).

    Attributes:
        calls_: Calls so far.
        hits_: Calls answered from the cache.
    """

    def __init__(self, inner: Stage | None = None, cache: dict[Any, Any] | None = None) -> None:
        self.inner = inner
        self.cache = cache
        self.calls_ = 0
        self.hits_ = 0

    def declared_columns(self) -> dict[str, pl.DataType] | None:
        return None if self.inner is None else self.inner.declared_columns()

    def _config(self, *, drop: tuple[str, ...] = ()) -> str:
        """The stage and its parameters (but ``drop``) as text, computed once per Memo (a
        replay does not change a stage's parameters)."""
        assert self.inner is not None
        memo: dict[tuple[str, ...], str] = self.__dict__.setdefault("_configs", {})
        if drop not in memo:
            params = {k: v for k, v in self.inner.get_params(deep=False).items()
                      if k not in drop}
            memo[drop] = stage_reference(self.inner) + json.dumps(params, sort_keys=True,
                                                                  default=repr)
        return memo[drop]

    def _query_key(self, ctx: QueryContext) -> tuple[Any, ...]:
        return (ctx.qid, ctx.text, ctx.client_id, repr(ctx.principal), *store_state(ctx.store))

    def transform(self, frame: pl.DataFrame, ctx: QueryContext) -> pl.DataFrame:
        if self.inner is None or self.cache is None:
            raise ValueError("Memo needs a stage and a cache")
        self.calls_ += 1
        free = _separable(self.inner, len(ctx.store)) if frame.height == 0 else None
        if free is not None:
            out = self._separable(ctx, free)
            if out is not None:
                return out
        return self._keyed(frame, ctx)

    def _separable(self, ctx: QueryContext, free: tuple[str, ...]) -> pl.DataFrame | None:
        assert self.inner is not None and self.cache is not None
        key = ("every-row", self._config(drop=free), *self._query_key(ctx))
        hit = self.cache.get(key)
        if hit is None:
            wide = getattr(self, "_wide", None)
            if wide is None:  # one copy per Memo: fitted state (BM25's index) is kept
                wide = self._wide = self.inner.clone().set_params(top_k=None)
                if isinstance(wide, Dense):
                    wide.set_params(backend="exact")
            every = _every_row_visible(ctx)
            full = wide.transform(empty_candidates(), every)
            rows = full.get_column(ROW_COLUMN).to_numpy() if ROW_COLUMN in full.columns else None
            hit = self.cache[key] = (full, rows, every.query_vector, False, {})
        full, rows, qvec, reused, cuts = hit
        if not reused:  # the next call with this key is a reuse
            self.cache[key] = (full, rows, qvec, True, cuts)
        if rows is None:
            return None
        keep = np.flatnonzero(ctx.visible_mask()[rows])
        top_k = getattr(self.inner, "top_k", None)
        if top_k is not None:
            keep = keep[:top_k]
        # The same visible rows in another replay give the same frame (the very object, which
        # lets MemoFuse key its input lists without hashing them again).
        cut = (top_k, keep.tobytes())
        out = cuts.get(cut)
        if out is None:
            out = take_rows(full, keep)
            out.replace_column(out.get_column_index("rank"),
                               i64_series("rank", np.arange(1, out.height + 1, dtype=np.int64)))
            cuts[cut] = out
            self.cache[("fingerprint", id(out))] = (out, None)
        if out.height == 0:
            return None
        if qvec is not None:
            ctx.query_vector = qvec
        self.hits_ += reused
        return out

    def _keyed(self, frame: pl.DataFrame, ctx: QueryContext) -> pl.DataFrame:
        assert self.inner is not None and self.cache is not None
        mask = np.packbits(ctx.visible_mask()).tobytes()
        if frame.height:
            rows = frame.hash_rows(seed=0).to_numpy().tobytes() + ",".join(frame.columns).encode()
        else:
            rows = b""
        digest = hashlib.blake2b(mask + b"|" + rows, digest_size=16).hexdigest()
        key = ("visible", self._config(), *self._query_key(ctx),
               digest)
        hit = self.cache.get(key)
        if hit is not None:
            self.hits_ += 1
            out, qvec = hit
            if qvec is not None:
                ctx.query_vector = qvec
            return out
        out = self.inner.transform(frame, ctx)
        self.cache[key] = (out, ctx.query_vector)
        return out


def _fingerprint(frame: pl.DataFrame, cache: dict[Any, Any]) -> bytes:
    """A digest of ``frame``'s rows and column names; remembered in ``cache`` for the frames
    :class:`Memo` keeps there (the same object comes back from the cache in every replay)."""
    entry = cache.get(("fingerprint", id(frame)))
    if entry is not None and entry[0] is frame and entry[1] is not None:
        return entry[1]
    digest = hashlib.blake2b(
        frame.hash_rows(seed=0).to_numpy().tobytes() + ",".join(frame.columns).encode(),
        digest_size=16,
    ).digest()
    if entry is not None and entry[0] is frame:
        cache[("fingerprint", id(frame))] = (frame, digest)
    return digest


class MemoFuse(Memo):
    """A ``cacheable`` fusion stage run once per query, store state and input lists (a change
    after the retrievers, e.g. to the lifecycle's decay, finds every fusion in the cache).

    Args:
        inner: The fusion stage (it has ``fuse(frames, ctx)``).
        cache: Where outputs are kept (shared between evaluations).
    """

    def fuse(self, frames: list[pl.DataFrame], ctx: QueryContext) -> pl.DataFrame:
        if self.inner is None or self.cache is None:
            raise ValueError("MemoFuse needs a fusion stage and a cache")
        self.calls_ += 1
        digest = hashlib.blake2b(
            b"|".join(_fingerprint(f, self.cache) for f in frames), digest_size=16
        ).hexdigest()
        key = ("fused", self._config(), *self._query_key(ctx), len(frames), digest)
        hit = self.cache.get(key)
        if hit is not None:
            self.hits_ += 1
            return hit
        out = self.inner.fuse(frames, ctx)  # type: ignore[attr-defined]
        self.cache[key] = out
        return out

    def transform(self, frame: pl.DataFrame, ctx: QueryContext) -> pl.DataFrame:
        raise TypeError("MemoFuse fuses the lists of a parallel step: call fuse(frames, ctx)")


def memoized(pipeline: Pipeline, cache: dict[Any, Any]) -> Pipeline:
    """A copy of ``pipeline`` whose ``cacheable`` stages go through :class:`Memo` (fusion
    stages through :class:`MemoFuse`) with ``cache``; same names, same order."""

    def cached_fuse(fuse: tuple[str, Any] | None) -> tuple[str, Any] | None:
        if fuse is None or not getattr(fuse[1], "cacheable", False):
            return fuse
        return (fuse[0], MemoFuse(fuse[1], cache))

    def wrap(stage: Stage) -> Stage:
        if isinstance(stage, Parallel):
            return Parallel([(n, wrap(s)) for n, s in stage.branches],
                            fuse=cached_fuse(stage.fuse))
        if isinstance(stage, Pipeline):
            return memoized(stage, cache)
        if getattr(stage, "cacheable", False) and not getattr(stage, "requires_fit", False):
            return Memo(stage, cache)
        return stage

    return Pipeline([(n, wrap(s)) for n, s in pipeline.steps], name=pipeline.name,
                    description=pipeline.description)


def _key_of(params: Mapping[str, Any]) -> str:
    return json.dumps(sorted(params.items()), default=repr)


class TuningSession:
    """A pipeline tuned on one dataset: every evaluation reuses the replayer and the cache.

    Args:
        replayer: The replayer (dataset, embedder, replay configuration).
        pipeline: The pipeline whose defaults are the reference.
        metrics: Metric names scored per query.
        test_fraction: Share of the queries held out (:func:`split_queries`).
        seed: Seed of the split.
        exclude_tags: Queries with these tags get no relevance metric.
        queries: Evaluate only these queries (default: all; every write still happens).

    Attributes:
        train: The queries constants are chosen on.
        test: The held-out queries.
        specs: :func:`tunable_params` of ``pipeline``.
        last_reuse_: Share of the cached stages' outputs (retrievers, fusions and other
            ``cacheable`` stages) the last replay took from the cache
            (``None`` before the first, or when no stage is cached).
    """

    def __init__(
        self,
        replayer: Replayer,
        pipeline: Pipeline,
        metrics: Sequence[str],
        *,
        test_fraction: float = 0.5,
        seed: int = 0,
        exclude_tags: Sequence[str] = ("adversarial",),
        queries: Sequence[Query] | None = None,
    ) -> None:
        self.replayer = replayer
        self.pipeline = pipeline
        self.metrics = list(metrics)
        self.exclude_tags = tuple(exclude_tags)
        self.queries = list(replayer.dataset.queries if queries is None else queries)
        self.train, self.test = split_queries(self.queries, test_fraction=test_fraction,
                                              seed=seed)
        self.specs = tunable_params(pipeline)
        self.cache: dict[Any, Any] = {}
        self._scores: dict[str, pl.DataFrame] = {}
        self._memories: dict[tuple[Any, ...], pl.DataFrame] = {}
        self.last_reuse_: float | None = None

    def configured(self, params: Mapping[str, Any]) -> Pipeline:
        """A fresh copy of the pipeline with ``params`` (``stage__param``) set."""
        pipe = self.pipeline.clone()
        if params:
            pipe.set_params(**dict(params))
        return pipe

    def evaluate(
        self,
        params: Mapping[str, Any] | None = None,
        *,
        on_query: Callable[[Query, QueryContext, pl.DataFrame], None] | None = None,
    ) -> pl.DataFrame:
        """Per-query metrics (``qid, metric, value``) of the pipeline with ``params``.

        Learned stages are fitted on :attr:`train` first. Results are kept per parameter set;
        ``on_query`` is called after each replayed query (progress).
        """
        params = dict(params or {})
        key = _key_of(params)
        if key in self._scores:
            return self._scores[key]
        pipe = self.configured(params)
        if any(getattr(s, "requires_fit", False) for _, s in pipe.named_stages()):
            fit_learned_stages(self.replayer, pipe, self.train)
        cfg = self.replayer.config
        if cfg.consolidation.enabled or cfg.conflict_policy is not None:
            memo = pipe  # merges and conflict resolutions write rows that differ per replay
        else:
            memo = memoized(pipe, self.cache)
        memos = [s for _, s in memo.named_stages() if isinstance(s, Memo)]
        res = self.replayer.run(memo, queries=self.queries, on_query=on_query)
        calls = sum(m.calls_ for m in memos)
        self.last_reuse_ = sum(m.hits_ for m in memos) / calls if calls else None
        pq = score_rankings(
            self.replayer.dataset,
            res,
            self.metrics,
            memories=self._memories_of(res) if memo is not pipe else None,
            exclude_tags=self.exclude_tags,
            qids={q.qid for q in self.queries},
        )
        self._scores[key] = pq
        return pq

    def _memories_of(self, res: Any) -> pl.DataFrame:
        """:func:`memories_frame` of a replay, kept per store state and id map (without
        merges or conflict resolutions, every row of a store is its write's, so the same ids
        in the same order and the same id map give the same frame)."""
        id_map = hashlib.blake2b(
            "\0".join(f"{k}\0{v}" for k, v in res.id_map.items()).encode(), digest_size=16
        ).hexdigest()
        key = (*store_state(res.store), id_map)
        frame = self._memories.get(key)
        if frame is None:
            while len(self._memories) >= 4:
                del self._memories[next(iter(self._memories))]
            frame = self._memories[key] = memories_frame(res)
        return frame

    def baseline(self, **kwargs: Any) -> pl.DataFrame:
        """:meth:`evaluate` of the defaults."""
        return self.evaluate({}, **kwargs)

    def split(self, per_query: pl.DataFrame) -> dict[str, pl.DataFrame]:
        """``{"train": …, "held-out": …}``: ``per_query`` restricted to each side."""
        return {
            "train": per_query.filter(pl.col("qid").is_in([q.qid for q in self.train])),
            "held-out": per_query.filter(pl.col("qid").is_in([q.qid for q in self.test])),
        }

    def comparison(
        self, tuned: pl.DataFrame, metrics: Sequence[str], *, test: str = "t"
    ) -> pl.DataFrame:
        """Train and held-out means of ``tuned`` against the defaults, with a paired test.

        Returns:
            ``split, metric, n, defaults, tuned, delta, p_value`` (two-sided ``test`` p-value
            over the queries scored by both; 1.0 when every pair is equal), split by split.
        """
        base = self.baseline()
        rows = []
        for split, (b, t) in zip(
            ("train", "held-out"),
            zip(self.split(base).values(), self.split(tuned).values(), strict=True),
            strict=True,
        ):
            for metric in metrics:
                pair = (
                    b.filter(pl.col("metric") == metric).select("qid", pl.col("value").alias("b"))
                    .join(t.filter(pl.col("metric") == metric)
                          .select("qid", pl.col("value").alias("t")), on="qid")
                    .sort("qid")
                )
                n = pair.height
                if n == 0:
                    rows.append((split, metric, 0, None, None, None, None))
                    continue
                bm, tm = float(pair["b"].mean()), float(pair["t"].mean())
                p = paired_test(pair["t"].to_numpy(), pair["b"].to_numpy(), test=test)
                rows.append((split, metric, n, bm, tm, tm - bm, None if math.isnan(p) else p))
        return pl.DataFrame(
            rows,
            schema={"split": pl.String, "metric": pl.String, "n": pl.Int64,
                    "defaults": pl.Float64, "tuned": pl.Float64, "delta": pl.Float64,
                    "p_value": pl.Float64},
            orient="row",
        )

    def save(self, params: Mapping[str, Any], path: str | Path, *, name: str | None = None) -> Path:
        """Write the pipeline with ``params`` as a TOML configuration (atomically).

        The pipeline keeps its name unless ``name`` is given.
        """
        pipe = self.configured(params)
        if name:
            pipe.set_params(name=name)
        out = Path(path)
        pipe.save(out)
        return out


def metric_curves(
    per_query: Mapping[str, pl.DataFrame],
    families: Sequence[str] = ("R_all", "Success", "nDCG"),
) -> pl.DataFrame:
    """Mean of every ``family@k`` metric of ``families`` per configuration, as curves over ``k``.

    Args:
        per_query: Configuration name → :meth:`TuningSession.evaluate` output.
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
            m = _CUTOFF.fullmatch(metric)
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
