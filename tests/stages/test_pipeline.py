"""Tests for memlab.pipeline: composition, parameters, cloning and TOML configurations."""

from __future__ import annotations

import tomllib
from pathlib import Path

import polars as pl
import pytest

from memlab.pipeline import (
    ConfigError,
    Parallel,
    Pipeline,
    dumps_toml,
    load_pipeline,
    pipeline_from_config,
)
from memlab.stages.base import empty_candidates
from memlab.stages.bm25 import BM25
from memlab.stages.context import Context
from memlab.stages.dense import Dense
from memlab.stages.hyde import HyDE
from memlab.stages.lifecycle import Lifecycle
from memlab.stages.mmr import MMR
from memlab.stages.rrf import RRF


def hybrid() -> Pipeline:
    retrieve = Parallel(
        branches=[("dense", Dense(top_k=20)), ("bm25", BM25(top_k=20))], fuse=("rrf", RRF())
    )
    return Pipeline(
        steps=[("retrieve", retrieve), ("lifecycle", Lifecycle()), ("mmr", MMR(top_k=5))],
        name="hybrid",
        description="dense + BM25, RRF, lifecycle, MMR",
    )


def test_rshift_composes_named_steps(make_ctx) -> None:
    pipe = Dense(top_k=10) >> Lifecycle() >> Context(max_items=3)
    assert isinstance(pipe, Pipeline)
    assert [n for n, _ in pipe.steps] == ["dense", "lifecycle", "context"]
    twice = Dense() >> Dense(top_k=3)
    assert [n for n, _ in twice.steps] == ["dense", "dense_2"]
    ctx = make_ctx("Acme website")
    out = pipe.run(ctx)
    by_hand = Lifecycle().transform(Dense(top_k=10).transform(empty_candidates(), ctx), ctx)
    assert out.drop("text", "tokens").equals(by_hand)
    assert ctx.context_text.startswith("- [")
    assert set(ctx.trace["timings"]) == {"dense", "lifecycle", "context"}


def test_parallel_fuses_branches_with_rrf(make_ctx) -> None:
    ctx = make_ctx("Acme website migration")
    out = hybrid().run(ctx)
    dense = Dense(top_k=20).transform(empty_candidates(), ctx)
    bm25 = BM25(top_k=20).transform(empty_candidates(), ctx)
    fused = RRF().fuse([dense, bm25], ctx)
    assert hybrid().stage("retrieve").transform(empty_candidates(), ctx).equals(fused)
    expected = MMR(top_k=5).transform(Lifecycle().transform(fused, ctx), ctx)
    assert out.equals(expected)
    assert {"dense", "bm25", "rrf", "lifecycle", "mmr"} <= set(ctx.trace["timings"])


def test_observer_sees_every_stage_with_its_input_and_output(make_ctx) -> None:
    ctx = make_ctx("Acme website migration")
    seen: list[tuple[str, str, pl.DataFrame, pl.DataFrame]] = []
    out = hybrid().run(ctx, observer=lambda n, s, a, b: seen.append((n, type(s).__name__, a, b)))
    assert [(n, k) for n, k, _, _ in seen] == [
        ("dense", "Dense"), ("bm25", "BM25"), ("rrf", "RRF"), ("retrieve", "Parallel"),
        ("lifecycle", "Lifecycle"), ("mmr", "MMR"),
    ]
    empty = empty_candidates()
    dense = Dense(top_k=20).transform(empty, ctx)
    fused = RRF().fuse([dense, BM25(top_k=20).transform(empty, ctx)], ctx)
    assert seen[0][2].equals(empty) and seen[0][3].equals(dense)
    assert seen[2][2].equals(empty) and seen[2][3].equals(fused)  # fusion: the step's input
    assert seen[3][3].equals(fused)
    assert seen[4][2].equals(fused) and seen[5][2].equals(seen[4][3])
    assert seen[5][3].equals(out)
    # The same path as without an observer: same output, timings of every stage.
    assert out.equals(hybrid().run(make_ctx("Acme website migration")))
    assert {"dense", "bm25", "rrf", "lifecycle", "mmr"} <= set(ctx.trace["timings"])


def test_parallel_needs_a_fusion_stage(make_ctx) -> None:
    with pytest.raises(ValueError, match="fusion stage"):
        Parallel(branches=[("dense", Dense())]).transform(empty_candidates(), make_ctx("x"))


def test_get_and_set_params() -> None:
    pipe = hybrid()
    params = pipe.get_params()
    assert params["rrf__k"] == 60.0
    assert params["dense__top_k"] == 20
    assert params["lifecycle__decay_factor"] == 0.98
    pipe.set_params(rrf__k=30, lifecycle__decaying_types=("fact",), name="renamed")
    assert pipe.stage("rrf").k == 30
    assert pipe.stage("lifecycle").decaying_types == ("fact",)
    assert pipe.name == "renamed"
    with pytest.raises(ValueError, match="has no parameter 'kk'"):
        pipe.set_params(rrf__kk=1)
    with pytest.raises(ValueError, match="has no stage 'faiss'"):
        pipe.set_params(faiss__k=1)
    with pytest.raises(ValueError, match="stage__param"):
        pipe.set_params(k=1)
    with pytest.raises(ValueError, match="has no parameter 'alpha'"):
        Dense().set_params(alpha=1)


def test_clone_is_independent() -> None:
    pipe = hybrid()
    copy = pipe.clone()
    copy.set_params(rrf__k=1, dense__top_k=3)
    assert pipe.stage("rrf").k == 60.0
    assert pipe.stage("dense").top_k == 20
    assert copy.stage("rrf") is not pipe.stage("rrf")
    stage = Lifecycle(decaying_types=("fact",))
    twin = stage.clone()
    assert twin.get_params() == stage.get_params() and twin is not stage


def test_repr_shows_non_defaults() -> None:
    assert repr(Dense(top_k=5)) == "Dense(top_k=5)"
    assert repr(MMR()) == "MMR()"


def test_config_round_trip() -> None:
    pipe = hybrid()
    cfg = pipe.to_config()
    assert cfg["steps"] == ["retrieve", "lifecycle", "mmr"]
    assert cfg["retrieve"] == {"parallel": ["dense", "bm25"], "fuse": "rrf"}
    assert cfg["lifecycle"]["decaying_types"] == ["fact", "status", "preference", "summary"]
    assert "top_k" not in cfg["rrf"]  # None is left out
    again = pipeline_from_config(cfg)
    assert again.to_config() == cfg
    assert again.stage("lifecycle").decaying_types == ("fact", "status", "preference", "summary")


def test_toml_round_trip() -> None:
    pipe = hybrid()
    pipe.steps = [*pipe.steps, ("context", Context(format="xml"))]
    pipe.steps.insert(0, ("hyde", HyDE(prompt_template='Say "hi"\t\\ {query}\r\nok')))
    text = pipe.to_toml()
    cfg = tomllib.loads(text)
    assert cfg == pipe.to_config()
    assert cfg["hyde"]["prompt_template"] == 'Say "hi"\t\\ {query}\r\nok'
    assert pipeline_from_config(cfg).to_toml() == text


def test_none_with_a_non_none_default_cannot_be_written() -> None:
    pipe = Dense() >> Context(max_items=None)
    # written as nothing, it would load back as the default 10
    with pytest.raises(ValueError, match="'max_items' is None but defaults to 10"):
        pipe.to_config()


def test_save_and_load(tmp_path: Path) -> None:
    path = tmp_path / "hybrid.toml"
    hybrid().save(path)
    loaded = load_pipeline(path)
    assert loaded.to_config() == hybrid().to_config()


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "bad.toml"
    path.write_text(text, encoding="utf-8")
    return path


BASE = 'name = "p"\nsteps = ["retrieve"]\n\n[retrieve]\n'


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ('stage = "faiss"\n', r"step 'retrieve': key 'stage': unknown stage 'faiss'"),
        ('stage = "dense"\nalpha = 1\n', r"step 'retrieve': unknown parameter 'alpha'"),
        ('stage = "dense"\ntop_k = "ten"\n', r"step 'retrieve': key 'top_k': 'ten' is not of"),
        ('stage = "lifecycle"\ndecaying_types = [1]\n', r"step 'retrieve': key 'decaying_types'"),
        ('stage = "rrf"\nweights = ["a"]\n', r"step 'retrieve': key 'weights'"),
        ('stage = "mmr"\nlambda_ = true\n', r"step 'retrieve': key 'lambda_'"),
        ('parallel = ["x"]\nfuse = "rrf"\n', r"step 'x' \(named in step 'retrieve'\) has no"),
        ("top_k = 3\n", r"step 'retrieve': key 'stage' must name a stage type"),
    ],
)
def test_config_errors_name_file_step_and_key(tmp_path: Path, body: str, message: str) -> None:
    path = _write(tmp_path, BASE + body)
    with pytest.raises(ConfigError, match=message) as info:
        load_pipeline(path)
    assert str(info.value).startswith(f"{path}: ")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('name = "p"\nsteps = []\n', "key 'steps' lists no step (a pipeline needs one)"),
        ('name = ""\nsteps = ["r"]\n[r]\nstage = "bm25"\n',
         "key 'name' must be a non-empty string"),
        ('name = "p"\nsteps = ["b__c"]\n[b__c]\nstage = "bm25"\n',
         "step 'b__c' (named in 'steps'): a step name holds no '__' (it separates a step "
         "from its parameter: step__param)"),
    ],
)
def test_a_pipeline_that_cannot_run_or_be_tuned_is_refused(
    tmp_path: Path, text: str, message: str
) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_pipeline(path)
    assert str(info.value) == f"{path}: {message}"


def test_bad_toml_names_the_file(tmp_path: Path) -> None:
    path = _write(tmp_path, 'name = "p"\nsteps = [\n')
    with pytest.raises(ConfigError, match="invalid TOML") as info:
        load_pipeline(path)
    assert str(info.value).startswith(f"{path}: ")


def test_unused_and_missing_tables() -> None:
    with pytest.raises(ConfigError, match="missing top-level key 'steps'"):
        pipeline_from_config({"name": "p"}, source="cfg.toml")
    with pytest.raises(ConfigError, match=r"cfg.toml: step table\(s\) extra are not used"):
        pipeline_from_config(
            {"name": "p", "steps": ["d"], "d": {"stage": "dense"}, "extra": {"stage": "bm25"}},
            source="cfg.toml",
        )


def test_dumps_toml_writes_special_floats() -> None:
    text = dumps_toml({"name": "p", "t": {"min_similarity": float("-inf"), "k": 1e-05}})
    assert tomllib.loads(text)["t"] == {"min_similarity": float("-inf"), "k": 1e-05}


# ---------------------------------------------------------------- limits and round trips
def _nested_toml(depth: int) -> str:
    """A pipeline whose parallel steps nest ``depth`` deep (p0 holds p1 holds ...)."""
    lines = ['name = "p"', 'steps = ["p0"]']
    for i in range(depth):
        nxt = f"p{i + 1}" if i + 1 < depth else "leaf"
        lines += [f"[p{i}]", f'parallel = ["{nxt}"]', f'fuse = "f{i}"', f"[f{i}]", 'stage = "rrf"']
    lines += ["[leaf]", 'stage = "bm25"']
    return "\n".join(lines) + "\n"


def test_parallel_nesting_up_to_the_bound_loads(tmp_path: Path) -> None:
    from memlab.pipeline import MAX_NESTING

    pipe = load_pipeline(_write(tmp_path, _nested_toml(MAX_NESTING)))
    assert len(list(pipe.named_stages())) == 2 * MAX_NESTING + 1


@pytest.mark.parametrize("depth", [33, 1200])
def test_parallel_nesting_past_the_bound_is_one_config_error(tmp_path: Path, depth: int) -> None:
    path = _write(tmp_path, _nested_toml(depth))
    with pytest.raises(ConfigError) as info:
        load_pipeline(path)
    assert str(info.value) == f"{path}: step 'p32': parallel steps nest more than 32 deep"


def test_toml_nested_too_deeply_for_the_parser_names_the_file(tmp_path: Path) -> None:
    path = _write(tmp_path, 'name = "p"\nsteps = []\nx = ' + "[" * 5000 + "]" * 5000 + "\n")
    with pytest.raises(ConfigError) as info:
        load_pipeline(path)
    assert str(info.value) == f"{path}: invalid TOML: nested too deeply to read"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('name = "a\\u0000b"\nsteps = ["s"]\n[s]\nstage = "bm25"\n',
         "key 'name': the pipeline name holds control character U+0000"),
        ('name = "a\\u001bb"\nsteps = ["s"]\n[s]\nstage = "bm25"\n',
         "key 'name': the pipeline name holds control character U+001B"),
        ('name = "p"\nsteps = ["s\\tx"]\n["s\\tx"]\nstage = "bm25"\n',
         "step 's\\tx' (named in 'steps'): a step name holds no control character, found U+0009"),
        ('name = "p"\nsteps = ["r"]\n[r]\nparallel = ["b\\u0085"]\nfuse = "f"\n'
         '["b\\u0085"]\nstage = "bm25"\n[f]\nstage = "rrf"\n',
         "step 'b\\x85' (named in step 'r'): a step name holds no control character, found U+0085"),
        ('name = "p"\ndescription = """two\nlines"""\nsteps = ["s"]\n[s]\nstage = "bm25"\n',
         "key 'description' holds control character U+000A (it is one line of a report)"),
    ],
)
def test_control_characters_in_names_are_refused(tmp_path: Path, text: str, message: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_pipeline(path)
    assert str(info.value) == f"{path}: {message}"


def test_validate_refuses_control_characters_in_built_pipelines() -> None:
    with pytest.raises(ValueError, match=r"the name holds control character U\+0000"):
        Pipeline([("bm25", BM25())], name="a\x00b").validate()
    with pytest.raises(ValueError, match=r"stage name 'b\\nm' holds control character U\+000A"):
        Pipeline([("b\nm", BM25())], name="p").validate()
    with pytest.raises(ValueError) as info:
        Pipeline([("bm25", BM25())], name="p", description="a\rb").validate()
    assert str(info.value) == "pipeline 'p': the description holds control character U+000D"


AWKWARD = [
    "my step.x", "with space", 'say "hi"', "back\\slash", "ünïcødé", "日本", "a=b", "[x]",
    "#hash", "'single'", "", "1.5", "tab-free_ok-9",
]


@pytest.mark.parametrize("step", AWKWARD)
def test_awkward_names_round_trip_through_to_toml(tmp_path: Path, step: str) -> None:
    name = f"pipe {step}"
    fuse = f"fuse {step}"
    pipe = Pipeline(
        [(step, Parallel(branches=[(f"{step}/b", BM25(top_k=3))], fuse=(fuse, RRF()))),
         (f"{step}.mmr", MMR(top_k=2))],
        name=name, description=f"desc {step}",
    )
    text = pipe.to_toml()
    path = tmp_path / "rt.toml"
    path.write_text(text, encoding="utf-8")
    loaded = load_pipeline(path)
    assert loaded.to_config() == pipe.to_config()
    assert loaded.to_toml() == text
    assert loaded.name == name and [n for n, _ in loaded.named_stages()] == [
        step, f"{step}/b", fuse, f"{step}.mmr"
    ]


def test_a_quoted_step_name_is_written_quoted(tmp_path: Path) -> None:
    path = _write(tmp_path, 'name = "p"\nsteps = ["my step.x"]\n["my step.x"]\nstage = "bm25"\n')
    text = load_pipeline(path).to_toml()
    assert '\n["my step.x"]\nstage = "bm25"\n' in text
    assert 'steps = ["my step.x"]' in text
    assert load_pipeline(_write(tmp_path, text)).to_config() == load_pipeline(path).to_config()


def test_bare_keys_stay_bare() -> None:
    text = dumps_toml({"name": "p", "a-b_9": {"k": 1}, "a.b": {"k.1": 2}})
    assert text == 'name = "p"\n\n[a-b_9]\nk = 1\n\n["a.b"]\n"k.1" = 2\n'
    assert tomllib.loads(text) == {"name": "p", "a-b_9": {"k": 1}, "a.b": {"k.1": 2}}


@pytest.mark.parametrize("step", ["name", "steps", "description"])
def test_a_step_named_like_a_top_level_key_cannot_be_written(step: str) -> None:
    with pytest.raises(ValueError, match=f"step '{step}': name, description, steps are top-level"):
        Pipeline([(step, BM25())], name="p").to_config()


def test_fusion_weights_that_do_not_match_the_branches_are_refused_at_load(
    tmp_path: Path,
) -> None:
    text = (
        'name = "w"\nsteps = ["both"]\n\n[both]\nparallel = ["dense", "bm25"]\nfuse = "rrf"\n\n'
        '[dense]\nstage = "dense"\n\n[bm25]\nstage = "bm25"\n\n'
        '[rrf]\nstage = "rrf"\nweights = [1.0, 2.0, 3.0]\n'
    )
    path = _write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_pipeline(path)
    assert str(info.value) == (
        f"{path}: pipeline 'w': stage 'rrf' has 3 weight(s) for the 2 branches of 'both'"
    )
    # as many weights as branches load
    two = text.replace("[1.0, 2.0, 3.0]", "[1.0, 2.0]")
    assert load_pipeline(_write(tmp_path, two)).name == "w"


def test_set_params_and_save_refuse_what_a_configuration_cannot_hold(tmp_path: Path) -> None:
    pipe = load_pipeline("bm25")
    for key, value, message in (
        ("description", "line one\nline two",
         "pipeline 'bm25': the description holds control character U+000A"),
        ("name", "bm25\tx", "pipeline 'bm25\\tx': the name holds control character U+0009"),
        ("name", " ", "pipeline name must be a non-empty string, got ' '"),
    ):
        with pytest.raises(ValueError) as info:
            pipe.set_params(**{key: value})
        assert str(info.value) == message
    assert (pipe.name, pipe.description) == ("bm25", load_pipeline("bm25").description)
    pipe.description = "two\nlines"  # set past set_params: save still refuses it
    with pytest.raises(ValueError, match="the description holds control character U\\+000A"):
        pipe.save(tmp_path / "p.toml")
    assert not (tmp_path / "p.toml").exists()


# ---------------------------------------------------------------- container parameters
def _steps_of(pipe: Pipeline) -> list[tuple[str, object]]:
    return [(n, s) for n, s in pipe.named_stages()]


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"steps": 5},
         "Pipeline: parameter 'steps' must be a sequence of (str, Stage) pairs; got 5"),
        ({"steps": [("a", 5)]},
         "Pipeline: parameter 'steps' must be a sequence of (str, Stage) pairs; "
         "item 0 is ('a', 5)"),
        ({"steps": [("a", BM25()), (1, BM25())]},
         "Pipeline: parameter 'steps' must be a sequence of (str, Stage) pairs; "
         "item 1 is (1, BM25())"),
        ({"steps": [("a", BM25()), ("a", Dense())]},
         "pipeline 'hybrid': stage name 'a' is used twice"),
        ({"name": 5}, "Pipeline: parameter 'name' must be a str; got 5"),
        ({"description": None}, "Pipeline: parameter 'description' must be a str; got None"),
        ({"retrieve__fuse": 5},
         "Parallel: parameter 'fuse' must be None or a (str, fusion stage) pair; got 5"),
        ({"retrieve__branches": [("lifecycle", Dense())]},
         "pipeline 'hybrid': stage name 'lifecycle' is used twice"),
        ({"rrf__weights": (1.0, 2.0, 3.0)},
         "pipeline 'hybrid': stage 'rrf' has 3 weight(s) for the 2 branches of 'retrieve'"),
        # several keys: the first ones are valid, a later one is not
        ({"rrf__k": 30, "lifecycle__decay_factor": -5},
         "Lifecycle: parameter 'decay_factor' must be a float in [0, 1]; got -5"),
        ({"name": "renamed", "dense__top_k": 3, "mmr__top_k": 0},
         "MMR: parameter 'top_k' must be an int in [1, inf) or None; got 0"),
        ({"rrf__k": 30, "steps": 5},
         "Pipeline: parameter 'steps' must be a sequence of (str, Stage) pairs; got 5"),
        ({"rrf__k": 30, "faiss__k": 1},
         "pipeline 'hybrid' has no stage 'faiss'; stages: retrieve, dense, bm25, rrf, "
         "lifecycle, mmr"),
    ],
)
def test_set_params_sets_nothing_when_a_value_is_invalid(
    params: dict[str, object], message: str
) -> None:
    pipe = hybrid()
    before = pipe.to_config()
    steps, stages = pipe.steps, _steps_of(pipe)
    with pytest.raises(ValueError) as info:
        pipe.set_params(**params)
    assert str(info.value) == message
    assert pipe.steps is steps and _steps_of(pipe) == stages
    assert pipe.to_config() == before  # still valid, nothing changed
    assert pipe.stage("rrf").k == 60.0


def test_set_params_with_several_keys_applies_all_of_them() -> None:
    pipe = hybrid()
    rrf = pipe.stage("rrf")
    pipe.set_params(rrf__k=30, lifecycle__decay_factor=0.5, name="renamed", dense__top_k=7)
    assert (rrf.k, pipe.stage("lifecycle").decay_factor, pipe.name) == (30, 0.5, "renamed")
    assert pipe.stage("rrf") is rrf and pipe.stage("dense").top_k == 7  # set in place
    # new branches and a parameter of one of them, in one call
    pipe.set_params(retrieve__branches=[("d2", Dense()), ("b2", BM25())], d2__top_k=5)
    assert [n for n, _ in pipe.named_stages()] == [
        "retrieve", "d2", "b2", "rrf", "lifecycle", "mmr"
    ]
    assert pipe.stage("d2").top_k == 5
    # weights and branches that match only together
    pipe.set_params(retrieve__branches=[("d3", Dense())], rrf__weights=(2.0,))
    assert pipe.stage("rrf").weights == (2.0,)
    assert pipe.to_config()["retrieve"] == {"parallel": ["d3"], "fuse": "rrf"}


def test_a_refused_set_params_leaves_the_given_stages_alone() -> None:
    pipe = hybrid()
    new = BM25(top_k=3)
    with pytest.raises(ValueError, match="has no stage 'nowhere'"):
        pipe.set_params(steps=[("x", new)], x__top_k=7, nowhere__k=1)
    assert new.top_k == 3 and pipe.name == "hybrid" and len(pipe.steps) == 3
    pipe.set_params(steps=[("x", new)], x__top_k=7)
    assert pipe.steps == [("x", new)] and new.top_k == 7


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: Pipeline(steps=5),
         "Pipeline: parameter 'steps' must be a sequence of (str, Stage) pairs; got 5"),
        (lambda: Pipeline([("a", 5)]),
         "Pipeline: parameter 'steps' must be a sequence of (str, Stage) pairs; "
         "item 0 is ('a', 5)"),
        (lambda: Pipeline(["bm25"]),
         "Pipeline: parameter 'steps' must be a sequence of (str, Stage) pairs; "
         "item 0 is 'bm25'"),
        (lambda: Pipeline(name=5), "Pipeline: parameter 'name' must be a str; got 5"),
        (lambda: Pipeline(name=""), "pipeline name must be a non-empty string, got ''"),
        (lambda: Pipeline(description=b"x"),
         "Pipeline: parameter 'description' must be a str; got b'x'"),
        (lambda: Pipeline([("a", BM25()), ("a", Dense())], name="p"),
         "pipeline 'p': stage name 'a' is used twice"),
        (lambda: Pipeline([("a__b", BM25())], name="p"),
         "pipeline 'p': stage name 'a__b' holds '__' (it separates a step from its parameter: "
         "step__param)"),
        (lambda: Pipeline([("r", Parallel([("bm25", BM25())], fuse=("rrf", RRF()))),
                           ("rrf", RRF())], name="p"),
         "pipeline 'p': stage name 'rrf' is used twice"),
        (lambda: Parallel(5),
         "Parallel: parameter 'branches' must be a sequence of (str, Stage) pairs; got 5"),
        (lambda: Parallel([("d", Dense())], fuse="rrf"),
         "Parallel: parameter 'fuse' must be None or a (str, fusion stage) pair; got 'rrf'"),
        (lambda: Parallel([("d", Dense())], fuse=("rrf", 5)),
         "Parallel: parameter 'fuse' must be None or a (str, fusion stage) pair; "
         "got ('rrf', 5)"),
        (lambda: Parallel([("d", Dense())], fuse=("rrf", Dense())),
         "Parallel: parameter 'fuse' must be None or a (str, fusion stage) pair; "
         "got ('rrf', Dense())"),
        (lambda: Parallel([("d", Dense())], fuse=("d", RRF())),
         "Parallel: stage name 'd' is used twice"),
        (lambda: Parallel([("d\n", Dense())]),
         "Parallel: stage name 'd\\n' holds control character U+000A"),
    ],
)
def test_containers_check_their_parameters_when_built(build, message: str) -> None:
    with pytest.raises(ValueError) as info:
        build()
    assert str(info.value) == message


def test_parallel_set_params_sets_nothing_when_a_value_is_invalid() -> None:
    par = Parallel([("d", Dense())], fuse=("rrf", RRF()))
    branches, fuse = par.branches, par.fuse
    with pytest.raises(ValueError) as info:
        par.set_params(branches=[("b", BM25())], fuse=("rrf", 5))
    assert str(info.value) == (
        "Parallel: parameter 'fuse' must be None or a (str, fusion stage) pair; got ('rrf', 5)"
    )
    assert (par.branches, par.fuse) == (branches, fuse)
    par.set_params(branches=[("b", BM25())], fuse=None)
    assert [n for n, _ in par.named_stages()] == ["b"]


def test_validate_checks_what_was_assigned_past_set_params() -> None:
    pipe = hybrid()
    pipe.steps = 5
    with pytest.raises(ValueError) as info:
        pipe.validate()
    assert str(info.value) == (
        "Pipeline: parameter 'steps' must be a sequence of (str, Stage) pairs; got 5"
    )
    pipe = hybrid()
    pipe.stage("retrieve").fuse = "rrf"
    with pytest.raises(ValueError) as info:
        pipe.to_config()
    assert str(info.value) == (
        "Parallel: parameter 'fuse' must be None or a (str, fusion stage) pair; got 'rrf'"
    )


def test_rshift_refuses_what_is_not_a_stage() -> None:
    with pytest.raises(TypeError) as info:
        Dense() >> 5
    assert str(info.value) == "Dense() >> 5: the right side must be a Stage, got int"
    with pytest.raises(TypeError) as info:
        Pipeline.chain("bm25", Dense())
    assert str(info.value) == "'bm25' >> Dense(): the left side must be a Stage, got str"
    # a name taken further up gets the next free number
    pipe = (Dense() >> Dense()) >> Dense()
    assert [n for n, _ in pipe.steps] == ["dense", "dense_2", "dense_3"]
