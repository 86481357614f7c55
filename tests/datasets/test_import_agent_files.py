"""The importers of real agent-memory files: each on its fixture, then import → validate →
eval end to end."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from memlab.cli import main
from memlab.datasets.format import Query, load_dataset, write_dataset
from memlab.datasets.importers import run_importer
from memlab.datasets.validate import validate_dataset
from memlab.embed import HashingEmbedder
from memlab.eval.experiment import run_experiment
from memlab.timeutil import parse_ts

FILES = Path(__file__).resolve().parents[1] / "fixtures" / "agent_files"


def _with_query(out: Path, text: str, relevant: str) -> Path:
    """The researcher's step after an import: write a query with its label."""
    ds = load_dataset(out)
    ts = ds.ops[-1].ts + 60
    q = Query(0, "q1", ts, text, relevant={relevant: 1}, tags=("written",))
    write_dataset((ds.meta, ds.ops, [q]), out)
    assert validate_dataset(out) == []
    return out


def _eval(ds: Path) -> dict:
    res = run_experiment(ds, ["bm25"], metrics=["R_all@10", "MRR"],
                         embedder=HashingEmbedder(dim=32), progress=False)
    return res.metrics["bm25"]


def test_mcp_memory_graph(tmp_path):
    with pytest.raises(ValueError, match="carries no timestamps; give ts="):
        run_importer("mcp-memory", FILES / "mcp_memory.jsonl", tmp_path / "x")
    rep = run_importer("mcp-memory", FILES / "mcp_memory.jsonl", tmp_path / "g",
                       ts="2026-03-01T00:00:00Z", client_id="acme")
    assert rep.counts == {"entities": 2, "observations": 4, "relations": 1, "not_mapped": 3}
    assert [u["where"] for u in rep.unmapped] == [
        "mcp_memory.jsonl:4", "mcp_memory.jsonl:5", "mcp_memory.jsonl:6",
    ]
    assert "'admires' has no memlab equivalent" in rep.unmapped[0]["reason"]
    assert rep.notes == ["every timestamp is the given ts 2026-03-01T00:00:00.000Z"]
    ds = load_dataset(tmp_path / "g")
    stores = ds.stores()
    assert [(s.id, s.text) for s in stores[:2]] == [
        ("Acme#1", "Acme: storefront runs on Remix"),
        ("Acme#2", "Acme: deploys the storefront on Vercel"),
    ]
    assert stores[0].fields["subject"] == "Acme"
    assert [(op.from_entity, op.relation, op.to_entity) for op in ds.ops if op.op == "relate"] == [
        ("Dana", "works_on", "Acme")
    ]
    mtime = run_importer("mcp-memory", FILES / "mcp_memory.jsonl", tmp_path / "m", ts="mtime")
    assert "modification time" in mtime.notes[0]
    _with_query(tmp_path / "g", "where does acme deploy the storefront", "Acme#2")
    assert _eval(tmp_path / "g")["R_all@10"] == 1.0


def test_markdown_notes(tmp_path):
    rep = run_importer("markdown", FILES / "notes", tmp_path / "n")
    assert rep.counts == {"files": 3, "memories": 3, "not_mapped": 1}
    assert rep.unmapped[0]["where"] == "undated.md:3"
    assert "no date in its front matter" in rep.unmapped[0]["reason"]
    ds = load_dataset(tmp_path / "n")
    got = [(s.id, s.ts, s.type, s.fields.get("client_id"), s.text) for s in ds.stores()]
    assert got == [
        ("acme/stack.md:8", parse_ts("2026-03-01T09:00:00Z"), "fact", "acme",
         "The storefront runs on Remix since March"),
        ("acme/stack.md:9", parse_ts("2026-03-01T09:00:00Z"), "fact", "acme",
         "Deploys go to Vercel from the main branch"),
        ("acme/incidents.md:6", parse_ts("2026-03-02T10:00:00Z"), "event", "acme",
         "Checkout outage: Checkout failed for two hours because the Stripe webhook secret "
         "expired."),
    ]
    dated = run_importer("markdown", FILES / "notes", tmp_path / "d", dates="mtime")
    assert dated.counts["memories"] == 4 and dated.unmapped == []
    assert dated.notes[0].startswith("undated.md: no date; dated by its modification time")
    _with_query(tmp_path / "n", "why did checkout fail stripe", "acme/incidents.md:6")
    assert _eval(tmp_path / "n")["MRR"] == 1.0


def test_csv_and_jsonl_logs_with_a_column_mapping(tmp_path):
    rep = run_importer("log", FILES / "chat.csv", tmp_path / "c",
                       mapping="text=message,ts=time,client_id=user,type=kind")
    assert rep.counts == {"records": 5, "memories": 2, "not_mapped": 3}
    assert [u["where"] for u in rep.unmapped] == ["chat.csv:4", "chat.csv:5", "chat.csv:6"]
    assert "no timestamp is guessed" in rep.unmapped[0]["reason"]
    assert rep.notes == ["columns not mapped: channel"]
    ds = load_dataset(tmp_path / "c")
    assert [(s.id, s.fields["client_id"]) for s in ds.stores()] == [("L3", "globex"),
                                                                    ("L2", "acme")]
    rep = run_importer("log", FILES / "events.jsonl", tmp_path / "e",
                       mapping="text=body,ts=at,client_id=who")
    assert [s.text for s in load_dataset(tmp_path / "e").stores()] == [
        "Checkout failing since 07:50", "Stripe webhook secret rotated",
        "Deploy to Vercel finished",
    ]
    assert rep.notes == ["columns not mapped: channel"]
    assert rep.unmapped == [{"where": "events.jsonl:3",
                             "reason": "column 'at' (ts) is missing: no timestamp is guessed"}]
    _with_query(tmp_path / "e", "stripe webhook secret", "L1")
    assert _eval(tmp_path / "e")["R_all@10"] == 1.0
    with pytest.raises(ValueError, match="map ts=<column>"):
        run_importer("log", FILES / "events.jsonl", tmp_path / "z", mapping="text=body")


def test_import_on_the_command_line(tmp_path, capsys):
    out = tmp_path / "e"
    assert main(["datasets", "import", "log", str(FILES / "events.jsonl"), str(out),
                 "--option", "mapping=text=body,ts=at"]) == 0
    assert "not mapped events.jsonl:3" in capsys.readouterr().out
    assert main(["datasets", "import", "log", str(FILES / "events.jsonl"), str(out)]) == 2
    assert "give a column mapping" in capsys.readouterr().err
    assert main(["datasets", "import", "mcp-memory", str(FILES / "mcp_memory.jsonl"),
                 str(tmp_path / "g"), "--option", "colour=red"]) == 2
    assert os.path.isdir(out)
