"""``memlab datasets validate`` and ``memlab eval`` agree on every dataset.

A catalogue of malformed variants of the handmade fixture goes to both commands: validate must
report a problem (exit 1) exactly when eval refuses the dataset (exit 2, one ``memlab: error:``
line, no traceback). A few unusual but valid variants must pass both.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from memlab.cli import main

HANDMADE = Path(__file__).resolve().parents[1] / "fixtures" / "handmade"
META = (HANDMADE / "dataset.toml").read_text(encoding="utf-8")
MEMS = [json.loads(x) for x in (HANDMADE / "memories.jsonl").read_text().splitlines()]
QRYS = [json.loads(x) for x in (HANDMADE / "queries.jsonl").read_text().splitlines()]
LAST_TS = "2025-03-13T10:00:00.000Z"  # the last memory of the fixture
LATE = "2025-03-20T09:00:00.000Z"  # after every memory and query


class Variant:
    """A dataset as text: ``dataset.toml`` and the two JSONL files as lists of lines."""

    def __init__(self) -> None:
        self.meta: str | bytes | None = META
        self.mems: list[str | bytes] = [_dump(m) for m in MEMS]
        self.qrys: list[str | bytes] = [_dump(q) for q in QRYS]

    def mem(self, i: int, **changes: Any) -> Variant:
        obj = {**MEMS[i], **changes}
        self.mems[i] = _dump({k: v for k, v in obj.items() if v is not _DROP})
        return self

    def qry(self, i: int, **changes: Any) -> Variant:
        obj = {**QRYS[i], **changes}
        self.qrys[i] = _dump({k: v for k, v in obj.items() if v is not _DROP})
        return self

    def add_mem(self, line: str | bytes | dict[str, Any]) -> Variant:
        self.mems.append(_dump(line) if isinstance(line, dict) else line)
        return self

    def write(self, root: Path) -> Path:
        root.mkdir()
        for name, content in (("dataset.toml", self.meta), ("memories.jsonl", self.mems),
                              ("queries.jsonl", self.qrys)):
            if content is None:
                continue
            if isinstance(content, list):
                content = b"".join(
                    (x if isinstance(x, bytes) else x.encode("utf-8", "surrogatepass")) + b"\n"
                    for x in content
                )
            (root / name).write_bytes(
                content if isinstance(content, bytes) else content.encode("utf-8")
            )
        return root


_DROP = object()


def _dump(obj: dict[str, Any]) -> str:
    # ensure_ascii writes lone surrogates as \\udxxx escapes, as a careless producer would
    return json.dumps(obj, ensure_ascii=True)


def _store(**fields: Any) -> dict[str, Any]:
    base = {"id": "new1", "ts": LATE, "type": "fact", "text": "A new fact about acme.",
            "client_id": "acme-corp"}
    return {**base, **fields}


def _nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = {"k": value}
    return value


def _raw_metadata(raw: str) -> str:
    line = _dump(_store(metadata={"x": 0}))
    return line.replace('{"x": 0}', raw)


MALFORMED: dict[str, Callable[[], Variant]] = {
    # the store's own limits, reached only when the log is written
    "text over the size limit": lambda: Variant().add_mem(_store(text="x" * 20_001)),
    "decision key reused": lambda: Variant()
    .add_mem(_store(id="d1", type="decision", key="k", text="We use Postgres."))
    .add_mem(_store(id="d2", type="decision", key="k", text="We use MySQL.")),
    # text that is not Unicode
    "lone surrogate in text": lambda: Variant().mem(0, text="broken \ud800 text"),
    "lone surrogate in a metadata value": lambda: Variant().add_mem(
        _store(metadata={"note": "\udfff"})
    ),
    "lone surrogate in a metadata key": lambda: Variant().add_mem(
        _store(metadata={"\ud83d": 1})
    ),
    "lone surrogate in client_id": lambda: Variant().mem(0, client_id="acme\ud800"),
    "lone surrogate in a query": lambda: Variant().qry(0, text="where \ud800"),
    "lone surrogate in a relevant id": lambda: Variant().qry(0, relevant={"h\ud80014": 1}),
    # timestamps
    "naive ts": lambda: Variant().mem(0, ts="2025-01-15T09:00:00"),
    "date only": lambda: Variant().mem(0, ts="2025-01-15"),
    "naive query ts": lambda: Variant().qry(0, ts="2025-03-14T09:00:00"),
    "naive at_time": lambda: Variant().qry(1, at_time="2025-03-05T00:00:00"),
    "naive valid_from": lambda: Variant().add_mem(_store(valid_from="2025-03-01T00:00:00")),
    "year 10000 through an offset": lambda: Variant().add_mem(
        _store(ts="9999-12-31T23:30:00-05:00")
    ),
    "year 10000 in at_time": lambda: Variant().qry(1, at_time="9999-12-31T23:00:00-02:00"),
    "before year 1 in UTC": lambda: Variant().mem(0, ts="0001-01-01T00:00:00+01:00"),
    "year 0": lambda: Variant().mem(0, ts="0000-01-01T00:00:00Z"),
    "ts as a number": lambda: Variant().mem(0, ts=1736931600),
    "ts goes backwards": lambda: Variant().mem(1, ts="2024-01-01T00:00:00Z"),
    "at_time after ts": lambda: Variant().qry(1, at_time="2026-01-01T00:00:00Z"),
    # numbers JSON does not have
    "NaN in metadata": lambda: Variant().add_mem(_raw_metadata('{"x": NaN}')),
    "Infinity in metadata": lambda: Variant().add_mem(_raw_metadata('{"x": Infinity}')),
    "-Infinity in metadata": lambda: Variant().add_mem(_raw_metadata('{"x": [-Infinity]}')),
    "1e999 in metadata": lambda: Variant().add_mem(_raw_metadata('{"x": 1e999}')),
    "an int of 5000 digits": lambda: Variant().add_mem(_raw_metadata('{"x": ' + "9" * 5000 + "}")),
    "NaN grade": lambda: _nan_grade(),
    "grade 1.5": lambda: Variant().qry(0, relevant={"h14": 1.5}),
    "grade 0": lambda: Variant().qry(0, relevant={"h14": 0}),
    "grade true": lambda: Variant().qry(0, relevant={"h14": True}),
    # nesting
    "metadata nested 5000 levels": lambda: Variant().add_mem(
        _raw_metadata('{"x": ' + "[" * 5000 + "]" * 5000 + "}")
    ),
    "metadata nested 40 levels": lambda: Variant().add_mem(_store(metadata=_nested(40))),
    # JSON and encoding
    "invalid JSON": lambda: Variant().add_mem('{"id": "x", "ts": '),
    "a JSON array line": lambda: Variant().add_mem("[1, 2]"),
    "duplicate key": lambda: Variant().add_mem(
        '{"id": "n", "id": "m", "ts": "' + LATE + '", "type": "fact", "text": "t"}'
    ),
    "not UTF-8": lambda: Variant().add_mem(b'{"id": "n", "text": "\xff"}'),
    "byte order mark": lambda: Variant().add_mem("\ufeff" + _dump(_store())),
    # files
    "no memories.jsonl": lambda: _without("mems"),
    "no dataset.toml": lambda: _without("meta"),
    "dataset.toml not TOML": lambda: _with_meta('name = "x\n'),
    "dataset.toml name not a string": lambda: _with_meta(META.replace('"handmade"', "3")),
    # fields
    "unknown type": lambda: Variant().mem(0, type="memo"),
    "unknown op": lambda: Variant().add_mem({"ts": LATE, "op": "erase", "target": "h01"}),
    "unknown field": lambda: Variant().mem(0, colour="red"),
    "empty text": lambda: Variant().mem(0, text="   "),
    "text not a string": lambda: Variant().mem(0, text=42),
    "metadata not an object": lambda: Variant().add_mem(_store(metadata=[1, 2])),
    "unknown importance": lambda: Variant().mem(0, importance="urgent"),
    "empty id": lambda: Variant().mem(0, id=""),
    "duplicate id": lambda: Variant().add_mem(_store(id="h01")),
    "forget a decision": lambda: Variant().add_mem(
        {"ts": LATE, "op": "forget", "target": "h05", "reason": "x"}
    ),
    "forget an unknown id": lambda: Variant().add_mem(
        {"ts": LATE, "op": "forget", "target": "nope", "reason": "x"}
    ),
    "unknown relation": lambda: Variant().add_mem(
        {"ts": LATE, "op": "relate", "from": "a", "relation": "likes", "to": "b"}
    ),
    "co_occurrence written": lambda: Variant().add_mem(
        {"ts": LATE, "op": "relate", "from": "a", "relation": "co_occurrence", "to": "b"}
    ),
    "duplicate qid": lambda: Variant().qry(1, qid="hq01"),
    "relevant id unknown": lambda: Variant().qry(0, relevant={"nope": 1}),
    "relevant written after the query": lambda: Variant()
    .add_mem(_store(id="late", ts="2025-03-14T09:01:00.000Z"))
    .qry(0, relevant={"late": 1}),
    "stale also relevant": lambda: Variant().qry(0, stale=["h14"]),
    "tags not a list": lambda: Variant().qry(0, tags="supersession"),
    "query without relevant": lambda: Variant().qry(0, relevant=_DROP),
}


def _nan_grade() -> Variant:
    v = Variant()
    v.qrys[0] = _dump(QRYS[0]).replace('{"h14": 1}', '{"h14": NaN}')
    return v


def _without(part: str) -> Variant:
    v = Variant()
    if part == "mems":
        v.mems = None  # type: ignore[assignment]
    else:
        v.meta = None
    return v


def _with_meta(text: str) -> Variant:
    v = Variant()
    v.meta = text
    return v


VALID: dict[str, Callable[[], Variant]] = {
    "the fixture": Variant,
    "offsets, unicode, a NUL and text at the limit": lambda: Variant()
    .mem(0, ts="2025-01-15T11:00:00+02:00", text="Sauvegarde lente 🚀 \u0000 مرحبا")
    .add_mem(_store(text="y " * 10_000, metadata=_nested(30))),
    "two decisions with different keys": lambda: Variant()
    .add_mem(_store(id="d1", type="decision", key="k1", text="We use Postgres."))
    .add_mem(_store(id="d2", type="decision", key="k2", text="We use MySQL.")),
    # a decision key holds within its client and scope, as dedup and supersession do
    "a decision key reused in another client and another scope": lambda: Variant()
    .add_mem(_store(id="d1", type="decision", key="k", text="We use Postgres."))
    .add_mem(_store(id="d2", type="decision", key="k", text="We use MySQL.", client_id="b"))
    .add_mem(_store(id="d3", type="decision", key="k", text="We use SQLite.",
                    scope="agent:hera")),
}


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.err


def _eval(ds: Path, out: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    return _run(["eval", str(ds), "--pipelines", "bm25", "--embedder", "hashing", "--no-cache",
                 "--quiet", "--out", str(out)], capsys)


def test_the_catalogue_is_large_enough() -> None:
    assert len(MALFORMED) >= 40


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_datasets_are_refused_by_both(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ds = MALFORMED[case]().write(tmp_path / "ds")
    code, _ = _run(["datasets", "validate", str(ds)], capsys)
    assert code == 1, f"validate accepted: {case}"
    code, err = _eval(ds, tmp_path / "out", capsys)
    assert code == 2, err
    assert "Traceback" not in err
    errors = [line for line in err.splitlines() if line.startswith("memlab: error:")]
    assert len(errors) == 1, err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("case", sorted(VALID))
def test_valid_datasets_pass_both(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ds = VALID[case]().write(tmp_path / "ds")
    code, err = _run(["datasets", "validate", str(ds)], capsys)
    assert code == 0, err
    code, err = _eval(ds, tmp_path / "out", capsys)
    assert code == 0, err
    assert (tmp_path / "out" / "metrics.json").is_file()


@pytest.mark.parametrize(
    ("case", "where"),
    [
        ("text over the size limit", "memories.jsonl:21: field 'text' is 20001 characters long"),
        ("decision key reused", "memories.jsonl:22: decision d1 has key 'k'"),
        ("lone surrogate in text", "memories.jsonl:1: field 'text': holds a lone surrogate"),
        ("naive ts", "memories.jsonl:1: field 'ts': '2025-01-15T09:00:00' has no time zone"),
        ("year 10000 through an offset",
         "memories.jsonl:21: field 'ts': '9999-12-31T23:30:00-05:00' is outside years 1 to 9999"),
        ("NaN in metadata", "memories.jsonl:21: invalid JSON: NaN is not a JSON number"),
        ("metadata nested 40 levels",
         "memories.jsonl:21: field 'metadata': nested deeper than 32 levels"),
        ("metadata nested 5000 levels", "memories.jsonl:21: "),
    ],
)
def test_messages_name_file_line_and_field(
    case: str, where: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ds = MALFORMED[case]().write(tmp_path / "ds")
    main(["datasets", "validate", str(ds)])
    printed = capsys.readouterr().out.splitlines()
    assert any(line.startswith(where) for line in printed), printed
    main(["eval", str(ds), "--embedder", "hashing", "--out", str(tmp_path / "out")])
    assert any(line.startswith(where) for line in capsys.readouterr().err.splitlines())
