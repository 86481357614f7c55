import json
from pathlib import Path

from memlab.cli import main

HANDMADE = str(Path(__file__).resolve().parent / "fixtures" / "handmade")


def test_eval_writes_a_run(tmp_path, capsys):
    out = tmp_path / "run"
    code = main(["eval", HANDMADE, "--pipelines", "bm25,dense", "--embedder", "hashing",
                 "--no-cache", "--quiet", "--out", str(out)])
    assert code == 0
    assert json.loads((out / "metrics.json").read_text())["bm25"]["R_all@10"] >= 0.0
    assert f"wrote {out}" in capsys.readouterr().out


def test_bad_input_is_one_message_and_exit_2(tmp_path, capsys):
    out = tmp_path / "run"
    cases = [
        ["eval", HANDMADE, "--pipelines", "bm25,nope", "--out", str(out)],
        ["eval", HANDMADE, "--metrics", "R_all@ten", "--out", str(out)],
        ["eval", str(tmp_path / "missing"), "--out", str(out)],
        ["sweep", HANDMADE, "--pipeline", "hybrid", "--grid", "rrf_k=1", "--out", str(out)],
        ["sweep", HANDMADE, "--pipeline", "hybrid", "--out", str(out)],
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


def test_replay_defaults_come_from_the_dataset_and_flags_override(tmp_path, capsys):
    import shutil

    data = tmp_path / "data"
    shutil.copytree(HANDMADE, data)
    toml = data / "dataset.toml"
    toml.write_text(toml.read_text() + "\n[replay]\ntouch_k = 0\nexpire = false\n")
    out = tmp_path / "run"
    assert main(["eval", str(data), "--pipelines", "bm25", "--embedder", "hashing",
                 "--no-cache", "--quiet", "--out", str(out), "--touch-k", "3"]) == 0
    assert "replay: ttl_days=30 expire=False touch_k=3" in capsys.readouterr().out
    replay = json.loads((out / "manifest.json").read_text())["replay"]
    assert (replay["expire"], replay["touch_k"]) == (False, 3)
    assert replay["source"] == {"expire": "dataset", "touch_k": "override"}
    toml.write_text(toml.read_text().replace("touch_k = 0", "touch_k = -1"))
    assert main(["eval", str(data), "--embedder", "hashing", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "dataset.toml" in err and "touch_k" in err and "Traceback" not in err
