"""``report.md`` and its charts (altair, saved as PNG and SVG through vl-convert)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import altair as alt
import polars as pl

from memlab.eval.metrics import higher_is_better, main_metric_of
from memlab.eval.stats import COMPARISON_KEYS, TAG_COMPARISON_KEYS, comparison_view

if TYPE_CHECKING:
    from memlab.eval.experiment import ExperimentResult


def save_chart(chart: alt.TopLevelMixin, base: Path) -> list[str]:
    """Save ``chart`` as ``base.png`` and ``base.svg``; return the file names."""
    import vl_convert as vlc

    spec = chart.to_json()
    base.with_suffix(".svg").write_text(vlc.vegalite_to_svg(spec), encoding="utf-8")
    base.with_suffix(".png").write_bytes(vlc.vegalite_to_png(spec, scale=2))
    return [base.with_suffix(".png").name, base.with_suffix(".svg").name]


def metrics_chart(per_query: pl.DataFrame, metrics: list[str]) -> alt.Chart:
    """Mean of each relevance metric per pipeline (grouped bars)."""
    data = (
        per_query.filter(pl.col("metric").is_in(metrics))
        .group_by("pipeline", "metric")
        .agg(pl.col("value").mean().alias("mean"))
        .sort("pipeline", "metric")
    )
    return (
        alt.Chart(data)
        .mark_bar()
        .encode(
            x=alt.X("pipeline:N", title=None),
            y=alt.Y("mean:Q", title="mean over queries"),
            color=alt.Color("pipeline:N", legend=None),
            column=alt.Column("metric:N", title=None),
            tooltip=["pipeline", "metric", alt.Tooltip("mean:Q", format=".4f")],
        )
        .properties(width=110, height=220)
    )


def tag_chart(per_tag: pl.DataFrame, metric: str) -> alt.Chart:
    """Heat map of one metric per (pipeline, tag)."""
    data = per_tag.filter(pl.col("metric") == metric)
    return (
        alt.Chart(data)
        .mark_rect()
        .encode(
            x=alt.X("tag:N", title="query tag"),
            y=alt.Y("pipeline:N", title=None),
            color=alt.Color("mean:Q", title=metric, scale=alt.Scale(domain=[0, 1])),
            tooltip=["pipeline", "tag", alt.Tooltip("mean:Q", format=".3f"), "n"],
        )
        .properties(width=alt.Step(48), height=alt.Step(28))
    )


def latency_table(timings: pl.DataFrame) -> pl.DataFrame:
    """p50 / p95 milliseconds per (pipeline, stage)."""
    return (
        timings.group_by("pipeline", "stage")
        .agg(
            (pl.col("seconds").quantile(0.5, interpolation="linear") * 1000).alias("p50_ms"),
            (pl.col("seconds").quantile(0.95, interpolation="linear") * 1000).alias("p95_ms"),
            pl.len().alias("n"),
        )
        .sort("pipeline", "stage")
    )


def markdown_table(frame: pl.DataFrame, *, floats: str = "{:.4f}") -> str:
    """A GitHub-flavoured markdown table of ``frame``."""
    if frame.height == 0:
        return "_(empty)_\n"
    cols = frame.columns

    def fmt(v: Any) -> str:
        if v is None:
            return ""
        if isinstance(v, float):
            if v != v:
                return "nan"
            return floats.format(v)
        if isinstance(v, list):
            return ", ".join(map(str, v))
        return str(v).replace("|", "\\|")

    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in frame.iter_rows():
        lines.append("| " + " | ".join(fmt(v) for v in row) + " |")
    return "\n".join(lines) + "\n"


def judging_lines(manifest: dict[str, Any]) -> list[str]:
    """The report's "Judgments" section: coverage (judged@10), judges, agreement, warnings.

    On a pooled dataset (``judgments.jsonl``) a pipeline whose judged@10 is below the
    manifest's ``warn_below`` (0.8) is named in a warning: its standard metrics count every
    unjudged memory as not relevant, so read its condensed-list metrics and bpref instead.
    """
    info = manifest.get("judgments")
    if not info:
        return []
    coverage = info.get("judged@10", {})
    lines = ["## Judgments", ""]
    if info.get("pooled"):
        judges = ", ".join(info.get("judges", [])) or "none"
        lines.append(
            f"Qrels from `judgments.jsonl` ({info['qrels_source']}): {info['n']} judgments "
            f"of {info['queries']} queries by {judges}."
        )
    else:
        lines.append("Qrels: the dataset's own labels (complete by construction).")
    lines.append("")
    if coverage:
        lines.append(
            "judged@10 (share of the top 10 with a judgment): "
            + ", ".join(
                f"`{name}` {'n/a' if v is None else format(v, '.3f')}"
                for name, v in coverage.items()
            )
        )
        lines.append("")
    low = [
        name
        for name, v in coverage.items()
        if info.get("pooled") and v is not None and v < info.get("warn_below", 0.8)
    ]
    if low:
        lines += [
            f"> **Warning:** judged@10 is below {info.get('warn_below', 0.8)} for "
            + ", ".join(f"`{n}`" for n in low)
            + ": unjudged memories count as not relevant in the standard metrics. Compare "
            "them on the condensed-list metrics (cnDCG, cMAP) and bpref, or judge more "
            "(`memlab judge pool`).",
            "",
        ]
    rows = info.get("agreement") or []
    if rows:
        lines += ["Agreement between judges (Cohen's kappa on the pairs both judged):", ""]
        lines.append(markdown_table(pl.DataFrame(rows)))
        lines.append("")
    return lines


def write_report(result: ExperimentResult, out_dir: Path) -> Path:
    """Render ``report.md`` (and charts) for an experiment into ``out_dir``."""
    out_dir = Path(out_dir)
    man = result.manifest
    metrics = list(man["metrics"])
    names = list(result.metrics)
    rel_metrics = [m for m in metrics if m.split("@")[0] in ("R_all", "R_any", "R_frac", "nDCG")]
    lines = [
        f"# memlab report: {man['dataset']['name']}",
        "",
        f"- dataset: `{man['dataset']['path']}` — {man['dataset']['memories']} memories, "
        f"{man['dataset']['queries']} queries ({man['dataset']['evaluated_queries']} evaluated)",
        f"- pipelines: {', '.join(f'`{n}`' for n in names)}; baseline `{man['baseline']}`",
        f"- embedder: `{man['embedder']}`; seed {man['seed']}; tests: {', '.join(man['tests'])}; "
        f"correction: {man['correction']}",
        f"- excluded from relevance metrics: {', '.join(man['exclude_tags']) or 'none'}",
        f"- commit: `{man.get('git_commit')}`",
        "",
        "## Aggregate metrics",
        "",
    ]
    agg_rows = [{"pipeline": n, **result.metrics[n]} for n in names]
    agg = pl.DataFrame(agg_rows).select(["pipeline", *[m for m in metrics if m in agg_rows[0]]])
    lines.append(markdown_table(agg))
    if rel_metrics:
        files = save_chart(metrics_chart(result.per_query, rel_metrics), out_dir / "metrics")
        lines += ["", f"![metrics]({files[0]}) ([svg]({files[1]}))", ""]
    lines += judging_lines(man)
    lower = [m for m in metrics if not higher_is_better(m)]
    if lower:
        lines += [f"Lower is better for {', '.join(lower)}; wins and losses read so.", ""]
    lines += [
        "## Paired comparison with the baseline",
        "",
        "Wins/losses count queries where the pipeline scores above/below the baseline. "
        "Adjusted p-values are corrected across pipelines × metrics.",
        "",
    ]
    lines.append(markdown_table(comparison_view(result.comparison, COMPARISON_KEYS)))
    lines += ["", "## By query tag", ""]
    main_metric = main_metric_of(metrics)
    tag_view = (
        result.per_tag.filter(pl.col("metric") == main_metric)
        .pivot(on="pipeline", index="tag", values="mean")
        .sort("tag")
    )
    lines.append(f"{main_metric} per tag:\n")
    lines.append(markdown_table(tag_view))
    if result.per_tag.height:
        files = save_chart(tag_chart(result.per_tag, main_metric), out_dir / "tags")
        lines += ["", f"![tags]({files[0]}) ([svg]({files[1]}))", ""]
    tag_comp = result.tag_comparison
    if tag_comp.height:
        lines += [
            f"Paired comparison with the baseline on {main_metric}, within each tag "
            "(adjusted p-values corrected across pipelines × tags):",
            "",
        ]
        lines.append(markdown_table(comparison_view(tag_comp, TAG_COMPARISON_KEYS)))
        lines.append("")
    lines += ["## Latency per stage (ms, this run's machine)", ""]
    lines.append(markdown_table(latency_table(result.timings), floats="{:.2f}"))
    lines += [
        "",
        "## Files",
        "",
        "`metrics.json`, `per_query.parquet`, `rankings.parquet`, `comparison.parquet`, "
        "`comparison_by_tag.parquet`, `per_tag.parquet`, `timings.parquet`, `manifest.json`.",
        "",
        "<details><summary>Pipeline configurations</summary>",
        "",
        "```json",
        json.dumps(man["pipelines"], indent=2, sort_keys=True),
        "```",
        "</details>",
        "",
    ]
    path = out_dir / "report.md"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path
