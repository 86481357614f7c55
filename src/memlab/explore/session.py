"""Datasets, embedders and a replay that stops at one query, for the marimo apps.

:func:`replay_to_query` replays a dataset's write log exactly as an experiment does (writes,
forgets, relations, event TTL expiry, the accesses of the earlier queries' top hits when a
pipeline is given) and stops right before the chosen query is answered, returning the store and
the :class:`~memlab.stages.base.QueryContext` that query would get. The apps then run stages on
that context one at a time.

Fast mode (``MEMLAB_NOTEBOOK_FAST=1``, set by the tests) swaps MiniLM for the model-free
:class:`~memlab.embed.HashingEmbedder` and lets the apps evaluate a subset of the queries.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from memlab.datasets.format import DATASET_FILES, Dataset, DatasetError, Query, load_dataset
from memlab.eval.replay import ReplayConfig, Replayer
from memlab.memory.store import MemoryStore
from memlab.pipeline import Pipeline
from memlab.stages.base import QueryContext, Stage, empty_candidates

FAST_ENV = "MEMLAB_NOTEBOOK_FAST"
"""Environment variable that puts the apps in fast mode."""


def fast_mode(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``MEMLAB_NOTEBOOK_FAST`` is true (``1``, ``true``, ``yes`` or ``on``)."""
    env = os.environ if environ is None else environ
    return env.get(FAST_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def project_root(start: str | Path | None = None) -> Path:
    """The memlab checkout: the first of ``start`` (default: the working directory) and its
    parents that holds ``pyproject.toml`` and ``src/memlab``; else the checkout this package was
    installed from."""
    here = Path.cwd() if start is None else Path(start)
    for d in (here.resolve(), *here.resolve().parents):
        if (d / "pyproject.toml").is_file() and (d / "src" / "memlab").is_dir():
            return d
    return Path(__file__).resolve().parents[3]


def is_dataset_dir(path: str | Path) -> bool:
    """Whether ``path`` holds the three files of dataset format v1."""
    p = Path(path)
    return all((p / name).is_file() for name in DATASET_FILES)


def find_datasets(root: str | Path | None = None) -> list[Path]:
    """Dataset directories of a checkout: ``datasets/*`` first, then ``tests/fixtures/*``.

    Each group is sorted by name; directories missing one of the three files are skipped.
    """
    base = project_root() if root is None else Path(root)
    found: list[Path] = []
    for group in (base / "datasets", base / "tests" / "fixtures"):
        if group.is_dir():
            found.extend(p for p in sorted(group.iterdir()) if p.is_dir() and is_dataset_dir(p))
    return found


def dataset_options(
    paths: Sequence[str | Path], *, root: str | Path | None = None
) -> dict[str, str]:
    """Dropdown options: path relative to ``root`` (default: the checkout) → absolute path."""
    base = (project_root() if root is None else Path(root)).resolve()
    out: dict[str, str] = {}
    for p in paths:
        full = Path(p).resolve()
        try:
            label = str(full.relative_to(base))
        except ValueError:
            label = str(full)
        out[label] = str(full)
    return out


def dataset_choices(
    default: Dataset, *, root: str | Path | None = None
) -> tuple[dict[str, str], str]:
    """Dropdown options for picking a dataset (the loaded default included) and its label."""
    paths = find_datasets(root)
    if default.path not in paths:
        paths = [default.path, *paths]
    options = dataset_options(paths, root=root)
    wanted = str(Path(default.path).resolve())
    return options, next(label for label, full in options.items() if full == wanted)


def picked_dataset(value: str, default: Dataset) -> Dataset:
    """The dataset a dropdown value names (the already loaded default when it is picked).

    Raises:
        ValueError: If the directory is not a valid dataset.
    """
    if Path(value).resolve() == Path(default.path).resolve():
        return default
    return open_dataset(value)[0]


def default_dataset_paths(
    root: str | Path | None = None,
    *,
    preferred: str = "agent-memories",
    fallback: str = "handmade",
) -> list[Path]:
    """Where the apps look for their default dataset, in order: the shipped one, the fixture."""
    base = project_root() if root is None else Path(root)
    return [base / "datasets" / preferred, base / "tests" / "fixtures" / fallback]


def open_dataset(
    path: str | Path | None = None, *, root: str | Path | None = None
) -> tuple[Dataset, list[str]]:
    """Load ``path``, or the first default dataset that loads.

    Returns:
        The dataset and the reasons the defaults before it were skipped (empty when the first
        one loaded, or when ``path`` was given).

    Raises:
        DatasetError: If ``path`` is given and does not load.
        FileNotFoundError: If no default dataset loads (the message lists why).
    """
    if path is not None:
        return load_dataset(Path(path)), []
    skipped: list[str] = []
    for cand in default_dataset_paths(root):
        if not is_dataset_dir(cand):
            skipped.append(f"{cand}: not a dataset directory")
            continue
        try:
            return load_dataset(cand), skipped
        except DatasetError as exc:
            skipped.append(f"{cand}: {len(exc.problems)} validation problem(s)")
    raise FileNotFoundError("no default dataset loads: " + "; ".join(skipped))


def notebook_embedder(fast: bool | None = None, *, dim: int = 256) -> Any:
    """MiniLM behind the on-disk cache, or in fast mode a :class:`HashingEmbedder` of ``dim``."""
    from memlab.embed import HashingEmbedder, default_embedder

    use_fast = fast_mode() if fast is None else fast
    return HashingEmbedder(dim=dim) if use_fast else default_embedder()


def primary_tag(query: Query) -> str:
    """The query's first tag (``""`` when it has none)."""
    return query.tags[0] if query.tags else ""


def sample_queries(queries: Sequence[Query], *, per_tag: int = 2) -> list[Query]:
    """The first ``per_tag`` queries of every primary tag, in their original order."""
    if isinstance(per_tag, bool) or not isinstance(per_tag, int) or per_tag < 1:
        raise ValueError(f"session.py: field 'per_tag' must be an int >= 1, got {per_tag!r}")
    seen: dict[str, int] = {}
    out = []
    for q in queries:
        tag = primary_tag(q)
        if seen.get(tag, 0) < per_tag:
            seen[tag] = seen.get(tag, 0) + 1
            out.append(q)
    return out


def query_label(query: Query, *, width: int = 70) -> str:
    """``qid [tag] text`` with the text cut to ``width`` characters."""
    text = query.text if len(query.text) <= width else query.text[: width - 1] + "…"
    return f"{query.qid} [{primary_tag(query) or '-'}] {text}"


def query_options(queries: Sequence[Query]) -> dict[str, str]:
    """Dropdown options: :func:`query_label` → qid, in query order."""
    return {query_label(q): q.qid for q in queries}


def queries_table(dataset: Dataset) -> pl.DataFrame:
    """``qid, tag, client_id, text, n_relevant`` of every query."""
    return pl.DataFrame(
        {
            "qid": [q.qid for q in dataset.queries],
            "tag": [primary_tag(q) for q in dataset.queries],
            "client_id": [q.client_id for q in dataset.queries],
            "text": [q.text for q in dataset.queries],
            "n_relevant": [len(q.relevant) for q in dataset.queries],
        },
        schema={
            "qid": pl.String,
            "tag": pl.String,
            "client_id": pl.String,
            "text": pl.String,
            "n_relevant": pl.Int64,
        },
    )


def find_query(dataset: Dataset, qid: str) -> Query:
    """The query ``qid`` of ``dataset`` (``ValueError`` naming the dataset when absent)."""
    for q in dataset.queries:
        if q.qid == qid:
            return q
    name = dataset.meta.get("name", dataset.path)
    raise ValueError(f"dataset {name}: queries.jsonl has no query with qid {qid!r}")


@dataclass
class QueryState:
    """The store and context of one query, right before it is answered.

    Attributes:
        dataset: The dataset replayed.
        query: The query.
        ctx: Its context (a fresh ``trace``; the replayer's embedding cache).
        id_map: Dataset memory id → store id for every write so far.
        relevant: Store id → graded relevance.
        stale: Store ids that must not be returned.
    """

    dataset: Dataset
    query: Query
    ctx: QueryContext
    id_map: dict[str, str]
    relevant: dict[str, int]
    stale: list[str]

    @property
    def store(self) -> MemoryStore:
        """The store as the query sees it."""
        return self.ctx.store


class StopBefore(Stage):
    """Run ``inner`` on every query except ``qid``; for ``qid`` keep its context, return nothing.

    A replay through this stage answers the earlier queries as ``inner`` would (so their top hits
    count as accesses) and leaves the store untouched by the chosen query.

    Args:
        qid: The query to stop at.
        inner: What answers the other queries (``None``: nothing is retrieved, nothing touched).

    Attributes:
        ctx_: The context of ``qid`` once the replay reached it.
    """

    def __init__(self, qid: str = "", inner: Stage | None = None) -> None:
        self.qid = qid
        self.inner = inner

    def transform(self, frame: pl.DataFrame, ctx: QueryContext) -> pl.DataFrame:
        if ctx.qid == self.qid:
            self.ctx_ = ctx
            return empty_candidates()
        if self.inner is None:
            return frame
        return self.inner.transform(frame, ctx)


def make_replayer(
    dataset: Dataset,
    embedder: Any,
    *,
    generator: Any | None = None,
    config: ReplayConfig | None = None,
    **overrides: Any,
) -> Replayer:
    """A :class:`Replayer` without progress bars (it embeds each text once, then caches).

    The replay configuration is ``config``, else the dataset's ``[replay]`` defaults with
    ``overrides`` (``ttl_days=…``, ``touch_k=…``, ``consolidation__interval_hours=…``).
    """
    cfg = config if config is not None else ReplayConfig.from_dataset(dataset, **overrides)
    return Replayer(dataset, embedder=embedder, generator=generator, config=cfg, progress=False)


def replay_to_query(
    replayer: Replayer, qid: str, *, pipeline: Stage | None = None
) -> QueryState:
    """Replay ``replayer.dataset`` up to query ``qid`` and stop before answering it.

    Args:
        replayer: The replayer (its dataset, embedder and replay settings).
        qid: The query.
        pipeline: Answers the earlier queries so that their hits count as accesses, as in an
            experiment with that pipeline; ``None`` replays the writes only.

    Returns:
        The :class:`QueryState` of ``qid``.
    """
    ds = replayer.dataset
    target = find_query(ds, qid)
    order = sorted(range(len(ds.queries)), key=lambda i: (ds.queries[i].ts, i))
    upto = order[: order.index(ds.queries.index(target)) + 1]
    earlier = [ds.queries[i] for i in sorted(upto)] if pipeline is not None else [target]
    probe = StopBefore(qid=qid, inner=pipeline)
    res = replayer.run(Pipeline([("stop_before", probe)], name="stop_before"), queries=earlier)
    ctx = dataclasses.replace(probe.ctx_, trace={})
    relevant: dict[str, int] = {}
    for mid, grade in target.relevant.items():
        sid = res.resolve(mid, target.ts)
        relevant[sid] = max(relevant.get(sid, 0), int(grade))
    stale = sorted({res.id_map.get(s, s) for s in target.stale})
    return QueryState(ds, target, ctx, dict(res.id_map), relevant, stale)
