"""Corrective retrieval: grade the candidates, then keep, refine, or fall back (CRAG).

Yan, Gu, Zhu & Ling, "Corrective Retrieval Augmented Generation", arXiv:2401.15884 (2024). A
retrieval evaluator gives every candidate a relevance score in ``[0, 1]`` (``crag_score``); the
best score picks one action for the query:

* **Correct** (``max ≥ upper``): keep the candidates scoring at least ``lower`` and *refine* them
  (the paper's decompose-then-recompose): split the text into sentence strips, score each strip
  with the same evaluator, drop strips under ``strip_threshold`` and join the rest in order into
  the ``text`` column. A text of one strip is kept whole; when every strip fails, the best strip
  (first on ties) is kept so that a kept candidate never comes out empty.
* **Incorrect** (``max < lower``): discard every candidate and run the fallback retrieval instead
  (the paper's web search); every row gets ``low_confidence = True``.
* **Ambiguous** (otherwise): both -- the refined candidates scoring at least ``lower`` first
  (``low_confidence = False``: the evaluator vouched for them), then the fallback rows
  (``low_confidence = True``: not vouched for).

An empty candidate frame counts as Incorrect (``max_score`` is ``None`` in the trace).
Fallback rows exclude every incoming candidate (already judged), carry their memory's full text
(not refined) and their own ``crag_score``. Kept rows keep their incoming ``score``; fallback
rows carry their retrieval score (a different scale), so the positional ``rank`` is the order to
use. ``crag_action`` repeats the query's action on every row, and ``ctx.trace["crag"]`` records
``{action, max_score, n_kept, n_discarded, n_fallback}``.

Fallbacks (registry :data:`CRAG_FALLBACKS`):

* ``"relax"`` -- a fresh dense retrieval over *every* row the query may see, not only the
  candidates the pipeline passed on, top ``fallback_top_k``. It broadens the candidate set, never
  the validity window: scope, namespaces, ``active``, ``now`` and ``at_time`` all still apply
  (:meth:`QueryContext.visible_mask`). Dropping ``at_time`` here once returned versions that were
  not valid at the asked time (stale@10 0.216 for ``full``); dropping the scope would leak
  other tenants' memories.
* ``"graph"`` -- spreading activation from the query's entities (:class:`~memlab.stages.graph.
  Graph` with seed-000 defaults), top ``fallback_top_k``.

Evaluators (registry :data:`CRAG_EVALUATORS`):

* ``"learned"`` (default) -- a scikit-learn classifier (``model``: ``"logistic"`` =
  ``LogisticRegression(C=C)``, ``"gbdt"`` = ``GradientBoostingClassifier`` with scikit-learn's
  defaults; ``C`` applies to the logistic model only) on the features of
  :mod:`memlab.stages.features`, trained by :meth:`CRAG.fit`; the score is the positive-class
  probability. The paper fine-tunes T5-large as its evaluator; a linear model over cheap
  retrieval features is the replayable stand-in.
* ``"similarity"`` -- the dense cosine of query and text, clipped to ``[0, 1]``; needs no
  training.
* ``"llm"`` -- asks ``ctx.generator`` the ``prompt`` (fields ``{query}`` and ``{document}``)
  once per text; an answer starting with "yes" scores 1, "no" 0, anything else 0.5.

Thresholds: the paper tunes ``upper``/``lower`` per dataset on its evaluator's scores; the
defaults 0.6 / 0.2 are set for probabilities and MiniLM cosines.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import polars as pl

from memlab.fastframe import (
    by_rank,
    drop_columns,
    f64_series,
    i64_series,
    keep_rows,
    select_columns,
    take_rows,
    with_series,
)
from memlab.registry import Registry
from memlab.stages.base import (
    CANDIDATE_SCHEMA,
    Column,
    QueryContext,
    Stage,
    candidates_from_rows,
    empty_candidates,
    frame_rows,
    register_stage,
    score_column,
)
from memlab.stages.constraints import Integral, Interval, Options, Predicate, Real
from memlab.stages.features import (
    FEATURE_NAMES,
    candidate_features,
    dense_similarity,
    max_normalise,
)
from memlab.stages.graph import Graph

if TYPE_CHECKING:
    from memlab.memory.store import MemoryStore

_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n+")

DEFAULT_PROMPT = (
    "Question: {query}\n"
    "Document: {document}\n"
    "Does the document help answer the question? Answer yes or no.\n"
    "Answer:"
)
"""The default yes/no relevance prompt of the ``llm`` evaluator."""


@dataclass(frozen=True)
class EvalBatch:
    """Texts to grade for one query.

    Attributes:
        rows: Store row of each text (a strip's memory row).
        ranks: Incoming rank of each text's memory.
        scores: Max-normalised incoming score of each text's memory.
        texts: The texts graded; ``None`` means the memories' own texts.
    """

    rows: np.ndarray
    ranks: np.ndarray
    scores: np.ndarray
    texts: list[str] | None = None

    def bodies(self, ctx: QueryContext) -> list[str]:
        """The texts (memory texts when ``texts`` is ``None``)."""
        if self.texts is not None:
            return self.texts
        return [ctx.store.record_at(int(r)).text for r in self.rows]


Evaluator = Callable[["CRAG", QueryContext, EvalBatch], np.ndarray]
Fallback = Callable[["CRAG", QueryContext, set[str]], pl.DataFrame]

CRAG_EVALUATORS: Registry[Evaluator] = Registry("evaluator")
"""Relevance evaluators by name: ``(stage, ctx, batch) -> scores in [0, 1]``."""

CRAG_FALLBACKS: Registry[Fallback] = Registry("fallback")
"""Fallback retrievals by name: ``(stage, ctx, excluded mem ids) -> candidate frame``."""

CRAG_MODELS: Registry[Callable[[float, int], Any]] = Registry("model")
"""Classifier factories of the learned evaluator by name: ``(C, seed) -> estimator``."""

register_evaluator = CRAG_EVALUATORS.register
"""Register a CRAG evaluator function under ``name``."""

register_fallback = CRAG_FALLBACKS.register
"""Register a CRAG fallback retrieval under ``name``."""

register_model = CRAG_MODELS.register
"""Register a classifier factory ``(C, seed) -> estimator`` under ``name``."""

MODEL_IMPORTS: dict[str, tuple[str, ...]] = {
    "logistic": ("sklearn.linear_model",),
    "gbdt": ("sklearn.ensemble",),
}
"""The modules each shipped classifier factory imports (a learned stage's ``imports``)."""


def fit_classifier(
    xs: list[np.ndarray], ys: list[np.ndarray], model: str, c: float, seed: int, *, owner: str
) -> tuple[Any, int, int]:
    """Fit the classifier :data:`CRAG_MODELS` names ``model`` on the stacked training rows
    (``xs``: feature matrices, ``ys``: their 0/1 labels), shared by the learned stages.

    Returns:
        The fitted classifier, the number of training rows and of relevant ones.

    Raises:
        ValueError: The labels hold one class only (``owner`` starts the message).
    """
    x_all, y_all = np.vstack(xs), np.concatenate(ys)
    n_pos = int(y_all.sum())
    if n_pos == 0 or n_pos == len(y_all):
        raise ValueError(
            f"{owner} needs relevant and irrelevant candidates; got {n_pos} relevant of "
            f"{len(y_all)}"
        )
    fitted = CRAG_MODELS.lookup(model)(c, seed)
    fitted.fit(x_all, y_all)
    return fitted, len(y_all), n_pos


@register_model("logistic")
def _logistic(c: float, seed: int) -> Any:
    from sklearn.linear_model import LogisticRegression

    return LogisticRegression(C=c, random_state=seed, max_iter=1000)


@register_model("gbdt")
def _gbdt(c: float, seed: int) -> Any:
    from sklearn.ensemble import GradientBoostingClassifier

    return GradientBoostingClassifier(random_state=seed)


# ---------------------------------------------------------------------- evaluators
@register_evaluator("similarity")
def _similarity(stage: CRAG, ctx: QueryContext, batch: EvalBatch) -> np.ndarray:
    sims = dense_similarity(ctx, batch.rows, batch.texts)
    return np.clip(sims, 0.0, 1.0)


@register_evaluator("learned")
def _learned(stage: CRAG, ctx: QueryContext, batch: EvalBatch) -> np.ndarray:
    model = getattr(stage, "model_", None)
    if model is None:
        raise ValueError(
            "crag.py: CRAG(evaluator='learned') is not fitted; call "
            "CRAG.fit(store, queries=..., relevant=..., embedder=...) first, or use "
            "evaluator='similarity'"
        )
    if len(batch.rows) == 0:
        return np.zeros(0, dtype=np.float64)
    x = candidate_features(
        ctx, batch.rows, ranks=batch.ranks, scores=batch.scores, texts=batch.texts
    )
    return np.asarray(model.predict_proba(x)[:, 1], dtype=np.float64)


@register_evaluator("llm")
def _llm(stage: CRAG, ctx: QueryContext, batch: EvalBatch) -> np.ndarray:
    if ctx.generator is None:
        raise ValueError(
            "crag.py: CRAG(evaluator='llm') needs a generator: give the experiment one"
        )
    out = np.zeros(len(batch.rows), dtype=np.float64)
    for i, text in enumerate(batch.bodies(ctx)):
        prompt = stage.prompt.format(query=ctx.text, document=text)
        answer = ctx.generator.generate(
            prompt, max_new_tokens=stage.max_new_tokens, temperature=0.0, seed=stage.seed
        )
        word = answer.strip().lower()
        out[i] = 1.0 if word.startswith("yes") else 0.0 if word.startswith("no") else 0.5
    return out


# ---------------------------------------------------------------------- fallbacks
@register_fallback("relax")
def _relax(stage: CRAG, ctx: QueryContext, exclude: set[str]) -> pl.DataFrame:
    mask = ctx.visible_mask() & True  # a writable copy: every validity constraint applies
    sims = ctx.store.vectors.similarities(ctx.vector(), wanted=mask)
    mask &= np.isfinite(sims)
    for mid in exclude:
        mask[ctx.store.idx(mid)] = False
    rows = np.flatnonzero(mask)
    if len(rows) == 0:
        return empty_candidates({"dense_score": pl.Float64()})
    return candidates_from_rows(ctx, rows, sims[rows], "dense_score", top_k=stage.fallback_top_k)


@register_fallback("graph")
def _graph(stage: CRAG, ctx: QueryContext, exclude: set[str]) -> pl.DataFrame:
    mem_act, _ = Graph(top_k=None).activate(ctx)
    mask = ctx.visible_mask() & (mem_act > 0.0)
    for mid in exclude:
        mask[ctx.store.idx(mid)] = False
    rows = np.flatnonzero(mask)
    if len(rows) == 0:
        return empty_candidates({"graph_score": pl.Float64()})
    return candidates_from_rows(
        ctx, rows, mem_act[rows], "graph_score", top_k=stage.fallback_top_k
    )


# ---------------------------------------------------------------------- the stage
def split_strips(text: str) -> list[str]:
    """Sentence strips: split after ``.``/``!``/``?`` followed by space, and at line breaks."""
    return [s.strip() for s in _SENTENCE.split(text) if s.strip()]


def _queries(
    queries: Any, store: MemoryStore, embedder: Any, cache: dict[Any, Any]
) -> list[QueryContext]:
    """Training queries as contexts (from contexts, mappings, or a frame of query rows)."""
    if isinstance(queries, pl.DataFrame):
        queries = queries.to_dicts()
    out = []
    for i, q in enumerate(queries):
        if isinstance(q, QueryContext):
            out.append(q)
            continue
        if not isinstance(q, Mapping):
            raise TypeError(
                f"crag.py: CRAG.fit field 'queries' entry {i} must be a QueryContext or a "
                f"mapping, got {type(q).__name__}"
            )
        for key in ("qid", "text", "now"):
            if q.get(key) is None:
                raise ValueError(f"crag.py: CRAG.fit field 'queries' entry {i} lacks '{key}'")
        out.append(
            QueryContext(
                qid=str(q["qid"]),
                text=str(q["text"]),
                store=store,
                now=float(q["now"]),
                client_id=q.get("client_id"),
                at_time=q.get("at_time"),
                include_superseded=bool(q.get("include_superseded", False)),
                embedder=embedder,
                cache=cache,
            )
        )
    return out


@register_stage("crag")
class CRAG(Stage):
    """Corrective RAG (Yan et al. 2024): grade candidates, keep/refine them or fall back.

    Args:
        evaluator: ``"learned"``, ``"similarity"`` or ``"llm"`` (see the module docstring).
        upper: Best score at or above which retrieval is Correct (paper: tuned per dataset).
        lower: Best score below which retrieval is Incorrect; also the keep threshold.
        strip_threshold: Sentence strips scoring below this are dropped from kept texts.
        fallback: ``"relax"`` or ``"graph"``.
        fallback_top_k: Rows the fallback retrieval returns (and training candidates per query
            when :meth:`fit` gets none).
        model: Classifier of the learned evaluator, ``"logistic"`` or ``"gbdt"``.
        C: Inverse regularisation strength of the logistic model.
        seed: Random seed of the model and of LLM decoding.
        prompt: Template of the ``llm`` evaluator (fields ``{query}`` and ``{document}``).
        max_new_tokens: Answer length of the ``llm`` evaluator.

    Attributes:
        model_: The fitted classifier (learned evaluator).
        n_train_: Training pairs seen by :meth:`fit`.
        n_positive_: Relevant training pairs.
    """

    @property
    def requires_fit(self) -> bool:
        """The learned evaluator must be fitted on training queries."""
        return self.evaluator == "learned"

    @property
    def imports(self) -> tuple[str, ...]:
        """The learned evaluator's classifier library (:data:`MODEL_IMPORTS`)."""
        return MODEL_IMPORTS.get(self.model, ()) if self.evaluator == "learned" else ()

    @property
    def needs_generator(self) -> bool:
        """The LLM judge asks the generator."""
        return self.evaluator == "llm"

    _parameter_constraints: ClassVar[dict[str, list[Any]]] = {
        "evaluator": [Options(str, CRAG_EVALUATORS)],
        "upper": [Interval(Real, 0, 1, closed="both")],
        "lower": [Interval(Real, 0, 1, closed="both")],
        "strip_threshold": [Interval(Real, 0, 1, closed="both")],
        "fallback": [Options(str, CRAG_FALLBACKS)],
        "fallback_top_k": [Interval(Integral, 1, None, closed="left")],
        "model": [Options(str, CRAG_MODELS)],
        "C": [Interval(Real, 0, None, closed="neither")],
        "seed": [Interval(Integral, 0, 2**32 - 1, closed="both")],
        "prompt": [
            Predicate(
                str,
                lambda v: "{query}" in v and "{document}" in v,
                "a str containing {query} and {document}",
            )
        ],
        "max_new_tokens": [Interval(Integral, 1, None, closed="left")],
    }

    columns = (
        score_column("crag_score", "retrieval evaluator score"),
        Column("crag_action", pl.String(), False, "correct, ambiguous or incorrect"),
        Column("low_confidence", pl.Boolean(), False, "found by a fallback"),
        Column("text", pl.String(), False, "the (refined) text"),
        score_column("dense_score", "cosine similarity to the query vector"),
        score_column("graph_score", "spreading activation from the query's entities"),
    )

    def __init__(
        self,
        evaluator: str = "learned",
        upper: float = 0.6,
        lower: float = 0.2,
        strip_threshold: float = 0.3,
        fallback: str = "relax",
        fallback_top_k: int = 20,
        model: str = "logistic",
        C: float = 1.0,  # noqa: N803 - scikit-learn's name
        seed: int = 0,
        prompt: str = DEFAULT_PROMPT,
        max_new_tokens: int = 4,
    ) -> None:
        self.evaluator = evaluator
        self.upper = upper
        self.lower = lower
        self.strip_threshold = strip_threshold
        self.fallback = fallback
        self.fallback_top_k = fallback_top_k
        self.model = model
        self.C = C
        self.seed = seed
        self.prompt = prompt
        self.max_new_tokens = max_new_tokens

    # ------------------------------------------------------------------ checks
    def _check(self) -> None:
        where = "crag.py: CRAG"
        for name, table in (
            ("evaluator", CRAG_EVALUATORS),
            ("fallback", CRAG_FALLBACKS),
            ("model", CRAG_MODELS),
        ):
            if getattr(self, name) not in table:
                raise ValueError(
                    f"{where} field '{name}' = {getattr(self, name)!r}; known: "
                    f"{', '.join(sorted(table))}"
                )
        for name in ("upper", "lower", "strip_threshold"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 <= v <= 1.0:
                raise ValueError(f"{where} field '{name}' must be in [0, 1], got {v!r}")
        if self.lower > self.upper:
            raise ValueError(
                f"{where} field 'lower' ({self.lower}) must not exceed 'upper' ({self.upper})"
            )
        k = self.fallback_top_k
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"{where} field 'fallback_top_k' must be an int >= 1, got {k!r}")

    # ------------------------------------------------------------------ training
    def fit(
        self,
        store: MemoryStore,
        *,
        queries: Any = None,
        relevant: Mapping[str, Collection[str]] | None = None,
        embedder: Any | None = None,
        candidates: Mapping[str, pl.DataFrame] | pl.DataFrame | None = None,
        fit_cache: dict[Any, Any] | None = None,
        **kwargs: Any,
    ) -> CRAG:
        """Train the learned evaluator (other evaluators need no training: returns at once).

        Args:
            store: The store the training queries run against.
            queries: Training queries: :class:`QueryContext` objects, mappings or a frame with
                ``qid``, ``text``, ``now`` and optionally ``client_id``, ``at_time``,
                ``include_superseded``.
            relevant: ``qid`` → relevant memory ids.
            embedder: Embeds the queries (and strips); needed by the ``dense`` feature.
            candidates: Each query's incoming candidate frame (``qid → frame`` or one frame
                with a ``qid`` column), e.g. the upstream pipeline's output. ``None``: the top
                ``fallback_top_k`` memories by dense similarity among the visible rows.
            fit_cache: A dict shared by fits on the same queries and candidates (the copies
                of one cross-fit, :class:`~memlab.eval.protocol.CrossFitted`): a query's
                feature matrix is computed once, by the first fit that meets the query.
            **kwargs: Ignored (a pipeline passes the same arguments to every stage).

        Positives are the relevant memories among a query's candidates, negatives the others.

        Raises:
            ValueError: Missing ``queries``/``relevant``, or a training set with one class only.
        """
        self._check()
        if self.evaluator != "learned":
            return self
        if queries is None or relevant is None:
            raise ValueError(
                "crag.py: CRAG.fit with evaluator='learned' needs queries= and relevant="
            )
        cache: dict[Any, Any] = {}
        contexts = _queries(queries, store, embedder, cache)
        if isinstance(candidates, pl.DataFrame):
            candidates = {
                str(k[0]): g for k, g in candidates.group_by("qid", maintain_order=True)
            }
        xs, ys = [], []
        for ctx in contexts:
            if candidates is not None:
                frame = candidates.get(ctx.qid)
                if frame is None:
                    continue
            else:
                frame = self._dense_candidates(ctx)
            if frame.height == 0:
                continue
            hit = None if fit_cache is None else fit_cache.get(("crag features", ctx.qid))
            if hit is None:
                frame = frame.sort("rank")
                ids = frame["mem_id"].to_list()
                x = candidate_features(
                    ctx,
                    store.rows_of(ids),
                    ranks=frame["rank"].to_numpy(),
                    scores=max_normalise(frame["score"].to_numpy()),
                )
                hit = (x, ids)
                if fit_cache is not None:
                    fit_cache[("crag features", ctx.qid)] = hit
            x, ids = hit
            wanted = set(relevant.get(ctx.qid, ()))
            xs.append(x)
            ys.append(np.asarray([m in wanted for m in ids], dtype=int))
        if not xs:
            raise ValueError("crag.py: CRAG.fit found no training candidates for the queries")
        self.model_, self.n_train_, self.n_positive_ = fit_classifier(
            xs, ys, self.model, self.C, self.seed, owner="crag.py: CRAG.fit"
        )
        self.feature_names_ = FEATURE_NAMES
        return self

    def _dense_candidates(self, ctx: QueryContext) -> pl.DataFrame:
        visible = ctx.visible_mask()
        sims = ctx.store.vectors.similarities(ctx.vector(), wanted=visible)
        rows = np.flatnonzero(visible & np.isfinite(sims))
        if len(rows) == 0:
            return empty_candidates({"dense_score": pl.Float64()})
        return candidates_from_rows(ctx, rows, sims[rows], "dense_score",
                                    top_k=self.fallback_top_k)

    # ------------------------------------------------------------------ grading
    def score(self, ctx: QueryContext, batch: EvalBatch) -> np.ndarray:
        """Relevance of each text of ``batch`` in ``[0, 1]`` by the configured evaluator."""
        self._check()
        return CRAG_EVALUATORS[self.evaluator](self, ctx, batch)

    def refine(
        self, ctx: QueryContext, rows: np.ndarray, ranks: np.ndarray, scores: np.ndarray
    ) -> list[str]:
        """Decompose-then-recompose the texts of ``rows`` (see the module docstring)."""
        texts = [ctx.store.record_at(int(r)).text for r in rows]
        strips = [split_strips(t) for t in texts]
        owner = [i for i, s in enumerate(strips) if len(s) > 1 for _ in s]
        flat = [x for s in strips if len(s) > 1 for x in s]
        if not flat:
            return texts
        idx = np.asarray(owner, dtype=np.int64)
        strip_scores = self.score(
            ctx, EvalBatch(rows=rows[idx], ranks=ranks[idx], scores=scores[idx], texts=flat)
        )
        out = list(texts)
        pos = 0
        for i, s in enumerate(strips):
            if len(s) <= 1:
                continue
            sc = strip_scores[pos : pos + len(s)]
            pos += len(s)
            keep = [x for x, v in zip(s, sc, strict=True) if v >= self.strip_threshold]
            out[i] = " ".join(keep) if keep else s[int(np.argmax(sc))]
        return out

    def transform(self, frame: pl.DataFrame, ctx: QueryContext) -> pl.DataFrame:
        self._check()
        store = ctx.store
        frame = by_rank(frame)
        rows = frame_rows(frame, ctx)
        if len(rows):
            visible = ctx.visible_mask()[rows]
            frame, rows = keep_rows(frame, visible), rows[visible]
        ranks = frame["rank"].to_numpy().astype(np.int64)
        norm = max_normalise(frame["score"].to_numpy())
        scores = self.score(ctx, EvalBatch(rows=rows, ranks=ranks, scores=norm))
        max_score = float(scores.max()) if len(scores) else None
        if max_score is not None and max_score >= self.upper:
            action = "correct"
        elif max_score is None or max_score < self.lower:
            action = "incorrect"
        else:
            action = "ambiguous"

        parts = []
        keep = np.flatnonzero(scores >= self.lower) if action != "incorrect" else np.zeros(0, int)
        if len(keep):
            texts = self.refine(ctx, rows[keep], ranks[keep], norm[keep])
            kept = drop_columns(
                take_rows(frame, keep), "crag_score", "crag_action", "low_confidence", "text"
            )
            parts.append(
                with_series(
                    kept,
                    f64_series("crag_score", scores[keep]),
                    pl.Series("low_confidence", np.zeros(len(keep), dtype=bool)),
                    pl.Series("text", texts, dtype=pl.String),
                )
            )
        n_fallback = 0
        if action != "correct":
            found = CRAG_FALLBACKS[self.fallback](self, ctx, set(frame["mem_id"].to_list()))
            n_fallback = found.height
            if found.height:
                f_rows = frame_rows(found, ctx)
                f_scores = self.score(
                    ctx,
                    EvalBatch(
                        rows=f_rows,
                        ranks=found["rank"].to_numpy().astype(np.int64),
                        scores=max_normalise(found["score"].to_numpy()),
                    ),
                )
                parts.append(
                    with_series(
                        found,
                        f64_series("crag_score", f_scores),
                        pl.Series("low_confidence", np.ones(found.height, dtype=bool)),
                        pl.Series("text", [store.record_at(int(r)).text for r in f_rows],
                                  dtype=pl.String),
                    )
                )
        ctx.trace["crag"] = {
            "action": action,
            "max_score": max_score,
            "n_kept": int(len(keep)),
            "n_discarded": int(frame.height - len(keep)),
            "n_fallback": n_fallback,
        }
        extra = {"crag_score": pl.Float64(), "crag_action": pl.String(),
                 "low_confidence": pl.Boolean(), "text": pl.String()}
        if not parts:
            return empty_candidates(extra)
        out = parts[0] if len(parts) == 1 else pl.concat(parts, how="diagonal_relaxed")
        out = with_series(
            out,
            pl.Series("crag_action", [action] * out.height, dtype=pl.String),
            i64_series("rank", np.arange(1, out.height + 1)),
        )
        return select_columns(
            out, [*CANDIDATE_SCHEMA, *(c for c in out.columns if c not in CANDIDATE_SCHEMA)]
        )
