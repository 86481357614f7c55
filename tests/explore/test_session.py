"""Datasets, fast mode and the replay that stops before one query."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from memlab.datasets.format import Query, write_dataset
from memlab.embed import HashingEmbedder
from memlab.explore import session
from memlab.pipeline import Pipeline

if str(Path(__file__).parent) not in sys.path:  # --import-mode=importlib: helpers by path
    sys.path.insert(0, str(Path(__file__).parent))
from _explore_fixtures import DAY, T0, Newest, small_dataset  # noqa: E402


@pytest.mark.parametrize(
    ("value", "expected"),
    [("1", True), ("true", True), (" Yes ", True), ("on", True), ("0", False), ("", False)],
)
def test_fast_mode_reads_the_environment_variable(value, expected):
    assert session.fast_mode({"MEMLAB_NOTEBOOK_FAST": value}) is expected


def test_fast_mode_is_off_when_the_variable_is_unset():
    assert session.fast_mode({}) is False


def _checkout(root: Path) -> Path:
    (root / "src" / "memlab").mkdir(parents=True)
    (root / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    return root


def test_project_root_walks_up_to_the_checkout(tmp_path):
    root = _checkout(tmp_path / "repo")
    deep = root / "notebooks" / "sub"
    deep.mkdir(parents=True)
    assert session.project_root(deep) == root.resolve()


def test_project_root_falls_back_to_the_installed_checkout(tmp_path):
    here = Path(session.__file__).resolve().parents[3]
    assert session.project_root(tmp_path) == here


def _write(path: Path) -> None:
    write_dataset(small_dataset(), path)


def test_find_datasets_lists_shipped_ones_then_fixtures(tmp_path):
    for rel in ("datasets/b", "datasets/a", "tests/fixtures/x"):
        _write(tmp_path / rel)
    broken = tmp_path / "datasets" / "c"
    _write(broken)
    (broken / "queries.jsonl").unlink()
    found = session.find_datasets(tmp_path)
    assert [p.relative_to(tmp_path).as_posix() for p in found] == [
        "datasets/a",
        "datasets/b",
        "tests/fixtures/x",
    ]


def test_open_dataset_falls_back_to_the_fixture_and_says_why(tmp_path):
    _write(tmp_path / "tests" / "fixtures" / "handmade")
    ds, skipped = session.open_dataset(root=tmp_path)
    assert ds.path == tmp_path / "tests" / "fixtures" / "handmade"
    assert skipped == [f"{tmp_path / 'datasets' / 'agent-memories'}: not a dataset directory"]


def test_open_dataset_prefers_the_shipped_dataset(tmp_path):
    _write(tmp_path / "datasets" / "agent-memories")
    _write(tmp_path / "tests" / "fixtures" / "handmade")
    ds, skipped = session.open_dataset(root=tmp_path)
    assert (ds.path, skipped) == (tmp_path / "datasets" / "agent-memories", [])


def test_open_dataset_without_any_dataset_raises(tmp_path):
    with pytest.raises(FileNotFoundError, match="no default dataset loads"):
        session.open_dataset(root=tmp_path)


def test_dataset_options_label_paths_relative_to_the_root(tmp_path):
    opts = session.dataset_options([tmp_path / "datasets" / "a", "/elsewhere/b"], root=tmp_path)
    assert opts == {
        "datasets/a": str((tmp_path / "datasets" / "a").resolve()),
        "/elsewhere/b": "/elsewhere/b",
    }


def test_dataset_choices_and_picked_dataset(tmp_path):
    _write(tmp_path / "datasets" / "agent-memories")
    _write(tmp_path / "datasets" / "other")
    default, _ = session.open_dataset(root=tmp_path)
    options, label = session.dataset_choices(default, root=tmp_path)
    assert list(options) == ["datasets/agent-memories", "datasets/other"]
    assert label == "datasets/agent-memories"
    assert session.picked_dataset(options[label], default) is default
    other = session.picked_dataset(options["datasets/other"], default)
    assert other.path == tmp_path / "datasets" / "other"
    with pytest.raises(ValueError):
        session.picked_dataset(str(tmp_path / "nothing"), default)


def test_notebook_embedder_in_fast_mode_is_the_hashing_embedder():
    emb = session.notebook_embedder(True, dim=32)
    assert isinstance(emb, HashingEmbedder)
    assert emb.model_id == "hashing-d32-s0-c0"


def _q(qid: str, tag: str | None) -> Query:
    return Query(0, qid, T0, "text", tags=(tag,) if tag else ())


def test_sample_queries_keeps_the_first_of_each_primary_tag():
    qs = [_q("a", "x"), _q("b", "x"), _q("c", "y"), _q("d", "x"), _q("e", None), _q("f", "y")]
    assert [q.qid for q in session.sample_queries(qs, per_tag=1)] == ["a", "c", "e"]
    assert [q.qid for q in session.sample_queries(qs, per_tag=2)] == ["a", "b", "c", "e", "f"]


def test_sample_queries_rejects_a_non_positive_count():
    with pytest.raises(ValueError, match="field 'per_tag'"):
        session.sample_queries([], per_tag=0)


def test_query_label_cuts_long_texts():
    q = Query(0, "q7", T0, "abcdefghij", tags=("paraphrase",))
    assert session.query_label(q, width=6) == "q7 [paraphrase] abcde…"
    assert session.query_label(_q("q8", None)) == "q8 [-] text"


def test_queries_table_and_options():
    ds = small_dataset()
    table = session.queries_table(ds)
    assert table.rows() == [
        ("q1", "supersession", "acme", "where is the acme shop hosted", 1),
        ("q2", "scope", "acme", "what does acme bill with", 1),
    ]
    assert list(session.query_options(ds.queries).values()) == ["q1", "q2"]


def test_find_query_names_the_dataset():
    with pytest.raises(ValueError, match="dataset small: queries.jsonl has no query"):
        session.find_query(small_dataset(), "nope")


def test_replay_to_query_stops_before_the_query_and_maps_ids():
    rep = session.make_replayer(small_dataset(), HashingEmbedder(dim=16))
    state = session.replay_to_query(rep, "q2")
    store = state.store
    # d4 comes after q2, d2 deduplicates onto d1: two records.
    assert store.ids == ["d1", "d3"]
    assert state.ctx.now == T0 + 3 * DAY
    assert state.ctx.client_id == "acme"
    assert state.ctx.trace == {}
    assert state.id_map == {"d1": "d1", "d2": "d1", "d3": "d3"}
    assert state.relevant == {"d1": 2}
    assert state.stale == ["d3"]
    # Without a pipeline no query touched anything.
    assert list(store.column("access_count")) == [0, 0]


def test_replay_to_query_with_a_pipeline_replays_earlier_accesses_only():
    rep = session.make_replayer(small_dataset(), HashingEmbedder(dim=16), touch_k=1)
    state = session.replay_to_query(rep, "q2", pipeline=Pipeline([("newest", Newest())]))
    # q1 (day 1.5) saw only d1 and touched it; q2 itself touched nothing.
    assert list(state.store.column("access_count")) == [1, 0]
    assert state.store.get("d1").last_accessed_at == T0 + 1.5 * DAY


def test_replay_to_the_first_query_sees_only_its_past():
    rep = session.make_replayer(small_dataset(), HashingEmbedder(dim=16))
    state = session.replay_to_query(rep, "q1", pipeline=Pipeline([("newest", Newest())]))
    assert state.store.ids == ["d1"]
    assert state.relevant == {"d1": 1}
    assert list(state.store.column("access_count")) == [0]
