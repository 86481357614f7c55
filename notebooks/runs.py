import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="memlab · runs")


@app.cell
def _():
    import marimo as mo
    import polars as pl

    from memlab.eval.report import tag_chart
    from memlab.explore import runs as rx
    from memlab.explore import session

    return mo, pl, rx, session, tag_chart


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
    runs = [
        rx.load_run(p, root=reports if p.is_relative_to(reports) else p.parent)
        for p in run_paths
    ]
    return demo_note, runs


@app.cell
def _(demo_note, mo, runs):
    mo.stop(
        not runs,
        mo.callout(mo.md("No run found. " + demo_note), kind="warn"),
    )
    run_names = [r.name for r in runs]
    compare_pick = mo.ui.multiselect(run_names, value=run_names[:4], label="runs to compare")
    focus_pick = mo.ui.dropdown(run_names, value=run_names[0], label="run")
    mo.vstack(
        [
            mo.callout(mo.md(demo_note), kind="info") if demo_note else mo.md(""),
            mo.md(f"{len(runs)} run(s): " + ", ".join(f"`{n}`" for n in run_names)),
        ]
    )
    return compare_pick, focus_pick


@app.cell
def _(compare_pick, mo, runs, rx):
    _chosen = [r for r in runs if r.name in compare_pick.value] or runs[:1]
    _wide = rx.metrics_wide(_chosen)
    _rel = [m for m in _wide.columns if m.split("@")[0] in ("R_all", "R_any", "nDCG", "MRR")]
    mo.vstack(
        [
            mo.md("## Pipelines across runs"),
            compare_pick,
            mo.ui.table(_wide, selection=None, page_size=12),
            mo.as_html(rx.comparison_chart(_wide, _rel)) if _rel else mo.md(""),
        ]
    )
    return


@app.cell
def _(focus_pick, mo, runs):
    run = next(r for r in runs if r.name == focus_pick.value)
    _metrics = list(run.manifest.get("metrics") or next(iter(run.metrics.values()), {}))
    mo.stop(
        not _metrics or not run.pipelines,
        mo.vstack([focus_pick, mo.callout(mo.md("This run records no metric."), kind="warn")]),
    )
    metric_pick = mo.ui.dropdown(
        _metrics, value="R_all@10" if "R_all@10" in _metrics else _metrics[0], label="metric"
    )
    mo.vstack(
        [
            mo.md("## One run"),
            mo.hstack([focus_pick, metric_pick], justify="start"),
            mo.md(
                f"Dataset `{run.manifest.get('dataset', {}).get('name', '?')}`, baseline "
                f"`{run.baseline}`, embedder `{run.manifest.get('embedder', '?')}`, "
                f"correction `{run.manifest.get('correction', '?')}`."
            ),
        ]
    )
    return metric_pick, run


@app.cell
def _(metric_pick, mo, pl, run, rx):
    mo.vstack(
        [
            mo.md(f"### Significance against `{run.baseline}` ({metric_pick.value})"),
            mo.ui.table(
                rx.significance_table(run, metric=metric_pick.value).with_columns(
                    pl.col(pl.Float64).round(4)
                ),
                selection=None,
                page_size=10,
            ),
        ]
    )
    return


@app.cell
def _(metric_pick, mo, pl, run, rx):
    _by_tag = rx.tag_significance_table(run, metric=metric_pick.value)
    mo.vstack(
        [
            mo.md(f"### Significance within each tag ({metric_pick.value})"),
            mo.ui.table(
                _by_tag.with_columns(pl.col(pl.Float64).round(4)),
                selection=None,
                page_size=10,
            )
            if _by_tag.height
            else mo.md("_The run compares tags on its headline metric only._"),
        ]
    )
    return


@app.cell
def _(metric_pick, mo, run, rx, tag_chart):
    _tags = rx.tag_table(run, metric_pick.value)
    _per_tag = run.tables["per_tag"]
    mo.vstack(
        [
            mo.md(f"### Per tag ({metric_pick.value})"),
            mo.as_html(tag_chart(_per_tag, metric_pick.value))
            if _per_tag.height else mo.md("_No per-tag table._"),
            mo.ui.table(_tags, selection=None, page_size=12),
        ]
    )
    return


@app.cell
def _(metric_pick, mo, run, rx):
    pipeline_pick = mo.ui.dropdown(run.pipelines, value=run.pipelines[-1], label="pipeline")
    _worst = rx.queries_by_metric(run, run.pipelines[-1], metric_pick.value)
    _qids = _worst["qid"].to_list() or sorted(set(run.tables["rankings"]["qid"].to_list()))
    query_pick = mo.ui.dropdown(_qids, value=_qids[0] if _qids else None, label="query",
                                searchable=True)
    k_pick = mo.ui.slider(1, 50, 1, value=10, label="cut-off k", show_value=True)
    _n_queries = int(run.manifest.get("dataset", {}).get("queries", 0))
    warm = mo.ui.switch(
        value=_n_queries <= 50,
        label="replay the earlier queries through the pipeline (exact access counts; slower)",
    )
    mo.vstack(
        [
            mo.md(
                f"### Per query ({metric_pick.value})\n"
                "The query picker below lists the queries worst first (for the last pipeline)."
            ),
            mo.ui.table(rx.query_table(run, metric_pick.value), selection=None, page_size=8),
            mo.md("### Drill down"),
            mo.hstack([pipeline_pick, query_pick, k_pick], justify="start"),
            warm,
        ]
    )
    return k_pick, pipeline_pick, query_pick, warm


@app.cell
def _(mo, pipeline_pick, run, rx, session):
    _ds_path = rx.run_dataset_path(run)
    mo.stop(
        _ds_path is None or not session.is_dataset_dir(_ds_path),
        mo.callout(mo.md(f"The run's dataset `{_ds_path}` is not available here."), kind="warn"),
    )
    drill_dataset, _ = session.open_dataset(_ds_path)
    drill_pipeline = rx.run_pipeline(run, pipeline_pick.value)
    _generator = None
    from memlab.eval.experiment import default_generator, needs_generator

    if needs_generator(drill_pipeline):
        try:
            _generator = default_generator(drill_dataset)
        except ValueError as exc:
            mo.stop(True, mo.callout(mo.md(f"This pipeline needs a generator: {exc}"),
                                     kind="warn"))
    drill_replayer = session.make_replayer(
        drill_dataset,
        rx.embedder_from_id(run.manifest.get("embedder"), fast=session.fast_mode()),
        generator=_generator,
        config=rx.replay_config_of(run.manifest, drill_dataset),
    )
    n_fitted = rx.fit_like_run(run, drill_pipeline, drill_replayer)
    return drill_pipeline, drill_replayer, n_fitted


@app.cell
def _(drill_pipeline, drill_replayer, query_pick, rx, session, warm):
    drill_state = session.replay_to_query(
        drill_replayer, query_pick.value, pipeline=drill_pipeline if warm.value else None
    )
    outputs = rx.trace_pipeline(drill_pipeline, drill_state.ctx)
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
