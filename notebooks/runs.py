import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="memlab · runs")


@app.cell
def _():
    import marimo as mo
    import polars as pl

    from memlab.eval.report import tag_chart
    from memlab.eval.runcompare import compare_runs
    from memlab.explore import runs as rx
    from memlab.explore import session

    return compare_runs, mo, pl, rx, session, tag_chart


@app.cell
def _(mo):
    mo.md("""
    # Compare runs

    Every directory under `reports/` holding `metrics.json` is a run
    (`memlab eval … --out reports/NAME`). Compare pipelines across runs, read the paired
    significance table and the per-tag breakdown of one run, then drill into a query: the
    query is replayed and its pipeline run stage by stage, showing where each stage ranked
    the relevant memories and which stage lost them.
    """)
    return


@app.cell
def _(rx, session):
    root = session.project_root()
    reports = root / "reports"
    run_paths = rx.find_runs(reports)
    demo_note = ""
    if session.fast_mode() or not run_paths:
        _fixture = root / "tests" / "fixtures" / "handmade"
        try:
            _demo = rx.build_demo_run(rx.demo_run_dir(), _fixture)
            run_paths = [_demo, *run_paths]
            demo_note = (
                f"A small demo run on the handmade fixture (hashing embedder) was built into "
                f"`{_demo}`"
                + (" because `reports/` holds no run yet." if len(run_paths) == 1 else ".")
            )
        except (ValueError, OSError) as exc:
            demo_note = f"No run under `reports/`, and the demo run failed: `{exc}`"
    runs, broken_runs = rx.load_runs(run_paths, reports=reports)
    return broken_runs, demo_note, runs


@app.cell
def _(broken_runs, demo_note, mo, runs):
    _broken = mo.callout(
        mo.md(
            f"Skipped {len(broken_runs)} run(s) that cannot be read:\n\n"
            + "\n".join(f"- `{line}`" for line in broken_runs)
        ),
        kind="warn",
    )
    mo.stop(
        not runs,
        mo.vstack([
            mo.callout(mo.md("No run found. " + demo_note), kind="warn"),
            *([_broken] if broken_runs else []),
        ]),
    )
    run_names = [r.name for r in runs]
    compare_pick = mo.ui.multiselect(run_names, value=run_names[:4], label="runs to compare")
    focus_pick = mo.ui.dropdown(run_names, value=run_names[0], label="run")
    mo.vstack(
        [
            mo.callout(mo.md(demo_note), kind="info") if demo_note else mo.md(""),
            *([_broken] if broken_runs else []),
            mo.md(f"{len(runs)} run(s): " + ", ".join(f"`{n}`" for n in run_names)),
        ]
    )
    return compare_pick, focus_pick


@app.cell
def _(compare_pick, mo, runs, rx):
    _chosen = [r for r in runs if r.name in compare_pick.value] or runs[:1]
    _wide = rx.runs_overview(_chosen)
    _rel = rx.relevance_columns(_wide)
    mo.vstack(
        [
            mo.md(
                "## Pipelines across runs\n"
                "Means only; `queries` is how many queries each run scored. Means of runs "
                "scored on different queries are not comparable: the paired comparison below "
                "tests two runs on the queries they share."
            ),
            compare_pick,
            mo.ui.table(rx.rounded(_wide), selection=None, page_size=12),
            mo.as_html(rx.comparison_chart(_wide, _rel)) if _rel else mo.md(""),
        ]
    )
    return


@app.cell
def _(mo, runs):
    _names = [r.name for r in runs]
    pair_a = mo.ui.dropdown(_names, value=_names[0], label="run A (reference)")
    pair_b = mo.ui.dropdown(_names, value=_names[-1], label="run B")
    return pair_a, pair_b


@app.cell
def _(compare_runs, mo, pair_a, pair_b, runs, rx):
    _a = next(r for r in runs if r.name == pair_a.value)
    _b = next(r for r in runs if r.name == pair_b.value)
    _lacking = [
        f"`{r.name}` lacks {', '.join(r.lacks('per_query'))}"
        for r in (_a, _b)
        if r.lacks("per_query")
    ]
    if _lacking:
        _body = mo.callout(
            mo.md("Paired tests need per-query values: " + "; ".join(_lacking) + "."),
            kind="warn",
        )
    else:
        try:
            _res = compare_runs(_a.path, _b.path, n_resamples=2000)
        except (ValueError, OSError) as exc:
            mo.stop(True, mo.vstack([
                mo.hstack([pair_a, pair_b], justify="start"),
                mo.callout(mo.md(f"Cannot pair these runs: `{exc}`"), kind="danger"),
            ]))
        _changed = _res.per_query.filter(_res.per_query["outcome"] != "tie")
        _comp = _res.comparison.select(
            "baseline", "pipeline", "metric", "n", "baseline_mean", "mean", "delta", "wins",
            "losses", *[c for c in _res.comparison.columns if c.endswith("_adj")],
            "significant",
        )
        _body = mo.vstack(
            [
                *(mo.callout(mo.md(n), kind="info") for n in _res.notes),
                mo.ui.table(rx.rounded(_comp), selection=None, page_size=10),
                mo.md(
                    f"{_changed.height} of {_res.per_query.height} paired queries whose "
                    f"{_res.metric} changed, largest change first:"
                ),
                mo.ui.table(rx.rounded(_changed), selection=None, page_size=8),
            ]
        )
    mo.vstack(
        [
            mo.md(
                "## Two runs, paired\n"
                "Same-named pipelines of A and B are tested query by query (`n`: paired "
                "queries); p-values are Holm-adjusted across every row."
            ),
            mo.hstack([pair_a, pair_b], justify="start"),
            _body,
        ]
    )
    return


@app.cell
def _(focus_pick, mo, runs, rx):
    run = next(r for r in runs if r.name == focus_pick.value)
    _metrics = list(run.manifest.get("metrics") or next(iter(run.metrics.values()), {}))
    mo.stop(
        not _metrics or not run.pipelines,
        mo.vstack([focus_pick, mo.callout(mo.md("This run records no metric."), kind="warn")]),
    )
    metric_pick = mo.ui.dropdown(
        _metrics, value="R_all@10" if "R_all@10" in _metrics else _metrics[0], label="metric"
    )
    _ds = run.manifest.get("dataset", {})
    mo.vstack(
        [
            mo.md("## One run"),
            mo.hstack([focus_pick, metric_pick], justify="start"),
            mo.md(
                f"Dataset `{_ds.get('name', '?')}` ({rx.protocol_text(run)}), baseline "
                f"`{run.baseline}`, embedder `{run.manifest.get('embedder', '?')}`, "
                f"correction `{run.manifest.get('correction', '?')}`."
            ),
            mo.callout(
                mo.md(
                    "This run directory lacks "
                    + ", ".join(f"`{m}`" for m in run.missing)
                    + " (a trimmed copy keeps only some files); the sections that need them "
                    "say so. Re-run `memlab eval … --out DIR` for the full set."
                ),
                kind="warn",
            )
            if run.missing
            else mo.md(""),
        ]
    )
    return metric_pick, run


@app.cell
def _(metric_pick, mo, run, rx):
    _sig = rx.significance_table(run, metric=metric_pick.value)
    mo.vstack(
        [
            mo.md(
                f"### Significance against `{run.baseline}` ({metric_pick.value})\n"
                "Paired tests over the queries both pipelines scored (`n`)."
            ),
            mo.ui.table(rx.rounded(_sig), selection=None, page_size=10)
            if _sig.height
            else mo.callout(
                mo.md(
                    "No paired comparison: "
                    + (", ".join(run.lacks("comparison")) or "the table is empty")
                    + " in this run."
                ),
                kind="warn",
            ),
        ]
    )
    return


@app.cell
def _(metric_pick, mo, run, rx):
    _by_tag = rx.tag_significance_table(run, metric=metric_pick.value)
    _why = (
        f"_This run lacks {', '.join(run.lacks('comparison_by_tag'))}._"
        if run.lacks("comparison_by_tag")
        else "_The run compares tags on its headline metric only._"
    )
    mo.vstack(
        [
            mo.md(f"### Significance within each tag ({metric_pick.value}; `n`: queries)"),
            mo.ui.table(rx.rounded(_by_tag), selection=None, page_size=10)
            if _by_tag.height
            else mo.md(_why),
        ]
    )
    return


@app.cell
def _(metric_pick, mo, run, rx, tag_chart):
    _tags = rx.tag_table(run, metric_pick.value)
    _per_tag = run.tables["per_tag"]
    mo.vstack(
        [
            mo.md(
                f"### Per tag ({metric_pick.value}; `n`: the tag's queries, also named on "
                "the chart)"
            ),
            mo.as_html(tag_chart(_per_tag, metric_pick.value))
            if _per_tag.height and _per_tag.filter(_per_tag["metric"] == metric_pick.value).height
            else mo.md(
                f"_No per-tag values: {', '.join(run.lacks('per_tag')) or 'empty table'}._"
            ),
            mo.ui.table(rx.rounded(_tags), selection=None, page_size=12),
        ]
    )
    return


@app.cell
def _(metric_pick, mo, run, rx):
    mo.stop(
        bool(run.lacks("per_query", "rankings")),
        mo.callout(
            mo.md(
                "The per-query table and the drill-down need "
                + ", ".join(f"`{m}`" for m in run.lacks("per_query", "rankings"))
                + ", which this run lacks."
            ),
            kind="warn",
        ),
    )
    pipeline_pick = mo.ui.dropdown(run.pipelines, value=run.pipelines[-1], label="pipeline")
    _worst = rx.queries_by_metric(run, run.pipelines[-1], metric_pick.value)
    _qids = _worst["qid"].to_list() or sorted(set(run.tables["rankings"]["qid"].to_list()))
    query_pick = mo.ui.dropdown(_qids, value=_qids[0] if _qids else None, label="query",
                                searchable=True)
    _no_query = mo.callout(
        mo.md(
            f"This run records no per-query {metric_pick.value} and no ranking for any query: "
            "there is no query to drill into."
        ),
        kind="warn",
    )
    k_pick = mo.ui.slider(1, 50, 1, value=10, label="cut-off k", show_value=True)
    _n_queries = int(run.manifest.get("dataset", {}).get("queries", 0))
    warm = mo.ui.switch(
        value=_n_queries <= 50,
        label="replay the earlier queries through the pipeline (exact access counts; slower)",
    )
    _per_query = rx.query_table(run, metric_pick.value, pipeline=run.pipelines[-1])
    _view = mo.vstack(
        [
            mo.md(
                f"### Per query ({metric_pick.value}, {_per_query.height} queries)\n"
                f"Sorted by the size of `{run.pipelines[-1]}`'s win or loss against "
                f"`{run.baseline}` (`delta`). The query picker below lists the queries "
                "worst first (for the last pipeline)."
            ),
            mo.ui.table(rx.rounded(_per_query), selection=None, page_size=8),
            mo.md("### Drill down"),
            mo.hstack([pipeline_pick, query_pick, k_pick], justify="start") if _qids
            else _no_query,
            warm if _qids else mo.md(""),
        ]
    )
    mo.stop(not _qids, _view)
    mo.output.replace(_view)
    return k_pick, pipeline_pick, query_pick, warm


@app.cell
def _(mo, pipeline_pick, run, rx, session):
    _ds_path = rx.run_dataset_path(run)
    mo.stop(
        _ds_path is None or not session.is_dataset_dir(_ds_path),
        mo.callout(mo.md(f"The run's dataset `{_ds_path}` is not available here."), kind="warn"),
    )
    try:
        drill_dataset, _ = session.open_dataset(_ds_path)
        drill_pipeline = rx.run_pipeline(run, pipeline_pick.value)
        _embedder = rx.embedder_from_id(run.manifest.get("embedder"), fast=session.fast_mode())
        _config = rx.replay_config_of(run.manifest, drill_dataset)
    except (ValueError, OSError) as exc:  # DatasetError and ConfigError are ValueErrors
        mo.stop(True, mo.callout(mo.md(f"Cannot replay this run here: `{exc}`"),
                                 kind="danger"))
    _generator = None
    from memlab.eval.experiment import default_generator, needs_generator

    if needs_generator(drill_pipeline):
        try:
            _generator = default_generator(drill_dataset)
        except ValueError as exc:
            mo.stop(True, mo.callout(mo.md(f"This pipeline needs a generator: {exc}"),
                                     kind="warn"))
    drill_replayer = session.make_replayer(
        drill_dataset, _embedder, generator=_generator, config=_config
    )
    try:
        n_fitted = rx.fit_like_run(run, drill_pipeline, drill_replayer)
    except Exception as exc:  # noqa: BLE001 - a failing stage is shown, not a blank panel
        mo.stop(True, mo.callout(mo.md(
            f"**Fitting `{pipeline_pick.value}`'s learned stages failed:** "
            f"`{type(exc).__name__}: {exc}`"
        ), kind="danger"))
    return drill_pipeline, drill_replayer, n_fitted


@app.cell
def _(drill_pipeline, drill_replayer, mo, query_pick, rx, session, warm):
    mo.stop(
        query_pick.value is None,
        mo.callout(mo.md("Pick a query to drill into."), kind="info"),
    )
    try:
        drill_state = session.replay_to_query(
            drill_replayer, query_pick.value, pipeline=drill_pipeline if warm.value else None
        )
        outputs = rx.trace_pipeline(drill_pipeline, drill_state.ctx)
    except Exception as exc:  # noqa: BLE001 - a failing stage is shown, not a blank panel
        mo.stop(True, mo.callout(mo.md(
            f"**Replaying `{query_pick.value}` through `{drill_pipeline.name}` failed:** "
            f"`{type(exc).__name__}: {exc}`"
        ), kind="danger"))
    return drill_state, outputs


@app.cell
def _(drill_state, k_pick, mo, n_fitted, outputs, pipeline_pick, pl, run, rx):
    _rel = drill_state.relevant
    _report = rx.loss_report(outputs, _rel, k=k_pick.value)
    _ids = list(_rel)
    _recorded = rx.recorded_ranking(run, pipeline_pick.value, drill_state.query.qid).head(
        k_pick.value
    )
    _rerun = outputs[-1].frame.head(k_pick.value).select("rank", "mem_id", "score")

    def _with_text(frame):
        return frame.with_columns(
            pl.col("mem_id")
            .map_elements(
                lambda m: drill_state.store.get(m).text if m in drill_state.store else "",
                return_dtype=pl.String,
            )
            .alias("text"),
            pl.col("score").round(4),
        )

    _recorded = _with_text(_recorded.select("rank", "mem_id", "score"))
    _rerun = _with_text(_rerun)
    _texts = {m: drill_state.store.get(m).text for m in _ids if m in drill_state.store}
    mo.vstack(
        [
            mo.md(
                f"**{drill_state.query.qid}** ({', '.join(drill_state.query.tags)}): "
                f"{drill_state.query.text}  \n"
                + "  \n".join(f"relevant `{m}`: {t}" for m, t in _texts.items())
                + (f"  \n{n_fitted} learned stage(s) fitted on the run's training split."
                   if n_fitted else "")
            ),
            mo.md("#### Which stage lost the relevant memories"),
            mo.ui.table(_report, selection=None),
            mo.md("#### Rank after every stage"),
            mo.ui.table(rx.ranks_wide(outputs, _ids), selection=None),
            mo.as_html(rx.rank_path_chart(rx.stage_ranks(outputs, _ids), k=k_pick.value))
            if _ids else mo.md("_This query has no relevant memory._"),
            mo.md("#### Final top k: recorded in the run, and re-run here"),
            mo.hstack(
                [
                    mo.ui.table(_recorded, selection=None, label="recorded"),
                    mo.ui.table(
                        _rerun.with_columns(
                            pl.col("mem_id").is_in(_ids).alias("relevant")
                        ),
                        selection=None,
                        label="re-run",
                    ),
                ],
                widths="equal",
            ),
        ]
    )
    return


if __name__ == "__main__":
    app.run()
