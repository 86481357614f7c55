"""Tests for memlab.stages.context (docs/design.md §D1.2's system_prompt_addition formats)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import polars as pl
import pytest

from memlab.memory.store import MemoryStore
from memlab.stages.base import CANDIDATE_SCHEMA, QueryContext, check_frame
from memlab.stages.context import Context
from memlab.timeutil import parse_ts


@pytest.fixture
def ctx() -> QueryContext:
    store = MemoryStore()
    store.store(
        "Acme hosts its site on Netlify", "fact", source_agent="t", key="acme-host",
        now="2026-03-01T10:00:00Z", id="m1",
    )
    store.store(
        'Use <b> & "quotes"\nin  templates\x01', "decision", source_agent="t",
        now="2026-03-02T23:59:00Z", confidence=0.75, id="m2",
    )
    store.store(
        "Weekly sync moved to Thursday", "event", source_agent="t",
        now="2026-03-03T08:00:00Z", id="m3",
    )
    return QueryContext(qid="q", text="x", store=store, now=parse_ts("2026-04-01T00:00:00Z"))


def _frame(ids: list[str]) -> pl.DataFrame:
    return pl.DataFrame(
        {"qid": ["q"] * len(ids), "mem_id": ids, "score": [1.0 / (i + 1) for i in range(len(ids))],
         "rank": list(range(1, len(ids) + 1))},
        schema=CANDIDATE_SCHEMA,
    )


def test_bullets(ctx: QueryContext) -> None:
    out = Context(max_items=2).transform(_frame(["m1", "m2", "m3"]), ctx)
    assert ctx.context_text == (
        "- [fact | 2026-03-01 | confidence 1.00] Acme hosts its site on Netlify\n"
        '- [decision | 2026-03-02 | confidence 0.75] Use <b> & "quotes" in templates\x01'
    )
    check_frame(out, "context")
    assert out["mem_id"].to_list() == ["m1", "m2", "m3"]
    assert out["text"].to_list() == [
        "Acme hosts its site on Netlify",
        'Use <b> & "quotes"\nin  templates\x01',
        "Weekly sync moved to Thursday",
    ]
    # memlab.tokens: words and punctuation marks; "Use < b > & " quotes " in templates \x01"
    assert out["tokens"].to_list() == [6, 11, 5]
    # each bullet's prefix "- [type | 2026 - 03 - 0d | confidence 1 . 00 ]" is 15 tokens
    assert ctx.trace["context_tokens"] == (15 + 6) + (15 + 11)


def test_bullets_without_metadata(ctx: QueryContext) -> None:
    Context(include_metadata=False).transform(_frame(["m3", "m1"]), ctx)
    assert ctx.context_text == (
        "- Weekly sync moved to Thursday\n- Acme hosts its site on Netlify"
    )


def test_json(ctx: QueryContext) -> None:
    Context(format="json").transform(_frame(["m2", "m1"]), ctx)
    assert ctx.context_text == (
        '{"memories": [{"text": "Use <b> & \\"quotes\\"\\nin  templates\\u0001", '
        '"type": "decision", "date": "2026-03-02", "confidence": 0.75}, '
        '{"text": "Acme hosts its site on Netlify", "type": "fact", "date": "2026-03-01", '
        '"confidence": 1.0}]}'
    )
    assert json.loads(ctx.context_text)["memories"][0]["text"] == (
        'Use <b> & "quotes"\nin  templates\x01'
    )
    Context(format="json", include_metadata=False).transform(_frame(["m3"]), ctx)
    assert ctx.context_text == '{"memories": [{"text": "Weekly sync moved to Thursday"}]}'


def test_xml_is_escaped_and_well_formed(ctx: QueryContext) -> None:
    Context(format="xml").transform(_frame(["m2", "m3"]), ctx)
    assert ctx.context_text == (
        "<memories>\n"
        '<memory type="decision" date="2026-03-02" confidence="0.75">'
        'Use &lt;b&gt; &amp; "quotes"\nin  templates\ufffd</memory>\n'
        '<memory type="event" date="2026-03-03" confidence="1.00">'
        "Weekly sync moved to Thursday</memory>\n"
        "</memories>"
    )
    root = ET.fromstring(ctx.context_text)
    assert [m.get("type") for m in root] == ["decision", "event"]
    assert root[0].text == 'Use <b> & "quotes"\nin  templates\ufffd'
    Context(format="xml", include_metadata=False).transform(_frame(["m1"]), ctx)
    assert ctx.context_text == (
        "<memories>\n<memory>Acme hosts its site on Netlify</memory>\n</memories>"
    )


def test_follows_the_rank_and_handles_empty(ctx: QueryContext) -> None:
    frame = _frame(["m1", "m3"]).with_columns(pl.Series("rank", [2, 1], dtype=pl.Int64))
    out = Context(include_metadata=False).transform(frame, ctx)
    assert ctx.context_text == "- Weekly sync moved to Thursday\n- Acme hosts its site on Netlify"
    assert out["mem_id"].to_list() == ["m3", "m1"]
    Context(format="json").transform(_frame([]), ctx)
    assert ctx.context_text == '{"memories": []}'
    Context(format="bullets").transform(_frame([]), ctx)
    assert ctx.context_text == ""


def test_unknown_format(ctx: QueryContext) -> None:
    with pytest.raises(ValueError, match="Context: parameter 'format' must be a str among"):
        Context(format="yaml")
