"""The stage contract, checked on every registered stage (scikit-learn's
``parametrize_with_checks``): declared constraints, clone, get/set_params, the configuration
round trip, an empty frame in, an unknown parameter and values that break a constraint."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import polars as pl
import pytest

from memlab.pipeline import ConfigError, Pipeline, pipeline_from_config
from memlab.stages import STAGES
from memlab.stages.base import (
    CANDIDATE_SCHEMA,
    FusionStage,
    QueryContext,
    Stage,
    _same,
    check_frame,
    empty_candidates,
    rerank,
)
from memlab.stages.constraints import Interval, Options, make_constraint

NAMES = sorted(STAGES)


class _EchoGenerator:
    model_id = "echo"

    def generate(self, prompt: str, **kwargs: Any) -> str:
        return "a passage about " + prompt[-20:]


def _invalid_values(specs: list[Any]) -> list[Any]:
    """Values aimed at each declared constraint that none of them admits."""
    candidates: list[Any] = [object(), "not-an-option", -1, math.nan]
    for spec in specs:
        c = make_constraint(spec)
        if isinstance(c, Interval):
            candidates += [math.nan, math.inf, -math.inf, True]
            if c.left is not None:
                candidates.append(c.left - 1)
            if c.right is not None:
                candidates.append(c.right + 1)
            candidates.append(0.5 if c.kind.__name__ == "Integral" else "1")
        elif isinstance(c, Options):
            candidates += ["no-such-option", 3]
    out = []
    for v in candidates:
        if not any(make_constraint(s).is_satisfied_by(v) for s in specs):
            out.append(v)
    return out


def test_every_stage_is_covered() -> None:
    assert len(NAMES) >= 14
    assert {"rrf", "mmr", "bm25", "dense", "lifecycle", "crag"} <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_every_parameter_declares_constraints(name: str) -> None:
    cls = STAGES[name]
    assert set(cls._parameter_constraints) == set(cls._param_names())
    for specs in cls._parameter_constraints.values():
        assert specs, "an empty constraint list admits nothing"
        for spec in specs:
            make_constraint(spec)  # every declaration is understood
    # the defaults satisfy the declarations (construction would raise otherwise)
    assert isinstance(cls(), cls)


@pytest.mark.parametrize("name", NAMES)
def test_clone_and_params(name: str) -> None:
    stage = STAGES[name]()
    params = stage.get_params()
    twin = stage.clone()
    assert type(twin) is type(stage) and twin is not stage
    assert all(_same(params[k], v) for k, v in twin.get_params().items())
    for k, v in twin.get_params().items():
        if isinstance(v, (list, dict)):
            assert v is not params[k], f"clone shares the mutable parameter {k!r}"
    assert stage.set_params(**params) is stage
    assert all(_same(params[k], v) for k, v in stage.get_params().items())


@pytest.mark.parametrize("name", NAMES)
def test_config_round_trip(name: str) -> None:
    stage = STAGES[name]()
    cfg = Pipeline(steps=[("step", stage)], name="p").to_config()
    back = pipeline_from_config(cfg, source="round-trip.toml").stage("step")
    assert type(back) is type(stage)
    assert all(_same(stage.get_params()[k], v) for k, v in back.get_params().items())
    assert Pipeline(steps=[("step", back)], name="p").to_config() == cfg


@pytest.mark.parametrize("name", NAMES)
def test_empty_frame_in(name: str, make_ctx: Any) -> None:
    stage = STAGES[name]()
    ctx: QueryContext = make_ctx("acme website", generator=_EchoGenerator())
    if getattr(stage, "requires_fit", False):
        pytest.skip("fitted on training queries first (covered in its own tests)")
    out = stage.transform(empty_candidates(), ctx)
    check_frame(out, name)
    assert isinstance(out, pl.DataFrame)
    if isinstance(stage, FusionStage):
        fused = stage.fuse([empty_candidates(), empty_candidates()], ctx)
        check_frame(fused, name)
        assert fused.height == 0


@pytest.mark.parametrize("name", NAMES)
def test_unknown_parameter(name: str) -> None:
    cls = STAGES[name]
    stage = cls()
    with pytest.raises(ValueError, match=f"{cls.__name__} has no parameter 'no_such_param'"):
        stage.set_params(no_such_param=1)
    with pytest.raises(TypeError):
        cls(no_such_param=1)
    cfg = Pipeline(steps=[("step", stage)], name="p").to_config()
    cfg["step"]["no_such_param"] = 1
    with pytest.raises(ConfigError, match="bad.toml: step 'step': unknown parameter 'no_such_"):
        pipeline_from_config(cfg, source="bad.toml")


def _constraint_cases() -> list[tuple[str, str, Any]]:
    cases = []
    for name in NAMES:
        cls = STAGES[name]
        for param, specs in cls._parameter_constraints.items():
            for value in _invalid_values(specs):
                cases.append((name, param, value))
    return cases


@pytest.mark.parametrize(("name", "param", "value"), _constraint_cases())
def test_value_breaking_a_constraint(name: str, param: str, value: Any) -> None:
    cls = STAGES[name]
    message = rf"{cls.__name__}: parameter '{param}' must be .*; got "
    with pytest.raises(ValueError, match=message):
        cls(**{param: value})
    stage = cls()
    before = stage.get_params()[param]
    with pytest.raises(ValueError, match=message):
        stage.set_params(**{param: value})
    assert _same(stage.get_params()[param], before), "a refused value must not be set"


@pytest.mark.parametrize("name", NAMES)
def test_config_value_breaking_a_constraint_names_file_step_and_key(name: str) -> None:
    cls = STAGES[name]
    stage: Stage = cls()
    cfg = Pipeline(steps=[("step", stage)], name="p").to_config()
    for param, specs in cls._parameter_constraints.items():
        # TOML can hold nan, -1 and strings; pick one the declaration refuses
        bad = [
            v
            for v in (math.nan, -1, "zzz")
            if not any(make_constraint(s).is_satisfied_by(v) for s in specs)
        ]
        assert bad, f"{param}: TOML can express no value the declaration refuses"
        for value in bad:
            broken = {**cfg, "step": {**cfg["step"], param: value}}
            with pytest.raises(ConfigError, match=rf"conf.toml: step 'step': .*'{param}'"):
                pipeline_from_config(broken, source="conf.toml")


def test_examples_from_the_issue() -> None:
    rrf, mmr = STAGES["rrf"], STAGES["mmr"]
    message = r"^RRF: parameter 'k' must be a float in \[0, inf\); got -1$"
    with pytest.raises(ValueError, match=message):
        rrf(k=-1)
    with pytest.raises(ValueError, match=r"^MMR: parameter 'lambda_' must be a float in \[0, 1\]"):
        mmr(lambda_=1.5)
    with pytest.raises(ValueError, match=r"MMR: parameter 'lambda_' .*; got nan$"):
        mmr().set_params(lambda_=math.nan)
    with pytest.raises(ValueError, match=r"parameter 'top_k' must be an int in \[1, inf\) or None"):
        STAGES["dense"](top_k=-5)
    with pytest.raises(ValueError, match=r"RRF: parameter 'k' .*; got 'abc'"):
        Pipeline(steps=[("rrf", rrf())]).set_params(rrf__k="abc")
    assert rrf(k=0).k == 0  # the bound itself is allowed


@pytest.mark.parametrize("n_store", [5, 40, 10_000])
def test_unique_rows_is_np_unique_with_its_inverse(n_store: int) -> None:
    from memlab.stages.base import unique_rows

    rows = np.array([3, 1, 3, 4, 0, 1, 4, 4], dtype=np.int64)
    union, inverse = unique_rows(rows, n_store)
    assert union.tolist() == [0, 1, 3, 4]
    assert inverse.tolist() == [2, 1, 2, 3, 0, 1, 3, 3]
    assert unique_rows(np.zeros(0, dtype=np.int64), n_store)[0].tolist() == []


def test_rerank_puts_a_nan_score_last_with_or_without_a_store() -> None:
    # rank_order's rule (NaN last, ties by id) holds on polars' path too
    frame = pl.DataFrame(
        {"qid": ["q"] * 4, "mem_id": ["c", "b", "a", "d"],
         "score": [float("nan"), 0.5, 0.9, 0.5], "rank": [0] * 4},
        schema=CANDIDATE_SCHEMA,
    )
    out = rerank(frame)
    assert out["mem_id"].to_list() == ["a", "b", "d", "c"]
    assert out["rank"].to_list() == [1, 2, 3, 4]


@pytest.mark.parametrize(
    ("cause", "kind"),
    [(RuntimeError("x"), "StageError"), (ValueError("bad k"), "StageValueError"),
     (TypeError("not a frame"), "StageTypeError")],
)
def test_a_stage_error_round_trips_through_pickle(cause: Exception, kind: str) -> None:
    # a stage failing in a worker process reaches the parent pickled (joblib/loky)
    import pickle

    from memlab.stages.base import stage_error

    err = stage_error("rrf", STAGES["rrf"](), "q1", cause)
    assert type(err).__name__ == kind
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        back = pickle.loads(pickle.dumps(err, protocol=protocol))
        assert type(back) is type(err)
        assert str(back) == str(err) == (
            f"stage 'rrf' (RRF) failed on query 'q1': {type(cause).__name__}: {cause}"
        )
        assert back.args == err.args
        assert (back.step, back.qid) == ("rrf", "q1")
        assert vars(back) == vars(err)
        assert isinstance(back, type(cause))
