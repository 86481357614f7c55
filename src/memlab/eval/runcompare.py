"""``memlab compare RUN_A RUN_B``: paired tests between two finished runs.

Two runs of the same dataset (say, before and after a change to a stage) are compared query by
query. Pipelines are paired by name when the runs share names (``A:rrf`` against ``B:rrf``);
otherwise every pipeline of B is compared with A's baseline. The per-query values come from each
run's ``per_query.parquet``; only queries scored in both runs are paired, and the result says
how many queries each run scored so that a change of population is never silent.

Each pair gets the paired tests of :func:`memlab.eval.stats.compare` (wins, losses, ties, the
run's tests), with p-values corrected across every (pair, metric) row; per-tag tests of the
headline metric follow when the runs carry ``queries.parquet``.

``--out DIR`` writes the tables as CSV (:func:`write_comparison`): ``comparison.csv``,
``per_query.csv`` and, with per-tag tests, ``comparison_by_tag.csv``, published atomically
as a memlab result of kind ``compare``. ``DIR`` follows memlab's rule for result directories
(:func:`memlab.io.check_output_dir`): new, empty, or a comparison memlab wrote (whose other
files are kept); a run, an export, a sweep, a dataset or any other memlab directory is refused
before anything is computed (:func:`check_compare_dir`), and an export never replaces a
comparison either.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from memlab.eval.experiment import ExperimentResult
from memlab.eval.metrics import canonical_metric, main_metric_of
from memlab.eval.protocol import describe_run
from memlab.eval.stats import compare, compare_by_tag, correct_pvalues, wins_losses
from memlab.io import atomic_directory, check_output_dir

COMPARE_KIND = "compare"
"""The kind of a comparison's output directory (:func:`memlab.io.output_kind`)."""

COMPARE_KINDS = (COMPARE_KIND,)
"""Kinds of directory a comparison replaces: a comparison only (one written when comparisons
and exports shared the marker kind ``result`` is recognised by its entries)."""


@dataclass
class RunComparison:
    """What :func:`compare_runs` found.

    Attributes:
        pairs: ``(A pipeline, B pipeline)`` pairs compared (shown as ``A:name`` / ``B:name``).
        comparison: One row per (pair, metric), as :func:`memlab.eval.stats.compare`, with
            ``baseline`` (the A side) beside ``pipeline`` (the B side).
        tag_comparison: Per-tag tests of ``metric`` (empty without ``queries.parquet``).
        per_query: ``pipeline, qid, baseline_value, value, delta, outcome`` of ``metric``,
            sorted by the size of the change.
        metric: The headline metric of the per-tag tests and the per-query table.
        notes: Population differences and what could not be compared.
        protocols: Each run's protocol sentence (query count and how learned stages were
            fitted; :func:`memlab.eval.protocol.describe_run`), A then B.
    """

    pairs: list[tuple[str, str]]
    comparison: pl.DataFrame
    tag_comparison: pl.DataFrame
    per_query: pl.DataFrame
    metric: str
    notes: list[str] = field(default_factory=list)
    protocols: tuple[str, str] = ("", "")


def _pairs(a: ExperimentResult, b: ExperimentResult, pipelines: Sequence[str] | None) -> list:
    common = [n for n in a.pipelines if n in b.pipelines]
    if pipelines:
        unknown = [n for n in pipelines if n not in common]
        if unknown:
            raise ValueError(
                f"pipelines {unknown} are not in both runs; common pipelines: "
                f"{', '.join(common) or 'none'}"
            )
        return [(n, n) for n in pipelines]
    if common:
        return [(n, n) for n in common]
    base = a.baseline or a.pipelines[0]
    return [(base, n) for n in b.pipelines]


def compare_runs(
    run_a: str | Path | ExperimentResult,
    run_b: str | Path | ExperimentResult,
    *,
    pipelines: Sequence[str] | None = None,
    metrics: Sequence[str] | None = None,
    metric: str | None = None,
    tests: Sequence[str] = ("t", "wilcoxon", "permutation"),
    correction: str = "holm",
    alpha: float = 0.05,
    seed: int = 0,
    n_resamples: int = 10_000,
) -> RunComparison:
    """Compare two finished runs (see the module docstring).

    Args:
        run_a: The reference run (a directory or a loaded result).
        run_b: The run compared with it.
        pipelines: Pipeline names present in both runs (default: every shared name).
        metrics: Metrics to test (default: those both sides have).
        metric: Headline metric for the per-tag tests and the per-query table (default: the
            first relevance metric).
        tests: Paired tests.
        correction: Correction across every (pair, metric) row.
        alpha: Level of ``significant``.
        seed: Seed of the permutation test.
        n_resamples: Permutation resamples.

    Raises:
        ValueError: If a run cannot be read, has no per-query values, or the runs share no
            queries or metrics.
    """
    from memlab.eval.runfiles import load_run

    a = run_a if isinstance(run_a, ExperimentResult) else load_run(run_a)
    b = run_b if isinstance(run_b, ExperimentResult) else load_run(run_b)
    for label, run in (("A", a), ("B", b)):
        if run.per_query.height == 0:
            raise ValueError(f"run {label} ({run.out}): no per_query.parquet to compare")
    # Old runs name metrics by their former names (R_any@10): compare under the current ones.
    a_pq, b_pq = _canonical_metrics(a.per_query), _canonical_metrics(b.per_query)
    metrics = [_canonical(m) for m in metrics] if metrics else metrics
    metric = _canonical(metric) if metric else metric
    pairs = _pairs(a, b, pipelines)
    notes: list[str] = []
    protocols = (describe_run(a.manifest), describe_run(b.manifest))
    if protocols[0] != protocols[1]:
        notes.append(f"the runs' protocols differ: A: {protocols[0]}; B: {protocols[1]}")
    notes += _same_queries(a.manifest, b.manifest)
    parts, tag_parts, pq_parts = [], [], []
    for name_a, name_b in pairs:
        left = a_pq.filter(pl.col("pipeline") == name_a)
        right = b_pq.filter(pl.col("pipeline") == name_b)
        shared = sorted(set(left["metric"].unique()) & set(right["metric"].unique()))
        if not shared:
            raise ValueError(
                f"A:{name_a} and B:{name_b} share no metric (A: "
                f"{', '.join(sorted(left['metric'].unique())) or 'none'}; B: "
                f"{', '.join(sorted(right['metric'].unique())) or 'none'})"
            )
        wanted = list(metrics) if metrics else shared
        missing = [m for m in wanted if m not in shared]
        if missing:
            raise ValueError(f"metrics {missing} are not scored in both runs for {name_a}")
        if metric is not None and metric not in wanted:
            raise ValueError(
                f"--metric {metric}: not scored in both runs for {name_a} (compared: "
                f"{', '.join(wanted)})"
            )
        head = metric or main_metric_of(wanted)
        for m in wanted:
            qa = set(left.filter(pl.col("metric") == m)["qid"])
            qb = set(right.filter(pl.col("metric") == m)["qid"])
            if qa != qb:
                notes.append(
                    f"{m}: A:{name_a} scored {len(qa)} queries, B:{name_b} {len(qb)}; "
                    f"compared on the {len(qa & qb)} scored in both"
                )
            if not qa & qb:
                raise ValueError(f"{m}: the runs share no scored query for {name_a}")
        tag_a, tag_b = f"A:{name_a}", f"B:{name_b}"
        frame = pl.concat(
            [
                left.with_columns(pl.lit(tag_a).alias("pipeline")),
                right.with_columns(pl.lit(tag_b).alias("pipeline")),
            ]
        ).filter(pl.col("metric").is_in(wanted))
        comp = compare(
            frame,
            baseline=tag_a,
            metrics=wanted,
            tests=tests,
            correction="none",
            alpha=alpha,
            seed=seed,
            n_resamples=n_resamples,
        )
        parts.append(comp.with_columns(pl.lit(tag_a).alias("baseline")))
        pq_parts.append(wins_losses(frame, tag_a, head))
        tags = a.queries if a.queries.height else b.queries
        if tags.height and "tags" in tags.columns:
            tag_comp = compare_by_tag(
                frame,
                tags.select("qid", "tags"),
                baseline=tag_a,
                metric=head,
                tests=tests,
                correction="none",
                alpha=alpha,
                seed=seed,
                n_resamples=n_resamples,
            )
            tag_parts.append(tag_comp.with_columns(pl.lit(tag_a).alias("baseline")))
    comparison = _recorrect(pl.concat(parts), tests, correction, alpha)
    tag_comparison = (
        _recorrect(pl.concat(tag_parts), tests, correction, alpha) if tag_parts else pl.DataFrame()
    )
    if not tag_parts:
        notes.append("no per-tag tests: neither run has queries.parquet")
    per_query = pl.concat(pq_parts).sort(
        pl.col("delta").abs(), "pipeline", "qid", descending=[True, False, False]
    )
    head = metric or main_metric_of(list(comparison["metric"].unique(maintain_order=True)))
    return RunComparison(
        pairs=pairs,
        comparison=comparison,
        tag_comparison=tag_comparison,
        per_query=per_query,
        metric=head,
        notes=notes,
        protocols=protocols,
    )


def _recorrect(
    frame: pl.DataFrame, tests: Sequence[str], correction: str, alpha: float
) -> pl.DataFrame:
    """Correct each test's raw p-values across all rows of ``frame``."""
    out = frame.with_columns(
        pl.Series(
            f"p_{t}_adj",
            correct_pvalues(frame.get_column(f"p_{t}").to_numpy(), correction),
            dtype=pl.Float64,
        )
        for t in tests
    )
    first = list(tests)[0]
    cols = ["baseline", *[c for c in out.columns if c != "baseline"]]
    return out.with_columns(
        significant=pl.col(f"p_{first}_adj").fill_nan(None).lt(alpha).fill_null(False)
    ).select(cols)


def _canonical(name: str) -> str:
    """The current name of a metric (``R_any@10`` → ``Success@10``); unparsed names as given."""
    try:
        return canonical_metric(name)
    except (TypeError, ValueError):
        return name


def _canonical_metrics(per_query: pl.DataFrame) -> pl.DataFrame:
    """``per_query`` with its ``metric`` column under current names."""
    if "metric" not in per_query.columns:
        return per_query
    names = {m: _canonical(m) for m in per_query["metric"].unique().to_list()}
    if all(k == v for k, v in names.items()):
        return per_query
    return per_query.with_columns(pl.col("metric").replace_strict(names, return_dtype=pl.String))


def check_compare_dir(out: str | Path, *, what: str = "--out") -> Path:
    """Refuse a comparison's output directory before any work (see the module docstring): a
    run (the runs compared included) is refused as a directory of another kind, a directory
    holding one as a directory memlab did not write.

    Returns:
        The absolute path.

    Raises:
        memlab.io.OutputDirError: Naming ``out`` and what is wrong, in one line.
    """
    return check_output_dir(out, what=what, kinds=COMPARE_KINDS)


def write_comparison(res: RunComparison, out: str | Path, *, what: str = "--out") -> Path:
    """Write ``res``'s tables as CSV into ``out`` atomically, as a result of kind
    :data:`COMPARE_KIND` (see the module docstring).

    Returns:
        The absolute path written.

    Raises:
        memlab.io.OutputDirError: ``out`` is refused (:func:`check_compare_dir`; nothing was
            written).
    """
    target = check_compare_dir(out, what=what)
    with atomic_directory(target, kind=COMPARE_KIND, replaces=COMPARE_KINDS) as tmp:
        res.comparison.write_csv(tmp / "comparison.csv")
        if res.tag_comparison.height:
            res.tag_comparison.write_csv(tmp / "comparison_by_tag.csv")
        res.per_query.write_csv(tmp / "per_query.csv")
    return target.resolve()


def _same_queries(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """Refuse two runs evaluated on different queries (a paired test pairs each query with
    itself); a note when their datasets differ otherwise (other memories, another name).

    Raises:
        ValueError: The manifests' ``queries.jsonl`` digests differ.
    """
    da, db = a.get("dataset") or {}, b.get("dataset") or {}
    sa, sb = da.get("sha256") or {}, db.get("sha256") or {}
    qa, qb = sa.get("queries.jsonl"), sb.get("queries.jsonl")
    names = f"A: {da.get('name', '?')!s}, B: {db.get('name', '?')!s}"
    if qa is not None and qb is not None and qa != qb:
        raise ValueError(
            f"the runs were evaluated on different queries ({names}: their queries.jsonl "
            "differ); a paired comparison needs the same queries"
        )
    if sa and sb and sa != sb:
        changed = sorted(k for k in set(sa) | set(sb) if sa.get(k) != sb.get(k))
        return [f"the runs' datasets differ in {', '.join(changed)} ({names})"]
    if da.get("name") != db.get("name"):
        return [f"the runs' datasets have different names ({names})"]
    return []
