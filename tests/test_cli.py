import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import polars as pl
import pytest

import memlab.cli as cli
from memlab.cli import main

HANDMADE = str(Path(__file__).resolve().parent / "fixtures" / "handmade")


def test_eval_notes_relevance_metrics_that_scored_no_query(tmp_path, capsys):
    common = ["eval", HANDMADE, "--pipelines", "bm25", "--embedder", "hashing", "--no-cache",
              "--quiet", "--metrics", "MRR,tokens@10"]
    # the handmade dataset has inline grades and no judgments.jsonl: no agent judgment
    code = main([*common, "--qrels-source", "agent", "--out", str(tmp_path / "a")])
    assert code == 0
    metrics = json.loads((tmp_path / "a" / "metrics.json").read_text())["bm25"]
    assert list(metrics) == ["tokens@10"]
    err = capsys.readouterr().err
    assert (
        "memlab: note: MRR scored no query: no evaluated query has a relevance judgment of "
        "--qrels-source agent (after --exclude-tags); give another --qrels-source, fewer "
        "--exclude-tags, or judge the queries (memlab judge)\n"
    ) in err
    assert main([*common, "--out", str(tmp_path / "h")]) == 0
    assert "scored no query" not in capsys.readouterr().err
    # a metric of another kind that no query of the dataset gives a value
    assert main([*common, "--metric", "scope_violation@10", "--out", str(tmp_path / "s")]) == 0
    assert (
        "memlab: note: scope_violation@10 scored no query: no evaluated query of this dataset "
        "gives it a value (scope_violation@k, for one, needs queries that name an agent)\n"
    ) in capsys.readouterr().err


def test_eval_notes_a_pipeline_that_ranks_nothing(tmp_path, capsys):
    config = tmp_path / "mmr-only.toml"
    config.write_text('name = "mmr-only"\nsteps = ["mmr"]\n[mmr]\nstage = "mmr"\n')
    code = main(["eval", HANDMADE, "--pipelines", f"bm25,{config}", "--embedder", "hashing",
                 "--no-cache", "--quiet", "--out", str(tmp_path / "r")])
    assert code == 0
    notes = [line for line in capsys.readouterr().err.splitlines() if "ranked no memory" in line]
    assert notes == [
        "memlab: note: pipeline mmr-only ranked no memory for any query (does it start with a "
        "retriever? a re-ranker alone receives no candidates)"
    ]


def test_eval_notes_shards_it_cannot_use(tmp_path, capsys):
    common = ["eval", HANDMADE, "--pipelines", "bm25", "--embedder", "hashing", "--no-cache",
              "--quiet", "--shards", "2"]
    assert main([*common, "--touch-k", "3", "--out", str(tmp_path / "a")]) == 0
    assert (
        "memlab: note: --shards 2 is not used: a query of this replay changes the store "
        "(expiry or --touch-k), so its queries cannot be split; give --no-expire --touch-k 0 "
        "to shard\n"
    ) in capsys.readouterr().err
    assert main([*common, "--no-expire", "--touch-k", "0", "--out", str(tmp_path / "b")]) == 0
    assert "--shards 2 is not used" not in capsys.readouterr().err


def test_eval_writes_a_run(tmp_path, capsys):
    out = tmp_path / "run"
    code = main(["eval", HANDMADE, "--pipelines", "bm25,dense", "--embedder", "hashing",
                 "--no-cache", "--quiet", "--out", str(out)])
    assert code == 0
    assert json.loads((out / "metrics.json").read_text())["bm25"]["R_all@10"] >= 0.0
    captured = capsys.readouterr()
    assert f"wrote {out}" in captured.out
    assert "protocol: 10 queries; learned stages cross-fitted over 5 folds (by query, seed 0)" in (
        captured.out
    )
    # --quiet: no bar, but one line per step on stderr
    assert "eval handmade: done, 2 pipelines in" in captured.err
    assert "paired tests: done" in captured.err
    assert "\r" not in captured.err


def test_eval_in_shards_writes_the_metrics_of_one_replay(tmp_path, capsys):
    common = ["eval", HANDMADE, "--pipelines", "bm25,dense", "--embedder", "hashing",
              "--no-cache", "--quiet", "--touch-k", "0", "--no-expire", "--executor", "serial"]
    assert main([*common, "--out", str(tmp_path / "one")]) == 0
    assert main([*common, "--shards", "3", "--out", str(tmp_path / "three")]) == 0
    assert "eval handmade: done, 6 replays in" in capsys.readouterr().err  # 2 pipelines x 3
    for name in ("metrics.json", "per_query.parquet", "rankings.parquet"):
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "three" / name).read_bytes()


def test_bad_input_is_one_message_and_exit_2(tmp_path, capsys):
    out = tmp_path / "run"
    cases = [
        ["eval", HANDMADE, "--pipelines", "bm25,nope", "--out", str(out)],
        ["eval", HANDMADE, "--metrics", "R_all@ten", "--out", str(out)],
        ["eval", str(tmp_path / "missing"), "--out", str(out)],
        ["sweep", HANDMADE, "--pipeline", "hybrid", "--grid", "rrf_k=1", "--out", str(out)],
        ["sweep", HANDMADE, "--pipeline", "hybrid", "--out", str(out)],
        ["eval", HANDMADE, "--pipelines", "bm25", "--folds", "1", "--out", str(out)],
        ["eval", HANDMADE, "--pipelines", "bm25", "--shards", "0", "--out", str(out)],
    ]
    for argv in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("memlab: error: "), err
        assert "Traceback" not in err
        assert not out.exists()


def test_eval_of_an_invalid_dataset_lists_its_problems(tmp_path, capsys):
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "dataset.toml").write_text('name = "bad"\n')
    (bad / "memories.jsonl").write_text('{"id": "a", "ts": "yesterday"}\n')
    (bad / "queries.jsonl").write_text("")
    assert main(["eval", str(bad), "--embedder", "hashing", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "memories.jsonl:1" in err
    assert not (tmp_path / "o").exists()


def test_datasets_validate_exit_codes(tmp_path):
    assert main(["datasets", "validate", HANDMADE]) == 0
    assert main(["datasets", "validate", str(tmp_path)]) == 1


def test_pipelines_lists_and_prints(capsys):
    assert main(["pipelines"]) == 0
    listing = capsys.readouterr().out
    for name in ("bm25", "dense", "graph", "hybrid", "full"):
        assert name in listing
    assert main(["pipelines", "hybrid"]) == 0
    assert 'fuse = "rrf"' in capsys.readouterr().out


def test_store_consolidate_runs_one_cycle(tmp_path, capsys):
    from memlab.embed import make_embedder
    from memlab.memory.store import MemoryStore

    path = tmp_path / "store"
    store = MemoryStore(path, embedder=make_embedder("hashing"), chroma=False)
    a = store.store("The database server runs PostgreSQL", "fact", key="db", source_agent="a",
                    now="2026-03-01T00:00:00Z")
    b = store.store("Ran the nightly job", source_agent="a", importance="low",
                    now="2026-03-01T00:00:00Z")
    store.close()
    argv = ["store", "consolidate", str(path), "--embedder", "hashing", "--no-cache",
            "--now", "2026-04-15T00:00:00Z"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "processed 2, reclassified 1, merged facts 0" in out
    assert "expired events 1" in out
    store = MemoryStore(path, embedder=make_embedder("hashing"), chroma=False)
    assert store.get(a.id).knowledge_category == "technical"
    assert store.get(a.id).consolidated and not store.get(b.id).active
    store.close()
    assert main(["store", "consolidate", str(tmp_path / "nowhere")]) == 2
    assert "not a memlab store" in capsys.readouterr().err
    assert main([*argv[:3], "--embedder", "hashing", "--now", "yesterday"]) == 2


def test_error_messages_that_echo_input_are_scrubbed(tmp_path, capsys):
    out = tmp_path / "run"
    code = main(["eval", HANDMADE, "--pipelines", "bm25,password=hunter22", "--out", str(out)])
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("memlab: error: ")
    assert "hunter22" not in err

# ---------------------------------------------------------------------- bad arguments
def _bad_argument_cases(tmp: Path) -> list[list[str]]:
    foreign = tmp / "foreign"
    foreign.mkdir()
    (foreign / "thesis.tex").write_text("mine")
    a_file = tmp / "a-file"
    a_file.write_text("x")
    folder = tmp / "folder"
    folder.mkdir()
    ev = ["eval", HANDMADE, "--embedder", "hashing", "--no-cache", "--quiet"]
    sw = ["sweep", HANDMADE, "--pipeline", "hybrid", "--embedder", "hashing", "--no-cache",
          "--quiet"]
    cases = [
        # numbers
        [*ev, "--touch-k", "-1"], [*ev, "--touch-k", "abc"], [*ev, "--touch-k", "1.5"],
        [*ev, "--ttl-days", "-3"], [*ev, "--ttl-days", "nan"], [*ev, "--ttl-days", "inf"],
        [*ev, "--ttl-days", "ten"], [*ev, "--seed", "-1"], [*ev, "--seed", "x"],
        # lists and names
        [*ev, "--pipelines", ","], [*ev, "--pipelines", " , "], [*ev, "--pipelines", ""],
        [*ev, "--pipelines", "bm25,,nope"], [*ev, "--pipelines", "nope"],
        [*ev, "--pipelines", "bm25,bm25"], [*ev, "--pipelines", str(tmp / "missing.toml")],
        [*ev, "--pipelines", f"{folder}/"], [*ev, "--pipelines", str(a_file)],
        [*ev, "--metrics", ","], [*ev, "--metrics", "R_all@ten"], [*ev, "--metrics", "nope"],
        [*ev, "--pipelines", "bm25", "--baseline", "dense"],
        [*ev, "--pipelines", "bm25", "--embedder", "nope"],
        [*ev, "--pipelines", "bm25", "--generator", "nope"],
        [*ev, "--frobnicate"], ["eval"], ["nope"], [],
        # files
        ["eval", str(tmp / "missing"), "--embedder", "hashing"],
        ["eval", str(a_file), "--embedder", "hashing"],
        [*ev, "--pipelines", "bm25", "--out", str(a_file)],
        [*ev, "--pipelines", "bm25", "--out", str(foreign)],
        # grids
        [*sw, "--grid", "rrf__k=abc"], [*sw, "--grid", "rrf__k=-1"],
        [*sw, "--grid", "rrf__k=nan"], [*sw, "--grid", "rrf__k=inf"],
        [*sw, "--grid", "rrf__k="], [*sw, "--grid", "=1"], [*sw, "--grid", "rrf_k=1"],
        [*sw, "--grid", "nope__k=1"], [*sw, "--grid", "rrf__nope=1"],
        [*sw, "--grid", "rrf__k=[1,2"], [*sw, "--grid", "rrf__weights=[a,b]"],
        [*sw, "--grid", "rrf__weights=[0.5,-1]"], [*sw, "--grid", "rrf__k=1,2", "--grid",
                                                    "rrf__k=3"],
        [*sw, "--grid", "lifecycle__decay_factor=1.5"],
        [*sw, "--grid", "lifecycle__decaying_types=[fact,memo]"],
        [*sw, "--grid", "dense__top_k=-5"], [*sw, "--grid", "dense__top_k=0.5"],
        [*sw, "--grid", "bm25__b=2"], [*sw, "--grid", "rrf__top_k=true"],
        [*sw, "--grid", "rrf__k=1", "--metric", "nope"], [*sw],
        [*sw, "--grid", "rrf__k=1", "--split-by", "x"],
        [*sw, "--grid", "rrf__k=1", "--out", str(foreign)],
        ["sweep", HANDMADE, "--pipeline", "nope", "--grid", "rrf__k=1"],
        # other commands
        ["datasets", "generate", "--seed", "-1", str(tmp / "gen")],
        ["datasets", "generate", "--seed", "1", str(foreign)],
        ["datasets", "validate"],
        ["datasets", "import", "nope", HANDMADE, str(tmp / "imp")],
        ["datasets", "import-locomo", str(tmp / "missing"), str(tmp / "imp")],
        ["store", "check", str(tmp / "missing")],
        ["store", "consolidate", str(tmp / "missing"), "--ttl-days", "-1"],
        ["store", "consolidate", str(tmp / "missing"), "--merge-threshold", "2"],
        ["generations", "record", HANDMADE, "--pipeline", "bm25", "--out", str(tmp / "g")],
        ["generations", "record", HANDMADE, "--pipeline", "nope", "--out", str(tmp / "g")],
        ["pipelines", "nope"], ["pipelines", ","],
    ]
    return cases


def test_bad_arguments_are_one_line_and_exit_2(tmp_path, capsys, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    cases = _bad_argument_cases(work)
    assert len(cases) >= 60
    monkeypatch.chdir(work)
    before = sorted(p.name for p in work.iterdir())
    for argv in cases:
        code = main(argv)
        err = capsys.readouterr().err
        assert code == 2, (argv, err)
        assert "Traceback" not in err, argv
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("memlab: error: "), (argv, err)
        assert sorted(p.name for p in work.iterdir()) == before, argv  # nothing written
        assert (work / "foreign" / "thesis.tex").read_text() == "mine"


def test_out_dot_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("keep")
    for argv in (
        ["eval", HANDMADE, "--pipelines", "bm25", "--embedder", "hashing", "--out", "."],
        ["sweep", HANDMADE, "--pipeline", "bm25", "--grid", "bm25__k1=1.2", "--out", "."],
        ["eval", HANDMADE, "--pipelines", "bm25", "--embedder", "hashing", "--out", ".."],
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith("memlab: error: --out ") and "working directory" in err
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


def test_an_empty_out_or_one_under_a_file_is_refused_before_any_work(tmp_path, capsys,
                                                                     monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a-file").write_text("keep")
    for out, message in (
        ("", "memlab: error: --out '': is empty; give a directory\n"),
        ("a-file/run", f"memlab: error: --out a-file/run: {tmp_path / 'a-file'} is a file, not "
                       "a directory\n"),
    ):
        for argv in (
            ["eval", HANDMADE, "--pipelines", "bm25", "--embedder", "hashing", "--out", out],
            ["sweep", HANDMADE, "--pipeline", "bm25", "--grid", "bm25__k1=1.2", "--out", out],
        ):
            assert main(argv) == 2
            assert capsys.readouterr().err == message
    assert [p.name for p in tmp_path.iterdir()] == ["a-file"]  # no reports/ fallback


def test_ctrl_c_is_one_line_and_exit_130(monkeypatch, capsys):
    def interrupted(args):
        raise KeyboardInterrupt

    parsed = SimpleNamespace(func=interrupted)  # a command whose work is interrupted
    monkeypatch.setattr(cli, "build_parser",
                        lambda: SimpleNamespace(parse_args=lambda argv: parsed))
    assert main(["eval", "somewhere"]) == 130
    assert capsys.readouterr().err == "memlab: interrupted\n"


def test_eval_replaces_its_own_run_and_keeps_added_files(tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["eval", HANDMADE, "--pipelines", "bm25", "--embedder", "hashing", "--no-cache",
            "--quiet", "--out", str(out)]
    assert main(argv) == 0
    (out / "my-notes.md").write_text("mine")
    assert main(argv) == 0
    assert (out / "my-notes.md").read_text() == "mine"
    assert (out / "metrics.json").is_file()


def test_a_folder_named_like_a_pipeline_does_not_shadow_it(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bm25").mkdir()
    (tmp_path / "bm25" / "x").write_text("")
    assert main(["pipelines", "bm25"]) == 0
    assert 'stage = "bm25"' in capsys.readouterr().out


def test_default_pipelines_without_generations_leave_out_the_generator_ones(
    tmp_path, capsys, monkeypatch
):
    import memlab.eval.experiment as experiment

    seen = {}

    def fake_run(ds, pipelines, **kwargs):
        seen["pipelines"] = [p.name for p in pipelines]
        seen["generator"] = kwargs["generator"]
        return SimpleNamespace(metrics={}, out=tmp_path / "run", rankings=pl.DataFrame(),
                               manifest={})

    monkeypatch.setattr(experiment, "run_experiment", fake_run)
    argv = ["eval", HANDMADE, "--embedder", "hashing", "--no-cache", "--quiet",
            "--out", str(tmp_path / "run")]
    assert main(argv) == 0
    err = capsys.readouterr().err
    note = [line for line in err.splitlines() if line.startswith("memlab: note:")]
    assert len(err.splitlines()) == 1 and len(note) == 1
    assert "leaving out full" in note[0] and "--generator smollm2" in note[0]
    # the file named is one eval reads (default_generator's first place)
    assert note[0].endswith(
        f"(memlab generations record {HANDMADE} --out {Path(HANDMADE) / 'generations.jsonl'})"
    )
    assert seen == {
        "pipelines": ["bm25", "dense", "graph", "rrf", "hybrid", "conversational"],
        "generator": None,
    }
    # asked for by name, or with a generator, nothing is left out
    assert main([*argv, "--pipelines", "bm25,full"]) == 0
    assert seen["pipelines"] == ["bm25", "full"]
    assert main([*argv, "--generator", "recorded"]) == 2  # none recorded: says how to record
    assert "memlab generations record" in capsys.readouterr().err


def test_default_pipelines_keep_full_when_generations_are_recorded(
    tmp_path, capsys, monkeypatch
):
    import memlab.eval.experiment as experiment

    seen = {}
    monkeypatch.setattr(
        experiment, "run_experiment",
        lambda ds, pipelines, **kw: seen.update(names=[p.name for p in pipelines])
        or SimpleNamespace(metrics={}, out=tmp_path, rankings=pl.DataFrame(), manifest={}),
    )
    shipped = str(Path(__file__).resolve().parents[1] / "datasets" / "agent-memories")
    assert main(["eval", shipped, "--embedder", "hashing", "--out", str(tmp_path / "r")]) == 0
    assert "note" not in capsys.readouterr().err
    assert seen["names"][-1] == "full"


def test_replay_defaults_come_from_the_dataset_and_flags_override(tmp_path, capsys):
    import shutil

    data = tmp_path / "data"
    shutil.copytree(HANDMADE, data)
    toml = data / "dataset.toml"
    toml.write_text(toml.read_text() + "\n[replay]\ntouch_k = 0\nexpire = false\n")
    out = tmp_path / "run"
    assert main(["eval", str(data), "--pipelines", "bm25", "--embedder", "hashing",
                 "--no-cache", "--quiet", "--out", str(out), "--touch-k", "3"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == (
        "replay: ttl_days=30 expire=False [dataset] touch_k=3 [flag] consolidation=off "
        "conflict_policy=None"
    )
    replay = json.loads((out / "manifest.json").read_text())["replay"]
    assert (replay["expire"], replay["touch_k"]) == (False, 3)
    assert replay["source"] == {"expire": "dataset", "touch_k": "override"}
    toml.write_text(toml.read_text().replace("touch_k = 0", "touch_k = -1"))
    assert main(["eval", str(data), "--embedder", "hashing", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "dataset.toml" in err and "touch_k" in err and "Traceback" not in err


def test_embedder_path_without_a_model_is_one_line(tmp_path, capsys):
    code = main(["eval", HANDMADE, "--pipelines", "dense", "--embedder",
                 f"path:{tmp_path / 'no-model'}", "--out", str(tmp_path / "run"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("memlab: error: "), err
    assert "modules.json missing" in lines[0]


def test_eval_accepts_ir_measures_names_and_old_metric_names(tmp_path, capsys):
    out = tmp_path / "run"
    code = main(["eval", HANDMADE, "--pipelines", "bm25", "--embedder", "hashing", "--no-cache",
                 "--quiet", "--out", str(out), "--metrics", "R_any@10,RBP(p=0.5,rel=1)",
                 "--metric", "P@5", "--metric", "RBP(p=0.8)"])
    assert code == 0, capsys.readouterr().err
    metrics = json.loads((out / "metrics.json").read_text())["bm25"]
    assert set(metrics) >= {"Success@10", "RBP(p=0.5,rel=1)", "P@5", "RBP(rel=1)"}
    assert "R_any@10" not in metrics
    assert 0.0 <= metrics["P@5"] <= 1.0
    assert main(["eval", HANDMADE, "--metric", "alpha_nDCG@10", "--out", str(out / "x")]) == 2
    assert "none of its installed providers" in capsys.readouterr().err


PLUGINS = Path(__file__).resolve().parent / "fixtures" / "plugins"


def test_a_failing_stage_is_one_message_and_exit_1(tmp_path, capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(PLUGINS))
    config = tmp_path / "crashing.toml"
    config.write_text(
        'name = "crashing"\nsteps = ["bm25", "custom"]\n\n[bm25]\nstage = "bm25"\n\n'
        '[custom]\nstage = "memlab_test_plugin:Crashes"\n',
        encoding="utf-8",
    )
    code = main(["eval", HANDMADE, "--pipelines", str(config), "--embedder", "hashing",
                 "--no-cache", "--quiet", "--executor", "serial", "--out", str(tmp_path / "run")])
    assert code == 1
    err = capsys.readouterr().err.splitlines()
    assert err[-1].startswith("memlab: error: stage 'custom' (Crashes) failed on query '")
    assert err[-1].endswith("': ZeroDivisionError: division by zero in a plugin")
    assert not (tmp_path / "run").exists()


def test_another_runtime_error_is_not_taken_for_a_stage_error(monkeypatch):
    def broken(args):
        raise RuntimeError("a bug, with its traceback")

    monkeypatch.setattr(cli, "cmd_pipelines", broken)
    with pytest.raises(RuntimeError, match="a bug, with its traceback"):
        main(["pipelines"])


def test_parsing_a_command_line_loads_neither_stages_nor_the_scrubber():
    # A command that starts worker processes starts them right after parsing: the parent's
    # own heavy imports (the stages: ~0.4 s) then overlap theirs.
    code = (
        "import sys; from memlab.cli import main\n"
        "assert main(['sweep', '--help']) == 0\n"
        "print(sorted(m for m in ('memlab.stages', 'memlab.memory.scrub', 'polars')"
        " if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_eval_refuses_bad_metrics_and_replay_numbers_before_any_replay(tmp_path, capsys):
    out = tmp_path / "run"
    common = ["eval", HANDMADE, "--pipelines", "bm25", "--embedder", "hashing", "--no-cache",
              "--quiet", "--out", str(out)]
    cases = {
        ("--metric", "RBP(p=2)"): "memlab: error: metric 'RBP(p=2)': invalid param p=2",
        ("--metric", "P@0"): "memlab: error: metric 'P@0': cutoff must be an integer in "
                             "[1, 100000], got 0",
        ("--metric", "ERR@5"): "memlab: error: metric 'ERR@5': ERR@5 is computed only by gdeval, "
                               "which runs an external program; memlab computes measures "
                               "in-process only",
        ("--consolidation-hours", "1e-300"): "memlab: error: --consolidation-hours: field "
            "'interval_hours' must be 0 (no cycles) or at least 0.000277777778 (one second), "
            "got 1e-300",
        ("--touch-k", "9" * 30): "memlab: error: --touch-k: field 'touch_k' must be at most "
                                 "1000000, got " + "9" * 30,
    }
    for flags, message in cases.items():
        assert main([*common, *flags]) == 2, flags
        captured = capsys.readouterr()
        assert captured.err.splitlines()[-1] == message
        assert "replay bm25" not in captured.err  # refused before the replay
        assert not out.exists()


def test_eval_of_a_dataset_without_queries_says_so(tmp_path, capsys):
    import shutil

    data = tmp_path / "data"
    shutil.copytree(HANDMADE, data)
    (data / "queries.jsonl").write_text("")
    for command in (["eval", str(data), "--pipelines", "bm25"],
                    ["sweep", str(data), "--pipeline", "hybrid", "--grid", "rrf__k=1,2"]):
        assert main([*command, "--embedder", "hashing", "--out", str(tmp_path / "o")]) == 2
        err = capsys.readouterr().err
        assert err == (f"memlab: error: {data / 'queries.jsonl'}: the dataset has no queries to "
                       "evaluate (the file holds none)\n")


def test_sigterm_unwinds_like_ctrl_c_and_leaves_no_temporary_output(tmp_path, monkeypatch,
                                                                   capsys):
    import os
    import signal

    from memlab.io import atomic_directory

    out = tmp_path / "run"

    def terminated_while_writing(args):
        with atomic_directory(out) as tmp:
            (tmp / "metrics.json").write_text("{}", encoding="utf-8")
            os.kill(os.getpid(), signal.SIGTERM)  # as `kill PID` or a CI timeout sends it
            raise AssertionError("SIGTERM did not interrupt the command")
        return 0

    parsed = SimpleNamespace(func=terminated_while_writing, command="eval")
    monkeypatch.setattr(cli, "build_parser",
                        lambda: SimpleNamespace(parse_args=lambda argv: parsed))
    assert main(["eval", "somewhere"]) == 143
    assert capsys.readouterr().err == "memlab: terminated\n"
    assert list(tmp_path.iterdir()) == []  # neither OUT nor a .run.tmp-* sibling
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the old handler is back


def test_serve_keeps_its_own_sigterm_handling(monkeypatch):
    import signal

    seen = []
    parsed = SimpleNamespace(func=lambda args: seen.append(signal.getsignal(signal.SIGTERM)) or 0,
                             command="serve")
    monkeypatch.setattr(cli, "build_parser",
                        lambda: SimpleNamespace(parse_args=lambda argv: parsed))
    assert main(["serve"]) == 0
    assert seen == [signal.SIG_DFL]


def test_finetune_writes_a_model_the_embedder_loads(tmp_path, capsys):
    out = tmp_path / "tuned"
    args = ["finetune", HANDMADE, str(out), "--epochs", "1", "--batch-size", "4"]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert printed.splitlines() == [
        "fine-tuning minilm on 10 pairs",
        f"wrote {out} (use it as --embedder path:{out})",
    ]
    assert json.loads((out / "finetune.json").read_text(encoding="utf-8"))["pairs"] == 10
    # asked again with other constants: refused, the model untouched
    assert main([*args[:3], "--epochs", "2"]) == 2
    assert "exists and is not a model fine-tuned" in capsys.readouterr().err
    assert main(["finetune", HANDMADE, str(tmp_path / "x"), "--embedder", "hashing"]) == 2
    assert "cannot fine-tune embedder 'hashing'" in capsys.readouterr().err
    assert main(["finetune", HANDMADE, str(tmp_path / "y"), "--epochs", "0"]) == 2
    assert "epochs must be >= 1, got 0" in capsys.readouterr().err
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


# ---------------------------------------------------------------- the last safety net


def _failing(monkeypatch, exc: BaseException) -> None:
    """``memlab judge pool`` raises ``exc`` from inside its reader."""
    import memlab.judge.cli as judge_cli

    def pool(args):
        raise exc

    monkeypatch.setattr(judge_cli, "cmd_pool", pool)


def _pool_argv(tmp_path):
    return ["judge", "pool", str(tmp_path), "--out", str(tmp_path / "p.jsonl")]


@pytest.mark.parametrize(
    ("exc", "line"),
    [
        (RecursionError("maximum recursion depth exceeded while decoding a JSON array"),
         "memlab: error: memlab judge pool: the input is nested too deeply to process "
         "(RecursionError; set MEMLAB_DEBUG=1 for the traceback)"),
    ],
)
def test_recursion_error_is_one_line_naming_the_command(tmp_path, monkeypatch, capsys, exc,
                                                        line):
    monkeypatch.delenv("MEMLAB_DEBUG", raising=False)
    _failing(monkeypatch, exc)
    assert main(_pool_argv(tmp_path)) == 2
    assert capsys.readouterr().err.splitlines() == [line]


def _library_errors():
    import sqlite3

    from polars.exceptions import ComputeError, PanicException

    return [
        (ComputeError("parquet: File out of specification\nmore detail"),
         "memlab judge pool failed: polars ComputeError: parquet: File out of specification"),
        (PanicException("index out of bounds"),
         "memlab judge pool failed: pyo3_runtime PanicException: index out of bounds"),
        (sqlite3.DatabaseError("file is not a database"),
         "memlab judge pool failed: sqlite3 DatabaseError: file is not a database"),
    ]


@pytest.mark.parametrize("case", range(3), ids=["polars", "rust-panic", "sqlite3"])
def test_a_library_exception_escaping_a_reader_is_one_line(tmp_path, monkeypatch, capsys, case):
    exc, text = _library_errors()[case]
    monkeypatch.delenv("MEMLAB_DEBUG", raising=False)
    _failing(monkeypatch, exc)
    assert main(_pool_argv(tmp_path)) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"memlab: error: {text} (set MEMLAB_DEBUG=1 for the traceback)"
    ]


def test_memlab_debug_shows_the_traceback_before_the_line(tmp_path, monkeypatch, capsys):
    from polars.exceptions import ComputeError

    monkeypatch.setenv("MEMLAB_DEBUG", "1")
    _failing(monkeypatch, ComputeError("parquet: bad footer"))
    assert main(_pool_argv(tmp_path)) == 1
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):")
    assert "polars.exceptions.ComputeError: parquet: bad footer" in err
    assert err.splitlines()[-1].startswith("memlab: error: memlab judge pool failed: polars")
    _failing(monkeypatch, ValueError("x.json: invalid JSON"))  # bad input: also explained
    assert main(_pool_argv(tmp_path)) == 2
    err = capsys.readouterr().err
    assert "Traceback" in err and err.splitlines()[-1] == "memlab: error: x.json: invalid JSON"


def test_a_bug_keeps_its_traceback(tmp_path, monkeypatch):
    monkeypatch.delenv("MEMLAB_DEBUG", raising=False)
    _failing(monkeypatch, AttributeError("'str' object has no attribute 'get'"))
    with pytest.raises(AttributeError, match="no attribute 'get'"):
        main(_pool_argv(tmp_path))


def test_a_deep_dataset_toml_is_one_line_in_every_command_that_reads_it(tmp_path, capsys):
    import shutil

    ds = tmp_path / "ds"
    shutil.copytree(HANDMADE, ds)
    with open(ds / "dataset.toml", "a", encoding="utf-8") as fh:
        fh.write("\nx = " + "[" * 5000 + "]" * 5000 + "\n")
    line = (ds / "dataset.toml").read_text().count("\n")
    problem = f"dataset.toml:{line}: invalid TOML: nested too deeply to read"
    for argv in (["datasets", "validate", str(ds)],
                 ["eval", str(ds), "--pipelines", "bm25", "--embedder", "hashing", "--no-cache",
                  "--quiet", "--out", str(tmp_path / "run")],
                 ["judge", "add", str(ds), "q1", "m1", "2", "--judge", "z"]):
        code = main(argv)
        out = capsys.readouterr()
        assert code in (1, 2), argv
        text = out.out + out.err
        assert problem in text, (argv, text)
        assert "Traceback" not in text
    assert not (tmp_path / "run").exists()
    assert not (ds / "judgments.jsonl").exists()


def test_finetune_trains_a_cross_encoder_the_stage_loads(tmp_path, capsys):
    from memlab.datasets.format import load_dataset
    from memlab.stages.cross_encoder import CrossEncoderScorer

    out = tmp_path / "cross"
    args = ["finetune", HANDMADE, str(out), "--cross-encoder", "--first-stage", "bm25",
            "--epochs", "1", "--batch-size", "4"]
    assert main(args) == 0
    from memlab.eval.experiment import run_experiment
    from memlab.pipeline import load_pipeline

    ds = load_dataset(HANDMADE)
    stored = {op.id for op in ds.ops if op.op == "store"}
    ranked = run_experiment(ds, [load_pipeline("bm25")], progress=False,
                            write_report=False).rankings
    negatives = 0  # up to four per judged query, from bm25's top 30 without its evidence
    for q in ds.queries:
        if "adversarial" in q.tags or not any(g > 0 and m in stored
                                              for m, g in q.relevant.items()):
            continue
        top = ranked.filter(pl.col("qid") == q.qid).sort("rank")["mem_id"].to_list()[:30]
        negatives += min(4, sum(1 for m in top if q.relevant.get(m, 0) <= 0))
    record = json.loads((out / "crossencoder.json").read_text(encoding="utf-8"))
    assert record["positives"] == 10  # the pairs the sentence encoder trains on
    assert record["examples"] == 10 + negatives > 10
    assert (record["epochs"], record["batch_size"]) == (1, 4)
    assert capsys.readouterr().out.splitlines() == [
        f"training a cross-encoder from minilm on {record['examples']} examples (10 positive; "
        "negatives from bm25)",
        f"wrote {out} (use it as cross_encoder__model={out})",
    ]
    logits = CrossEncoderScorer(out).score("where is billing deployed?", ["a", "b c"])
    assert logits.shape == (2,) and np.isfinite(logits).all()
    assert main(["finetune", HANDMADE, str(tmp_path / "z"), "--cross-encoder",
                 "--first-stage", "no-such-pipeline"]) == 2
    assert "no-such-pipeline" in capsys.readouterr().err
    assert not (tmp_path / "z").exists()


def test_every_embedder_option_shares_one_help_text() -> None:
    import argparse

    from memlab.cli import EMBEDDER_HELP, build_parser

    def walk(parser: argparse.ArgumentParser, path: tuple[str, ...]):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    yield from walk(sub, (*path, name))
            elif "--embedder" in action.option_strings:
                yield path, action.help

    found = dict(walk(build_parser(), ()))
    assert {("tune",), ("serve", "mcp"), ("serve", "http"), ("eval",)} <= set(found)
    # fine-tuning takes a base model, not an embedder to evaluate with
    shared = {path: text for path, text in found.items() if "finetune" not in " ".join(path)}
    assert {text for text in shared.values()} == {EMBEDDER_HELP}, shared
