"""Time-aware replay of recorded agent memories through a pipeline.

Writes are applied in timestamp order; each query runs against the store as it was at its
``ts``:

* **exact** — only operations with ``ts <=`` the query's ``ts`` are applied (file order breaks
  ties); supersessions, soft deletes (``forget``), relations and cross-agent corroboration take
  effect when they are written; event TTL expiry (seed 000 ``cleanupOldEvents``) runs at each
  query's ``ts``, so an event expires unless an earlier query's hits touched it; every query's
  top ``touch_k`` hits count as accesses (``access_count``, ``last_accessed_at``), feeding decay,
  the access boost and the TTL rule of later queries. Each pipeline replays on its own store,
  because these feedbacks differ between pipelines.
* **approximated** — BM25 corpus statistics cover every memory written so far, in every scope,
  active or not (a shared keyword index); consolidation (merges, Hebbian upkeep,
  reclassification) does not run during a replay; query and memory embeddings are computed once
  per experiment from the scrubbed texts.

A retrieval prefix whose stages are all ``cacheable`` (their output depends only on the query,
the memories written and which of them are visible) is computed once per experiment: its result
is shared between pipelines that reach the same query with the same visible set.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

from memlab.datasets.format import Dataset, MemoryOp, Query
from memlab.datasets.writes import apply_op
from memlab.memory.consolidate import expire_events
from memlab.memory.store import MemoryStore
from memlab.pipeline import Parallel, Pipeline, run_step
from memlab.stages.base import QueryContext, Stage, empty_candidates
from memlab.stages.constraints import Integral, Interval, Real, validate_params


def progress_enabled(progress: bool | None) -> bool:
    """Progress bars are on unless ``CI=true`` (or explicitly off)."""
    if progress is not None:
        return progress
    return os.environ.get("CI", "").lower() not in ("1", "true", "yes")


def _bar(iterable: Any, *, total: int, desc: str, enabled: bool) -> Any:
    if not enabled:
        return iterable
    from tqdm.auto import tqdm

    return tqdm(iterable, total=total, desc=desc, leave=False)


@dataclass
class ReplayResult:
    """What one pipeline did on one dataset.

    Attributes:
        pipeline: Pipeline name.
        rankings: ``pipeline, qid, rank, mem_id, score`` (top ``depth`` per query).
        timings: ``pipeline, qid, stage, seconds``.
        id_map: Dataset memory id → store id (dedup maps later writes onto earlier records).
        contexts: ``qid`` → rendered context text, where a ``context`` stage ran.
        flags: ``qid`` → ``low_confidence`` where a CRAG stage flagged it.
    """

    pipeline: str
    rankings: pl.DataFrame
    timings: pl.DataFrame
    id_map: dict[str, str]
    contexts: dict[str, str] = field(default_factory=dict)
    flags: dict[str, bool] = field(default_factory=dict)


def _all_stages(stage: Stage) -> list[Stage]:
    if isinstance(stage, (Pipeline, Parallel)):
        return [s for _, s in stage.named_stages() if not isinstance(s, (Pipeline, Parallel))]
    return [stage]


def cacheable_prefix(pipeline: Pipeline) -> int:
    """How many leading steps are made only of ``cacheable`` stages."""
    n = 0
    for _, step in pipeline.steps:
        if all(getattr(s, "cacheable", False) for s in _all_stages(step)):
            n += 1
        else:
            break
    return n


def _prefix_key(pipeline: Pipeline, n_steps: int) -> str:
    cfg = pipeline.to_config()
    names = {n for n, _ in pipeline.steps[:n_steps]}
    keep: set[str] = set()
    for n, s in pipeline.named_stages():
        if n in names:
            keep.add(n)
            keep.update(x for x, _ in (s.named_stages() if isinstance(s, Parallel) else []))
    sub = {"steps": [n for n, _ in pipeline.steps[:n_steps]], **{k: cfg[k] for k in sorted(keep)}}
    return hashlib.sha256(json.dumps(sub, sort_keys=True).encode()).hexdigest()[:16]


class Replayer:
    """Replays a dataset's write log and queries through pipelines.

    Args:
        dataset: The dataset (format v1).
        embedder: Embeds memories and queries (wrap it in a cache for repeated runs).
        generator: Text generator handed to stages that need one (HyDE, LLM judges).
        ttl_days: Event TTL used at each query (seed 000: 30 days).
        expire: Run the TTL cleanup before each query.
        touch_k: How many top hits of each query count as accesses.
        depth: How many candidates per query are kept in the rankings.
        progress: Show progress bars (default: on unless ``CI=true``).
    """

    def __init__(
        self,
        dataset: Dataset,
        *,
        embedder: Any,
        generator: Any | None = None,
        ttl_days: float = 30.0,
        expire: bool = True,
        touch_k: int = 10,
        depth: int = 100,
        progress: bool | None = None,
    ) -> None:
        validate_params(
            "replay",
            {
                "ttl_days": [Interval(Real, 0, None, closed="left")],
                "expire": [bool],
                "touch_k": [Interval(Integral, 0, None, closed="left")],
                "depth": [Interval(Integral, 1, None, closed="left")],
            },
            {"ttl_days": ttl_days, "expire": expire, "touch_k": touch_k, "depth": depth},
        )
        self.dataset = dataset
        self.embedder = embedder
        self.generator = generator
        self.ttl_days = ttl_days
        self.expire = expire
        self.touch_k = touch_k
        self.depth = depth
        self.progress = progress
        self.cache: dict[Any, Any] = {}
        self._vectors: dict[str, np.ndarray] | None = None
        self._scrubbed: dict[int, str] = {}

    # ------------------------------------------------------------------ preparation
    def prepare(self) -> None:
        """Scrub every memory text and embed it (and every query) once."""
        if self._vectors is not None:
            return
        scratch = MemoryStore()
        texts: list[str] = []
        for op in self.dataset.ops:
            if op.op == "store":
                try:
                    scrubbed, _ = scratch.prepare_text(op.text)
                except (TypeError, ValueError) as exc:
                    raise ValueError(f"memories.jsonl:{op.line}: {exc}") from None
                self._scrubbed[op.line] = scrubbed
                texts.append(scrubbed)
        texts.extend(q.text for q in self.dataset.queries)
        unique = list(dict.fromkeys(texts))
        vectors: dict[str, np.ndarray] = {}
        batch = 256
        enabled = progress_enabled(self.progress)
        starts = range(0, len(unique), batch)
        for start in _bar(starts, total=len(starts), desc="embedding", enabled=enabled):
            chunk = unique[start : start + batch]
            embs = np.asarray(self.embedder.embed(chunk), dtype=np.float32)
            for t, v in zip(chunk, embs, strict=True):
                vectors[t] = v
        self._vectors = vectors
        model = getattr(self.embedder, "model_id", type(self.embedder).__name__)
        for q in self.dataset.queries:
            self.cache[("emb", model, q.text)] = vectors[q.text]

    # ------------------------------------------------------------------ replay
    def _apply(self, store: MemoryStore, op: MemoryOp, id_map: dict[str, str]) -> None:
        vector = None
        if op.op == "store":
            if self._vectors is None:
                raise RuntimeError("prepare() must run before the replay")
            vector = self._vectors[self._scrubbed[op.line]]
        apply_op(store, op, id_map, embedding=vector)

    def run(
        self,
        pipeline: Pipeline,
        *,
        queries: Sequence[Query] | None = None,
        on_query: Callable[[Query, QueryContext, pl.DataFrame], None] | None = None,
    ) -> ReplayResult:
        """Replay the dataset through ``pipeline`` (a fresh store each call).

        Args:
            pipeline: The pipeline (it is not modified; fitted stages keep their state).
            queries: Evaluate only these queries (default: all). Every write still happens and
                only these queries' hits count as accesses.
            on_query: Called after each query with its context and output (notebooks).
        """
        for _, stage in pipeline.named_stages():  # parameters set by plain assignment
            stage._validate_params()
        self.prepare()
        store = MemoryStore()
        id_map: dict[str, str] = {}
        qs = list(self.dataset.queries if queries is None else queries)
        order = sorted(range(len(qs)), key=lambda i: (qs[i].ts, i))
        ops = self.dataset.ops
        n_prefix = cacheable_prefix(pipeline)
        prefix_key = _prefix_key(pipeline, n_prefix) if n_prefix else ""
        rank_rows: dict[str, list[Any]] = {k: [] for k in ("qid", "rank", "mem_id", "score")}
        time_rows: dict[str, list[Any]] = {k: [] for k in ("qid", "stage", "seconds")}
        contexts: dict[str, str] = {}
        flags: dict[str, bool] = {}
        pos = 0
        enabled = progress_enabled(self.progress)
        for i in _bar(order, total=len(order), desc=f"replay {pipeline.name}", enabled=enabled):
            q = qs[i]
            while pos < len(ops) and ops[pos].ts <= q.ts:
                self._apply(store, ops[pos], id_map)
                pos += 1
            if self.expire:
                expire_events(store, now=q.ts, event_ttl_days=self.ttl_days)
            ctx = QueryContext(
                qid=q.qid,
                text=q.text,
                store=store,
                now=q.ts,
                client_id=q.client_id,
                at_time=q.at_time,
                embedder=self.embedder,
                generator=self.generator,
                cache=self.cache,
            )
            frame = self._run_query(pipeline, ctx, n_prefix, prefix_key)
            top = frame.head(self.depth)
            n = top.height
            rank_rows["qid"].extend([q.qid] * n)
            rank_rows["rank"].extend(range(1, n + 1))
            rank_rows["mem_id"].extend(top["mem_id"].to_list())
            rank_rows["score"].extend(top["score"].to_list())
            for stage, secs in ctx.trace.get("timings", {}).items():
                time_rows["qid"].append(q.qid)
                time_rows["stage"].append(stage)
                time_rows["seconds"].append(secs)
            if ctx.context_text is not None:
                contexts[q.qid] = ctx.context_text
            if "low_confidence" in top.columns and n:
                flags[q.qid] = bool(top["low_confidence"].any())
            if self.touch_k > 0 and n:
                store.touch(top["mem_id"].head(self.touch_k).to_list(), now=q.ts)
            if on_query is not None:
                on_query(q, ctx, frame)
        rankings = pl.DataFrame(
            rank_rows,
            schema={"qid": pl.String, "rank": pl.Int64, "mem_id": pl.String, "score": pl.Float64},
        ).with_columns(pl.lit(pipeline.name).alias("pipeline"))
        timings = pl.DataFrame(
            time_rows, schema={"qid": pl.String, "stage": pl.String, "seconds": pl.Float64}
        ).with_columns(pl.lit(pipeline.name).alias("pipeline"))
        self.last_store_ = store
        return ReplayResult(
            pipeline=pipeline.name,
            rankings=rankings.select("pipeline", "qid", "rank", "mem_id", "score"),
            timings=timings.select("pipeline", "qid", "stage", "seconds"),
            id_map=id_map,
            contexts=contexts,
            flags=flags,
        )

    def _run_query(
        self, pipeline: Pipeline, ctx: QueryContext, n_prefix: int, prefix_key: str
    ) -> pl.DataFrame:
        frame = empty_candidates()
        start_step = 0
        if n_prefix:
            mask = ctx.visible_mask()
            digest = hashlib.blake2b(np.packbits(mask).tobytes(), digest_size=16).hexdigest()
            key = ("prefix", prefix_key, ctx.qid, len(ctx.store), digest)
            hit = self.cache.get(key)
            if hit is not None:
                frame, qvec = hit
                ctx.query_vector = qvec
                start_step = n_prefix
                ctx.trace.setdefault("timings", {})["prefix_cache"] = 0.0
            else:
                for name, stage in pipeline.steps[:n_prefix]:
                    frame = run_step(name, stage, frame, ctx)
                self.cache[key] = (frame, ctx.query_vector)
                start_step = n_prefix
        for name, stage in pipeline.steps[start_step:]:
            frame = run_step(name, stage, frame, ctx)
        return frame



def qrels_frame(dataset: Dataset, id_map: dict[str, str]) -> pl.DataFrame:
    """``qid, mem_id, relevance`` with dataset ids mapped onto store ids (dedup)."""
    rows: dict[str, list[Any]] = {"qid": [], "mem_id": [], "relevance": []}
    for q in dataset.queries:
        best: dict[str, int] = {}
        for mid, grade in q.relevant.items():
            sid = id_map.get(mid, mid)
            best[sid] = max(best.get(sid, 0), int(grade))
        for sid, grade in sorted(best.items()):
            rows["qid"].append(q.qid)
            rows["mem_id"].append(sid)
            rows["relevance"].append(grade)
    return pl.DataFrame(
        rows, schema={"qid": pl.String, "mem_id": pl.String, "relevance": pl.Int64}
    )


def queries_frame(dataset: Dataset, id_map: dict[str, str]) -> pl.DataFrame:
    """``qid, client_id, stale, tags`` with stale ids mapped onto store ids."""
    return pl.DataFrame(
        {
            "qid": [q.qid for q in dataset.queries],
            "client_id": [q.client_id for q in dataset.queries],
            "stale": [sorted({id_map.get(s, s) for s in q.stale}) for q in dataset.queries],
            "tags": [list(q.tags) for q in dataset.queries],
        },
        schema={
            "qid": pl.String,
            "client_id": pl.String,
            "stale": pl.List(pl.String),
            "tags": pl.List(pl.String),
        },
    )
