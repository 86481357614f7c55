import marimo

__generated_with = "0.25.2"
app = marimo.App(width="medium", app_title="memlab · judge")


@app.cell
def _():
    import shutil
    import tempfile
    from pathlib import Path

    import marimo as mo

    from memlab.explore.judge import RECORDING, JudgeSession

    return JudgeSession, Path, RECORDING, mo, shutil, tempfile


@app.cell
def _(JudgeSession, Path, RECORDING, mo, shutil, tempfile):
    _args = mo.cli_args()
    _pool = Path(str(_args["pool"])) if _args.get("pool") else None
    try:
        if _args.get("dataset"):
            _dataset = Path(str(_args["dataset"]))
        else:  # a scratch copy of the small recording: judging never writes into the repository
            _dataset = Path(tempfile.mkdtemp(prefix="memlab-judge-")) / "recording"
            shutil.copytree(RECORDING, _dataset)
        sess = JudgeSession(_dataset, pool=_pool, judge=str(_args.get("judge") or "judge"))
    except (ValueError, OSError) as exc:  # DatasetError is a ValueError
        mo.stop(True, mo.callout(mo.md(f"Cannot open this dataset or pool: `{exc}`"),
                                 kind="danger"))
    mo.md(
        f"""
        # Judge pooled memories

        Dataset `{sess.dataset}`, judge **{sess.judge}**; judgments are saved to
        `judgments.jsonl` as you go. Keys: **0** not relevant, **1** relevant,
        **2** highly relevant, **s** skip.
        """
    )
    return (sess,)


@app.cell
def _(mo, sess):
    def _act(grade):
        def _click(count):
            if grade is None:
                sess.skip()
            else:
                sess.grade(grade)
            return (count or 0) + 1

        return _click

    b0 = mo.ui.button(label="0 · not relevant", on_click=_act(0), keyboard_shortcut="0")
    b1 = mo.ui.button(label="1 · relevant", on_click=_act(1), keyboard_shortcut="1")
    b2 = mo.ui.button(label="2 · highly relevant", on_click=_act(2), keyboard_shortcut="2")
    bs = mo.ui.button(label="s · skip", on_click=_act(None), keyboard_shortcut="s")
    return b0, b1, b2, bs


@app.cell
def _(b0, b1, b2, bs, mo, sess):
    _clicks = (b0.value, b1.value, b2.value, bs.value)  # re-run after every key
    _done, _total = sess.progress()
    _cur = sess.current()
    if _cur is None:
        _body = mo.md(f"**All {_total} candidates judged.**")
    else:
        _q = sess.query_view(_cur["qid"])
        _body = mo.vstack(
            [
                mo.md(
                    f"""
                    ### Query `{_q['qid']}`: {_q['text']}

                    asked {_q['time']} by {_q['agent']} · scope: {_q['client']} ·
                    projects: {_q['projects']}

                    Candidate **{_cur['mem_id']}** (pooled from {', '.join(_cur['runs'])},
                    best rank {_cur['best_rank']}) and its history:
                    """
                ),
                mo.ui.table(sess.history(_cur["mem_id"]), selection=None),
            ]
        )
    mo.vstack(
        [
            mo.md(f"judged **{_done} of {_total}**"),
            _body,
            mo.hstack([b0, b1, b2, bs], justify="start"),
        ]
    )
    return


if __name__ == "__main__":
    app.run()
