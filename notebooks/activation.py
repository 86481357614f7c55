import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="memlab · activation")


@app.cell
def _():

    import marimo as mo
    import polars as pl

    from memlab.explore import activation as act
    from memlab.explore import session
    from memlab.stages.graph import Graph
    from memlab.stages.lif import LIF

    return Graph, LIF, act, mo, pl, session


@app.cell
def _(mo, session):
    mo.md(
        f"""
        # Activation spread over the entity graph

        Pick a query: its entities seed the **graph BFS** (seed 000: activation × hop decay ×
        causal boost × edge strength, hop by hop), and its top retrieved memories seed the
        **leaky integrate-and-fire** network (seed 002: potentials leak, spike at the threshold,
        refract). Slide through the steps to watch the spread; below, the memories each model
        pulls in and the ranking with and without propagation.
        {"_Fast mode: hashing embedder._" if session.fast_mode() else ""}
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
    replayer = session.make_replayer(dataset, session.notebook_embedder())
    _queries = dataset.queries
    _multi_hop = [q for q in _queries if session.primary_tag(q) == "multi-hop"]
    query_choices = session.query_options(_queries)
    query_pick = mo.ui.dropdown(
        query_choices,
        value=session.query_label((_multi_hop or _queries)[0]),
        label="query",
        searchable=True,
    )
    _note = (
        mo.callout(mo.md("Skipped: " + "; ".join(skipped)), kind="warn") if skipped else mo.md("")
    )
    mo.vstack([mo.hstack([dataset_pick, query_pick], justify="start"), _note])
    return dataset, query_pick, replayer


@app.cell
def _(mo):
    leak = mo.ui.slider(0.0, 1.0, 0.05, value=0.8, label="LIF leak", show_value=True)
    threshold = mo.ui.slider(0.1, 3.0, 0.1, value=1.0, label="LIF threshold", show_value=True)
    refractory = mo.ui.slider(0, 5, 1, value=2, label="refractory steps", show_value=True)
    lif_steps = mo.ui.slider(1, 10, 1, value=5, label="LIF steps", show_value=True)
    n_seeds = mo.ui.slider(1, 10, 1, value=5, label="LIF seed memories", show_value=True)
    hop_decay = mo.ui.slider(0.0, 1.0, 0.05, value=0.8, label="BFS hop decay", show_value=True)
    max_depth = mo.ui.slider(1, 4, 1, value=2, label="BFS depth", show_value=True)
    max_nodes = mo.ui.slider(10, 80, 5, value=30, label="nodes drawn", show_value=True)
    mo.hstack(
        [
            mo.vstack([leak, threshold, refractory, lif_steps, n_seeds]),
            mo.vstack([hop_decay, max_depth, max_nodes]),
        ],
        justify="start",
        gap=3,
    )
    return hop_decay, leak, lif_steps, max_depth, max_nodes, n_seeds, refractory, threshold


@app.cell
def _(query_pick, replayer, session):
    state = session.replay_to_query(replayer, query_pick.value)
    return (state,)


@app.cell
def _(
    Graph,
    LIF,
    act,
    hop_decay,
    leak,
    lif_steps,
    max_depth,
    n_seeds,
    refractory,
    state,
    threshold,
):
    graph_stage = Graph(hop_decay=hop_decay.value, max_depth=max_depth.value)
    lif_stage = LIF(
        leak=leak.value,
        threshold=threshold.value,
        refractory=refractory.value,
        steps=lif_steps.value,
        n_seeds=n_seeds.value,
    )
    rankings = act.propagation_rankings(state.ctx, graph=graph_stage, lif=lif_stage)
    entity_graph = state.store.graph
    bfs_seeds = list(state.ctx.trace["graph"]["seeds"])
    lif_trace = state.ctx.trace["lif"]["trace"]
    bfs = act.bfs_steps(
        entity_graph, bfs_seeds, hop_decay=hop_decay.value, max_depth=max_depth.value
    )
    lif = act.lif_steps(lif_trace, entity_graph)
    return bfs, bfs_seeds, entity_graph, lif, lif_trace, rankings


@app.cell
def _(act, bfs, bfs_seeds, entity_graph, lif_trace, max_nodes, pl):
    lif_seeds = [int(i) for i in (lif_trace.seed_currents > 0).nonzero()[0]]
    _bfs_order = bfs.filter(pl.col("step") == bfs["step"].max()).sort(
        "activation", descending=True
    )["entity_idx"].to_list() if bfs.height else []
    drawn = act.focus_nodes(
        entity_graph,
        [*bfs_seeds, *lif_seeds, *_bfs_order, *lif_trace.fired],
        max_nodes=max_nodes.value,
    )
    layout = act.layout_frame(entity_graph, drawn)
    edges = act.network_edges(entity_graph, layout)
    return edges, layout, lif_seeds


@app.cell
def _(lif_steps, max_depth, mo):
    step = mo.ui.slider(
        0,
        max(lif_steps.value, max_depth.value),
        1,
        value=min(2, max(lif_steps.value, max_depth.value)),
        label="step t",
        show_value=True,
        full_width=True,
    )
    mo.output.replace(step)
    return (step,)


@app.cell
def _(
    act,
    bfs,
    bfs_seeds,
    edges,
    layout,
    lif,
    lif_seeds,
    max_depth,
    mo,
    pl,
    state,
    step,
    threshold,
):
    _t_bfs = min(step.value, max_depth.value)
    _bfs_now = bfs.filter(pl.col("step") == _t_bfs)
    _bfs_nodes = act.node_states(
        layout,
        dict(zip(_bfs_now["entity_idx"].to_list(), _bfs_now["activation"].to_list(), strict=True)),
        spiked=_bfs_now.filter(pl.col("changed"))["entity_idx"].to_list(),
        seeds=bfs_seeds,
    )
    _t_lif = min(step.value, int(lif["step"].max()) if lif.height else 0)
    _lif_now = lif.filter(pl.col("step") == _t_lif)
    _lif_nodes = act.node_states(
        layout,
        dict(zip(_lif_now["entity_idx"].to_list(), _lif_now["potential"].to_list(), strict=True)),
        spiked=_lif_now.filter(pl.col("spiked"))["entity_idx"].to_list(),
        seeds=lif_seeds,
    )
    _bfs_chart = act.network_chart(
        _bfs_nodes,
        edges,
        value_title="activation",
        color_max=1.0,
        title=f"graph BFS after {_t_bfs} hop(s) (ring: set or raised at this hop)",
    )
    _lif_chart = act.network_chart(
        _lif_nodes,
        edges,
        value_title="potential",
        color_max=threshold.value,
        title=f"LIF at t = {_t_lif} (ring: spiking)",
    )
    mo.vstack(
        [
            mo.md(
                f"**Query** `{state.query.qid}`: {state.query.text}  \n"
                f"{len(bfs_seeds)} BFS seed entit{'y' if len(bfs_seeds) == 1 else 'ies'}, "
                f"{len(lif_seeds)} LIF input neuron(s); thick outline = seed."
            ),
            mo.ui.tabs({"LIF": mo.as_html(_lif_chart),
                        "graph BFS": mo.as_html(_bfs_chart)}),
        ]
    )
    return


@app.cell
def _(act, bfs_seeds, entity_graph, lif_trace, mo):
    mo.vstack(
        [
            mo.md("### Seeds"),
            mo.ui.table(act.seed_table(entity_graph, bfs_seeds, lif_trace), selection=None,
                        page_size=10),
        ]
    )
    return


@app.cell
def _(act, mo, rankings, state):
    _base = rankings["no propagation"]
    _bfs_new = act.pulled_in(_base, rankings["graph BFS"], state.store, top_k=10)
    _lif_new = act.pulled_in(_base, rankings["LIF"], state.store, top_k=10)
    mo.vstack(
        [
            mo.md(
                "### Memories pulled in\n"
                "In the top 10 with propagation, not in the top 10 of dense + BM25 "
                "(`base_rank`: their rank there; blank: not retrieved at all)."
            ),
            mo.md("**graph BFS**"),
            mo.ui.table(_bfs_new, selection=None, page_size=5),
            mo.md("**LIF**"),
            mo.ui.table(_lif_new, selection=None, page_size=5),
        ]
    )
    return


@app.cell
def _(act, mo, rankings, state):
    _table = act.compare_rankings(
        rankings, state.store, relevant=list(state.relevant), stale=state.stale, top_k=10
    )
    mo.vstack(
        [
            mo.md(
                "### Ranking with and without propagation\n"
                "Top 10 of each ranking plus the relevant memories; a blank rank means the "
                "ranking does not hold the memory."
            ),
            mo.ui.table(_table, selection=None, page_size=15),
        ]
    )
    return


if __name__ == "__main__":
    app.run()
