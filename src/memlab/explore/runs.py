"""Experiment run directories: finding, loading, comparing, and the per-query drill-down.

A run directory is what :func:`memlab.eval.experiment.run_experiment` writes, read through the
one reader of that contract, :meth:`memlab.eval.experiment.ExperimentResult.load`; any directory
holding ``metrics.json`` counts, and a trimmed copy (such as ``reports/baseline``) lists what it
lacks in :attr:`Run.missing` so that the app can say so.

The drill-down re-runs one query through a run's pipeline one stage at a time
(:func:`trace_pipeline`) and reports, for each relevant memory, its rank after every stage
(:func:`stage_ranks`) and which stage lost it (:func:`loss_report`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import altair as alt
import polars as pl

from memlab.eval.experiment import RUN_TABLES as EXPERIMENT_TABLES
from memlab.eval.experiment import ExperimentResult
from memlab.eval.metrics import higher_is_better
from memlab.eval.stats import COMPARISON_KEYS, TAG_COMPARISON_KEYS, comparison_view
from memlab.pipeline import Parallel, Pipeline, pipeline_from_config
from memlab.stages.base import QueryContext, Stage

RUN_TABLES: tuple[str, ...] = tuple(Path(name).stem for name in EXPERIMENT_TABLES.values())
"""The parquet tables of a run directory (``NAME.parquet``), as the output contract lists them."""

_HASHING_ID = re.compile(r"^hashing-d(?P<dim>\d+)-s(?P<seed>\d+)-c(?P<ngram>\d+)$")


@dataclass
class Run:
    """One run directory, loaded.

    Attributes:
        path: The directory.
        name: Its path relative to the root it was found under (or its own name).
        manifest: ``manifest.json`` (empty when absent).
        metrics: ``metrics.json``: pipeline → metric → value.
        tables: Table name (:data:`RUN_TABLES`) → frame; a missing file gives an empty frame.
        missing: Files of the output contract the directory lacks.
    """

    path: Path
    name: str
    manifest: dict[str, Any]
    metrics: dict[str, dict[str, float]]
    tables: dict[str, pl.DataFrame]
    missing: tuple[str, ...] = ()

    def lacks(self, *tables: str) -> list[str]:
        """The files among ``tables`` (names of :data:`RUN_TABLES`) this run does not have."""
        return [f"{t}.parquet" for t in tables if f"{t}.parquet" in self.missing]

    @property
    def pipelines(self) -> list[str]:
        """Pipeline names in ``metrics.json`` order."""
        return list(self.metrics)

    @property
    def baseline(self) -> str | None:
        """The baseline named in the manifest (else the first pipeline)."""
        base = self.manifest.get("baseline")
        if base is not None:
            return str(base)
        return self.pipelines[0] if self.pipelines else None


def find_runs(root: str | Path) -> list[Path]:
    """Directories under ``root`` (``root`` included) holding ``metrics.json``.

    Hidden directories (a name starting with ``.``, e.g. a run still being written) are skipped.
    Sorted by path.
    """
    base = Path(root)
    if not base.is_dir():
        return []
    found = []
    for metrics in base.rglob("metrics.json"):
        rel = metrics.parent.relative_to(base)
        if any(part.startswith(".") for part in rel.parts):
            continue
        found.append(metrics.parent)
    return sorted(found)


def load_run(path: str | Path, *, root: str | Path | None = None) -> Run:
    """Read a run directory through :meth:`ExperimentResult.load`.

    Raises:
        ValueError: If ``metrics.json``, ``manifest.json`` or a table cannot be read (naming
            the file).
    """
    p = Path(path)
    result = ExperimentResult.load(p)
    tables = {
        Path(name).stem: getattr(result, attr) for attr, name in EXPERIMENT_TABLES.items()
    }
    if root is not None:
        try:
            label = str(p.resolve().relative_to(Path(root).resolve()))
        except ValueError:
            label = p.name
    else:
        label = p.name
    return Run(
        p,
        "." if label == "" else label,
        result.manifest,
        result.metrics,
        tables,
        tuple(result.missing),
    )


def load_runs(paths: Sequence[str | Path], *, reports: str | Path) -> tuple[list[Run], list[str]]:
    """Load every run of ``paths``, skipping those that cannot be read.

    A run under ``reports`` is named relative to it, any other run relative to its parent
    (:func:`load_run`).

    Args:
        paths: Run directories (:func:`find_runs`).
        reports: The reports directory.

    Returns:
        The runs that loaded, in ``paths`` order, and one ``"<dir>: <reason>"`` line for each
        run skipped (a file that is not JSON or not parquet, a field of the wrong type, an
        unreadable file).
    """
    base = Path(reports)
    runs: list[Run] = []
    skipped: list[str] = []
    for path in paths:
        p = Path(path)
        try:
            runs.append(load_run(p, root=base if p.is_relative_to(base) else p.parent))
        except (ValueError, OSError) as exc:
            skipped.append(f"{p}: {exc}")
    return runs, skipped


def rounded(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` with its float columns rounded for display: p-values (``p_*``) to three
    significant digits, any other float to four decimals."""
    return frame.with_columns(
        [
            pl.col(c).round_sig_figs(3) if c.startswith("p_") else pl.col(c).round(4)
            for c, t in frame.schema.items()
            if t == pl.Float64
        ]
    )


RELEVANCE_FAMILIES: tuple[str, ...] = ("R_all", "Success", "nDCG", "MRR")
"""Metric families the comparison chart draws (the part of a metric's name before ``@``)."""


def runs_overview(runs: Sequence[Run]) -> pl.DataFrame:
    """:func:`metrics_wide` of ``runs`` with how many queries each run scored and its protocol.

    Returns:
        ``run, pipeline, queries, protocol`` (:func:`query_count`, :func:`protocol_text`), then
        one column per metric; one row per (run, pipeline), in run order.
    """
    wide = metrics_wide(runs)
    counts = pl.DataFrame(
        {
            "run": [r.name for r in runs],
            "queries": [query_count(r) for r in runs],
            "protocol": [protocol_text(r) for r in runs],
        },
        schema={"run": pl.String, "queries": pl.Int64, "protocol": pl.String},
    )
    return wide.join(counts, on="run", how="left", maintain_order="left").select(
        "run", "pipeline", "queries", "protocol",
        *[c for c in wide.columns if c not in ("run", "pipeline")],
    )


def relevance_columns(table: pl.DataFrame) -> list[str]:
    """The columns of ``table`` whose metric family is in :data:`RELEVANCE_FAMILIES`."""
    return [c for c in table.columns if c.split("@")[0] in RELEVANCE_FAMILIES]


def metrics_long(runs: Sequence[Run]) -> pl.DataFrame:
    """Every aggregate metric of every run: ``run, pipeline, metric, value``."""
    rows = [
        (run.name, pipe, metric, float(value))
        for run in runs
        for pipe, values in run.metrics.items()
        for metric, value in values.items()
    ]
    return pl.DataFrame(
        rows,
        schema={"run": pl.String, "pipeline": pl.String, "metric": pl.String, "value": pl.Float64},
        orient="row",
    )


def metrics_wide(runs: Sequence[Run], metrics: Sequence[str] | None = None) -> pl.DataFrame:
    """One row per (run, pipeline), one column per metric (in ``metrics`` order, default: the
    metrics of the first run's manifest, else every metric sorted)."""
    long = metrics_long(runs)
    if metrics is None:
        first = runs[0].manifest.get("metrics") if runs else None
        metrics = list(first) if first else sorted(set(long["metric"].to_list()))
    long = long.filter(pl.col("metric").is_in(list(metrics)))
    if long.height == 0:
        return pl.DataFrame(schema={"run": pl.String, "pipeline": pl.String})
    order = [(r.name, p) for r in runs for p in r.pipelines]
    wide = long.pivot(on="metric", index=["run", "pipeline"], values="value")
    present = [m for m in metrics if m in wide.columns]
    key = {k: i for i, k in enumerate(order)}
    return (
        wide.with_columns(
            pl.struct("run", "pipeline")
            .map_elements(lambda s: key[(s["run"], s["pipeline"])], return_dtype=pl.Int64)
            .alias("_o")
        )
        .sort("_o")
        .select("run", "pipeline", *present)
    )


def significance_table(run: Run, *, metric: str | None = None) -> pl.DataFrame:
    """The run's paired comparison with its baseline (``comparison.parquet``).

    Keeps ``pipeline, metric, n`` (paired queries), ``baseline_mean, mean, delta, wins,
    losses``, the adjusted p-values (``*_adj``) and ``significant`` where present; optionally
    one metric only.
    """
    comp = run.tables.get("comparison", pl.DataFrame())
    if comp.height == 0:
        return comp
    keys = list(COMPARISON_KEYS)
    keys.insert(keys.index("metric") + 1, "n")
    out = comparison_view(comp, keys)
    if metric is not None:
        out = out.filter(pl.col("metric") == metric)
    return out


def tag_significance_table(run: Run, *, metric: str | None = None) -> pl.DataFrame:
    """The run's paired comparison within each query tag (``comparison_by_tag.parquet``).

    Keeps ``pipeline, tag, n, baseline_mean, mean, wins, losses``, the adjusted p-values and
    ``significant``; the file holds the run's headline metric only, so asking for another
    metric gives an empty table.
    """
    comp = run.tables.get("comparison_by_tag", pl.DataFrame())
    if comp.height == 0:
        return comp
    if metric is not None:
        comp = comp.filter(pl.col("metric") == metric)
    return comparison_view(comp, TAG_COMPARISON_KEYS)


def tag_table(run: Run, metric: str) -> pl.DataFrame:
    """Mean of ``metric`` per query tag (rows) and pipeline (columns), from ``per_tag``, after
    ``n``: how many queries of the tag were scored (the most any pipeline scored)."""
    table = run.tables.get("per_tag", pl.DataFrame())
    if table.height == 0:
        return pl.DataFrame(schema={"tag": pl.String})
    sub = table.filter(pl.col("metric") == metric)
    if sub.height == 0:
        return pl.DataFrame(schema={"tag": pl.String})
    wide = sub.pivot(on="pipeline", index="tag", values="mean").sort("tag")
    wide = wide.select("tag", *[p for p in run.pipelines if p in wide.columns])
    if "n" not in sub.columns:
        return wide
    counts = sub.group_by("tag").agg(pl.col("n").max().cast(pl.Int64))
    return wide.join(counts, on="tag", how="left").select("tag", "n", *wide.columns[1:])


def query_table(run: Run, metric: str, *, pipeline: str | None = None) -> pl.DataFrame:
    """Per query: the value of ``metric`` for each pipeline (columns in run order).

    With ``pipeline`` (not the baseline), a ``delta`` column (pipeline − baseline) is added and
    rows are sorted by the size of the win or loss, largest first; otherwise by ``qid``. Query
    text is added when the run carries ``queries.parquet``.
    """
    pq = run.tables.get("per_query", pl.DataFrame())
    if pq.height == 0:
        return pl.DataFrame(schema={"qid": pl.String})
    wide = pq.filter(pl.col("metric") == metric).pivot(
        on="pipeline", index="qid", values="value"
    )
    wide = wide.select("qid", *[p for p in run.pipelines if p in wide.columns])
    queries = run.tables.get("queries", pl.DataFrame())
    if queries.height and "text" in queries.columns:
        wide = wide.join(queries.select("qid", "text"), on="qid", how="left")
    base = run.baseline
    if pipeline and base and pipeline != base and {pipeline, base} <= set(wide.columns):
        wide = wide.with_columns((pl.col(pipeline) - pl.col(base)).alias("delta")).sort(
            pl.col("delta").abs(), "qid", descending=[True, False], nulls_last=True
        )
        return wide
    return wide.sort("qid")


def run_pipeline(run: Run, name: str) -> Pipeline:
    """The pipeline ``name`` as the run's manifest resolved it."""
    cfgs = run.manifest.get("pipelines", {})
    if name not in cfgs:
        raise ValueError(
            f"{run.path / 'manifest.json'}: no configuration for pipeline {name!r} "
            f"(pipelines: {', '.join(cfgs) or 'none'})"
        )
    return pipeline_from_config(cfgs[name], source=f"{run.path / 'manifest.json'}:{name}")


def embedder_from_id(model_id: str | None, *, fast: bool = False) -> Any:
    """The embedder a run's manifest names by its ``model_id`` (``embedder``), rebuilt.

    ``hashing-dD-sS-cC`` rebuilds that :class:`~memlab.embed.HashingEmbedder`. With ``fast``
    (the apps' fast mode) any other id gives a 256-dimensional hashing embedder. Otherwise the
    id must be that of an embedder of the registry (:data:`memlab.embed.EMBEDDERS`) with its
    default settings (``all-MiniLM-L6-v2``, ``all-mpnet-base-v2``, the two
    ``multilingual-e5-small-q4`` ones): it is built by name behind the on-disk cache
    (:func:`memlab.embed.named_embedder`, as ``memlab eval --embedder NAME`` does), after
    checking that its model is installed (MiniLM: its directory; any other: it is loaded).

    Raises:
        ValueError: If the manifest names no embedder, or one memlab cannot rebuild (a
            ``path:DIR`` or ``onnx:DIR`` model: the manifest does not record the directory), or
            one whose model is not installed here; the message names the embedder.
    """
    from memlab.embed import HashingEmbedder, named_embedder

    m = _HASHING_ID.fullmatch(model_id or "")
    if m is not None:
        return HashingEmbedder(dim=int(m["dim"]), seed=int(m["seed"]), char_ngram=int(m["ngram"]))
    if fast:
        return HashingEmbedder(dim=256)
    if not model_id:
        raise ValueError("the run's manifest.json names no embedder: cannot replay it here")
    name = registered_embedder_name(model_id)
    if name is None:
        raise ValueError(
            f"the run used the embedder {model_id!r}, which is not available here: it is not "
            "a registered embedder with its default settings (a path: or onnx: model's "
            "directory is not recorded in the run)"
        )
    emb = named_embedder(name)
    try:
        _check_available(emb.embedder)
    except (OSError, ImportError, ValueError) as exc:
        raise ValueError(
            f"the run used the embedder {model_id!r} ({name}), which is not available here: "
            f"{exc}"
        ) from None
    return emb


def _check_available(embedder: Any) -> None:
    """Raise if ``embedder``'s model is not installed: MiniLM's model directory is looked up
    without loading it (its vectors may all be in the cache), any other model is loaded."""
    from memlab.embed import MiniLMEmbedder, default_minilm_path

    if isinstance(embedder, MiniLMEmbedder):
        path = default_minilm_path() if embedder.model_path is None else embedder.model_path
        if not Path(path).is_dir():
            raise FileNotFoundError(f"{path}: not a directory")
        return
    load = getattr(embedder, "load", None)
    if load is not None:
        load()


def registered_embedder_name(model_id: str) -> str | None:
    """The name of the registered embedder (:data:`memlab.embed.EMBEDDERS`) whose default
    settings give ``model_id``, or ``None``.

    Embedders that need arguments (a model directory) are skipped: their ids name a directory
    the registry cannot find again.
    """
    from memlab.embed import EMBEDDERS, make_embedder

    for name in EMBEDDERS:
        try:
            if make_embedder(name).model_id == model_id:
                return name
        except (TypeError, ValueError, OSError):
            continue
    return None


def replay_config_of(manifest: Mapping[str, Any], dataset: Any) -> Any:
    """The replay configuration a run's manifest records (older manifests: the flat knobs they
    list, over the dataset's defaults)."""
    from memlab.eval.replay import ReplayConfig

    recorded = dict(manifest.get("replay") or {})
    recorded.pop("source", None)
    base = ReplayConfig.from_dataset(dataset)
    return base.with_params(
        _where="manifest.json replay",
        **{
            **{k: v for k, v in recorded.items() if k != "consolidation"},
            **{f"consolidation__{k}": v for k, v in (recorded.get("consolidation") or {}).items()},
        },
    )


def run_dataset_path(run: Run) -> Path | None:
    """The dataset directory the run's manifest names (``None`` when it names none).

    A relative path that does not exist from the working directory is taken relative to the
    checkout (:func:`memlab.explore.session.project_root`).
    """
    from memlab.explore.session import project_root

    path = run.manifest.get("dataset", {}).get("path")
    if path is None:
        return None
    p = Path(path)
    if not p.is_absolute() and not p.exists():
        return project_root() / p
    return p


def recorded_ranking(run: Run, pipeline: str, qid: str) -> pl.DataFrame:
    """``rank, mem_id, score`` the run recorded for one pipeline and query."""
    rk = run.tables.get("rankings", pl.DataFrame())
    if rk.height == 0:
        return pl.DataFrame(schema={"rank": pl.Int64, "mem_id": pl.String, "score": pl.Float64})
    return (
        rk.filter((pl.col("pipeline") == pipeline) & (pl.col("qid") == qid))
        .sort("rank")
        .select("rank", "mem_id", "score")
    )


# ---------------------------------------------------------------------- per-stage drill-down
@dataclass
class StageOutput:
    """The candidates after one stage of a traced pipeline.

    Attributes:
        order: Position in execution order (0, 1, …).
        step: The pipeline step it belongs to.
        stage: The stage's name (a branch or fusion stage inside a parallel step has its own).
        kind: ``"step"`` (a sequential step), ``"branch"`` (a parallel branch) or ``"fusion"``
            (the stage that merged the branches: its output is the step's output).
        frame: Its output, ranked.
    """

    order: int
    step: str
    stage: str
    kind: str
    frame: pl.DataFrame

    @property
    def label(self) -> str:
        """``step/stage`` inside a parallel step, else the step name."""
        return self.step if self.kind == "step" else f"{self.step}/{self.stage}"


def trace_pipeline(pipeline: Pipeline, ctx: QueryContext) -> list[StageOutput]:
    """Run ``pipeline`` on ``ctx`` and keep every stage's output (through its observer hook,
    so every stage runs exactly as in a replay: :func:`memlab.pipeline.run_step`).

    Parallel steps are opened up: each branch's output is kept, then the fusion's.
    """
    where: dict[str, tuple[str, str]] = {}
    for name, stage in pipeline.steps:
        if isinstance(stage, Parallel):
            if stage.fuse is None:
                raise ValueError(f"pipeline '{pipeline.name}': parallel step {name!r} has no fuse")
            where.update({b: (name, "branch") for b, _ in stage.branches})
            where[stage.fuse[0]] = (name, "fusion")
        else:
            where[name] = (name, "step")
    out: list[StageOutput] = []

    def keep(name: str, stage: Stage, before: pl.DataFrame, after: pl.DataFrame) -> None:
        if name in where and not isinstance(stage, Parallel):
            step, kind = where[name]
            out.append(StageOutput(len(out), step, name, kind, after))

    pipeline.run(ctx, observer=keep)
    return out


def _ranks(frame: pl.DataFrame) -> dict[str, int]:
    if frame.height == 0:
        return {}
    return dict(zip(frame["mem_id"].to_list(), frame["rank"].to_list(), strict=True))


def stage_ranks(outputs: Sequence[StageOutput], mem_ids: Sequence[str]) -> pl.DataFrame:
    """Where each stage ranked each of ``mem_ids``.

    Returns:
        ``order, stage, kind, mem_id, rank, n_candidates``: one row per stage and memory,
        ``rank`` null where the stage's output does not hold it. Sorted by order, then the
        order of ``mem_ids``.
    """
    rows = []
    for o in outputs:
        ranks = _ranks(o.frame)
        for m in mem_ids:
            rows.append((o.order, o.label, o.kind, m, ranks.get(m), o.frame.height))
    return pl.DataFrame(
        rows,
        schema={
            "order": pl.Int64,
            "stage": pl.String,
            "kind": pl.String,
            "mem_id": pl.String,
            "rank": pl.Int64,
            "n_candidates": pl.Int64,
        },
        orient="row",
    )


def ranks_wide(outputs: Sequence[StageOutput], mem_ids: Sequence[str]) -> pl.DataFrame:
    """:func:`stage_ranks` as one row per memory and one rank column per stage label."""
    data: dict[str, list[Any]] = {"mem_id": list(mem_ids)}
    schema: dict[str, pl.DataType] = {"mem_id": pl.String()}
    for o in outputs:
        ranks = _ranks(o.frame)
        data[o.label] = [ranks.get(m) for m in mem_ids]
        schema[o.label] = pl.Int64()
    return pl.DataFrame(data, schema=schema)


def loss_report(
    outputs: Sequence[StageOutput], relevant: Mapping[str, int], *, k: int = 10
) -> pl.DataFrame:
    """For each relevant memory: where it was best ranked, its final rank and what lost it.

    The main line is the sequence of ``step`` and ``fusion`` outputs (each feeds the next);
    branches only retrieve. Verdicts:

    * ``found`` -- final rank ≤ ``k``; ``lost_at`` is null.
    * ``never retrieved`` -- no stage output ever held it; ``lost_at`` is the first stage.
    * ``dropped`` -- a main-line stage's output no longer holds it; ``lost_at`` is that stage
      (a fusion that drops every branch hit counts too).
    * ``below k`` -- still ranked at the end, but beyond ``k``; ``lost_at`` is the first
      main-line stage from which it stays beyond ``k`` (the first stage when it never was
      within ``k``).

    Returns:
        ``mem_id, relevance, best_rank, best_stage, final_rank, verdict, lost_at``, in the order
        of ``relevant``.
    """
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"runs.py: field 'k' must be an int >= 1, got {k!r}")
    main = [o for o in outputs if o.kind in ("step", "fusion")]
    ranks = {o.order: _ranks(o.frame) for o in outputs}
    rows = []
    for mid, grade in relevant.items():
        seen = [(ranks[o.order][mid], o.order, o.label) for o in outputs if mid in ranks[o.order]]
        best = min(seen) if seen else None
        final = ranks[main[-1].order].get(mid) if main else None
        if final is not None and final <= k:
            verdict, lost = "found", None
        elif not seen:
            verdict, lost = "never retrieved", outputs[0].label if outputs else None
        elif final is None:
            verdict, lost = "dropped", _first_drop(main, ranks, mid, outputs)
        else:
            verdict, lost = "below k", _first_stay_out(main, ranks, mid, k)
        rows.append(
            (
                mid,
                int(grade),
                None if best is None else best[0],
                None if best is None else best[2],
                final,
                verdict,
                lost,
            )
        )
    return pl.DataFrame(
        rows,
        schema={
            "mem_id": pl.String,
            "relevance": pl.Int64,
            "best_rank": pl.Int64,
            "best_stage": pl.String,
            "final_rank": pl.Int64,
            "verdict": pl.String,
            "lost_at": pl.String,
        },
        orient="row",
    )


def _first_drop(
    main: Sequence[StageOutput],
    ranks: Mapping[int, Mapping[str, int]],
    mid: str,
    outputs: Sequence[StageOutput],
) -> str | None:
    present = False
    for o in main:
        if mid in ranks[o.order]:
            present = True
        elif present or o.kind == "fusion" and any(
            mid in ranks[b.order] for b in outputs if b.step == o.step and b.kind == "branch"
        ):
            return o.label
    return None


def _first_stay_out(
    main: Sequence[StageOutput], ranks: Mapping[int, Mapping[str, int]], mid: str, k: int
) -> str | None:
    lost = None
    for o in main:
        r = ranks[o.order].get(mid)
        if r is not None and r <= k:
            lost = None
        elif lost is None:
            lost = o.label
    return lost


def rank_path_chart(long: pl.DataFrame, *, k: int = 10) -> alt.LayerChart:
    """Rank of each memory after each stage (:func:`stage_ranks`), rank 1 on top, the cut-off
    ``k`` as a dashed rule; stages are in execution order."""
    data = long.filter(pl.col("rank").is_not_null())
    order = long.select("order", "stage").unique().sort("order")["stage"].to_list()
    x = alt.X("stage:N", sort=order, title="stage (in execution order)",
              axis=alt.Axis(labelAngle=-30))
    lines = (
        alt.Chart(data)
        .mark_line(point=alt.OverlayMarkDef(size=70))
        .encode(
            x=x,
            y=alt.Y("rank:Q", scale=alt.Scale(type="log", reverse=True), title="rank (log)"),
            color=alt.Color("mem_id:N", title="relevant memory"),
            tooltip=["mem_id:N", "stage:N", "rank:Q", "n_candidates:Q"],
        )
    )
    rule = (
        alt.Chart(pl.DataFrame({"k": [k]}))
        .mark_rule(strokeDash=[5, 4], color="#d62728")
        .encode(y="k:Q")
    )
    return alt.layer(lines, rule).properties(width=560, height=240)


def comparison_chart(wide: pl.DataFrame, metrics: Sequence[str]) -> alt.Chart:
    """Grouped bars: ``metrics`` of every (run, pipeline) row of :func:`metrics_wide`."""
    cols = [m for m in metrics if m in wide.columns]
    long = wide.with_columns(
        (pl.col("run") + " · " + pl.col("pipeline")).alias("config")
    ).unpivot(index="config", on=cols, variable_name="metric", value_name="value")
    return (
        alt.Chart(long)
        .mark_bar()
        .encode(
            x=alt.X("config:N", title="run · pipeline", axis=alt.Axis(labelAngle=-35)),
            y=alt.Y("value:Q", title="mean over the run's queries"),
            color=alt.Color("config:N", legend=None),
            column=alt.Column("metric:N", title="metric"),
            tooltip=["config:N", "metric:N", alt.Tooltip("value:Q", format=".4f")],
        )
        .properties(width=max(60, 22 * wide.height), height=180)
    )


def demo_run_dir(name: str = "demo-handmade") -> Path:
    """Where the apps put the demo run: ``<system temp dir>/memlab-demo-runs/<name>`` (rebuilt,
    atomically, by each app session that needs it)."""
    import tempfile

    return Path(tempfile.gettempdir()) / "memlab-demo-runs" / name


def build_demo_run(
    out: str | Path,
    dataset: str | Path,
    *,
    pipelines: Sequence[str] = ("bm25", "dense", "graph", "hybrid"),
    embedder: Any | None = None,
    n_resamples: int = 2000,
) -> Path:
    """Run a small experiment into ``out`` (no report), for when no run exists yet.

    Args:
        out: Output directory (written atomically).
        dataset: The dataset directory (the handmade fixture is meant).
        pipelines: Shipped pipeline names.
        embedder: Defaults to a 256-dimensional :class:`~memlab.embed.HashingEmbedder`.
        n_resamples: Permutation-test resamples.

    Returns:
        The run directory.
    """
    from memlab.embed import HashingEmbedder
    from memlab.eval.experiment import run_experiment

    result = run_experiment(
        Path(dataset),
        list(pipelines),
        out=Path(out),
        embedder=HashingEmbedder(dim=256) if embedder is None else embedder,
        n_resamples=n_resamples,
        progress=False,
        write_report=False,
    )
    if result.out is None:
        raise ValueError(f"runs.py: the demo run was not written to {out}")
    return result.out


def queries_by_metric(run: Run, pipeline: str, metric: str) -> pl.DataFrame:
    """``qid, value`` of one pipeline and metric, worst first (ties by ``qid``).

    Worst is lowest for a higher-is-better metric and highest for a lower-is-better one
    (``tokens@10``, ``stale@10``), as the metric's registration says.
    """
    pq = run.tables.get("per_query", pl.DataFrame())
    if pq.height == 0:
        return pl.DataFrame(schema={"qid": pl.String, "value": pl.Float64})
    return (
        pq.filter((pl.col("pipeline") == pipeline) & (pl.col("metric") == metric))
        .select("qid", "value")
        .sort(["value", "qid"], descending=[not higher_is_better(metric), False])
    )


def protocol_text(run: Run) -> str:
    """The run's protocol sentence: query count and how learned stages were fitted
    (:func:`memlab.eval.protocol.describe_run`)."""
    from memlab.eval.protocol import describe_run

    return describe_run(run.manifest)


def query_count(run: Run) -> int | None:
    """How many queries the run scored (``None`` when its manifest does not say)."""
    from memlab.eval.protocol import run_query_count

    return run_query_count(run.manifest)


def fit_like_run(run: Run, pipeline: Pipeline, replayer: Any) -> int:
    """Fit the learned stages of ``pipeline`` as the run did.

    A run with a ``protocol`` block cross-fitted them over folds
    (:func:`memlab.eval.experiment.cross_fit_learned_stages` with the run's folds, group key
    and seed): the learned steps of ``pipeline`` are replaced by their cross-fitted copies, so
    each query is answered out of fold. An older run held out a share of the queries
    (``held_out_split``): the stages are fitted on its training split. Either way they are
    fitted on the labels the run scored with (its manifest's ``judging``: qrels source and
    aggregation). Returns how many stages need fitting (0: nothing was replayed).
    """
    from memlab.eval.experiment import (
        cross_fit_learned_stages,
        fit_learned_stages,
        learnable_stages,
        split_queries,
    )
    from memlab.eval.protocol import EvalProtocol

    n = len(learnable_stages(pipeline))
    if n == 0:
        return 0
    judging = run.manifest.get("judging")
    if isinstance(judging, dict):  # the labels the run scored with (and fitted on)
        replayer.qrels_source = str(judging.get("qrels_source", "human"))
        replayer.aggregate = str(judging.get("aggregate", "majority"))
    seed = int(run.manifest.get("seed", 0))
    proto = run.manifest.get("protocol")
    if isinstance(proto, dict):
        fold_of = EvalProtocol(
            folds=int(proto.get("folds", 5)), group_by=str(proto.get("group_by", "query")),
            seed=int(proto.get("seed", seed)),
        ).assign(replayer.dataset.queries)
        pipeline.steps = cross_fit_learned_stages(replayer, pipeline, fold_of).steps
        return n
    split = run.manifest.get("held_out_split") or {}
    train, _ = split_queries(
        replayer.dataset.queries, test_fraction=float(split.get("test_fraction", 0.5)), seed=seed
    )
    fit_learned_stages(replayer, pipeline, train)
    return n
