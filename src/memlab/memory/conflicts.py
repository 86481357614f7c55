"""Contradiction detection without a shared key.

Design §D3.8 detects contradictory facts "via embedding similarity + opposite sentiment": two
memories need not share a ``key`` or ``subject`` to contradict each other. Detection runs in two
steps:

1. **candidates** — :func:`contradiction_candidates`: the active memories of the same client
   (and the same ``scope``, where records carry one) whose cosine similarity with the memory
   reaches a threshold, most similar first;
2. **a detector** judges each pair: :class:`LexicalDetector`, a cheap rule set (negation
   asymmetry, antonym pairs, differing values on otherwise matching text), or
   :class:`GeneratorNLIDetector`, an NLI-style yes/no question put to a
   :class:`~memlab.generate.base.Generator` (recorded generations replay it offline).

Detectors register in :data:`CONFLICT_DETECTORS` and are built by :func:`make_detector`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from memlab.registry import Registry

if TYPE_CHECKING:
    from memlab.memory.store import MemoryStore

__all__ = [
    "CONFLICT_DETECTORS",
    "ContradictionDetector",
    "GeneratorNLIDetector",
    "LexicalDetector",
    "Verdict",
    "contradiction_candidates",
    "make_detector",
]


@dataclass(frozen=True, slots=True)
class Verdict:
    """A detector's judgement of one pair.

    Attributes:
        contradicts: True when the two texts cannot both be true.
        rule: Which rule (or model answer) decided.
    """

    contradicts: bool
    rule: str = ""


class ContradictionDetector(Protocol):
    """Judges whether two memory texts contradict each other."""

    def judge(self, a: str, b: str) -> Verdict:
        """The verdict on the pair ``(a, b)`` (symmetric)."""
        ...


CONFLICT_DETECTORS: Registry[type[Any]] = Registry("conflict detector")
"""Detector classes by name (``lexical``, ``nli``)."""

_WORD = re.compile(r"[a-z0-9][a-z0-9.'/-]*[a-z0-9]|[a-z0-9]")
_NEGATIONS: frozenset[str] = frozenset(
    {
        "not", "no", "never", "none", "nobody", "nothing", "neither", "nor", "without",
        "cannot", "can't", "won't", "isn't", "aren't", "wasn't", "weren't", "doesn't",
        "don't", "didn't", "hasn't", "haven't", "hadn't", "shouldn't", "mustn't", "longer",
        "stopped", "dropped", "cancelled", "canceled", "abandoned",
    }
)
DEFAULT_ANTONYMS: tuple[tuple[str, str], ...] = (
    ("enabled", "disabled"), ("enable", "disable"), ("on", "off"), ("allowed", "forbidden"),
    ("allowed", "banned"), ("allow", "forbid"), ("increase", "decrease"),
    ("increased", "decreased"), ("raised", "lowered"), ("up", "down"),
    ("approved", "rejected"), ("accepted", "declined"), ("accepted", "rejected"),
    ("added", "removed"), ("start", "stop"), ("started", "stopped"), ("open", "closed"),
    ("active", "inactive"), ("true", "false"), ("pass", "fail"), ("passed", "failed"),
    ("succeeded", "failed"), ("include", "exclude"), ("included", "excluded"),
    ("always", "never"), ("keep", "drop"), ("kept", "dropped"), ("public", "private"),
    ("required", "optional"), ("mandatory", "optional"), ("online", "offline"),
    ("available", "unavailable"), ("supported", "unsupported"), ("valid", "invalid"),
    ("confirmed", "cancelled"), ("confirmed", "canceled"), ("hired", "fired"),
    ("joined", "left"), ("won", "lost"), ("likes", "dislikes"), ("prefers", "avoids"),
    ("ahead", "behind"), ("before", "after"), ("early", "late"), ("earlier", "later"),
    ("more", "less"), ("higher", "lower"), ("faster", "slower"), ("larger", "smaller"),
    ("paid", "unpaid"), ("signed", "unsigned"), ("shipped", "delayed"),
    ("launched", "postponed"), ("on-time", "delayed"), ("yes", "no"),
)
"""Antonym pairs of the lexical detector (one word of a pair in each text)."""

_STOP: frozenset[str] = frozenset(
    {
        "a", "an", "the", "is", "are", "was", "were", "be", "been", "to", "of", "in", "on",
        "for", "and", "or", "at", "by", "with", "it", "its", "this", "that", "as", "from",
        "has", "have", "had", "will", "now", "we", "our", "their", "they", "he", "she", "so",
        "still", "again", "also", "any", "all", "per", "which", "who", "what",
    }
)
_VALUE = re.compile(r"^(?:\d[\d.,:/%-]*[a-z%]*|q[1-4])$")


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower().replace("n’t", "n't").replace("’", "'"))


def _content(words: Sequence[str]) -> set[str]:
    return {w for w in words if w not in _STOP and w not in _NEGATIONS}


def _jaccard(a: set[str], b: set[str]) -> float:
    return len(a & b) / len(a | b) if a or b else 0.0


@CONFLICT_DETECTORS.register("lexical")
class LexicalDetector:
    """A cheap rule set: negation asymmetry, antonyms, differing values.

    A pair contradicts when the texts talk about the same thing (content-word Jaccard at least
    ``min_overlap``) and one of the rules fires:

    * ``negation`` — one text has a negation cue (``not``, ``no longer``, ``never`` …) the other
      lacks;
    * ``antonym`` — one text has a word of an antonym pair and the other its opposite (and
      neither has both);
    * ``value`` — both texts state a value (a number, a quarter, a version) and the values
      differ, with content overlap at least ``value_overlap``.

    Args:
        min_overlap: Content-word Jaccard both texts must share for any rule to apply.
        value_overlap: Jaccard (values left out) required by the value rule.
        antonyms: Antonym pairs (default :data:`DEFAULT_ANTONYMS`).
    """

    def __init__(
        self,
        min_overlap: float = 0.25,
        value_overlap: float = 0.5,
        antonyms: Sequence[tuple[str, str]] | None = None,
    ) -> None:
        self.min_overlap = min_overlap
        self.value_overlap = value_overlap
        self.antonyms = antonyms

    def judge(self, a: str, b: str) -> Verdict:
        """See the class docstring."""
        wa, wb = _words(a), _words(b)
        ca, cb = _content(wa), _content(wb)
        overlap = _jaccard(ca, cb)
        if overlap < self.min_overlap:
            return Verdict(False, "unrelated")
        na = any(w in _NEGATIONS or w.endswith("n't") for w in wa)
        nb = any(w in _NEGATIONS or w.endswith("n't") for w in wb)
        if na != nb:
            return Verdict(True, "negation")
        sa, sb = set(wa), set(wb)
        for x, y in self.antonyms or DEFAULT_ANTONYMS:
            if (x in sa and y in sb and y not in sa and x not in sb) or (
                y in sa and x in sb and x not in sa and y not in sb
            ):
                return Verdict(True, f"antonym:{x}/{y}")
        va = {w for w in ca if _VALUE.match(w)}
        vb = {w for w in cb if _VALUE.match(w)}
        if va and vb and va != vb and not (va <= vb or vb <= va):
            if _jaccard(ca - va, cb - vb) >= self.value_overlap:
                return Verdict(True, "value")
        return Verdict(False, "no rule")


DEFAULT_NLI_PROMPT = (
    "Statement A: {a}\n"
    "Statement B: {b}\n"
    "Do these two statements contradict each other, so that both cannot be true at the same "
    "time? Answer with one word, yes or no.\n"
)
"""The NLI prompt; ``{a}`` and ``{b}`` are the two memory texts."""


@CONFLICT_DETECTORS.register("nli")
class GeneratorNLIDetector:
    """An NLI-style judgement through the Generator protocol.

    The generator answers :data:`DEFAULT_NLI_PROMPT`; an answer whose first word is ``yes``
    means a contradiction. Greedy decoding and a fixed seed make the prompt hash stable, so
    :class:`~memlab.generate.recorded.RecordedGenerator` replays it without a model.

    Args:
        generator: The text generator.
        prompt_template: Prompt with ``{a}`` and ``{b}`` fields.
        max_new_tokens: Generation budget.
        symmetric: Ask both orders and call a contradiction only when both say yes.
    """

    def __init__(
        self,
        generator: Any,
        prompt_template: str = DEFAULT_NLI_PROMPT,
        max_new_tokens: int = 4,
        symmetric: bool = False,
    ) -> None:
        self.generator = generator
        self.prompt_template = prompt_template
        self.max_new_tokens = max_new_tokens
        self.symmetric = symmetric

    def prompts(self, a: str, b: str) -> list[str]:
        """The prompts one judgement asks (for recording generations)."""
        if "{a}" not in self.prompt_template or "{b}" not in self.prompt_template:
            raise ValueError("GeneratorNLIDetector: prompt_template needs {a} and {b} fields")
        first = self.prompt_template.format(a=a, b=b)
        return [first, self.prompt_template.format(a=b, b=a)] if self.symmetric else [first]

    def judge(self, a: str, b: str) -> Verdict:
        """See the class docstring."""
        answers = []
        for prompt in self.prompts(a, b):
            raw = self.generator.generate(
                prompt, max_new_tokens=self.max_new_tokens, temperature=0.0, seed=0
            )
            words = re.findall(r"[a-z]+", raw.lower())
            answers.append(bool(words) and words[0] == "yes")
        return Verdict(all(answers), "nli:yes" if all(answers) else "nli:no")


def make_detector(name: str, *, generator: Any | None = None) -> ContradictionDetector:
    """Build a registered detector by name (``nli`` needs a generator).

    Raises:
        ValueError: On an unknown name, or ``nli`` without a generator.
    """
    cls = CONFLICT_DETECTORS.lookup(name)
    if cls is GeneratorNLIDetector:
        if generator is None:
            raise ValueError("conflict detector 'nli' needs a generator")
        return GeneratorNLIDetector(generator)
    return cls()


def contradiction_candidates(
    store: MemoryStore,
    memory_id: str,
    *,
    threshold: float = 0.6,
    max_candidates: int = 3,
    types: Sequence[str] = ("fact", "status", "decision"),
    now: float | None = None,
) -> list[tuple[str, float]]:
    """Active memories that the client of ``memory_id`` owns, in its scope, similar to it
    (those of ``global`` belong to every client: one client's write never contradicts them
    away; a ``global`` memory's own candidates are the ``global`` ones).

    Args:
        store: The store.
        memory_id: The memory whose contradictions are sought.
        threshold: Lowest cosine similarity of a candidate.
        max_candidates: At most this many, most similar first (ties by row).
        types: Memory types that can contradict (events are records of what happened).
        now: Only memories written at or before ``now``.

    Returns:
        ``(memory id, cosine)`` pairs; empty when the memory has no vector or another type.
    """
    rec = store.get(memory_id)
    idx = store.idx(memory_id)
    if rec.type not in types:
        return []
    vec = store.vectors.get(idx)
    if vec is None:
        return []
    # Ownership, not visibility: a client reads the 'global' memories too, but they belong to
    # every client, so one client's write never retires them (as consolidation's rule).
    mask = store.visible_mask(client_id=rec.client_id, now=now)
    mask &= store.column("client") == store.client_code(rec.client_id)
    mask &= store.column("scope") == store.scope_code(rec.scope)
    mask &= np.isin(store.column("type"), list(types))
    mask[idx] = False
    mask &= store.vectors.present
    rows = np.flatnonzero(mask)
    if len(rows) == 0:
        return []
    sims = store.vectors.similarities(np.asarray(vec), wanted=mask)[rows]
    keep = sims >= threshold
    rows, sims = rows[keep], sims[keep]
    order = np.lexsort((rows, -sims))[:max_candidates]
    return [(store.record_at(int(rows[i])).id, float(sims[i])) for i in order]
