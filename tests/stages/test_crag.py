"""Corrective RAG: evaluator training, the three actions, refinement and the fallbacks.

Uses the shared 13-memory store of ``conftest.py`` (fixtures ``store`` and ``make_ctx``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

import numpy as np
import polars as pl
import pytest

from memlab.embed.hashing import HashingEmbedder
from memlab.memory.store import MemoryStore
from memlab.stages.base import QueryContext, check_frame, empty_candidates, get_stage_class
from memlab.stages.crag import CRAG, CRAG_EVALUATORS, EvalBatch, split_strips
from memlab.stages.features import FEATURE_NAMES, candidate_features, max_normalise
from memlab.timeutil import SECONDS_PER_DAY

GLOBEX = ["globex-cms", "globex-call", "globex-blog"]


def _frame(ids: list[str], scores: list[float] | None = None) -> pl.DataFrame:
    scores = scores if scores is not None else [1.0 - 0.1 * i for i in range(len(ids))]
    return pl.DataFrame(
        {"qid": ["q1"] * len(ids), "mem_id": ids, "score": scores,
         "rank": list(range(1, len(ids) + 1))},
        schema={"qid": pl.String, "mem_id": pl.String, "score": pl.Float64, "rank": pl.Int64},
    )


@pytest.fixture
def stub(monkeypatch: pytest.MonkeyPatch) -> Callable[..., str]:
    """``stub(memory_scores, strip_scores)`` registers evaluator ``"stub"`` and returns its name.

    Memories score by id (unknown ids 0.0), strips by text (unknown strips 0.0).
    """

    def install(
        by_id: Mapping[str, float], by_strip: Mapping[str, float] | None = None
    ) -> str:
        def evaluate(stage: CRAG, ctx: QueryContext, batch: EvalBatch) -> np.ndarray:
            if batch.texts is None:
                return np.array(
                    [by_id.get(ctx.store.record_at(int(r)).id, 0.0) for r in batch.rows]
                )
            return np.array([(by_strip or {}).get(t, 0.0) for t in batch.texts])

        monkeypatch.setitem(CRAG_EVALUATORS, "stub", evaluate)
        return "stub"

    return install


def test_registered_under_crag() -> None:
    assert get_stage_class("crag") is CRAG


# ---------------------------------------------------------------------- actions
def test_correct_keeps_candidates_above_lower(stub, make_ctx) -> None:
    ev = stub({"globex-cms": 0.7, "globex-call": 0.3, "globex-blog": 0.1})
    ctx = make_ctx("globex", client_id="globex")
    out = CRAG(evaluator=ev).transform(_frame(GLOBEX), ctx)
    check_frame(out, "crag")
    assert out["mem_id"].to_list() == ["globex-cms", "globex-call"]
    assert out["crag_score"].to_list() == [0.7, 0.3]
    assert out["crag_action"].to_list() == ["correct", "correct"]
    assert out["low_confidence"].to_list() == [False, False]
    assert out["score"].to_list() == [1.0, 0.9]
    assert out["rank"].to_list() == [1, 2]
    assert out["text"].to_list() == [
        "Globex uses WordPress as its CMS",
        "Globex marketing call about the spring campaign",
    ]
    assert ctx.trace["crag"] == {"action": "correct", "max_score": 0.7, "n_kept": 2,
                                 "n_discarded": 1, "n_fallback": 0}


def test_upper_threshold_is_inclusive(stub, make_ctx) -> None:
    ev = stub({"globex-cms": 0.6})
    ctx = make_ctx("globex", client_id="globex")
    out = CRAG(evaluator=ev).transform(_frame(GLOBEX), ctx)
    assert ctx.trace["crag"]["action"] == "correct"
    assert out["mem_id"].to_list() == ["globex-cms"]


def _relaxed_dense_order(store: MemoryStore, ctx: QueryContext, exclude: list[str]) -> list[str]:
    mask = store.visible_mask(client_id=ctx.client_id, now=ctx.now)
    sims = store.vectors.similarities(store.embedder.embed([ctx.text])[0])
    pairs = [(store.record_at(i).id, sims[i]) for i in np.flatnonzero(mask)]
    pairs = [p for p in pairs if p[0] not in exclude]
    return [m for m, _ in sorted(pairs, key=lambda p: (-p[1], p[0]))]


def test_ambiguous_keeps_filtered_and_adds_fallback(stub, store, make_ctx) -> None:
    ev = stub({"globex-cms": 0.5, "globex-call": 0.2, "globex-blog": 0.1})
    ctx = make_ctx("globex marketing", client_id="globex")
    out = CRAG(evaluator=ev).transform(_frame(GLOBEX), ctx)
    fallback = _relaxed_dense_order(store, ctx, GLOBEX)
    assert set(fallback) == {"globex-seo", "brain-sqlite", "team-meeting"}
    assert out["mem_id"].to_list() == ["globex-cms", "globex-call", *fallback]
    assert out["low_confidence"].to_list() == [False, False, True, True, True]
    assert set(out["crag_action"].to_list()) == {"ambiguous"}
    assert ctx.trace["crag"]["action"] == "ambiguous"
    assert ctx.trace["crag"]["n_fallback"] == 3


def test_lower_threshold_is_ambiguous_not_incorrect(stub, make_ctx) -> None:
    ev = stub({"globex-cms": 0.2})
    ctx = make_ctx("globex", client_id="globex")
    out = CRAG(evaluator=ev).transform(_frame(GLOBEX), ctx)
    assert ctx.trace["crag"]["action"] == "ambiguous"
    assert out["mem_id"].to_list()[0] == "globex-cms"


def test_incorrect_discards_and_flags_low_confidence(stub, store, make_ctx) -> None:
    ev = stub({"globex-cms": 0.19, "globex-call": 0.1})
    ctx = make_ctx("globex marketing", client_id="globex")
    out = CRAG(evaluator=ev).transform(_frame(GLOBEX), ctx)
    check_frame(out, "crag")
    assert out["mem_id"].to_list() == _relaxed_dense_order(store, ctx, GLOBEX)
    assert out["low_confidence"].to_list() == [True] * out.height
    assert set(out["crag_action"].to_list()) == {"incorrect"}
    assert ctx.trace["crag"] == {"action": "incorrect", "max_score": 0.19, "n_kept": 0,
                                 "n_discarded": 3, "n_fallback": 3}
    # Fallback rows carry their full text and a score.
    assert out["text"].to_list() == [store.get(m).text for m in out["mem_id"].to_list()]
    assert out["crag_score"].to_list() == [0.0] * out.height


def test_empty_candidates_count_as_incorrect(stub, make_ctx) -> None:
    ev = stub({})
    ctx = make_ctx("globex marketing", client_id="globex")
    out = CRAG(evaluator=ev, fallback_top_k=2).transform(empty_candidates(), ctx)
    assert out.height == 2
    assert ctx.trace["crag"]["action"] == "incorrect"
    assert ctx.trace["crag"]["max_score"] is None


def test_relax_keeps_at_time_and_scope(stub, make_ctx) -> None:
    ev = stub({})
    t = make_ctx("").now - 97 * SECONDS_PER_DAY  # T0 + 3 days: acme-stack-1 was valid
    ctx = make_ctx("acme website stack", client_id="acme", at_time=t)
    out = CRAG(evaluator=ev).transform(_frame(["acme-stack-1"]), ctx)
    ids = out["mem_id"].to_list()
    assert "acme-stack-2" not in ids  # valid now, not at at_time
    assert "acme-stack-1" not in ids  # already judged
    assert not any(m.startswith("globex") for m in ids)  # scope kept
    assert ids  # it still broadens: other acme memories valid at t come back


@pytest.mark.parametrize("days_before_now", [0, 1, 50, 96, 97, 98, 99, 100])
@pytest.mark.parametrize("fallback", ["relax", "graph"])
def test_fallback_never_returns_a_version_not_valid_at_at_time(
    stub, make_ctx, days_before_now: int, fallback: str
) -> None:
    ev = stub({})  # everything graded incorrect: only the fallback's rows come back
    t = make_ctx("").now - days_before_now * SECONDS_PER_DAY
    for client in ("acme", "globex", None):
        ctx = make_ctx("acme website stack globex cms", client_id=client, at_time=t)
        out = CRAG(evaluator=ev, fallback=fallback).transform(empty_candidates(), ctx)
        valid = {ctx.store.record_at(int(i)).id for i in np.flatnonzero(ctx.visible_mask())}
        assert set(out["mem_id"].to_list()) <= valid


def test_graph_fallback_expands_from_query_entities(stub, make_ctx) -> None:
    ev = stub({})
    ctx = make_ctx("Does Globex still run WordPress?", client_id="globex")
    out = CRAG(evaluator=ev, fallback="graph").transform(_frame(["globex-call"]), ctx)
    assert out["mem_id"].to_list()[0] == "globex-cms"
    assert "graph_score" in out.columns
    assert "globex-call" not in out["mem_id"].to_list()
    assert out["low_confidence"].to_list() == [True] * out.height


# ---------------------------------------------------------------------- refinement
def test_split_strips() -> None:
    assert split_strips("Acme uses Next.js. It rained!  Deploys run on Vercel.\nDone") == [
        "Acme uses Next.js.", "It rained!", "Deploys run on Vercel.", "Done",
    ]


def _strip_store() -> tuple[MemoryStore, QueryContext]:
    store = MemoryStore(embedder=HashingEmbedder(dim=64, seed=0))
    store.store("Acme uses Next.js. The weather was nice! Deploys run on Vercel.", "event",
                source_agent="bot", now=0.0, id="long")
    store.store("Short note.", "event", source_agent="bot", now=0.0, id="short")
    ctx = QueryContext(qid="q1", text="acme", store=store, now=10.0, embedder=store.embedder)
    return store, ctx


def test_refine_drops_weak_strips(stub) -> None:
    _, ctx = _strip_store()
    ev = stub({"long": 0.9, "short": 0.8},
              {"Acme uses Next.js.": 0.9, "The weather was nice!": 0.1,
               "Deploys run on Vercel.": 0.3})
    out = CRAG(evaluator=ev, strip_threshold=0.3).transform(_frame(["long", "short"]), ctx)
    assert out["text"].to_list() == ["Acme uses Next.js. Deploys run on Vercel.", "Short note."]


def test_refine_keeps_best_strip_when_all_fail(stub) -> None:
    _, ctx = _strip_store()
    ev = stub({"long": 0.9},
              {"Acme uses Next.js.": 0.1, "The weather was nice!": 0.2,
               "Deploys run on Vercel.": 0.2})
    out = CRAG(evaluator=ev, strip_threshold=0.3).transform(_frame(["long"]), ctx)
    assert out["text"].to_list() == ["The weather was nice!"]


# ---------------------------------------------------------------------- evaluators
def test_similarity_evaluator_is_clipped_cosine(store, make_ctx) -> None:
    ctx = make_ctx("Globex WordPress CMS", client_id="globex")
    ids = ["globex-cms", "globex-call"]
    out = CRAG(evaluator="similarity", lower=0.0, upper=0.0).transform(_frame(ids), ctx)
    sims = store.vectors.similarities(store.embedder.embed([ctx.text])[0])
    want = [min(max(float(sims[store.idx(m)]), 0.0), 1.0) for m in ids]
    np.testing.assert_allclose(out["crag_score"].to_numpy(), want, rtol=1e-6)


class _YesIfWordPress:
    model_id = "stub-judge"

    def generate(self, prompt: str, *, max_new_tokens: int = 128, temperature: float = 0.0,
                 seed: int = 0) -> str:
        document = prompt.split("Document: ", 1)[1].split("\n", 1)[0]
        if "WordPress" in document:
            return " Yes."
        return "no" if "call" in document else "maybe"


def test_llm_evaluator_maps_answers(make_ctx) -> None:
    ctx = make_ctx("Which CMS does Globex use?", client_id="globex", generator=_YesIfWordPress())
    out = CRAG(evaluator="llm").transform(_frame(GLOBEX), ctx)
    assert ctx.trace["crag"]["action"] == "correct"
    assert out["mem_id"].to_list() == ["globex-cms", "globex-blog"]
    assert out["crag_score"].to_list() == [1.0, 0.5]


def test_llm_evaluator_needs_a_generator(make_ctx) -> None:
    with pytest.raises(ValueError, match="generator"):
        CRAG(evaluator="llm").transform(_frame(GLOBEX), make_ctx("cms", client_id="globex"))


TRAIN = [
    {"qid": "t1", "text": "Which CMS does Globex use?"},
    {"qid": "t2", "text": "What database did Acme choose for billing?"},
    {"qid": "t3", "text": "Where does the shared brain store memories?"},
    {"qid": "t4", "text": "When is the weekly team meeting?"},
]
RELEVANT = {"t1": ["globex-cms"], "t2": ["acme-db"], "t3": ["brain-sqlite"],
            "t4": ["team-meeting"]}


def _fit(store: MemoryStore, now: float, **params: object) -> CRAG:
    queries = [{**q, "now": now} for q in TRAIN]
    return CRAG(**params).fit(store, queries=queries, relevant=RELEVANT,
                              embedder=store.embedder)


def test_learned_evaluator_separates_relevant_from_irrelevant(store, make_ctx) -> None:
    ctx = make_ctx("Is the Globex SEO audit complete?")
    crag = _fit(store, ctx.now)
    # 12 visible memories per query (the superseded fact is hidden), one relevant each.
    assert (crag.n_train_, crag.n_positive_) == (4 * 12, 4)
    rows = np.array([store.idx("globex-seo"), store.idx("team-meeting")])
    scores = crag.score(ctx, EvalBatch(rows=rows, ranks=np.array([1, 2]),
                                       scores=np.array([1.0, 1.0])))
    assert scores[0] > scores[1]
    out = crag.transform(_frame(["globex-seo", "team-meeting", "acme-deploy"]), ctx)
    assert out.filter(~pl.col("low_confidence"))["mem_id"].to_list() == ["globex-seo"]


def test_learned_fit_is_deterministic(store, make_ctx) -> None:
    now = make_ctx("").now
    a, b = _fit(store, now), _fit(store, now)
    assert a.model_.coef_.tobytes() == b.model_.coef_.tobytes()
    gb = _fit(store, now, model="gbdt")
    assert gb.model_.predict_proba(np.zeros((1, len(FEATURE_NAMES)))).shape == (1, 2)


def test_fit_on_given_candidates(store, make_ctx) -> None:
    now = make_ctx("").now
    frame = pl.concat([
        _frame(["globex-cms", "globex-call"]).with_columns(pl.lit("t1").alias("qid")),
        _frame(["acme-deploy", "acme-db"]).with_columns(pl.lit("t2").alias("qid")),
    ])
    crag = CRAG().fit(store, queries=[{**q, "now": now} for q in TRAIN[:2]],
                      relevant=RELEVANT, embedder=store.embedder, candidates=frame)
    assert (crag.n_train_, crag.n_positive_) == (4, 2)


def test_cross_fitted_copies_share_each_querys_features(store, make_ctx, monkeypatch) -> None:
    from memlab.eval.protocol import CrossFitted
    from memlab.stages import crag as crag_module

    now = make_ctx("").now
    queries = [{**q, "now": now} for q in TRAIN]
    folds = {"t1": 0, "t2": 0, "t3": 1, "t4": 1}
    computed: list[str] = []
    features = crag_module.candidate_features

    def counting(ctx, *args, **kwargs):
        computed.append(ctx.qid)
        return features(ctx, *args, **kwargs)

    monkeypatch.setattr(crag_module, "candidate_features", counting)
    crossed = CrossFitted(CRAG(), folds).fit(
        store, queries=queries, relevant=RELEVANT, embedder=store.embedder
    )
    assert sorted(computed) == ["t1", "t2", "t3", "t4"]  # once each, not once per fold
    # each copy as if fitted alone on the queries outside its fold
    for fold, copy in enumerate(crossed.fitted_):
        alone = CRAG().fit(store, queries=[q for q in queries if folds[q["qid"]] != fold],
                           relevant=RELEVANT, embedder=store.embedder)
        assert copy.model_.coef_.tobytes() == alone.model_.coef_.tobytes()
        assert (copy.n_train_, copy.n_positive_) == (2 * 12, 2)


def test_unfitted_learned_evaluator_raises(make_ctx) -> None:
    with pytest.raises(ValueError, match="not fitted"):
        CRAG().transform(_frame(GLOBEX), make_ctx("cms", client_id="globex"))


def test_fit_needs_both_classes(store, make_ctx) -> None:
    with pytest.raises(ValueError, match="relevant and irrelevant"):
        CRAG().fit(store, queries=[{**TRAIN[0], "now": make_ctx("").now}],
                   relevant={"t1": []}, embedder=store.embedder)
    with pytest.raises(ValueError, match="lacks 'now'"):
        CRAG().fit(store, queries=TRAIN, relevant=RELEVANT, embedder=store.embedder)


def test_bad_parameters_name_the_field(make_ctx) -> None:
    ctx = make_ctx("cms")
    with pytest.raises(ValueError, match="'evaluator'"):
        CRAG(evaluator="oracle").transform(_frame(GLOBEX), ctx)
    with pytest.raises(ValueError, match="'lower'"):
        CRAG(evaluator="similarity", lower=0.7, upper=0.6).transform(_frame(GLOBEX), ctx)


# ---------------------------------------------------------------------- features
def test_features_by_hand(store, make_ctx) -> None:
    ctx = make_ctx("WordPress")
    rows = np.array([store.idx("globex-cms"), store.idx("team-meeting")])
    x = candidate_features(ctx, rows, ranks=[1, 4], scores=max_normalise([2.0, 1.0]))
    col = {name: x[:, j] for j, name in enumerate(FEATURE_NAMES)}
    # One query entity (WordPress), named by globex-cms only: Jaccard 1/1 and 0/1.
    assert col["entity_overlap"].tolist() == [1.0, 0.0]
    assert col["type_fact"].tolist() == [1.0, 0.0]
    assert col["type_event"].tolist() == [0.0, 1.0]
    # Created on day 6 and day 12; the query runs on day 100.
    assert col["recency"].tolist() == pytest.approx([np.log1p(94.0), np.log1p(88.0)])
    assert col["rank_reciprocal"].tolist() == [1.0, 1 / 4]
    assert col["score_norm"].tolist() == [1.0, 0.5]
    # BM25 of a one-term query: "wordpress" occurs once in one of 12 visible memories.
    idf = np.log(1 + (12 - 1 + 0.5) / (1 + 0.5))
    lengths = [len(re.findall(r"\w+", store.get(m).text)) for m in store.ids
               if store.get(m).active]
    avgdl = sum(lengths) / len(lengths)
    tf_part = 1 * 2.5 / (1 + 1.5 * (1 - 0.75 + 0.75 * 6 / avgdl))
    assert col["bm25"].tolist() == pytest.approx([idf * tf_part / (idf * 2.5), 0.0])


def test_a_learned_crag_names_its_classifier_library_for_workers_to_import_ahead():
    from memlab.eval.experiment import stage_imports
    from memlab.pipeline import Pipeline
    from memlab.stages.ltr import LearnedFusion

    assert CRAG(evaluator="learned").imports == ("sklearn.linear_model",)
    assert CRAG(evaluator="learned", model="gbdt").imports == ("sklearn.ensemble",)
    assert CRAG(evaluator="similarity").imports == ()
    assert LearnedFusion(model="gbdt").imports == ("sklearn.ensemble",)
    pipes = [
        Pipeline([("crag", CRAG(evaluator="learned"))], name="a"),
        Pipeline([("crag", CRAG(evaluator="similarity")),
                  ("ltr", LearnedFusion(model="logistic"))], name="b"),
        Pipeline([("ltr", LearnedFusion(model="gbdt"))], name="c"),
    ]
    assert stage_imports(pipes) == ("sklearn.linear_model", "sklearn.ensemble")


def test_max_normalise_gives_a_missing_score_zero_not_every_candidate() -> None:
    assert max_normalise([1.0, float("nan"), 0.5, -2.0]).tolist() == [1.0, 0.0, 0.5 / 1.0, 0.0]
