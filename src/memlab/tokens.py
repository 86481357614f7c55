"""One token count for the whole package (context budgets, ``tokens@k``, entropy gating).

Counts word pieces and punctuation marks: ``re.findall(r"\\w+|[^\\w\\s]", text)``. It is a model-
free stand-in for a subword tokenizer (close to GPT-style counts on English prose, within ~25%).
"""

from __future__ import annotations

import re

_TOKEN = re.compile(r"\w+|[^\w\s]")


def tokenize(text: str) -> list[str]:
    """Word pieces and punctuation marks of ``text``."""
    return _TOKEN.findall(text)


def count_tokens(text: str) -> int:
    """How many tokens :func:`tokenize` finds."""
    return len(_TOKEN.findall(text))
