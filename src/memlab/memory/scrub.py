"""Credential scrubbing, run on every text before it is hashed, stored or embedded (seed 000).

The reference system's ``scrub.js`` removes API keys, passwords, tokens, connection strings
with credentials and bearer tokens on every store path. This module does the same with a
fixed, ordered list of precompiled regular expressions, one ``re.sub`` pass per pattern.

Every secret is replaced by a typed placeholder such as ``[REDACTED:api_key]``. When a pattern
has a named group ``secret`` only that group is replaced, so the surrounding context survives:
``password=hunter2`` becomes ``password=[REDACTED:password]`` and
``postgres://app:s3cret@db:5432/x`` becomes ``postgres://app:[REDACTED:password]@db:5432/x``.

Scrubbing is idempotent: no pattern matches a placeholder (every ``secret`` group refuses to
start on ``[REDACTED:``), so ``scrub(scrub(t)[0]) == (scrub(t)[0], 0)``.

Example:
    >>> scrub("export OPENAI_API_KEY=sk-proj-abcdefghijklmnop1234")
    ('export OPENAI_API_KEY=[REDACTED:api_key]', 1)
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_PLACEHOLDER = "[REDACTED:{}]"
_NOT_PLACEHOLDER = r"(?!\[REDACTED:)"

# Value of a ``key=value`` / ``key: value`` assignment: either quoted (may hold spaces) or a bare
# run of characters up to whitespace or a separator. Uses the conditional group ``(?(q)...)``.
_ASSIGNED_VALUE = (
    r"\s*[:=]\s*(?P<q>[\"'])?" + _NOT_PLACEHOLDER + r"(?P<secret>(?(q)[^\"'\n]+|[^\s\"'`,;&<>]+))"
)


def _key_pattern(keys: str) -> str:
    """Regex for an assignment whose key ends in one of ``keys`` (``DB_PASSWORD=...``)."""
    return r"\b(?:[A-Za-z0-9]+[_-])*(?:" + keys + r")\b[\"']?" + _ASSIGNED_VALUE


DEFAULT_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "private_key",
        re.compile(
            r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----"
            r"[\s\S]*?(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----|\Z)"
        ),
    ),
    (
        "password",
        re.compile(
            r"\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s:/@\[\]]*:"
            + _NOT_PLACEHOLDER
            + r"(?P<secret>[^\s/?#]+)@"
        ),
    ),
    (
        "bearer_token",
        re.compile(
            r"(?i)\b(?:proxy-)?authorization[\"']?\s*[:=]\s*[\"']?"
            r"(?:(?:bearer|basic|token|digest)\s+)?+"
            + _NOT_PLACEHOLDER
            + r"(?P<secret>[^\s\"',;]+)"
        ),
    ),
    (
        "bearer_token",
        re.compile(
            r"(?i)\bbearer\s+"
            r"(?P<secret>(?:(?=[\w\-.~+/]*\d)[\w\-.~+/]{8,}|[\w\-.~+/]{20,})=*)"
        ),
    ),
    ("jwt", re.compile(r"\beyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*")),
    (
        "api_key",
        re.compile(
            r"\b(?:"
            r"sk-[A-Za-z0-9_\-]{16,}"
            r"|[spr]k_(?:live|test)_[A-Za-z0-9]{16,}"
            r"|(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA)[0-9A-Z]{16}"
            r"|gh[pousr]_[A-Za-z0-9]{20,}"
            r"|github_pat_[A-Za-z0-9_]{20,}"
            r"|xox[abposr]-[A-Za-z0-9\-]{10,}"
            r"|AIza[0-9A-Za-z_\-]{30,}"
            r")"
        ),
    ),
    ("api_key", re.compile(r"(?i)" + _key_pattern(r"api[ _-]?key|apikey|api[_-]?secret"))),
    ("password", re.compile(r"(?i)" + _key_pattern(r"password|passwd|pwd|passphrase"))),
    (
        "token",
        re.compile(r"(?i)" + _key_pattern(r"(?:token|secret)(?:[_-](?:key|access[_-]key))?")),
    ),
)
"""Default ``(placeholder type, compiled regex)`` pairs, applied in this order.

Order matters: PEM blocks first (they contain anything), then connection strings (before the
``password=`` rule), header-style bearer tokens, JWTs, vendor key shapes (OpenAI/Anthropic
``sk-``, Stripe, AWS access key ids, GitHub, Slack, Google), then generic assignments.
"""


class Scrubber:
    """Replace credentials in text with typed placeholders.

    Args:
        patterns: Ordered ``(name, compiled regex)`` pairs. A match is replaced by
            ``[REDACTED:<name>]``; if the regex has a named group ``secret`` only that group is
            replaced. Each pattern is applied once, in order, over the whole text.

    Attributes:
        patterns_: The validated patterns (set on first use).
    """

    def __init__(
        self,
        *,
        patterns: Sequence[tuple[str, re.Pattern[str]]] = DEFAULT_PATTERNS,
    ) -> None:
        self.patterns = patterns

    def _checked(self) -> tuple[tuple[str, re.Pattern[str]], ...]:
        checked = getattr(self, "patterns_", None)
        if checked is not None:
            return checked
        if isinstance(self.patterns, (str, bytes)) or not isinstance(self.patterns, Sequence):
            raise TypeError(
                "scrub.py: Scrubber field 'patterns' must be a sequence of (name, re.Pattern) "
                f"pairs, got {type(self.patterns).__name__}"
            )
        out: list[tuple[str, re.Pattern[str]]] = []
        for i, pair in enumerate(self.patterns):
            if (
                not isinstance(pair, tuple)
                or len(pair) != 2
                or not isinstance(pair[0], str)
                or not isinstance(pair[1], re.Pattern)
            ):
                raise TypeError(
                    f"scrub.py: Scrubber field 'patterns[{i}]' must be a (str, re.Pattern) pair, "
                    f"got {pair!r}"
                )
            if not pair[0] or not re.fullmatch(r"[a-z0-9_]+", pair[0]):
                raise ValueError(
                    f"scrub.py: Scrubber field 'patterns[{i}]' name must match [a-z0-9_]+, "
                    f"got {pair[0]!r}"
                )
            out.append(pair)
        self.patterns_ = tuple(out)
        return self.patterns_

    def scrub(self, text: str) -> tuple[str, int]:
        """Scrub one text.

        Args:
            text: Raw text.

        Returns:
            The scrubbed text and the number of redactions made.

        Raises:
            TypeError: If ``text`` is not a string.
        """
        if not isinstance(text, str):
            raise TypeError(f"scrub.py: field 'text' must be a str, got {type(text).__name__}")
        total = 0
        for name, pattern in self._checked():
            placeholder = _PLACEHOLDER.format(name)
            if "secret" in pattern.groupindex:

                def _replace(m: re.Match[str], _p: str = placeholder) -> str:
                    start, end = m.span("secret")
                    whole = m.group(0)
                    base = m.start(0)
                    return whole[: start - base] + _p + whole[end - base :]

                text, n = pattern.subn(_replace, text)
            else:
                text, n = pattern.subn(placeholder, text)
            total += n
        return text, total


_DEFAULT_SCRUBBER = Scrubber()


def scrub(text: str) -> tuple[str, int]:
    """Scrub ``text`` with the default patterns.

    Args:
        text: Raw text.

    Returns:
        The scrubbed text and the number of redactions made.
    """
    return _DEFAULT_SCRUBBER.scrub(text)
