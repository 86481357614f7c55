import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="memlab · tuning")


@app.cell
def _():

    import marimo as mo
    import polars as pl

    from memlab.explore import session
    from memlab.explore import tuning as tune

    return mo, pl, session, tune


@app.cell
def _(mo, session):
    mo.md(
        f"""
        # Tune the retrieval constants

        Hybrid retrieval (dense + BM25 + graph, fused by RRF), then lifecycle scoring (decay and
        access boost), MMR and the entropy gate. Move a slider and the dataset is replayed with
        the new constants; the curves compare them with the seed defaults (dashed baseline) at
        every cut-off k.
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
def _(mo):
    rrf_k = mo.ui.slider(1, 200, 1, value=60, label="RRF k", show_value=True, debounce=True)
    decay = mo.ui.slider(
        0.90, 1.0, 0.005, value=0.98, label="decay per day", show_value=True, debounce=True
    )
    boost = mo.ui.slider(
        0.0, 1.0, 0.05, value=0.3, label="access-boost weight", show_value=True, debounce=True
    )
    mmr_lambda = mo.ui.slider(0.0, 1.0, 0.05, value=0.7, label="MMR λ", show_value=True,
                              debounce=True)
    budget = mo.ui.slider(50, 2000, 50, value=2000, label="token budget", show_value=True,
                          debounce=True)
    mo.hstack(
        [mo.vstack([rrf_k, decay, boost]), mo.vstack([mmr_lambda, budget])],
        justify="start",
        gap=3,
    )
    return boost, budget, decay, mmr_lambda, rrf_k


@app.cell
def _(tune):
    summary_metrics = ["R_all@10", "Success@10", "nDCG@10", "MRR", "stale@10", "leak@10",
                       "dup@10", "tokens@10"]
    metrics = [*tune.cutoff_metrics(("R_all", "Success", "nDCG")), *summary_metrics]
    return metrics, summary_metrics


@app.cell
def _(metrics, queries, replayer, tune):
    baseline = tune.evaluate_pipeline(
        replayer, tune.tuning_pipeline(name="baseline"), metrics, queries=queries
    )
    return (baseline,)


@app.cell
def _(boost, budget, decay, metrics, mmr_lambda, queries, replayer, rrf_k, tune):
    params = {
        "rrf_k": float(rrf_k.value),
        "decay_factor": float(decay.value),
        "boost_weight": float(boost.value),
        "mmr_lambda": float(mmr_lambda.value),
        "token_budget": int(budget.value),
    }
    tuned = tune.evaluate_pipeline(
        replayer, tune.tuning_pipeline(**params, name="tuned"), metrics, queries=queries
    )
    return params, tuned


@app.cell
def _(baseline, mo, params, tune, tuned):
    _curves = tune.metric_curves(
        {"tuned": tuned, "baseline": baseline}, families=("R_all", "Success", "nDCG")
    )
    mo.vstack(
        [
            mo.md(f"### Metric curves\nTuned: {tune.describe_params(params)}."),
            mo.as_html(tune.curve_chart(_curves, baseline="baseline")),
        ]
    )
    return


@app.cell
def _(baseline, mo, pl, summary_metrics, tune, tuned):
    _table = tune.summary_table({"baseline": baseline, "tuned": tuned}, baseline="baseline")
    _table = _table.filter(pl.col("metric").is_in(summary_metrics)).with_columns(
        pl.col(pl.Float64).round(4)
    )
    mo.vstack(
        [
            mo.md("### At k = 10\n`stale`, `leak`, `dup` and `tokens`: lower is better."),
            mo.ui.table(_table, selection=None, page_size=10),
        ]
    )
    return


@app.cell
def _(mo, summary_metrics):
    tag_metric = mo.ui.dropdown(summary_metrics, value="R_all@10", label="per-tag metric")
    mo.output.replace(tag_metric)
    return (tag_metric,)


@app.cell
def _(baseline, mo, queries, tag_metric, tune, tuned):
    _tags = tune.tag_means({"baseline": baseline, "tuned": tuned}, queries, tag_metric.value)
    mo.as_html(tune.tag_chart(_tags, tag_metric.value))
    return


if __name__ == "__main__":
    app.run()
