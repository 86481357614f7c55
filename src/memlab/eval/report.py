"""``report.md`` and its charts (altair, saved as PNG and SVG through vl-convert)."""

from __future__ import annotations

import json
import math
import re
import unicodedata
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from memlab.eval.metrics import higher_is_better, main_metric_of
from memlab.eval.stats import (
    COMPARISON_KEYS,
    TAG_COMPARISON_KEYS,
    adjustment_phrase,
    comparison_view,
)

if TYPE_CHECKING:
    import altair as alt

    from memlab.eval.experiment import ExperimentResult


_SVG_ID = re.compile(r'\bid="([A-Za-z_-]+?)(\d+)"')


def stable_svg_ids(svg: str) -> str:
    """``svg`` with its numbered element ids (``gradient_3``, ``clip7``) renumbered from 0 in
    order of appearance, each prefix on its own, references (``url(#…)``, ``href="#…"``)
    included.

    Vega numbers them with a counter that lives as long as the process: the same chart rendered
    second in a process, or in a worker that rendered another chart before, would otherwise
    come out with other bytes.
    """
    renamed: dict[str, str] = {}
    counts: dict[str, int] = {}
    for match in _SVG_ID.finditer(svg):
        old, prefix = match.group(1) + match.group(2), match.group(1)
        if old not in renamed:
            renamed[old] = f"{prefix}{counts.get(prefix, 0)}"
            counts[prefix] = counts.get(prefix, 0) + 1
    changed = {old: new for old, new in renamed.items() if old != new}
    if not changed:
        return svg
    names = "|".join(map(re.escape, changed))  # one pass: swapped names stay apart
    pattern = re.compile(rf'(?<=id=")({names})(?=")|(?<=#)({names})(?=[)"])')
    return pattern.sub(lambda m: changed[m.group(1) or m.group(2)], svg)


def _escape_control(text: str) -> str:
    """``text`` with each control character (Unicode categories Cc and Cs) written as its
    escape (``\\x00``, ``\\ud800``): the chart renderer aborts the process on some of them, and
    the escape keeps two names that differ only there apart."""
    if all(unicodedata.category(c) not in _CONTROL for c in text):
        return text
    return "".join(
        c if unicodedata.category(c) not in _CONTROL else repr(c)[1:-1] for c in text
    )


_CONTROL = ("Cc", "Cs")


def sanitize_spec(spec: str) -> str:
    """A Vega-Lite spec (JSON) whose every string, keys included, has its control characters
    escaped (:func:`_escape_control`), and whose every number that is not finite (``NaN``,
    ``Infinity``: a metric no query of a split scored) is ``null``, so that no pipeline name,
    tag, metric or degenerate value can crash the renderer (its parser accepts only strict
    JSON; Vega-Lite leaves a ``null`` point out). Keys and values are rewritten alike: a field
    stays the field its data carries."""

    def clean(value: Any) -> Any:
        if isinstance(value, str):
            return _escape_control(value)
        if isinstance(value, float) and not math.isfinite(value):
            return None
        if isinstance(value, list):
            return [clean(v) for v in value]
        if isinstance(value, dict):
            return {_escape_control(k): clean(v) for k, v in value.items()}
        return value

    return json.dumps(clean(json.loads(spec)), allow_nan=False)


_WARM: list[bool] = [False]
"""Whether this process has rendered a chart (vl-convert's runtime is running)."""

_WARM_UP_SPEC = json.dumps(
    {
        "$schema": "https://vega.github.io/schema/vega-lite/v5.json",
        "data": {"values": [{"x": 0}]},
        "mark": "point",
        "encoding": {"x": {"field": "x", "type": "quantitative"}},
    }
)


def warm_renderer() -> None:
    """Import altair and start vl-convert's JavaScript runtime here (most of a second, on the
    first chart a process renders) with a one-point chart, so that the report's charts then
    take only their own time. A run calls it while it waits for its workers
    (:meth:`~memlab.eval.executor.Executor.map`'s ``meanwhile``)."""
    import altair  # noqa: F401 - the charts' specs are built with it

    render_specs({"warm-up": _WARM_UP_SPEC})


def renderer_is_warm() -> bool:
    """Whether this process has rendered a chart already (:func:`warm_renderer`): its charts
    are then quicker to render here than on a worker that starts vl-convert first."""
    return _WARM[0]


def render_specs(specs: Mapping[str, str]) -> dict[str, tuple[str, bytes]]:
    """SVG text and PNG bytes of each Vega-Lite spec (JSON), by the same key.

    The PNG is rasterised from the SVG (the bytes vl-convert renders from the spec, without
    running Vega twice), whose ids are numbered per chart (:func:`stable_svg_ids`), so that a
    chart's bytes do not depend on what the process rendered before. A module-level function
    of plain data, so that an idle worker process can render a report's charts while this one
    runs its paired tests (vl-convert holds the GIL, and its first call starts a JavaScript
    runtime: most of a second). Control characters in any text of a spec are escaped first
    (:func:`sanitize_spec`).
    """
    import vl_convert as vlc

    out: dict[str, tuple[str, bytes]] = {}
    for name, spec in specs.items():
        svg = stable_svg_ids(vlc.vegalite_to_svg(sanitize_spec(spec)))
        out[name] = (svg, vlc.svg_to_png(svg, scale=2))
        _WARM[0] = True
    return out


def write_rendered(rendered: tuple[str, bytes], base: Path) -> list[str]:
    """Write a chart's ``(svg, png)`` (:func:`render_specs`) as ``base.svg`` and ``base.png``;
    return the file names."""
    svg, png = rendered
    base.with_suffix(".svg").write_text(svg, encoding="utf-8")
    base.with_suffix(".png").write_bytes(png)
    return [base.with_suffix(".png").name, base.with_suffix(".svg").name]


def save_chart(chart: alt.TopLevelMixin, base: Path) -> list[str]:
    """Save ``chart`` as ``base.png`` and ``base.svg``; return the file names.

    The spec is not validated here: every chart this module builds is validated against the
    Vega-Lite schema in the tests.
    """
    return write_rendered(render_specs({"chart": chart.to_json(validate=False)})["chart"], base)


def report_specs(
    per_query: pl.DataFrame, per_tag: pl.DataFrame, metrics: Sequence[str]
) -> dict[str, str]:
    """The Vega-Lite specs of the charts :func:`write_report` draws, by file stem: ``metrics``
    (the relevance metrics, if any were asked for) and ``tags`` (the main metric per query
    tag, if the queries have tags). They read only the per-query and per-tag tables, so they
    can be rendered (:func:`render_specs`) before the paired tests are done. A metric that
    scored no query (its population is empty on the dataset) is left out of both, as it is
    of the report's headline."""
    if "metric" in per_query.columns:
        scored = set(per_query["metric"].unique().to_list())
        metrics = [m for m in metrics if m in scored]
    rel_metrics = [m for m in metrics if m.split("@")[0] in ("R_all", "Success", "Recall", "nDCG")]
    charts: dict[str, alt.TopLevelMixin] = {}
    if rel_metrics:
        charts["metrics"] = metrics_chart(per_query, rel_metrics)
    if per_tag.height and metrics:
        charts["tags"] = tag_chart(per_tag, main_metric_of(list(metrics)))
    return {stem: chart.to_json(validate=False) for stem, chart in charts.items()}


def render_report_charts(
    per_query: pl.DataFrame, per_tag: pl.DataFrame, metrics: Sequence[str]
) -> dict[str, tuple[str, bytes]]:
    """:func:`render_specs` of :func:`report_specs`: the report's charts built and rendered in
    one call, which an idle worker can make (it loads altair and vl-convert, this process
    neither)."""
    return render_specs(report_specs(per_query, per_tag, metrics))


def metric_means(per_query: pl.DataFrame, metrics: list[str]) -> pl.DataFrame:
    """Mean, count and a normal 95% interval of each metric per pipeline.

    The interval is ``mean ± 1.96 · sd / sqrt(n)`` over queries (computed here, not by the
    chart library, so the charts are deterministic).
    """
    return (
        per_query.filter(pl.col("metric").is_in(metrics))
        .group_by("pipeline", "metric")
        .agg(
            pl.col("value").mean().alias("mean"),
            pl.col("value").std().fill_null(0.0).alias("sd"),
            pl.len().alias("n"),
        )
        .with_columns(
            half=1.96 * pl.col("sd") / pl.col("n").cast(pl.Float64).sqrt(),
        )
        .with_columns(
            lo=pl.col("mean") - pl.col("half"),
            hi=pl.col("mean") + pl.col("half"),
        )
        .sort("pipeline", "metric")
    )


def metrics_chart(per_query: pl.DataFrame, metrics: list[str]) -> alt.FacetChart:
    """Mean of each relevance metric per pipeline with 95% intervals (grouped bars)."""
    import altair as alt  # on first use: a process that renders no chart never loads it

    data = metric_means(per_query, metrics)
    base = alt.Chart(data)
    bars = base.mark_bar().encode(
        x=alt.X("pipeline:N", title=None, axis=alt.Axis(labelAngle=-40, labelFontSize=12)),
        y=alt.Y(
            "mean:Q",
            title="mean over queries (95% CI)",
            scale=alt.Scale(domain=[0, 1], clamp=True),
        ),
        color=alt.Color("pipeline:N", legend=alt.Legend(title="pipeline", labelFontSize=12)),
        tooltip=[
            "pipeline",
            "metric",
            alt.Tooltip("mean:Q", format=".4f"),
            alt.Tooltip("lo:Q", format=".4f"),
            alt.Tooltip("hi:Q", format=".4f"),
            "n",
        ],
    )
    rules = base.mark_rule(color="black").encode(
        x="pipeline:N", y="lo:Q", y2="hi:Q"
    )
    return (
        alt.layer(bars, rules, data=data)
        .properties(width=200, height=260)
        .facet(column=alt.Column("metric:N", title=None, header=alt.Header(labelFontSize=14)))
        .configure_axis(labelFontSize=12, titleFontSize=13)
    )


def tag_chart(per_tag: pl.DataFrame, metric: str) -> alt.LayerChart:
    """Heat map of one metric per (pipeline, tag), each cell labelled with its mean; the tag
    axis names the number of queries of each tag."""
    import altair as alt

    data = per_tag.filter(pl.col("metric") == metric)
    counts = data.group_by("tag").agg(pl.col("n").max().alias("tag_n"))
    # A join keeps no row order: sorted, the chart's marks (and its SVG) come out the same in
    # every process.
    data = (
        data.join(counts, on="tag")
        .with_columns(
            (pl.col("tag") + " (n=" + pl.col("tag_n").cast(pl.String) + ")").alias("tag_label")
        )
        .sort("pipeline", "tag")
    )
    base = alt.Chart(data).encode(
        x=alt.X("tag_label:N", title="query tag (queries)", axis=alt.Axis(labelAngle=-40)),
        y=alt.Y("pipeline:N", title=None),
    )
    rect = base.mark_rect().encode(
        color=alt.Color("mean:Q", title=metric, scale=alt.Scale(domain=[0, 1])),
        tooltip=["pipeline", "tag", alt.Tooltip("mean:Q", format=".3f"), "n"],
    )
    text = base.mark_text(fontSize=11).encode(
        text=alt.Text("mean:Q", format=".2f"),
        color=alt.condition("datum.mean > 0.6", alt.value("white"), alt.value("black")),
    )
    return (
        alt.layer(rect, text)
        .properties(width=alt.Step(64), height=alt.Step(30))
        .configure_axis(labelFontSize=12, titleFontSize=13)
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


def format_pvalue(p: float | None) -> str:
    """A p-value in scientific notation with three significant digits (never ``0.0000``)."""
    if p is None or p != p:
        return "nan"
    return f"{p:.2e}"


def markdown_table(frame: pl.DataFrame, *, floats: str = "{:.4f}") -> str:
    """A GitHub-flavoured markdown table of ``frame``.

    Columns named ``p_…`` (p-values) print in scientific notation (:func:`format_pvalue`).
    """
    if frame.height == 0:
        return "_(empty)_\n"
    cols = frame.columns

    def fmt(v: Any, col: str = "") -> str:
        if v is None:
            return ""
        if isinstance(v, float):
            if col.startswith("p_"):
                return format_pvalue(v)
            if v != v:
                return "nan"
            return floats.format(v)
        if isinstance(v, list):
            return ", ".join(map(str, v))
        return str(v).replace("|", "\\|")

    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in frame.iter_rows():
        lines.append("| " + " | ".join(fmt(v, c) for v, c in zip(row, cols, strict=True)) + " |")
    return "\n".join(lines) + "\n"


def protocol_line(manifest: dict[str, Any]) -> str:
    """How many queries were scored and by which protocol (printed beside every table)."""
    from memlab.eval.protocol import describe_run

    excluded = ", ".join(manifest.get("exclude_tags") or []) or "none"
    return f"{describe_run(manifest)} (tags left out of relevance metrics: {excluded})"


def _lower_is_better(metric: str) -> bool:
    return not higher_is_better(metric)


def scored_metrics(result: ExperimentResult) -> list[str]:
    """The run's requested metrics that scored at least one query, in the manifest's order.

    A metric whose population is empty on the dataset (``R_all@10`` where no query has a
    relevant memory) has no aggregate; the headline and the paired comparison are chosen
    among the others, so that both name the same metric.
    """
    if not result.pipelines:
        return []
    present = result.metrics[result.pipelines[0]]
    return [m for m in result.manifest.get("metrics", []) if m in present]


def answer_lines(result: ExperimentResult) -> list[str]:
    """The report's opening: which pipeline is best on what, by how much, and how sure."""
    man = result.manifest
    metrics = scored_metrics(result)
    main_metric = main_metric_of(metrics) if metrics else None
    base = man.get("baseline")
    first_test = (man.get("tests") or ["t"])[0]
    correction = str(man.get("correction", "holm"))
    alpha = float(man.get("alpha", 0.05))
    lines: list[str] = []
    comp = result.comparison
    for i, m in enumerate(metrics):
        values = {n: result.metrics[n][m] for n in result.pipelines if m in result.metrics[n]}
        if not values:
            continue
        lower = _lower_is_better(m)
        best_value = min(values.values()) if lower else max(values.values())
        best = [n for n, v in values.items() if v == best_value]
        if len(best) == len(values) and len(values) > 1:
            if m == main_metric:  # the headline says so, rather than vanish
                lines.insert(0, f"- **Headline ({m})**: every pipeline scores {best_value:.4f}.")
            elif i:
                lines.append(f"- {m}: every pipeline scores {best_value:.4f}.")
            continue
        name = best[0]
        tie = f" (tied with {', '.join(f'`{n}`' for n in best[1:])})" if len(best) > 1 else ""
        what = "lowest" if lower else "best"
        text = f"{what} {m}: **`{name}`** at {best_value:.4f}{tie}"
        row = None
        if comp.height and name != base:
            sel = comp.filter((pl.col("pipeline") == name) & (pl.col("metric") == m))
            row = sel.row(0, named=True) if sel.height else None
        if row is not None:
            p = row.get(f"p_{first_test}_adj")
            sure = "significant" if row.get("significant") else "not significant"
            if p is None or p != p:  # one pair, or nothing to test: no p-value exists
                how = f"no {first_test}-test p-value on {row['n']} paired queries: {sure}"
            else:
                how = (
                    f"{adjustment_phrase(correction, title=True)} {first_test}-test p = "
                    f"{format_pvalue(p)}: "
                    f"{sure} at α = {alpha:g}"
                )
            text += (
                f", {row['delta']:+.4f} against the baseline `{base}` over {row['n']} paired "
                f"queries (wins {row['wins']} / losses {row['losses']}; {how})"
            )
        elif name == base:
            text += " (the baseline itself)"
        if m == main_metric:
            lines.insert(0, f"- **Headline ({m})**: {text[0].upper()}{text[1:]}.")
        else:
            lines.append(f"- {text[0].upper()}{text[1:]}.")
    lines.append(f"- Population: {protocol_line(man)}.")
    return lines


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


def write_report(
    result: ExperimentResult,
    out_dir: Path,
    rendered: Mapping[str, tuple[str, bytes]] | None = None,
) -> Path:
    """Render ``report.md`` (the answer, then the main tables) and ``appendix.md`` (the long
    tables) with their charts into ``out_dir``; ``rendered``: the charts of
    :func:`report_specs` already rendered (:func:`render_specs`), else they are rendered here."""
    out_dir = Path(out_dir)
    man = result.manifest
    metrics = list(man["metrics"])
    names = list(result.metrics)
    protocol = protocol_line(man)
    lines = [
        f"# memlab report: {man['dataset']['name']}",
        "",
        "## Answer",
        "",
        *answer_lines(result),
        "",
        "## Setup",
        "",
        f"- dataset: `{man['dataset']['path']}` — {man['dataset']['memories']} memories, "
        f"{man['dataset']['queries']} queries ({man['dataset']['evaluated_queries']} evaluated)",
        f"- pipelines: {', '.join(f'`{n}`' for n in names)}; baseline `{man['baseline']}`",
        f"- embedder: `{man['embedder']}`; seed {man['seed']}; tests: {', '.join(man['tests'])}; "
        f"correction: {man['correction']}; α = {man.get('alpha', 0.05)}",
        f"- excluded from relevance metrics: {', '.join(man['exclude_tags']) or 'none'}",
        f"- replay: {json.dumps(man.get('replay', {}), sort_keys=True)}",
        f"- commit: `{man.get('git_commit')}`",
        "",
        "## Aggregate metrics",
        "",
        f"{protocol}.",
        "",
    ]
    agg_rows = [{"pipeline": n, **result.metrics[n]} for n in names]
    agg = pl.DataFrame(agg_rows).select(["pipeline", *[m for m in metrics if m in agg_rows[0]]])
    lines.append(markdown_table(agg))
    if rendered is None:
        rendered = render_report_charts(result.per_query, result.per_tag, metrics)
    if "metrics" in rendered:
        files = write_rendered(rendered["metrics"], out_dir / "metrics")
        lines += ["", f"![metrics]({files[0]}) ([svg]({files[1]}))", ""]
    scored = scored_metrics(result)
    main_metric = main_metric_of(scored or metrics)
    lines += judging_lines(man)
    lower = [m for m in metrics if not higher_is_better(m)]
    if lower:
        lines += [f"Lower is better for {', '.join(lower)}; wins and losses read so.", ""]
    lines += [
        f"## Paired comparison with the baseline on {main_metric}",
        "",
        f"{protocol}. Wins/losses count queries where the pipeline scores above/below the "
        "baseline. Adjusted p-values are corrected across pipelines × metrics; every metric's "
        "comparison is in [appendix.md](appendix.md).",
        "",
    ]
    comp = comparison_view(result.comparison, (*COMPARISON_KEYS, "n"))
    if comp.height:
        comp = comp.filter(pl.col("metric") == main_metric)
    lines.append(markdown_table(comp))
    lines += ["", "## By query tag", ""]
    if result.per_tag.height:
        counts = (
            result.per_tag.filter(pl.col("metric") == main_metric)
            .group_by("tag")
            .agg(pl.col("n").max().alias("queries"))
        )
        tag_view = (
            result.per_tag.filter(pl.col("metric") == main_metric)
            .pivot(on="pipeline", index="tag", values="mean")
            .join(counts, on="tag")
            .sort("tag")
        )
        lines.append(
            f"{protocol}. {main_metric} per tag (`queries`: how many queries carry the tag):\n"
        )
        lines.append(markdown_table(tag_view))
        files = write_rendered(rendered["tags"], out_dir / "tags")
        lines += ["", f"![tags]({files[0]}) ([svg]({files[1]}))", ""]
    else:
        lines.append("_(no query tags)_\n")
    lines += [
        "## Files",
        "",
        "`metrics.json`, `per_query.parquet`, `rankings.parquet`, `comparison.parquet`, "
        "`comparison_by_tag.parquet`, `per_tag.parquet`, `timings.parquet`, `qrels.parquet`, "
        "`queries.parquet`, `manifest.json`; the long tables are in `appendix.md`. "
        "`memlab export` writes TREC runs, qrels, CSV and a LaTeX table.",
        "",
    ]
    appendix = [
        f"# Appendix: {man['dataset']['name']}",
        "",
        f"Every table below: {protocol}.",
        "",
        "## Paired comparison with the baseline, every metric",
        "",
        f"{protocol}.",
        "",
        markdown_table(comparison_view(result.comparison, (*COMPARISON_KEYS, "n"))),
    ]
    tag_comp = result.tag_comparison
    if tag_comp.height:
        appendix += [
            "",
            f"## Paired comparison with the baseline on {main_metric}, within each tag",
            "",
            "Adjusted p-values corrected across pipelines × tags; `n` is the tag's paired "
            "queries.",
            "",
            markdown_table(comparison_view(tag_comp, TAG_COMPARISON_KEYS)),
        ]
    appendix += ["", "## Latency per stage (ms, this run's machine)", ""]
    appendix.append(markdown_table(latency_table(result.timings), floats="{:.2f}"))
    appendix += [
        "",
        "## Pipeline configurations",
        "",
        "```json",
        json.dumps(man["pipelines"], indent=2, sort_keys=True),
        "```",
        "",
    ]
    (out_dir / "appendix.md").write_text("\n".join(appendix), encoding="utf-8")
    path = out_dir / "report.md"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path
