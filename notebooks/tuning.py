import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="memlab · tuning")


@app.cell
def _():

    import time

    import marimo as mo
    import polars as pl

    from memlab.explore import session
    from memlab.explore import tuning as tune
    from memlab.pipeline import available_pipelines, load_pipeline

    return available_pipelines, load_pipeline, mo, pl, session, time, tune


@app.cell
def _(mo, session):
    mo.md(
        f"""
        # Tune the retrieval constants

        Pick a shipped pipeline or a configuration file, set any of its constants and press
        **Run**: the dataset is replayed with the new constants (the retrievers' outputs are
        cached, so only what a constant changes is recomputed), then scored on a seeded train
        and held-out split against the pipeline's defaults, with a paired test. Save the
        settings as a TOML configuration when they hold up on the held-out queries.
        {"_Fast mode: hashing embedder, two queries per tag._" if session.fast_mode() else ""}
        """
    )
    return


@app.cell
def _(mo, session):
    default_dataset, skipped = session.open_dataset()
    _choices, _label = session.dataset_choices(default_dataset)
    dataset_pick = mo.ui.dropdown(_choices, value=_label, label="dataset")
    return dataset_pick, default_dataset, skipped


@app.cell
def _(dataset_pick, default_dataset, mo, session, skipped):
    try:
        dataset = session.picked_dataset(dataset_pick.value, default_dataset)
    except ValueError as exc:
        mo.stop(True, mo.callout(mo.md(f"Cannot load this dataset: `{exc}`"), kind="danger"))
    fast = session.fast_mode()
    queries = session.sample_queries(dataset.queries, per_tag=2) if fast else list(dataset.queries)
    replayer = session.make_replayer(dataset, session.notebook_embedder(fast))
    with mo.status.spinner(title="Embedding the memories and queries…"):
        replayer.prepare()
    _note = (
        mo.callout(mo.md("Skipped: " + "; ".join(skipped)), kind="warn") if skipped else mo.md("")
    )
    mo.vstack(
        [
            dataset_pick,
            mo.md(f"{len(queries)} of {len(dataset.queries)} queries evaluated."),
            _note,
        ]
    )
    return queries, replayer


@app.cell
def _(available_pipelines, mo):
    _names = available_pipelines()
    pipeline_pick = mo.ui.dropdown(
        _names, value="hybrid" if "hybrid" in _names else _names[0], label="shipped pipeline"
    )
    pipeline_path = mo.ui.text(
        value=str(mo.cli_args().get("pipeline") or ""),
        placeholder="path/to/pipeline.toml", label="or a configuration file", full_width=True
    )
    mo.hstack([pipeline_pick, pipeline_path], justify="start", widths=[1, 2])
    return pipeline_path, pipeline_pick


@app.cell
def _(load_pipeline, mo, pipeline_path, pipeline_pick, queries, replayer, tune):
    _source = pipeline_path.value.strip() or pipeline_pick.value
    try:
        pipeline = load_pipeline(_source)
    except ValueError as exc:
        mo.stop(True, mo.callout(mo.md(f"Cannot load this pipeline: `{exc}`"), kind="danger"))
    tuner = tune.TuningSession(replayer, pipeline, tune.app_metrics(), queries=queries)
    try:
        with mo.status.progress_bar(
            total=len(queries), title=f"Replaying {pipeline.name} with its defaults…"
        ) as _bar:
            baseline = tuner.baseline(on_query=lambda *_: _bar.update())
    except Exception as exc:  # noqa: BLE001 - a failing stage is shown, not a blank panel
        mo.stop(True, mo.callout(mo.md(
            f"**{pipeline.name} failed with its defaults:** `{type(exc).__name__}: {exc}`"
        ), kind="danger"))
    mo.md(
        f"Pipeline **{pipeline.name}**: {pipeline.description or '(no description)'}  \n"
        f"{len(tuner.specs)} numeric constants; {len(tuner.train)} train and "
        f"{len(tuner.test)} held-out queries (seeded split, eval's `split_queries`)."
    )
    return baseline, pipeline, tuner


@app.cell
def _(mo, tuner):
    _inputs = {
        f"p{_i}": mo.ui.number(
            start=spec.low, stop=spec.high, step=spec.step, value=spec.default,
            label=spec.name,
        )
        for _i, spec in enumerate(tuner.specs)
    }
    settings = mo.md("\n\n".join("{" + name + "}" for name in _inputs)).batch(**_inputs).form(
        submit_button_label="Run", label="Constants (defaults shown; change any, then Run)",
        bordered=True,
    )
    mo.output.replace(settings)
    return (settings,)


@app.cell
def _(baseline, mo, queries, settings, time, tune, tuner):
    try:
        params = tune.changed_params(
            tuner.specs,
            {tuner.specs[int(k[1:])].name: v for k, v in (settings.value or {}).items()},
        )
    except ValueError as exc:
        mo.stop(True, mo.callout(mo.md(f"`{exc}`"), kind="danger"))
    _start = time.perf_counter()
    if params:
        try:
            with mo.status.progress_bar(
                total=len(queries), title=f"Replaying with {tune.describe_params(params)}…",
                subtitle="train and held-out queries in one replay",
            ) as _bar:
                tuned = tuner.evaluate(params, on_query=lambda *_: _bar.update())
        except Exception as exc:  # noqa: BLE001 - a failing stage is shown, not a blank panel
            mo.stop(True, mo.callout(mo.md(
                f"**Failed with {tune.describe_params(params)}:** `{type(exc).__name__}: {exc}`"
            ), kind="danger"))
    else:
        tuned = baseline
    _reuse = (
        f" Replayed and scored in {time.perf_counter() - _start:.1f} s; retriever and "
        f"fusion outputs reused from the cache: {tuner.last_reuse_:.0%}."
        if params and tuner.last_reuse_ is not None else ""
    )
    mo.md(
        f"**Tuned:** {tune.describe_params(params) or 'the defaults (change a constant, Run)'}."
        + _reuse
    )
    return params, tuned


@app.cell
def _(mo, pl, tune, tuned, tuner):
    _table = tuner.comparison(tuned, tune.SUMMARY_METRICS).with_columns(
        pl.col("defaults", "tuned", "delta").round(4),
        pl.col("p_value").map_elements(lambda p: f"{p:.2e}", return_dtype=pl.String),
    )
    mo.vstack(
        [
            mo.md(
                "### Train and held-out, against the defaults\n"
                "Means over the `n` queries of each side; `p_value`: two-sided paired t-test "
                "of tuned against defaults on the same queries. `stale`, `leak`, `dup` and "
                "`tokens`: lower is better. Trust a gain only where it holds on the held-out "
                "side."
            ),
            mo.ui.table(_table, selection=None, page_size=16),
        ]
    )
    return


@app.cell
def _(baseline, mo, params, tune, tuned):
    _curves = tune.metric_curves(
        {"tuned": tuned, "defaults": baseline}, families=("R_all", "Success", "nDCG")
    )
    mo.vstack(
        [
            mo.md(f"### Metric curves (all queries)\nTuned: {tune.describe_params(params)}."),
            mo.as_html(tune.curve_chart(_curves, baseline="defaults")),
        ]
    )
    return


@app.cell
def _(mo):
    tag_metric = mo.ui.dropdown(
        ["R_all@10", "Success@10", "nDCG@10", "MRR", "stale@10", "tokens@10"],
        value="R_all@10", label="per-tag metric",
    )
    mo.output.replace(tag_metric)
    return (tag_metric,)


@app.cell
def _(baseline, mo, queries, tag_metric, tune, tuned):
    _tags = tune.tag_means({"defaults": baseline, "tuned": tuned}, queries, tag_metric.value)
    mo.as_html(tune.tag_chart(_tags, tag_metric.value))
    return


@app.cell
def _(mo, pipeline):
    save_path = mo.ui.text(
        value=f"eval/configs/{pipeline.name}-tuned.toml", label="save as", full_width=True
    )
    save_button = mo.ui.run_button(label="Save settings as TOML")
    mo.hstack([save_path, save_button], justify="start", widths=[3, 1])
    return save_button, save_path


@app.cell
def _(mo, params, pipeline, save_button, save_path, tuner):
    mo.stop(not save_button.value)
    try:
        _out = tuner.save(params, save_path.value.strip(), name=f"{pipeline.name}-tuned")
    except (OSError, ValueError, TypeError) as exc:
        mo.stop(True, mo.callout(mo.md(f"Not saved: `{exc}`"), kind="danger"))
    mo.callout(mo.md(f"Saved `{_out}`: load it with `memlab eval DATASET --pipelines {_out}`."),
               kind="success")
    return


if __name__ == "__main__":
    app.run()
