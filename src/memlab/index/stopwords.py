"""Stop-word lists by name, for dropping function words from keyword queries.

``english`` is a short list of English function words and question words (articles,
prepositions, pronouns, auxiliaries, wh-words): in memory queries such as "What did Caroline
research?" they carry no topic and only add noise to BM25.
"""

from __future__ import annotations

STOPWORDS: dict[str, frozenset[str]] = {
    "english": frozenset(
        """
        a an the of to in on at for with and or but nor so yet is are was were be been being am
        do does did doing done what when where who whom whose which why how that this these
        those it its it's his her hers their theirs my mine your yours our ours i you he she
        they we me him them us has have had having will would can could should shall may might
        must about from by as into onto than then there here any some s t also just very too
        if not no up down out over under again further once all both each few more most other
        such only own same
        """.split()
    ),
}


def get_stopwords(name: str) -> frozenset[str]:
    """The stop-word list called ``name`` (``ValueError`` listing the known lists)."""
    try:
        return STOPWORDS[name]
    except KeyError:
        raise ValueError(
            f"unknown stop-word list {name!r}; known lists: {', '.join(sorted(STOPWORDS))}"
        ) from None
