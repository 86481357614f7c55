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


def test_a_written_memory_the_format_refuses_is_named_at_its_source_line(tmp_path):
    from memlab.datasets.format import DatasetError
    from memlab.datasets.validate import Problem

    log = tmp_path / "chat.csv"
    log.write_text("time,message\n2025-01-01T10:00:00Z,fine\n"
                   f"2025-01-01T10:01:00Z,{'x' * 20_001}\n", encoding="utf-8")
    with pytest.raises(DatasetError) as info:
        run_importer("log", log, tmp_path / "out", mapping="text=message,ts=time")
    assert info.value.problems == [Problem(
        str(log), 3, None,
        "field 'text' is 20001 characters long; the limit is 20000 (written as "
        "memories.jsonl:2)",
    )]
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("---\ndate: 2025-01-01T00:00:00Z\n---\n- short\n- "
                                + "y" * 20_001 + "\n", encoding="utf-8")
    with pytest.raises(DatasetError) as info:
        run_importer("markdown", notes, tmp_path / "out")
    assert [(p.file, p.line) for p in info.value.problems] == [(str(notes / "a.md"), 5)]
    assert not (tmp_path / "out").exists()


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


# ---------------------------------------------------------------- malformed sources
DEEP = "[" * 100_000 + "]" * 100_000
TS = "2025-01-01T00:00:00Z"


def _lines(path, *lines, bom=False):
    path.write_text(("\ufeff" if bom else "") + "\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_deeply_nested_jsonl_lines_are_not_mapped_with_their_line(tmp_path):
    mcp = _lines(tmp_path / "m.jsonl", '{"type":"entity","name":"a","entityType":"t",'
                 '"observations":["x"]}', DEEP)
    rep = run_importer("mcp-memory", mcp, tmp_path / "o1", ts=TS)
    assert rep.unmapped == [{"where": "m.jsonl:2", "reason": "invalid JSON: nested too deeply "
                             "to read"}]
    log = _lines(tmp_path / "l.jsonl", f'{{"m":"a","t":"{TS}"}}', '{"m":' + DEEP + "}")
    rep = run_importer("log", log, tmp_path / "o2", mapping="text=m,ts=t")
    assert rep.unmapped == [{"where": "l.jsonl:2", "reason": "invalid JSON: nested too deeply "
                             "to read"}]
    assert rep.counts == {"records": 2, "memories": 1, "not_mapped": 1}


def test_an_import_that_maps_nothing_is_an_error_and_writes_nothing(tmp_path):
    log = _lines(tmp_path / "l.jsonl", DEEP, f'{{"x":"a","t":"{TS}"}}')
    with pytest.raises(ValueError) as info:
        run_importer("log", log, tmp_path / "o", mapping="text=m,ts=t")
    assert str(info.value) == (
        f"{log}: no record could be mapped to a memory (2 not mapped; first l.jsonl:1: invalid "
        "JSON: nested too deeply to read); nothing was written"
    )
    assert not (tmp_path / "o").exists()
    mcp = _lines(tmp_path / "m.jsonl", DEEP)
    with pytest.raises(ValueError, match=r"m.jsonl: no record could be mapped .*m.jsonl:1"):
        run_importer("mcp-memory", mcp, tmp_path / "o", ts=TS)
    empty = _lines(tmp_path / "e.jsonl", "")
    with pytest.raises(ValueError) as info:
        run_importer("log", empty, tmp_path / "o", mapping="text=m,ts=t")
    assert str(info.value) == f"{empty}: no records to import; nothing was written"
    notes = tmp_path / "notes"
    notes.mkdir()
    _lines(notes / "a.md", "# Title", "body")
    with pytest.raises(ValueError, match=r"no record could be mapped .*a.md:1: the file has no "):
        run_importer("markdown", notes, tmp_path / "o")
    assert not (tmp_path / "o").exists()


def test_cli_import_that_maps_nothing_exits_2(tmp_path, capsys):
    log = _lines(tmp_path / "l.csv", "message,time", "hello,not a time")
    code = main(["datasets", "import", "log", str(log), str(tmp_path / "o"),
                 "--option", "mapping=text=message,ts=time"])
    assert code == 2
    err = capsys.readouterr().err
    assert err == (f"memlab: error: {log}: no record could be mapped to a memory (1 not mapped; "
                   "first l.csv:2: column 'time' (ts): 'not a time' is not ISO 8601); nothing "
                   "was written\n")
    assert not (tmp_path / "o").exists()


def test_a_csv_row_longer_than_its_header_names_file_and_line(tmp_path):
    log = _lines(tmp_path / "l.csv", "message,time", f"a,{TS}", f"b,{TS},extra,more")
    with pytest.raises(ValueError) as info:
        run_importer("log", log, tmp_path / "o", mapping="text=message,ts=time")
    assert str(info.value) == f"{log}:3: the row has 4 fields but the header has 2"
    assert not (tmp_path / "o").exists()


def test_a_malformed_csv_names_file_and_line(tmp_path):
    import csv

    old = csv.field_size_limit(10)
    try:
        log = _lines(tmp_path / "l.csv", "message,time", f"{'x' * 50},{TS}")
        with pytest.raises(ValueError, match=rf"^{log}:2: not a readable CSV row \(field larger"):
            run_importer("log", log, tmp_path / "o", mapping="text=message,ts=time")
    finally:
        csv.field_size_limit(old)


@pytest.mark.parametrize("suffix", ["csv", "jsonl"])
def test_a_utf8_bom_is_dropped(tmp_path, suffix):
    if suffix == "csv":
        log = _lines(tmp_path / "l.csv", "message,time", f"hello,{TS}", bom=True)
        mapping = "text=message,ts=time"
    else:
        log = _lines(tmp_path / "l.jsonl", f'{{"message":"hello","time":"{TS}"}}', bom=True)
        mapping = "text=message,ts=time"
    rep = run_importer("log", log, tmp_path / "o", mapping=mapping)
    assert rep.counts == {"records": 1, "memories": 1, "not_mapped": 0}
    assert rep.notes == []
    assert [s.text for s in load_dataset(tmp_path / "o").stores()] == ["hello"]


def test_a_bom_before_markdown_front_matter_and_mcp_lines_is_dropped(tmp_path):
    notes = tmp_path / "notes"
    notes.mkdir()
    _lines(notes / "a.md", "---", f"date: {TS}", "---", "- remember this", bom=True)
    rep = run_importer("markdown", notes, tmp_path / "o1")
    assert rep.counts == {"files": 1, "memories": 1, "not_mapped": 0}
    mcp = _lines(tmp_path / "m.jsonl", '{"type":"entity","name":"a","entityType":"t",'
                 '"observations":["x"]}', bom=True)
    rep = run_importer("mcp-memory", mcp, tmp_path / "o2", ts=TS)
    assert rep.unmapped == [] and rep.counts["observations"] == 1


def test_non_utf8_sources_name_the_file(tmp_path):
    log = tmp_path / "l.csv"
    log.write_bytes(b"message,time\n\xff\xfe,x\n")
    with pytest.raises(ValueError) as info:
        run_importer("log", log, tmp_path / "o", mapping="text=message,ts=time")
    assert str(info.value) == f"{log}:2: not UTF-8 text (byte 13)"


def test_duplicates_are_reported_against_the_source_line(tmp_path):
    log = _lines(tmp_path / "l.jsonl", '{"m":"a","t":"2025-01-02T00:00:00Z","i":"x"}',
                 '{"m":"b","t":"2025-01-01T00:00:00Z","i":"x"}')
    with pytest.raises(ValueError) as info:
        run_importer("log", log, tmp_path / "o", mapping="text=m,ts=t,id=i")
    assert str(info.value) == f"{log}:2: column 'i' (id): 'x' is already the id of line 1"
    mcp = _lines(tmp_path / "m.jsonl",
                 '{"type":"entity","name":"a","entityType":"t","observations":["x"]}',
                 '{"type":"relation","from":"a","to":"a","relationType":"supersedes"}',
                 '{"type":"entity","name":"a","entityType":"t","observations":["y"]}')
    with pytest.raises(ValueError) as info:
        run_importer("mcp-memory", mcp, tmp_path / "o", ts=TS)
    assert str(info.value) == f"{mcp}:3: field 'name': entity 'a' is already defined on line 1"
    assert not (tmp_path / "o").exists()
