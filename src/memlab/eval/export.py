"""``memlab export RUN_DIR``: a finished run in the formats papers and other tools read.

Writes into ``RUN_DIR/export/`` (or ``--out``), atomically. The target follows memlab's rule
for result directories (:func:`memlab.io.check_output_dir`: new, empty, or an export memlab
wrote, whose other files are kept), and is refused before anything is read when it is a
memlab directory of another kind (the run itself, another run, a dataset, a sweep, a
comparison written by ``memlab compare --out``) or holds the run (:func:`check_export_dir`):

``runs/<pipeline>.trec``
    TREC run files (``qid Q0 docno rank score tag``). trec_eval re-sorts a run by score and
    breaks ties by document id, so memlab's own scores (which may tie, or be non-monotone after
    a re-ranking stage) would not reproduce memlab's order. The exported score is therefore
    ``n - rank + 1`` for a query with ``n`` ranked memories: strictly decreasing in memlab's
    rank, so trec_eval (and ir_measures, ranx, pytrec_eval) evaluate exactly the ranking memlab
    evaluated.
``qrels.trec``
    ``qid 0 docno relevance``: the judgements the run's relevance metrics used (a relevant
    memory a consolidation merged before its query as the merged fact). Where the pipelines'
    replays merged differently, ``qrels/<run file>`` per pipeline instead, each for the run of
    the same name.

TREC files separate their fields by white space, so a query id, memory id or pipeline name
holding white space or a control character (``m 0029``, a newline) cannot be written to them:
trec_eval and ir_measures would read shifted fields. Dataset validation accepts such ids, so
``memlab export`` refuses such a run before writing anything, naming the id, the TREC file it
was bound for and the run file it came from (rename the id in the dataset and run again). A
pipeline name must also be a plain file name (``runs/<pipeline>.trec``).
``aggregate.csv``, ``per_query.csv``, ``comparison.csv``, ``comparison_by_tag.csv``
    The run's tables as CSV. ``aggregate.csv`` counts the queries behind each mean (``n``);
    it and the comparison tables carry the run's protocol (query count and how learned stages
    were fitted, :func:`memlab.eval.protocol.describe_run`) in a ``protocol`` column.
``comparison.tex``
    A LaTeX table of the aggregate metrics with significance markers against the baseline, in
    the style of ranx's ``Report.to_latex`` (Bassani, "ranx: A Blazing-Fast Python Library for
    Ranking Evaluation and Comparison", ECIR 2022): the best value of each metric in bold,
    :math:`^\\dagger` where a pipeline is significantly better than the baseline and
    :math:`^\\ddagger` where it is significantly worse (first test's adjusted p-value below
    the run's alpha).
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Sequence
from pathlib import Path

import polars as pl

from memlab.eval.experiment import ExperimentResult
from memlab.eval.metrics import higher_is_better
from memlab.eval.stats import adjustment_phrase
from memlab.io import OutputDirError, atomic_directory, check_output_dir, output_kind

EXPORT_DIR = "export"

EXPORT_KINDS = ("export",)
"""Kinds of directory an export replaces (:func:`memlab.io.output_kind`): an export only. An
export written when exports and comparisons shared the marker kind ``result`` is recognised by
its entries as an export; a comparison's directory (``memlab compare --out``) never is."""


def check_export_dir(
    out: str | Path, run_dir: str | Path, *, what: str = "output directory"
) -> Path:
    """Refuse an export target before any work (see the module docstring).

    Returns:
        The absolute path.

    Raises:
        memlab.io.OutputDirError: Naming ``out`` and what is wrong.
    """
    path = check_output_dir(out, what=what)
    run = Path(run_dir).expanduser().absolute().resolve()
    real = path.resolve()
    if real == run or real in run.parents:
        raise OutputDirError(
            f"{what} {out}: is the run {run_dir} or holds it; give a new directory (default: "
            f"{Path(run_dir) / EXPORT_DIR})"
        )
    if path.is_dir() and any(path.iterdir()):
        kind = output_kind(path)
        if kind not in EXPORT_KINDS:
            raise OutputDirError(
                f"{what} {out}: is a memlab {kind} directory, not an export; an export "
                "replaces only an export: give a new or empty directory"
            )
    return path


def trec_field_problem(value: object) -> str | None:
    """Why ``value`` cannot be one field of a TREC line (``None``: it can).

    A field is a non-empty string without white space (any character :meth:`str.isspace`
    accepts, which is how trec_eval and ir_measures split a line) and without control
    characters.
    """
    if not isinstance(value, str) or not value:
        return "is empty"
    for char in value:
        if char.isspace():
            return f"holds white space ({char!r})"
        if unicodedata.category(char) == "Cc":
            return f"holds a control character ({char!r})"
    return None


def _check_trec_fields(
    frame: pl.DataFrame, columns: dict[str, str], target: str, source: str
) -> None:
    """Refuse the first id of ``columns`` (column → what it is) a TREC line cannot hold.

    Raises:
        ValueError: Naming the id, the TREC file ``target`` and the run file ``source``.
    """
    for column, what in columns.items():
        for value in frame.get_column(column).unique(maintain_order=True).to_list():
            why = trec_field_problem(value)
            if why is not None:
                raise ValueError(
                    f"{target}: {what} {value!r} (in {source}) {why}, which a TREC file cannot "
                    "hold: its fields are separated by white space; rename it in the dataset "
                    "and run again (nothing was exported)"
                )


def trec_run_lines(
    rankings: pl.DataFrame, tag: str, *, target: str = "run file", source: str = "rankings"
) -> list[str]:
    """TREC run lines of one pipeline's rankings, with tie-safe scores ``n - rank + 1``.

    Args:
        rankings: ``qid, rank, mem_id`` (one pipeline).
        tag: The run tag (last column).
        target: The TREC file, for the message of an id it cannot hold.
        source: Where the rankings come from, for that message.

    Raises:
        ValueError: A query id, memory id or the tag that a TREC line cannot hold
            (:func:`trec_field_problem`).
    """
    why = trec_field_problem(tag)
    if why is not None:
        raise ValueError(f"{target}: run tag {tag!r} {why}, which a TREC file cannot hold")
    if rankings.height == 0:
        return []
    frame = rankings.select("qid", "rank", "mem_id").sort("qid", "rank")
    _check_trec_fields(frame, {"qid": "query id", "mem_id": "memory id"}, target, source)
    frame = frame.with_columns(pl.len().over("qid").alias("n"))
    return [
        f"{qid} Q0 {mem_id} {rank} {n - rank + 1} {tag}"
        for qid, rank, mem_id, n in frame.iter_rows()
    ]


def trec_qrels_lines(
    qrels: pl.DataFrame, *, target: str = "qrels file", source: str = "qrels"
) -> list[str]:
    """TREC qrels lines (``qid 0 docno relevance``) of ``qid, mem_id, relevance``.

    Raises:
        ValueError: A query or memory id that a TREC line cannot hold (naming ``target`` and
            ``source``; :func:`trec_field_problem`).
    """
    if qrels.height == 0:
        return []
    frame = qrels.select("qid", "mem_id", "relevance").sort("qid", "mem_id")
    _check_trec_fields(frame, {"qid": "query id", "mem_id": "memory id"}, target, source)
    return [f"{qid} 0 {mem_id} {rel}" for qid, mem_id, rel in frame.iter_rows()]


def run_file_name(pipeline: str, source: str) -> str:
    """``<pipeline>.trec``, refused unless the pipeline name is a plain file name that a TREC
    line can hold as its tag (no white space, control character, ``/`` or ``\\``, and not
    ``.``-led).

    Raises:
        ValueError: Naming the pipeline and ``source`` (the run file that names it).
    """
    why = trec_field_problem(pipeline)
    if why is None and ("/" in pipeline or "\\" in pipeline or pipeline.startswith(".")):
        why = "is not a plain file name"
    if why is not None:
        raise ValueError(
            f"{source}: pipeline name {pipeline!r} {why}: it cannot name a TREC run file "
            "(runs/<pipeline>.trec) or be its tag (nothing was exported)"
        )
    return f"{pipeline}.trec"


def _latex_escape(text: str) -> str:
    out = []
    for ch in text:
        if ch in "&%$#_{}":
            out.append("\\" + ch)
        elif ch == "~":
            out.append("\\textasciitilde{}")
        elif ch == "^":
            out.append("\\textasciicircum{}")
        elif ch == "\\":
            out.append("\\textbackslash{}")
        else:
            out.append(ch)
    return "".join(out)


def _lower_is_better(metric: str) -> bool:
    return not higher_is_better(metric)


def latex_table(result: ExperimentResult, metrics: Sequence[str] | None = None) -> str:
    """The comparison as a LaTeX ``table`` (booktabs), ranx style.

    Args:
        result: A run (computed or loaded).
        metrics: Columns (default: the run's metrics that every pipeline has).
    """
    names = result.pipelines
    if metrics is None:
        metrics = [m for m in result.manifest.get("metrics", []) if m in result.metrics[names[0]]]
        if not metrics:
            metrics = list(result.metrics[names[0]])
    base = result.baseline or names[0]
    tests = result.manifest.get("tests")
    first_test = str(tests[0]) if isinstance(tests, list) and tests else "t"
    given = result.manifest.get("alpha", 0.05)
    number = isinstance(given, (int, float)) and not isinstance(given, bool)
    alpha = float(given) if number else 0.05
    marks: dict[tuple[str, str], str] = {}
    comp = result.comparison
    adj = f"p_{first_test}_adj"
    if comp.height and adj in comp.columns:
        for row in comp.iter_rows(named=True):
            p = row[adj]
            if p is None or (isinstance(p, float) and math.isnan(p)) or p >= alpha:
                continue
            delta = row["delta"] or 0.0
            better = delta < 0 if _lower_is_better(row["metric"]) else delta > 0
            marks[(row["pipeline"], row["metric"])] = "^{\\dagger}" if better else "^{\\ddagger}"
    best: dict[str, float] = {}
    for m in metrics:
        values = [result.metrics[n][m] for n in names if m in result.metrics[n]]
        if values:
            best[m] = min(values) if _lower_is_better(m) else max(values)
    header = " & ".join(["Pipeline", *(_latex_escape(m) for m in metrics)])
    rows = []
    for n in names:
        cells = [_latex_escape(n) + (" (baseline)" if n == base else "")]
        for m in metrics:
            v = result.metrics[n].get(m)
            if v is None:
                cells.append("--")
                continue
            text = f"{v:.3f}"
            if m in best and v == best[m]:
                text = f"\\textbf{{{text}}}"
            mark = marks.get((n, m), "")
            cells.append(f"${text}{mark}$" if mark else text)
        rows.append(" & ".join(cells) + " \\\\")
    from memlab.eval.protocol import describe_run

    protocol = _latex_escape(describe_run(result.manifest))
    correction = _latex_escape(
        adjustment_phrase(str(result.manifest.get("correction", "holm")), title=True)
    )
    dataset = result.manifest.get("dataset")
    name = dataset.get("name", "memlab run") if isinstance(dataset, dict) else "memlab run"
    caption = (
        f"{_latex_escape(str(name))}"
        + f", {protocol}"
        + f". $\\dagger$/$\\ddagger$: significantly better/worse than {_latex_escape(base)} "
        f"({_latex_escape(first_test)} test, {correction} $p < {alpha:g}$). Best value in "
        "bold."
    )
    return "\n".join(
        [
            "\\begin{table}[t]",
            "\\centering",
            f"\\caption{{{caption}}}",
            "\\begin{tabular}{l" + "c" * len(metrics) + "}",
            "\\toprule",
            header + " \\\\",
            "\\midrule",
            *rows,
            "\\bottomrule",
            "\\end{tabular}",
            "\\end{table}",
            "",
        ]
    )


def aggregate_frame(result: ExperimentResult) -> pl.DataFrame:
    """``pipeline, metric, value, n, protocol`` of ``metrics.json`` (pipelines and metrics in
    run order); ``n`` counts the per-query values behind the mean (null without
    ``per_query.parquet``)."""
    from memlab.eval.protocol import describe_run

    counts: dict[tuple[str, str], int] = {}
    if result.per_query.height:
        for name, metric, n in result.per_query.group_by("pipeline", "metric").len().iter_rows():
            counts[(name, metric)] = n
    protocol = describe_run(result.manifest)
    rows = [
        {
            "pipeline": n,
            "metric": m,
            "value": float(v),
            "n": counts.get((n, m)),
            "protocol": protocol,
        }
        for n in result.pipelines
        for m, v in result.metrics[n].items()
    ]
    return pl.DataFrame(
        rows,
        schema={
            "pipeline": pl.String,
            "metric": pl.String,
            "value": pl.Float64,
            "n": pl.Int64,
            "protocol": pl.String,
        },
    )


def export_run(run_dir: str | Path, out: str | Path | None = None) -> tuple[Path, list[str]]:
    """Export a run (see the module docstring).

    Args:
        run_dir: A directory written by ``memlab eval``.
        out: Target directory (default ``RUN_DIR/export``); replaced atomically.

    Returns:
        The export directory and the notes on what could not be exported (missing tables of
        a trimmed run).

    Raises:
        memlab.io.OutputDirError: ``out`` is refused (:func:`check_export_dir`), before the run
            is read.
        ValueError: If ``run_dir`` is not a readable run.
    """
    from memlab.eval.protocol import describe_run
    from memlab.eval.runfiles import load_run

    run = Path(run_dir)
    target = Path(out) if out is not None else run / EXPORT_DIR
    check_export_dir(target, run)
    result = load_run(run)
    protocol = describe_run(result.manifest)
    shown = out if out is not None else target
    # Every TREC line is built (and every id checked) before anything is written.
    runs: dict[str, list[str]] = {}
    if result.rankings.height:
        for name in result.pipelines:
            file = run_file_name(name, str(run / "metrics.json"))
            part = result.rankings.filter(pl.col("pipeline") == name)
            runs[file] = trec_run_lines(
                part,
                name,
                target=f"{Path(shown) / 'runs' / file}",
                source=str(run / "rankings.parquet"),
            )
    # One qrels.trec; or, where the pipelines' replays merged memories differently (the
    # table has a pipeline column), one qrels file per pipeline beside its run file.
    qrels: dict[str, list[str]] | None = None
    if "qrels.parquet" not in result.missing:
        table = result.qrels
        if "pipeline" in table.columns:
            qrels = {}
            for name in result.pipelines:
                file = f"qrels/{run_file_name(name, str(run / 'metrics.json'))}"
                qrels[file] = trec_qrels_lines(
                    table.filter(pl.col("pipeline") == name),
                    target=str(Path(shown) / file),
                    source=str(run / "qrels.parquet"),
                )
        else:
            qrels = {"qrels.trec": trec_qrels_lines(
                table, target=str(Path(shown) / "qrels.trec"), source=str(run / "qrels.parquet")
            )}
    notes: list[str] = []
    check_export_dir(target, run)  # it may have changed while the run was read
    with atomic_directory(target, kind="export", replaces=EXPORT_KINDS) as tmp:
        if result.rankings.height:
            (tmp / "runs").mkdir()
            for file, lines in runs.items():
                (tmp / "runs" / file).write_text(
                    "\n".join(lines) + ("\n" if lines else ""), encoding="utf-8"
                )
        else:
            notes.append("no TREC runs: the run has no rankings.parquet")
        if qrels is not None:
            for file, lines in qrels.items():
                (tmp / file).parent.mkdir(exist_ok=True)
                (tmp / file).write_text(
                    "\n".join(lines) + ("\n" if lines else ""), encoding="utf-8"
                )
        else:
            notes.append("no qrels: the run has no qrels.parquet (re-run it with this memlab)")
        aggregate_frame(result).write_csv(tmp / "aggregate.csv")
        for attr, name in (
            ("per_query", "per_query.csv"),
            ("comparison", "comparison.csv"),
            ("tag_comparison", "comparison_by_tag.csv"),
        ):
            frame = getattr(result, attr)
            if frame.height:
                if attr != "per_query":
                    frame = frame.with_columns(pl.lit(protocol).alias("protocol"))
                frame.write_csv(tmp / name)
            else:
                notes.append(f"no {name}: the run has no {attr} table")
        (tmp / "comparison.tex").write_text(latex_table(result), encoding="utf-8")
    return target.resolve(), notes
