import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="memlab · timeline")


@app.cell
def _():

    import marimo as mo
    import polars as pl

    from memlab.explore import session
    from memlab.explore import timeline as tl
    from memlab.pipeline import available_pipelines, load_pipeline

    return available_pipelines, load_pipeline, mo, pl, session, tl


@app.cell
def _(mo, session):
    mo.md(
        f"""
        # One client's memory over time

        The dataset is replayed through a pipeline as an experiment would (every query's top
        hits count as accesses); then, for one client: which facts and statuses superseded
        which, when each memory was valid, how confidence decayed between accesses and jumped
        with each one, how often each memory was accessed, and which events expired.
        {"_Fast mode: hashing embedder, two queries per tag._" if session.fast_mode() else ""}
        """
    )
    return


@app.cell
def _(available_pipelines, mo, session):
    default_dataset, skipped = session.open_dataset()
    _choices, _label = session.dataset_choices(default_dataset)
    dataset_pick = mo.ui.dropdown(_choices, value=_label, label="dataset")
    _pipes = [p for p in available_pipelines() if p != "full"] or ["hybrid"]
    pipeline_pick = mo.ui.dropdown(
        _pipes, value="hybrid" if "hybrid" in _pipes else _pipes[0], label="replay through"
    )
    return dataset_pick, default_dataset, pipeline_pick, skipped


@app.cell
def _(
    dataset_pick,
    default_dataset,
    load_pipeline,
    mo,
    pipeline_pick,
    session,
    skipped,
    tl,
):
    try:
        dataset = session.picked_dataset(dataset_pick.value, default_dataset)
    except ValueError as exc:
        mo.stop(True, mo.callout(mo.md(f"Cannot load this dataset: `{exc}`"), kind="danger"))
    _fast = session.fast_mode()
    _queries = session.sample_queries(dataset.queries, per_tag=2) if _fast else None
    _replayer = session.make_replayer(dataset, session.notebook_embedder(_fast))
    try:
        data = tl.replay_timeline(
            _replayer, load_pipeline(pipeline_pick.value), queries=_queries
        )
    except Exception as exc:  # noqa: BLE001 - a failing stage is shown, not a blank panel
        mo.stop(True, mo.vstack([
            mo.hstack([dataset_pick, pipeline_pick], justify="start"),
            mo.callout(mo.md(
                f"**Replaying with `{pipeline_pick.value}` failed:** "
                f"`{type(exc).__name__}: {exc}`"
            ), kind="danger"),
        ]))
    _note = (
        mo.callout(mo.md("Skipped: " + "; ".join(skipped)), kind="warn") if skipped else mo.md("")
    )
    mo.vstack(
        [
            mo.hstack([dataset_pick, pipeline_pick], justify="start"),
            mo.md(
                f"{len(data.store)} memories, {data.accesses.height} accesses from "
                f"{len(_queries) if _queries is not None else len(dataset.queries)} queries."
            ),
            _note,
        ]
    )
    return (data,)


@app.cell
def _(data, mo, tl):
    _clients = tl.client_table(data.store)
    mo.stop(
        _clients.height == 0,
        mo.callout(mo.md(
            f"The replay of `{data.dataset.meta.get('name', data.dataset.path)}` left no memory "
            f"in the store ({len(data.dataset.ops)} memory operation(s), "
            f"{len(data.dataset.queries)} quer{'y' if len(data.dataset.queries) == 1 else 'ies'})"
            ": there is no client to show."
        ), kind="warn"),
    )
    client_pick = mo.ui.dropdown(
        {f"{c} ({n} memories)": c for c, n in _clients.iter_rows()},
        value=next(f"{c} ({n} memories)" for c, n in _clients.iter_rows()),
        label="client",
        searchable=True,
    )
    types_pick = mo.ui.multiselect(
        ["fact", "status", "decision", "event"], value=["fact", "status"], label="types drawn"
    )
    decay = mo.ui.slider(0.90, 1.0, 0.005, value=0.98, label="decay per day", show_value=True)
    boost = mo.ui.slider(0.0, 1.0, 0.05, value=0.3, label="access-boost weight",
                         show_value=True)
    mo.hstack([client_pick, types_pick, mo.vstack([decay, boost])], justify="start", gap=2)
    return boost, client_pick, decay, types_pick


@app.cell
def _(client_pick, data, tl):
    records = tl.client_records(data.store, client_pick.value)
    chains = tl.supersession_chains(records)
    return chains, records


@app.cell
def _(chains, mo, tl):
    mo.vstack(
        [
            mo.md(f"## Supersession chains ({chains['chain'].n_unique()} keys and subjects)"),
            mo.as_html(tl.chains_chart(chains)) if chains.height
            else mo.md("_No fact or status of this client was superseded._"),
            mo.ui.table(chains.drop("created_at", "valid_from", "valid_to"), selection=None,
                        page_size=8),
        ]
    )
    return


@app.cell
def _(data, mo, pl, records, tl, types_pick):
    _limit = 60
    _windows = tl.validity_windows(
        records.filter(pl.col("type").is_in(types_pick.value or ["fact", "status"])),
        horizon=data.horizon,
    )
    mo.vstack(
        [
            mo.md(
                f"## Validity windows ({_windows.height} memories"
                + (f", the first {_limit} drawn)" if _windows.height > _limit else ")")
            ),
            mo.as_html(tl.windows_chart(_windows.head(_limit)))
            if _windows.height else mo.md("_Nothing of these types._"),
        ]
    )
    return


@app.cell
def _(boost, chains, data, decay, mo, records, tl):
    curves = tl.decay_curves(
        tl.decay_records(records, data.accesses, chains["mem_id"].to_list(), n=6),
        data.accesses,
        until=data.horizon,
        decay_factor=decay.value,
        boost_weight=boost.value,
    )
    mo.vstack(
        [
            mo.md(
                "## Decay curves\nFacts and statuses (chain members and the most accessed "
                "first): `confidence × decay^days since last access × (1 + w·log2(accesses+1))`."
            ),
            mo.as_html(tl.decay_chart(curves)) if curves.height
            else mo.md("_This client has no fact or status._"),
        ]
    )
    return


@app.cell
def _(data, mo, records, tl):
    _top = tl.most_accessed(data.accesses, records, n=8)
    _counts = tl.access_counts(data.accesses, _top["mem_id"].to_list())
    mo.vstack(
        [
            mo.md("## Access counts (the 8 most accessed memories)"),
            mo.as_html(tl.access_chart(
                _counts, span=(float(records["created_at"].min()), data.horizon)
            )) if _counts.height
            else mo.md("_No memory of this client was accessed._"),
            mo.ui.table(_top, selection=None, page_size=8),
        ]
    )
    return


@app.cell
def _(data, mo, records, tl):
    _retired = tl.retired_memories(records)
    _log = tl.change_log(data.store, records["id"].to_list())
    mo.vstack(
        [
            mo.md(
                f"## Expired and forgotten ({_retired.height})\nEvents expire after 30 days "
                "without an access unless important; `forget` soft-deletes."
            ),
            mo.ui.table(tl.with_datetimes(_retired, "created_at", "retired_at"),
                        selection=None, page_size=8),
            mo.as_html(tl.changes_chart(_log)) if _log.height else mo.md(""),
        ]
    )
    return


@app.cell
def _(client_pick, data, mo, tl):
    _cycles = tl.consolidation_log(data, client_pick.value)
    mo.vstack(
        [
            mo.md(
                f"## Consolidation and conflicts ({_cycles.height})\nWhat each consolidation "
                "cycle of the replay did to this client's memories (expired, merged, flagged, "
                "archived; strengthened entity edges), and contradictions the conflict policy "
                "resolved when they were written. Empty unless the replay configuration runs "
                "cycles (`[replay.consolidation] interval_hours`) or a `conflict_policy`."
            ),
            mo.ui.table(tl.with_datetimes(_cycles, "at"), selection=None, page_size=8)
            if _cycles.height
            else mo.md("_Nothing logged._"),
        ]
    )
    return


if __name__ == "__main__":
    app.run()
