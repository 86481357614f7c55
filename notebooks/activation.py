import marimo

__generated_with = "0.25.2"
app = marimo.App(width="full", app_title="memlab · activation")


@app.cell
def _():

    import marimo as mo
    import polars as pl

    from memlab.explore import activation as act
    from memlab.explore import session
    from memlab.explore import tuning as tune
    from memlab.pipeline import Pipeline
    from memlab.stages.graph import Graph
    from memlab.stages.lif import LIF

    return Graph, LIF, Pipeline, act, mo, pl, session, tune


@app.cell
def _(mo, session):
    mo.md(
        f"""
        # Activation spread over the entity graph

        Pick a query of the dataset (the store is replayed up to it) or type your own, or point
        at any store directory. The query's entities seed the **graph BFS** (docs/design.md §D0.9:
        activation × hop decay × causal boost × edge strength, hop by hop); its top retrieved
        memories seed the **leaky integrate-and-fire** network (design §D2.3: potentials leak,
        spike at the threshold, refract). Both run side by side; squares are memories (orange:
        relevant), labelled with their rank without → with propagation.
        {"_Fast mode: hashing embedder._" if session.fast_mode() else ""}
        """
    )
    return


@app.cell
def _(mo, session):
    default_dataset, skipped = session.open_dataset()
    _choices, _label = session.dataset_choices(default_dataset)
    dataset_pick = mo.ui.dropdown(_choices, value=_label, label="dataset")
    store_path = mo.ui.text(
        placeholder="empty: replay the dataset", label="or a store directory", full_width=True
    )
    free_text = mo.ui.text(
        placeholder="empty: the query's own text", label="query text", full_width=True
    )
    return dataset_pick, default_dataset, free_text, skipped, store_path


@app.cell
def _(dataset_pick, default_dataset, free_text, mo, session, skipped, store_path):
    try:
        dataset = session.picked_dataset(dataset_pick.value, default_dataset)
    except ValueError as exc:
        mo.stop(True, mo.callout(mo.md(f"Cannot load this dataset: `{exc}`"), kind="danger"))
    embedder = session.notebook_embedder()
    replayer = session.make_replayer(dataset, embedder)
    _queries = dataset.queries
    mo.stop(
        not _queries,
        mo.vstack([
            dataset_pick,
            mo.callout(mo.md(
                f"This dataset has no query (`{dataset.path}`): pick another one."
            ), kind="warn"),
        ]),
    )
    _multi_hop = [q for q in _queries if session.primary_tag(q) == "multi-hop"]
    query_pick = mo.ui.dropdown(
        session.query_options(_queries),
        value=session.query_label((_multi_hop or _queries)[0]),
        label="query",
        searchable=True,
    )
    _note = (
        mo.callout(mo.md("Skipped: " + "; ".join(skipped)), kind="warn") if skipped else mo.md("")
    )
    mo.vstack(
        [mo.hstack([dataset_pick, query_pick], justify="start"), free_text, store_path, _note]
    )
    return embedder, query_pick, replayer


@app.cell
def _(Graph, LIF, Pipeline, mo, tune):
    constant_specs = tune.tunable_params(Pipeline([("graph", Graph()), ("lif", LIF())]))
    constants = (
        mo.md("\n\n".join("{p" + str(i) + "}" for i in range(len(constant_specs))))
        .batch(
            **{
                f"p{i}": mo.ui.number(start=s.low, stop=s.high, step=s.step, value=s.default,
                                      label=s.name)
                for i, s in enumerate(constant_specs)
            }
        )
        .form(submit_button_label="Apply", label="Graph and LIF constants (from get_params)",
              bordered=True)
    )
    max_nodes = mo.ui.slider(10, 80, 5, value=30, label="entities drawn", show_value=True)
    n_labels = mo.ui.slider(0, 40, 1, value=10, label="labels (top by value)", show_value=True)
    n_memories = mo.ui.slider(0, 20, 1, value=8, label="memories drawn", show_value=True)
    mo.hstack([constants, mo.vstack([max_nodes, n_labels, n_memories])], justify="start",
              gap=2)
    return constant_specs, constants, max_nodes, n_labels, n_memories


@app.cell
def _(act, embedder, free_text, mo, query_pick, replayer, session, store_path):
    _text = free_text.value.strip()
    if store_path.value.strip():
        try:
            ctx = act.store_context(store_path.value.strip(), _text or "", embedder=embedder)
        except (OSError, ValueError, TypeError) as exc:
            mo.stop(True, mo.callout(mo.md(f"Cannot open this store: `{exc}`"), kind="danger"))
        mo.stop(not _text, mo.callout(mo.md("Type a query for this store."), kind="info"))
        relevant, stale = [], []
        query_note = f"free text on the store `{store_path.value.strip()}`: {_text}"
    else:
        with mo.status.spinner(title="Replaying the dataset up to the query…"):
            _state = session.replay_to_query(replayer, query_pick.value)
        ctx = act.with_text(_state.ctx, _text) if _text else _state.ctx
        relevant = [] if _text else list(_state.relevant)
        stale = [] if _text else list(_state.stale)
        query_note = (
            f"free text at the time of `{_state.query.qid}`: {_text}" if _text
            else f"`{_state.query.qid}`: {_state.query.text}"
        )
    store = ctx.store
    return ctx, query_note, relevant, stale, store


@app.cell
def _(act, constant_specs, constants, ctx, mo, tune):
    try:
        _values = tune.changed_params(
            constant_specs,
            {constant_specs[int(k[1:])].name: v for k, v in (constants.value or {}).items()},
        )
        graph_stage, lif_stage = act.propagation_stages(_values)
        rankings = act.propagation_rankings(ctx, graph=graph_stage, lif=lif_stage)
    except (ValueError, TypeError) as exc:
        mo.stop(True, mo.callout(mo.md(f"Cannot run these constants: `{exc}`"), kind="danger"))
    except Exception as exc:  # noqa: BLE001 - a failing stage is shown, not a blank panel
        mo.stop(True, mo.callout(
            mo.md(f"**The graph or LIF stage failed:** `{type(exc).__name__}: {exc}`"),
            kind="danger",
        ))
    entity_graph = ctx.store.graph
    bfs_seeds = list(ctx.trace["graph"]["seeds"])
    lif_trace = ctx.trace["lif"]["trace"]
    bfs = act.bfs_steps(
        entity_graph, bfs_seeds, **act.propagation_params(graph_stage, act.bfs_steps)
    )
    lif = act.lif_steps(lif_trace, entity_graph)
    mo.md(f"Constants changed from the defaults: {tune.describe_params(_values) or 'none'}.")
    return bfs, bfs_seeds, entity_graph, graph_stage, lif, lif_stage, lif_trace, rankings


@app.cell
def _(act, bfs, bfs_seeds, entity_graph, lif_trace, max_nodes):
    lif_seeds = act.lif_seeds(lif_trace)
    drawn = act.drawn_entities(
        entity_graph, bfs, bfs_seeds, lif_trace, max_nodes=max_nodes.value
    )
    layout = act.layout_frame(entity_graph, drawn)
    edges = act.network_edges(entity_graph, layout)
    return edges, layout, lif_seeds


@app.cell
def _(graph_stage, lif_stage, mo):
    _last = max(lif_stage.steps, graph_stage.max_depth, 1)
    step = mo.ui.slider(0, _last, 1, value=min(2, _last), label="step t", show_value=True,
                        full_width=True)
    mo.output.replace(step)
    return (step,)


@app.cell
def _(
    act,
    bfs,
    bfs_seeds,
    edges,
    graph_stage,
    layout,
    lif,
    lif_seeds,
    lif_stage,
    mo,
    n_labels,
    n_memories,
    pl,
    query_note,
    rankings,
    relevant,
    step,
    store,
):
    _t_bfs = min(step.value, graph_stage.max_depth)
    _bfs_now = bfs.filter(pl.col("step") == _t_bfs)
    _bfs_nodes = act.node_states(
        layout,
        dict(zip(_bfs_now["entity_idx"].to_list(), _bfs_now["activation"].to_list(), strict=True)),
        spiked=_bfs_now.filter(pl.col("changed"))["entity_idx"].to_list(),
        seeds=bfs_seeds,
        n_labels=n_labels.value,
    )
    _t_lif = min(step.value, int(lif["step"].max()) if lif.height else 0)
    _lif_now = lif.filter(pl.col("step") == _t_lif)
    _lif_nodes = act.node_states(
        layout,
        dict(zip(_lif_now["entity_idx"].to_list(), _lif_now["potential"].to_list(), strict=True)),
        spiked=_lif_now.filter(pl.col("spiked"))["entity_idx"].to_list(),
        seeds=lif_seeds,
        n_labels=n_labels.value,
    )
    _base = dict(zip(rankings["no propagation"]["mem_id"].to_list(),
                     rankings["no propagation"]["rank"].to_list(), strict=True))

    def _mems(name):
        _top = rankings[name].sort("rank")["mem_id"].head(n_memories.value).to_list()
        _after = dict(zip(rankings[name]["mem_id"].to_list(), rankings[name]["rank"].to_list(),
                          strict=True))
        return act.memory_nodes(store, layout, [*relevant, *_top], before=_base, after=_after,
                                relevant=relevant)

    _bfs_mem, _bfs_links = _mems("graph BFS")
    _lif_mem, _lif_links = _mems("LIF")
    _bfs_max = float(bfs["activation"].max()) if bfs.height else 1.0
    _lif_max = max(float(lif_stage.threshold),
                   float(lif["potential"].max()) if lif.height else 0.0)
    _bfs_chart = act.network_chart(
        _bfs_nodes, edges, memories=_bfs_mem, memory_edges=_bfs_links,
        value_title="activation", color_max=_bfs_max, width=480, height=420,
        title=f"graph BFS after {_t_bfs} hop(s) (ring: set or raised at this hop)",
    )
    _lif_chart = act.network_chart(
        _lif_nodes, edges, memories=_lif_mem, memory_edges=_lif_links,
        value_title="potential", color_max=_lif_max, width=480, height=420,
        title=f"LIF at t = {_t_lif} (ring: spiking)",
    )
    mo.vstack(
        [
            mo.md(
                f"**Query** {query_note}  \n"
                f"{len(bfs_seeds)} BFS seed entit{'y' if len(bfs_seeds) == 1 else 'ies'}, "
                f"{len(lif_seeds)} LIF input neuron(s); thick outline = seed; colours scale to "
                f"the largest value over all steps (BFS {_bfs_max:.2f}, LIF {_lif_max:.2f})."
            ),
            mo.as_html(
                (_bfs_chart | _lif_chart).resolve_scale(color="independent")
            ),
        ]
    )
    return


@app.cell
def _(act, mo, rankings, relevant, store):
    mo.stop(not relevant, mo.md("_No relevant memories for this query (free text or store)._"))
    _moves = act.rank_moves(rankings, store, relevant)
    mo.vstack(
        [
            mo.md("### How propagation moved the relevant memories\n"
                  + "\n".join(f"- {line}" for line in act.describe_moves(_moves))),
            mo.ui.table(_moves, selection=None, page_size=10),
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
def _(act, mo, rankings, store):
    _base = rankings["no propagation"]
    _bfs_new = act.pulled_in(_base, rankings["graph BFS"], store, top_k=10)
    _lif_new = act.pulled_in(_base, rankings["LIF"], store, top_k=10)
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
def _(act, mo, rankings, relevant, stale, store):
    _table = act.compare_rankings(rankings, store, relevant=relevant, stale=stale, top_k=10)
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
