import json
from pathlib import Path

import optuna.distributions as od
import polars as pl
import pytest

from memlab.cli import main
from memlab.embed import HashingEmbedder
from memlab.eval.tune import parse_space, run_tune

HANDMADE = Path(__file__).resolve().parents[1] / "fixtures" / "handmade"


def test_parse_space_reads_the_three_kinds():
    space = parse_space(
        ["rrf__k=int:1:200:log", "lifecycle__decay_factor=float:0.9:1.0", "bm25__s=cat:store,scope"]
    )
    assert space["rrf__k"] == od.IntDistribution(1, 200, log=True)
    assert space["lifecycle__decay_factor"] == od.FloatDistribution(0.9, 1.0)
    assert space["bm25__s"] == od.CategoricalDistribution(["store", "scope"])


@pytest.mark.parametrize(
    "expr", ["rrf__k", "rrf_k=int:1:2", "rrf__k=int:1", "rrf__k=int:a:b", "rrf__k=bool:1:2",
             "rrf__k=int:1:2:lin", "x__y=cat:"],
)
def test_parse_space_rejects_bad_expressions(expr):
    with pytest.raises(ValueError, match="bad space expression"):
        parse_space([expr])


def test_tune_writes_study_and_continues_it(tmp_path):
    space = parse_space(["rrf__k=int:1:100:log"])
    kw = dict(embedder=HashingEmbedder(dim=64), progress=False, n_resamples=200)
    res = run_tune(HANDMADE, "rrf", space, trials=4, out=tmp_path / "t", **kw)
    names = {p.name for p in (tmp_path / "t").iterdir()}
    assert {"study.db", "tune.json", "manifest.json", "best.toml", "trials.parquet",
            "history.png", "history.svg"} <= names
    assert res.trials.height == 4
    assert 1 <= res.best_params["rrf__k"] <= 100
    summary = json.loads((tmp_path / "t" / "tune.json").read_text())
    assert summary["best_params"] == res.best_params
    assert res.tests["pipeline"].to_list() == ["best"]
    assert res.tests["delta"][0] == pytest.approx(res.best_test - res.defaults_test)
    assert f"k = {res.best_params['rrf__k']}" in (tmp_path / "t" / "best.toml").read_text()
    # a second call on the same storage adds trials to the same study
    again = run_tune(HANDMADE, "rrf", space, trials=2, out=tmp_path / "t", **kw)
    assert again.trials.height == 6
    assert pl.read_parquet(tmp_path / "t" / "trials.parquet").height == 6


def test_tune_cli_bad_space_is_one_message(tmp_path, capsys):
    code = main(["tune", str(HANDMADE), "--pipeline", "rrf", "--space", "rrf__k=int:x:2",
                 "--out", str(tmp_path / "o")])
    assert code == 2
    assert capsys.readouterr().err.startswith("memlab: error: bad space expression")
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("rrf__k=float:0:nan", "the high bound nan is not a finite number"),
        ("rrf__k=float:-inf:1", "the low bound -inf is not a finite number"),
        ("rrf__k=float:0:inf:log", "the high bound inf is not a finite number"),
        ("rrf__k=float:NaN:1", "the low bound nan is not a finite number"),
        ("rrf__k=float:2:1", "the low bound 2.0 must be below the high bound 1.0"),
        ("rrf__k=int:5:5", "the low bound 5 must be below the high bound 5"),
        ("rrf__k=float:0:1:log", "a log scale needs a low bound above 0, got 0.0"),
        ("rrf__k=int:-1:10:log", "a log scale needs a low bound above 0, got -1"),
    ],
)
def test_parse_space_refuses_non_finite_or_empty_ranges(expr, message):
    with pytest.raises(ValueError) as info:
        parse_space([expr])
    assert str(info.value) == f"bad space expression {expr!r}: {message}"


@pytest.mark.parametrize(
    ("pipeline", "space", "message"),
    [
        ("dense", {"dense__top_k": od.CategoricalDistribution([1, None])},
         "search space dense__top_k: value None: step 'dense': parameter 'top_k' is None but "
         "defaults to 100; TOML has no null, so it cannot be written"),
        ("rrf", {"rrf__k": od.FloatDistribution(0.0, float("nan"))},
         "search space rrf__k: the high bound nan is not a finite number"),
        ("rrf", {"rrf__k": od.FloatDistribution(1.0, float("inf"))},
         "search space rrf__k: the high bound inf is not a finite number"),
    ],
)
def test_run_tune_checks_the_space_before_creating_the_study(tmp_path, pipeline, space, message):
    with pytest.raises(ValueError) as info:
        run_tune(HANDMADE, pipeline, space, trials=2, out=tmp_path / "o",
                 embedder=HashingEmbedder(dim=64), progress=False)
    assert str(info.value) == message
    assert not (tmp_path / "o").exists()


def test_every_categorical_value_meets_the_parameter_constraints(tmp_path):
    space = parse_space(["rrf__k=cat:60,-1"])
    with pytest.raises(ValueError, match=r"^search space rrf__k: value -1: ") as info:
        run_tune(HANDMADE, "rrf", space, trials=2, out=tmp_path / "o",
                 embedder=HashingEmbedder(dim=64), progress=False)
    assert "'k'" in str(info.value)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "spec", ["rrf__k=float:0:nan", "rrf__k=float:0:inf", "dense__top_k=cat:1,None"]
)
def test_tune_cli_refuses_a_bad_space_without_leaving_a_study(tmp_path, capsys, spec):
    pipeline = spec.partition("__")[0]
    code = main(["tune", str(HANDMADE), "--pipeline", pipeline, "--space", spec, "--trials", "2",
                 "--embedder", "hashing", "--out", str(tmp_path / "o"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("memlab: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    assert not (tmp_path / "o").exists()


# ---------------------------------------------------------------- the tune output directory

_TUNE_CLI = ["--pipeline", "rrf", "--space", "rrf__k=int:1:100:log", "--trials", "2",
             "--embedder", "hashing", "--no-cache", "--quiet"]


def _snapshot(root: Path) -> dict[str, bytes | str]:
    """Every entry under ``root`` (not following links): a file's bytes, a link's target."""
    out: dict[str, bytes | str] = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_symlink():
            out[rel] = f"-> {path.readlink()}"
        elif path.is_file():
            out[rel] = path.read_bytes()
        else:
            out[rel] = "dir"
    return out


def _user_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "notes.txt").write_text("precious")
    (path / "manifest.json").write_text('{"mine": true}')
    (path / "best.toml").write_text("my toml\n")
    return path


def _eval_result(path: Path) -> Path:
    from memlab.io import atomic_directory

    with atomic_directory(path, kind="experiment") as tmp:
        (tmp / "manifest.json").write_text('{"an": "eval run"}')
        (tmp / "metrics.json").write_text("{}")
    return path


@pytest.mark.parametrize(
    ("setup", "out", "message"),
    [
        (lambda root: _user_dir(root / "mine"), "mine",
         "--out mine: exists, is not empty and is not a memlab result"),
        (lambda root: _user_dir(root), ".",
         "--out .: is the working directory or one of its parents"),
        (lambda root: (_user_dir(root / "u"), (root / "link").symlink_to("u")), "link",
         "--out link: is a symbolic link (to u)"),
        (lambda root: (root / "afile").write_text("hi"), "afile",
         "--out afile: exists and is not a directory"),
        (lambda root: _eval_result(root / "res"), "res",
         "--out res: is a memlab experiment result, not a tune directory"),
    ],
    ids=["user-dir", "cwd", "symlink", "file", "eval-result"],
)
def test_tune_refuses_an_output_it_may_not_write_before_any_work(
    tmp_path, monkeypatch, capsys, setup, out, message
):
    root = tmp_path / "root"
    root.mkdir()
    setup(root)
    monkeypatch.chdir(root)
    before = _snapshot(root)
    code = main(["tune", str(HANDMADE), *_TUNE_CLI, "--out", out])
    err = capsys.readouterr()
    assert code == 2
    assert err.err.startswith(f"memlab: error: {message}"), err.err
    assert err.err.count("\n") == 1 and err.out == ""  # refused before loading the dataset
    assert _snapshot(root) == before


def test_tune_publishes_a_marked_directory_and_a_later_run_continues_its_study(tmp_path, capsys):
    from memlab.io import OUTPUT_MARKER

    out = tmp_path / "t"
    assert main(["tune", str(HANDMADE), *_TUNE_CLI, "--out", str(out)]) == 0
    marker = json.loads((out / OUTPUT_MARKER).read_text())
    assert marker["memlab"] == "tune"
    assert {"study.db", "tune.json", "manifest.json", "best.toml", "trials.parquet"} <= set(
        marker["entries"]
    )
    (out / "my-notes.md").write_text("mine")  # a user's file beside the results
    study = (out / "study.db").stat().st_ino
    assert main(["tune", str(HANDMADE), *_TUNE_CLI, "--out", str(out)]) == 0
    assert json.loads((out / "tune.json").read_text())["trials"] == 4  # the study continued
    assert pl.read_parquet(out / "trials.parquet").height == 4
    assert (out / "study.db").stat().st_ino == study  # written in place, never replaced
    assert (out / "my-notes.md").read_text() == "mine"
    assert "study.db" in json.loads((out / OUTPUT_MARKER).read_text())["entries"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t"]  # no temporary sibling left
    capsys.readouterr()


def test_a_tune_directory_written_before_the_marker_is_continued(tmp_path):
    space = parse_space(["rrf__k=int:1:100:log"])
    kw = dict(embedder=HashingEmbedder(dim=64), progress=False, n_resamples=200)
    out = tmp_path / "t"
    run_tune(HANDMADE, "rrf", space, trials=2, out=out, **kw)
    (out / ".memlab-output.json").unlink()  # as an older memlab left it
    (out / "notes.txt").write_text("mine")
    again = run_tune(HANDMADE, "rrf", space, trials=1, out=out, **kw)
    assert again.trials.height == 3
    assert (out / "notes.txt").read_text() == "mine"


def test_a_study_db_memlab_did_not_write_is_refused(tmp_path, capsys):
    out = tmp_path / "t"
    space = parse_space(["rrf__k=int:1:100:log"])
    run_tune(HANDMADE, "rrf", space, trials=1, out=out, embedder=HashingEmbedder(dim=64),
             progress=False, storage=f"sqlite:///{tmp_path / 'elsewhere.db'}", n_resamples=50)
    (out / "study.db").write_text("someone's database")
    before = _snapshot(out)
    assert main(["tune", str(HANDMADE), *_TUNE_CLI, "--out", str(out)]) == 2
    assert "holds a study.db memlab did not write" in capsys.readouterr().err
    assert _snapshot(out) == before


def test_a_failed_first_trial_leaves_no_directory_but_finished_trials_are_kept(
    tmp_path, monkeypatch
):
    import memlab.eval.tune as tune

    space = parse_space(["rrf__k=int:1:100:log"])
    kw = dict(embedder=HashingEmbedder(dim=64), progress=False, n_resamples=50)
    real = tune.score_rankings
    calls = []

    def flaky(*args, **kwargs):
        calls.append(1)
        if len(calls) >= limit[0]:
            raise KeyboardInterrupt  # the user gives up
        return real(*args, **kwargs)

    monkeypatch.setattr(tune, "score_rankings", flaky)
    limit = [1]
    with pytest.raises(KeyboardInterrupt):
        run_tune(HANDMADE, "rrf", space, trials=3, out=tmp_path / "fresh", **kw)
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no trial finished: nothing left
    (tmp_path / "empty").mkdir()
    calls[:] = []
    with pytest.raises(KeyboardInterrupt):
        run_tune(HANDMADE, "rrf", space, trials=3, out=tmp_path / "empty", **kw)
    assert list((tmp_path / "empty").iterdir()) == []  # an empty directory stays empty
    (tmp_path / "empty").rmdir()
    limit, calls[:] = [3], []
    with pytest.raises(KeyboardInterrupt):
        run_tune(HANDMADE, "rrf", space, trials=3, out=tmp_path / "t", **kw)
    assert sorted(p.name for p in (tmp_path / "t").iterdir()) == [".memlab-output.json",
                                                                   "study.db"]
    monkeypatch.setattr(tune, "score_rankings", real)
    res = run_tune(HANDMADE, "rrf", space, trials=1, out=tmp_path / "t", **kw)
    assert res.trials.filter(pl.col("state") == "COMPLETE").height == 3  # two kept, one more


def test_a_study_started_for_another_question_is_not_continued(tmp_path):
    import optuna

    kw = dict(embedder=HashingEmbedder(dim=64), progress=False, n_resamples=200)
    out = tmp_path / "t"
    run_tune(HANDMADE, "rrf", parse_space(["rrf__k=int:1:100:log"]), trials=2, out=out, **kw)
    before = (out / "study.db").read_bytes()
    for space, extra, differs in (
        (["rrf__k=int:200:300"], {}, "--space differs"),
        (["rrf__k=int:1:100:log"], {"seed": 7}, "--seed differs"),
        (["rrf__k=int:1:100:log"], {"metric": "MRR", "study_name": "rrf-R_all@10"},
         "--metric differs"),
        (["rrf__k=int:1:100:log"], {"test_fraction": 0.3, "seed": 3},
         "--seed, test_fraction differ"),
    ):
        with pytest.raises(ValueError, match=(
                rf"^study 'rrf-R_all@10' was started for another question: its {differs} "
                r"from this run's, so its trials do not answer this one; continue it as it was "
                r"started, or give another --study-name or a new --out$")):
            run_tune(HANDMADE, "rrf", parse_space(space), trials=1, out=out, **kw, **extra)
    assert (out / "study.db").read_bytes() == before  # no trial added
    # a study without the record (an older memlab's) is continued while its trials fit
    storage = f"sqlite:///{tmp_path / 'old.db'}"
    old = optuna.create_study(storage=storage, study_name="s", direction="maximize")
    old.add_trial(optuna.trial.create_trial(
        params={"rrf__k": 5}, distributions={"rrf__k": od.IntDistribution(1, 9)}, value=0.5))
    with pytest.raises(ValueError, match=r"^study 's': trial 0 sampled rrf__k from "):
        run_tune(HANDMADE, "rrf", parse_space(["rrf__k=int:1:100:log"]), trials=1,
                 storage=storage, study_name="s", **kw)
    res = run_tune(HANDMADE, "rrf", parse_space(["rrf__k=int:1:9"]), trials=1,
                   storage=storage, study_name="s", **kw)
    assert res.trials.height == 2


def test_a_storage_that_cannot_be_opened_is_one_message(tmp_path):
    kw = dict(embedder=HashingEmbedder(dim=64), progress=False, n_resamples=200)
    with pytest.raises(ValueError, match=r"^--storage nosuchdb://x: cannot open the study \("):
        run_tune(HANDMADE, "rrf", parse_space(["rrf__k=int:1:9"]), trials=1,
                 storage="nosuchdb://x", **kw)
