"""Pipeline configuration files: reading any file names it, saving follows the output rule and
reads back equal."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import memlab.stages  # noqa: F401 - registers the stages
from memlab.io import OutputFileError
from memlab.pipeline import (
    ConfigError,
    Parallel,
    Pipeline,
    dumps_toml,
    load_pipeline,
    pipeline_from_config,
    resolve_config_path,
)
from memlab.stages.base import STAGES, FusionStage

SHIPPED = ("bm25", "graph", "rrf", "hybrid", "full", "conversational", "conversational-ltr")

BM25_STEP = '\n[a]\nstage = "bm25"\n'


def _params(pipe: Pipeline) -> dict[str, Any]:
    """Every value of ``get_params()`` but the stage objects themselves."""
    return {
        key: value
        for key, value in pipe.get_params().items()
        if "__" in key or key in ("name", "description")
    }


def _as_numpy(pipe: Pipeline) -> Pipeline:
    """``pipe`` with every float parameter turned into a NumPy float of the same value (what
    a sweep or tune over a NumPy grid sets)."""
    edits = {
        key: np.float64(value)
        for key, value in _params(pipe).items()
        if "__" in key and isinstance(value, float)
    }
    assert edits  # every pipeline tested has float parameters
    return pipe.set_params(**edits)


# ---------------------------------------------------------------- reading


def test_every_unreadable_configuration_file_is_a_config_error_naming_it(tmp_path: Path) -> None:
    head = 'name = "x"\nsteps = ["a"]\n'
    cases = {
        "huge-int.toml": (
            head + BM25_STEP + "top_k = " + "9" * 5000 + "\n",
            "invalid TOML: Exceeds the limit (4300 digits) for integer string conversion",
        ),
        "deep-array.toml": (
            head + BM25_STEP + "top_k = " + "[" * 5000 + "]" * 5000 + "\n",
            "invalid TOML: nested too deeply to read",
        ),
        "deep-table.toml": (
            head + BM25_STEP + "top_k = " + "{a = " * 3000 + "1" + "}" * 3000 + "\n",
            "invalid TOML: nested too deeply to read",
        ),
        "latin1.toml": (b'name = "caf\xe9"\nsteps = []\n', "not valid UTF-8 (byte 0xe9 on line 1)"),
        "syntax.toml": ('name = "x\n', "invalid TOML: "),
        "wrong-type.toml": (
            head + BM25_STEP + "lowercase = " + "[" * 50 + "]" * 50 + "\n",
            "step 'a': key 'lowercase': [[[[[[[[[[",
        ),
    }
    for name, (content, message) in cases.items():
        path = tmp_path / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
        with pytest.raises(ConfigError) as info:
            load_pipeline(path)
        assert str(info.value).startswith(f"{path}: {message}"), (name, str(info.value))
        assert "\n" not in str(info.value)


def test_a_configuration_of_any_depth_or_size_is_a_config_error_naming_its_source() -> None:
    deep: list[Any] = []
    for _ in range(100_000):
        deep = [deep]
    huge = 10**5000
    cases = [
        (
            {"name": "x", "steps": ["a"], "a": {"stage": "bm25", "top_k": deep}},
            "manifest.json:x: step 'a': key 'top_k': a list nested too deeply to show is not "
            "of type int | None",
        ),
        (
            {"name": "x", "steps": ["a"], "a": {"stage": "bm25", "lowercase": huge}},
            "manifest.json:x: step 'a': key 'lowercase': an int too long to show is not of "
            "type <class 'bool'>",
        ),
        (
            {"name": "x", "steps": ["a"], "a": {"stage": "bm25", "token_pattern": deep}},
            "manifest.json:x: step 'a': key 'token_pattern': a list nested too deeply to show "
            "is not of type <class 'str'>",
        ),
    ]
    for cfg, message in cases:
        with pytest.raises(ConfigError) as info:
            pipeline_from_config(cfg, source="manifest.json:x")
        assert str(info.value) == message


# ---------------------------------------------------------------- round trips


@pytest.mark.parametrize("name", SHIPPED)
def test_a_saved_shipped_pipeline_loads_back_equal(tmp_path: Path, name: str) -> None:
    pipe = _as_numpy(load_pipeline(name))
    path = tmp_path / f"{name}.toml"
    pipe.save(path)
    assert _params(load_pipeline(path)) == _params(pipe)
    # Through JSON too (a run's manifest.json holds each pipeline's configuration).
    cfg = json.loads(json.dumps(pipe.to_config()))
    assert _params(pipeline_from_config(cfg, source="manifest")) == _params(pipe)


def test_extreme_numbers_read_back_equal(tmp_path: Path) -> None:
    pipe = load_pipeline("hybrid").set_params(
        bm25__k1=1e-300,
        bm25__epsilon=1e300,
        bm25__b=0.1,
        rrf__k=5e-324,
        dense__top_k=2**70,
        bm25__top_k=10**300,
        graph__hop_decay=np.float32(0.1),
        lifecycle__decay_factor=np.float64(0.3),
    )
    path = tmp_path / "edge.toml"
    pipe.save(path)
    text = path.read_text(encoding="utf-8")
    assert "k1 = 1e-300\n" in text and "epsilon = 1e+300\n" in text and "b = 0.1\n" in text
    assert "k = 5e-324\n" in text and f"top_k = {10**300}\n" in text
    assert "hop_decay = 0.10000000149011612\n" in text and "decay_factor = 0.3\n" in text
    loaded = _params(load_pipeline(path))
    assert loaded == _params(pipe)
    assert loaded["dense__top_k"] == 1180591620717411303424
    assert type(loaded["graph__hop_decay"]) is float


def test_every_registered_stage_saves_and_loads_back_equal(tmp_path: Path) -> None:
    bm25, dense = STAGES["bm25"], STAGES["dense"]
    for name, cls in STAGES.items():
        stage = cls()
        if isinstance(stage, FusionStage):
            step = Parallel(branches=[("b1", bm25()), ("b2", dense())], fuse=("f", stage))
            pipe = Pipeline(steps=[("group", step)], name=f"with-{name}")
        else:
            pipe = Pipeline(steps=[("s", stage)], name=f"with-{name}")
        edits = {
            key: np.float64(value)
            for key, value in _params(pipe).items()
            if "__" in key and isinstance(value, float)
        }
        pipe.set_params(**edits)
        path = tmp_path / f"{name}.toml"
        pipe.save(path)
        assert _params(load_pipeline(path)) == _params(pipe), name


# ---------------------------------------------------------------- the output rule


def test_save_replaces_only_a_configuration_memlab_wrote(tmp_path: Path) -> None:
    pipe = load_pipeline("hybrid")
    hand_written = resolve_config_path("hybrid").read_text(encoding="utf-8")
    mine = tmp_path / "mine.toml"
    pipe.save(mine)
    pipe.set_params(rrf__k=30.0).save(mine)  # memlab's own file: replaced
    assert load_pipeline(mine).get_params()["rrf__k"] == 30.0

    target = tmp_path / "target.toml"
    target.write_text("keep", encoding="utf-8")
    cases = {
        "hand.toml": (hand_written, "exists and is not a pipeline configuration memlab wrote"),
        "notes.txt": ("my notes\n", "exists and is not a pipeline configuration memlab wrote"),
        "edited.toml": (
            mine.read_text(encoding="utf-8") + "# tuned by hand\n",
            "exists and is not a pipeline configuration memlab wrote",
        ),
        "link.toml": (target, "is a symbolic link"),
        "folder.toml": (None, "is a directory"),
    }
    for name, (content, message) in cases.items():
        path = tmp_path / name
        if content is None:
            path.mkdir()
        elif isinstance(content, Path):
            path.symlink_to(content)
        else:
            path.write_text(content, encoding="utf-8")
        with pytest.raises(OutputFileError) as info:
            pipe.save(path)
        assert str(info.value).startswith(f"configuration file {path}: {message}"), name
        if isinstance(content, str):
            assert path.read_text(encoding="utf-8") == content, name
    assert target.read_text(encoding="utf-8") == "keep"
    assert os.listdir(tmp_path / "folder.toml") == []
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_a_value_toml_cannot_hold_is_a_value_error_naming_it() -> None:
    deep: list[Any] = []
    for _ in range(100_000):
        deep = [deep]
    cases = [
        (
            {"name": "x\ud800", "steps": []},
            "'x\\ud800' holds U+D800, a lone surrogate, which TOML cannot hold",
        ),
        ({"name": "x", "steps": deep}, "a value is nested too deeply to write to TOML"),
        ({"name": "x", "steps": [10**5000]}, "an integer too long to write to TOML"),
    ]
    for cfg, message in cases:
        with pytest.raises(ValueError) as info:
            dumps_toml(cfg)
        assert str(info.value) == message


def test_a_stage_failing_in_a_worker_process_is_its_one_line_error(tmp_path: Path) -> None:
    # two pipelines run on joblib's worker processes: the stage's error crosses back pickled
    import subprocess
    import sys

    tests = Path(__file__).resolve().parent
    config = tmp_path / "crashing.toml"
    config.write_text(
        'name = "crashing"\nsteps = ["bm25", "custom"]\n\n[bm25]\nstage = "bm25"\n\n'
        '[custom]\nstage = "memlab_test_plugin:Crashes"\n',
        encoding="utf-8",
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(tests / "fixtures" / "plugins"), os.environ.get("PYTHONPATH", "")]
    )}
    argv = ["eval", str(tests / "fixtures" / "handmade"), "--pipelines", f"{config},bm25",
            "--embedder", "hashing", "--no-cache", "--quiet", "--executor", "joblib",
            "--jobs", "2", "--out", str(tmp_path / "run")]
    code = f"import sys; from memlab.cli import main; sys.exit(main({argv!r}))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode == 1, done.stderr
    assert done.stderr.splitlines()[-1] == (
        "memlab: error: stage 'custom' (Crashes) failed on query 'hq01': "
        "ZeroDivisionError: division by zero in a plugin"
    )
    assert not (tmp_path / "run").exists()
