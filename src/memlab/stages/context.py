"""Render the retrieved memories as a prompt addition (design §D1.2's ``system_prompt_addition``).

Design §D1.2 offers three formats: ``bullets`` (prompt-ready natural language, the default),
``json`` (for programs that parse the context) and ``xml`` (for models that follow tags
precisely; design §D0.10 also wraps memories in ``<memory>`` tags to resist prompt injection). Each
item carries the memory's text and, with ``include_metadata``, its type, the UTC date it was
written and its stored (base) confidence::

    bullets  - [fact | 2026-03-01 | confidence 1.00] Acme hosts its site on Netlify.
    json     {"memories": [{"text": "Acme hosts …", "type": "fact", "date": "2026-03-01",
             "confidence": 1.0}]}
    xml      <memories>
             <memory type="fact" date="2026-03-01" confidence="1.00">Acme hosts …</memory>
             </memories>

Bullets put each memory on one line (runs of whitespace become one space). XML text and
attributes are escaped, and characters XML 1.0 forbids are replaced by U+FFFD. JSON is
``json.dumps`` with ``ensure_ascii=False``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import Any, ClassVar
from xml.sax.saxutils import escape, quoteattr

import polars as pl

from memlab.fastframe import by_rank, with_series
from memlab.registry import Registry
from memlab.stages.base import (
    Column,
    QueryContext,
    Stage,
    register_stage,
)
from memlab.stages.constraints import Integral, Interval, Options
from memlab.timeutil import to_iso
from memlab.tokens import count_tokens

Renderer = Callable[[Sequence[dict[str, Any]], bool], str]
"""``(items, include_metadata) -> text``; an item has ``text, type, date, confidence``."""

CONTEXT_FORMATS: Registry[Renderer] = Registry("format")
"""Context renderers by format name."""

register_context_format = CONTEXT_FORMATS.register
"""Function decorator: register a context renderer under ``name``."""

_XML_FORBIDDEN = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff\ud800-\udfff]")


@register_context_format("bullets")
def render_bullets(items: Sequence[dict[str, Any]], include_metadata: bool) -> str:
    """One ``- `` line per memory."""
    lines = []
    for item in items:
        text = " ".join(item["text"].split())
        if include_metadata:
            meta = f"[{item['type']} | {item['date']} | confidence {item['confidence']:.2f}] "
            lines.append(f"- {meta}{text}")
        else:
            lines.append(f"- {text}")
    return "\n".join(lines)


@register_context_format("json")
def render_json(items: Sequence[dict[str, Any]], include_metadata: bool) -> str:
    """``{"memories": [...]}`` with one object per memory."""
    keys = ("text", "type", "date", "confidence") if include_metadata else ("text",)
    return json.dumps(
        {"memories": [{k: item[k] for k in keys} for item in items]}, ensure_ascii=False
    )


def _xml_safe(text: str) -> str:
    return _XML_FORBIDDEN.sub("\ufffd", text)


@register_context_format("xml")
def render_xml(items: Sequence[dict[str, Any]], include_metadata: bool) -> str:
    """``<memories>`` with one escaped ``<memory>`` element per memory."""
    lines = ["<memories>"]
    for item in items:
        attrs = ""
        if include_metadata:
            attrs = (
                f" type={quoteattr(_xml_safe(item['type']))}"
                f" date={quoteattr(item['date'])}"
                f" confidence=\"{item['confidence']:.2f}\""
            )
        lines.append(f"<memory{attrs}>{escape(_xml_safe(item['text']))}</memory>")
    lines.append("</memories>")
    return "\n".join(lines)


@register_stage("context")
class Context(Stage):
    """Render the top candidates into ``ctx.context_text``; the ranking passes through.

    Args:
        format: ``"bullets"``, ``"json"`` or ``"xml"`` (design §D1.2; bullets is the default).
        max_items: Render at most this many candidates, best rank first (``None`` = all).
        include_metadata: Add type, date and confidence to each memory.

    Output columns: ``text`` (the memory text) and ``tokens`` (its length in the package's one
    token count, :func:`memlab.tokens.count_tokens`) on every candidate;
    ``ctx.trace["context_tokens"]`` is that count over the whole rendered ``ctx.context_text``.
    """

    _parameter_constraints: ClassVar[dict[str, list[Any]]] = {
        "format": [Options(str, CONTEXT_FORMATS)],
        "max_items": [Interval(Integral, 0, None, closed="left"), None],
        "include_metadata": [bool],
    }

    columns = (
        Column("text", pl.String(), False, "text given to the model"),
        Column("tokens", pl.Int64(), False, "context cost in tokens"),
    )
    embeds_other_texts = False  # embeds no text but the query

    def __init__(
        self,
        format: str = "bullets",
        max_items: int | None = 10,
        include_metadata: bool = True,
    ) -> None:
        self.format = format
        self.max_items = max_items
        self.include_metadata = include_metadata

    def transform(self, frame: pl.DataFrame, ctx: QueryContext) -> pl.DataFrame:
        try:
            render = CONTEXT_FORMATS.lookup(self.format)
        except ValueError as error:
            raise ValueError(f"context: {error}") from None
        frame = by_rank(frame)
        records = [ctx.store.get(m) for m in frame["mem_id"]]
        texts = [r.text for r in records]
        tokens = [count_tokens(t) for t in texts]
        shown = records if self.max_items is None else records[: self.max_items]
        items = [
            {
                "text": r.text,
                "type": r.type,
                "date": (to_iso(r.created_at) or "")[:10],
                "confidence": float(r.confidence),
            }
            for r in shown
        ]
        ctx.context_text = render(items, self.include_metadata)
        ctx.trace["context_tokens"] = count_tokens(ctx.context_text)
        return with_series(
            frame,
            pl.Series("text", texts, dtype=pl.String),
            pl.Series("tokens", tokens, dtype=pl.Int64),
        )
