"""Stages named by import path or offered under the ``memlab.stages`` entry-point group."""

from __future__ import annotations

import sys
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from memlab.pipeline import ConfigError, Pipeline, pipeline_from_config
from memlab.stages.base import STAGES, StageError, get_stage_class, stage_reference
from memlab.stages.dense import Dense

PLUGINS = Path(__file__).resolve().parents[1] / "fixtures" / "plugins"


@pytest.fixture
def plugin_path(monkeypatch):
    monkeypatch.syspath_prepend(str(PLUGINS))
    yield
    sys.modules.pop("memlab_test_plugin", None)


def config(stage: str, **params) -> dict:
    return {
        "name": "p",
        "description": "",
        "steps": ["dense", "custom"],
        "dense": {"stage": "dense", "top_k": 5},
        "custom": {"stage": stage, **params},
    }


def test_a_config_names_a_stage_by_import_path_and_round_trips(plugin_path, make_ctx):
    pipe = pipeline_from_config(config("memlab_test_plugin:ReverseRank", offset=1.5))
    custom = pipe.stage("custom")
    assert type(custom).__name__ == "ReverseRank" and custom.offset == 1.5
    assert stage_reference(custom) == "memlab_test_plugin:ReverseRank"
    assert pipe.to_config()["custom"] == {"stage": "memlab_test_plugin:ReverseRank", "offset": 1.5}
    assert pipeline_from_config(pipe.to_config()).to_config() == pipe.to_config()
    out = pipe.run(make_ctx("Acme website"))
    plain = Pipeline([("dense", Dense(top_k=5))]).run(make_ctx("Acme website"))
    assert out.height == 5
    assert out["mem_id"].to_list() == plain["mem_id"].to_list()[::-1]


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("no_such_module_xyz:Stage", "cannot import module 'no_such_module_xyz'"),
        ("memlab_test_plugin:Missing", "module 'memlab_test_plugin' has no 'Missing'"),
        ("memlab_test_plugin:NotAStage", "'NotAStage' is not a memlab Stage subclass"),
        ("memlab_test_plugin:", "an import path reads 'package.module:ClassName'"),
    ],
)
def test_bad_import_paths_name_the_step_and_the_reason(plugin_path, path, message):
    with pytest.raises(ConfigError, match="step 'custom': key 'stage'") as info:
        pipeline_from_config(config(path))
    assert message in str(info.value)


def test_entry_point_stages_register_under_their_name(plugin_path, monkeypatch):
    ep = EntryPoint("reverse_rank", "memlab_test_plugin:ReverseRank", "memlab.stages")
    monkeypatch.setattr(
        "importlib.metadata.entry_points",
        lambda group=None: [ep] if group == "memlab.stages" else [],
    )
    try:
        cls = get_stage_class("reverse_rank")
        assert cls.__name__ == "ReverseRank"
        pipe = pipeline_from_config(config("reverse_rank"))
        assert pipe.to_config()["custom"]["stage"] == "reverse_rank"
    finally:
        STAGES.pop("reverse_rank", None)


def test_a_failing_stage_names_step_class_and_query(plugin_path, make_ctx):
    pipe = pipeline_from_config(config("memlab_test_plugin:Crashes"))
    with pytest.raises(StageError) as info:
        pipe.run(make_ctx("Acme website", qid="q7"))
    assert str(info.value) == (
        "stage 'custom' (Crashes) failed on query 'q7': "
        "ZeroDivisionError: division by zero in a plugin"
    )
    assert (info.value.step, info.value.qid) == ("custom", "q7")


def test_a_stage_input_error_stays_a_value_error(make_ctx):
    pipe = Pipeline([("dense", Dense())])
    with pytest.raises(ValueError, match="stage 'dense' \\(Dense\\) failed on query 'q1'"):
        pipe.run(make_ctx("x", embedder=None))


@pytest.mark.parametrize(
    ("source", "cause"),
    [
        ("def broken(:\n", "SyntaxError: invalid syntax (memlab_broken_plugin.py, line 1)"),
        ("raise RuntimeError('no licence key')\n", "RuntimeError: no licence key"),
        ("import sys\nsys.exit(3)\n", "SystemExit: 3"),
    ],
)
def test_a_plugin_module_that_fails_to_import_is_one_config_error(
    tmp_path, monkeypatch, source, cause
):
    (tmp_path / "memlab_broken_plugin.py").write_text(source, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "memlab_broken_plugin", raising=False)
    with pytest.raises(ConfigError) as info:
        pipeline_from_config(config("memlab_broken_plugin:Stage"), source="p.toml")
    assert str(info.value) == (
        "p.toml: step 'custom': key 'stage': stage 'memlab_broken_plugin:Stage': importing "
        f"module 'memlab_broken_plugin' failed: {cause}"
    )
    sys.modules.pop("memlab_broken_plugin", None)
