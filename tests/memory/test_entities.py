"""Tests for memlab.memory.entities (fast-path extraction, docs/design.md §D0.8)."""

from __future__ import annotations

import pytest

from memlab.memory.entities import (
    TECH_NAMES,
    AliasCache,
    Entity,
    EntityExtractor,
    EntityMention,
)


def names(text: str, extractor: EntityExtractor | None = None, **kw: str) -> list[tuple]:
    ex = extractor or EntityExtractor()
    return [(m.entity.name, m.entity.type, m.role) for m in ex.extract(text, **kw)]


# ---------------------------------------------------------------- client and agent
def test_client_and_agent_come_first() -> None:
    assert names("Moved acme.com to Vercel", client_id="acme-corp", source_agent="ops-agent") == [
        ("acme-corp", "client", "about"),
        ("ops-agent", "agent", "source"),
        ("acme.com", "domain", "mentioned"),
        ("Vercel", "technology", "mentioned"),
    ]


def test_global_client_is_not_an_entity() -> None:
    assert names("nothing here", client_id="global", source_agent="crawler") == [
        ("crawler", "agent", "source")
    ]
    assert names("nothing here") == []


# ---------------------------------------------------------------- domains
def test_domains_are_lowercased_and_drop_www() -> None:
    assert names("Email ops@www.Acme-Corp.ca, see shop.example.co.uk and x.io/path") == [
        ("acme-corp.ca", "domain", "mentioned"),
        ("shop.example.co.uk", "domain", "mentioned"),
        ("x.io", "domain", "mentioned"),
    ]


def test_file_names_are_not_domains() -> None:
    assert names("edit index.html, app.py and README.md") == []


# ---------------------------------------------------------------- technology
def test_tech_aliases_resolve_to_canonical_names() -> None:
    assert names("Migrated from nextjs to NEXT.JS with postgres, psql and k8s") == [
        ("Next.js", "technology", "mentioned"),
        ("PostgreSQL", "technology", "mentioned"),
        ("Kubernetes", "technology", "mentioned"),
    ]


def test_longest_tech_name_wins() -> None:
    assert names("node.js, postgresql, React Native and GitHub Actions") == [
        ("Node.js", "technology", "mentioned"),
        ("PostgreSQL", "technology", "mentioned"),
        ("React Native", "technology", "mentioned"),
        ("GitHub Actions", "technology", "mentioned"),
    ]


def test_symbol_tech_names_and_multiword_aliases() -> None:
    assert names("C++ and C# on .NET, hosted on Google  Cloud") == [
        ("C++", "technology", "mentioned"),
        ("C#", "technology", "mentioned"),
        (".NET", "technology", "mentioned"),
        ("GCP", "technology", "mentioned"),
    ]


def test_word_like_tech_names_need_exact_case() -> None:
    # "react", "next", "node", "go" are ordinary words: no technology found.
    assert names("we react to the next node and go home") == []
    assert names("React and Go via golang") == [
        ("React", "technology", "mentioned"),
        ("Go", "technology", "mentioned"),
    ]


def test_tech_inside_a_domain_is_the_domain() -> None:
    assert names("docs at nextjs.org") == [("nextjs.org", "domain", "mentioned")]


def test_builtin_dictionary_has_more_than_70_names() -> None:
    assert len(TECH_NAMES) > 70
    assert len(TECH_NAMES) == 117


# ---------------------------------------------------------------- systems
def test_system_names_case_insensitive() -> None:
    assert names("The Shared Brain feeds the agency  system") == [
        ("shared brain", "system", "mentioned"),
        ("agency system", "system", "mentioned"),
    ]


def test_custom_system_names() -> None:
    ex = EntityExtractor(system_names=["Memory Lab"])
    assert names("memory lab and shared brain", ex) == [("Memory Lab", "system", "mentioned")]


# ---------------------------------------------------------------- quoted names
def test_quoted_names_in_every_quote_style() -> None:
    assert names("""Use "Content Pillars", `growth kit`, 'Blue Ocean' and “North Star”.""") == [
        ("Content Pillars", "concept", "mentioned"),
        ("growth kit", "concept", "mentioned"),
        ("Blue Ocean", "concept", "mentioned"),
        ("North Star", "concept", "mentioned"),
    ]


def test_quoted_length_bounds() -> None:
    long = "x" * 61
    assert names(f'"ab" "abc" "{long}"') == [("abc", "concept", "mentioned")]
    ex = EntityExtractor(min_quoted=2, max_quoted=61)
    assert names(f'"ab" "{long}"', ex) == [
        ("ab", "concept", "mentioned"),
        (long, "concept", "mentioned"),
    ]


def test_quoted_alias_resolves() -> None:
    assert names("we picked `next` over `vue`") == [
        ("Next.js", "technology", "mentioned"),
        ("Vue.js", "technology", "mentioned"),
    ]


def test_apostrophes_are_not_quotes() -> None:
    assert names("Caroline's dog and Melanie's cat") == []


@pytest.mark.parametrize(
    "junk",
    [
        "src/app.py",  # path
        "<div>",  # HTML
        "a = b",  # code
        "user_profile",  # snake_case
        "fooBar",  # camelCase
        "we should do this now",  # prose
        "Fixed login",  # action verb
        "the dashboard",  # determiner
        "Monday sync",  # time word
        "font size",  # CSS
        "login error",  # generic tail
        "123",  # no letter
    ],
)
def test_quoted_junk_is_dropped(junk: str) -> None:
    assert names(f'see "{junk}" now') == []


# ---------------------------------------------------------------- capitalised phrases
def test_capitalised_phrases_become_concepts() -> None:
    assert names("Met the Acme Corp team about Content Strategy and Blue Ocean Labs.") == [
        ("Acme Corp", "concept", "mentioned"),
        ("Content Strategy", "concept", "mentioned"),
        ("Blue Ocean Labs", "concept", "mentioned"),
    ]


def test_two_titlecase_words_with_given_name_are_a_person() -> None:
    assert names("Caroline Smith met Taylor Swift and Jon Snow Jr") == [
        ("Caroline Smith", "person", "mentioned"),
        ("Taylor Swift", "concept", "mentioned"),
        ("Swift", "technology", "mentioned"),
        ("Jon Snow Jr", "concept", "mentioned"),
    ]
    ex = EntityExtractor(given_names=["taylor"])
    assert names("Taylor Swift and Caroline Smith", ex) == [
        ("Taylor Swift", "person", "mentioned"),
        ("Swift", "technology", "mentioned"),
        ("Caroline Smith", "concept", "mentioned"),
    ]


@pytest.mark.parametrize(
    "junk",
    [
        "Fixed Login Flow",
        "Added Dark Mode",
        "Deployed New Build",
        "The System",
        "This Feature",
        "Our Team",
        "What Caroline",
        "Monday Meeting",
        "January Update",
        "Team Sync Today",
        "Roadmap Q1",
        "Plan 2024",
        "Background Color",
        "Border Radius",
        "Font Size",
        "Error Fix",
        "Data Type",
        "Page View",
        "Checkout Issue",
        "Is It Over",
        "Le Chat Est Sur La Table",
    ],
)
def test_capitalised_junk_is_dropped(junk: str) -> None:
    assert names(f"x {junk} y") == []


def test_sentence_boundary_splits_phrases() -> None:
    assert names("Ship it. Acme Corp agreed") == [("Acme Corp", "concept", "mentioned")]


def test_prose_ratio_threshold() -> None:
    # "Heaven In Made": 2 of 3 words are prose words ("in", "made") -> 0.67 > 0.4.
    assert names('"Heaven In Made"') == []
    # "Hill Of Dreams": 1 of 3 is a prose word -> 0.33 <= 0.4 -> kept.
    assert names('"Hill Of Dreams"') == [("Hill Of Dreams", "concept", "mentioned")]
    assert names('"Hill Of Dreams"', EntityExtractor(prose_ratio=0.3)) == []


# ---------------------------------------------------------------- aliases, dedup, order
def test_alias_cache_resolves_found_names() -> None:
    cache = AliasCache()
    cache.add("Acme Corporation", Entity("acme-corp", "client"))
    cache.add("acme.com", Entity("acme-corp", "client"))
    ex = EntityExtractor(aliases=cache)
    assert names("Acme Corporation owns acme.com and uses k8s", ex) == [
        ("acme-corp", "client", "mentioned"),
        ("Kubernetes", "technology", "mentioned"),
    ]


def test_query_entities_are_remembered_until_an_alias_is_added() -> None:
    cache = AliasCache()
    ex = EntityExtractor(aliases=cache)
    text = 'does billing run on "zorblax"'
    assert ex.extract_query_entities(text) == [Entity("zorblax", "concept")]
    assert ex.extract_query_entities(text) == [Entity("zorblax", "concept")]
    cache.add("zorblax", Entity("Zorblax", "technology"))
    assert ex.extract_query_entities(text) == [Entity("Zorblax", "technology")]
    first = ex.extract_query_entities(text)
    first.clear()  # the caller's list: the remembered entities are not touched
    assert ex.extract_query_entities(text) == [Entity("Zorblax", "technology")]


def test_dedup_is_case_insensitive_and_keeps_first() -> None:
    assert names("Postgres, then POSTGRESQL, then `psql`", client_id="acme") == [
        ("acme", "client", "about"),
        ("PostgreSQL", "technology", "mentioned"),
    ]
    assert names('the "acme" account', client_id="acme") == [("acme", "client", "about")]


def test_output_is_deterministic() -> None:
    text = 'Acme Corp uses nextjs on vercel.app with "Growth Loop" and Jane Doe'
    a = names(text, client_id="c", source_agent="a")
    b = names(text, client_id="c", source_agent="a")
    assert (
        a
        == b
        == [
            ("c", "client", "about"),
            ("a", "agent", "source"),
            ("Acme Corp", "concept", "mentioned"),
            ("Next.js", "technology", "mentioned"),
            ("vercel.app", "domain", "mentioned"),
            ("Growth Loop", "concept", "mentioned"),
            ("Jane Doe", "person", "mentioned"),
        ]
    )


def test_extract_query_entities_has_no_client_or_agent() -> None:
    ex = EntityExtractor()
    assert ex.extract_query_entities("What does Acme Corp host on k8s?") == [
        Entity("Acme Corp", "concept"),
        Entity("Kubernetes", "technology"),
    ]


def test_extractor_resolve_uses_its_cache() -> None:
    cache = AliasCache(tech_names={})
    cache.add("acme", Entity("acme-corp", "client"))
    assert EntityExtractor(aliases=cache).resolve("ACME") == Entity("acme-corp", "client")
    assert EntityExtractor(aliases=cache).resolve("k8s") is None
    assert EntityExtractor().resolve("k8s") == Entity("Kubernetes", "technology")


def test_custom_tech_dictionary() -> None:
    ex = EntityExtractor(tech_names={"Memlab": ("mlab",)})
    assert names("mlab beats postgres", ex) == [("Memlab", "technology", "mentioned")]


# ---------------------------------------------------------------- AliasCache
def test_alias_cache_preloaded_and_extensible() -> None:
    cache = AliasCache()
    assert cache.resolve("NextJS") == Entity("Next.js", "technology")
    assert cache.resolve("next") == Entity("Next.js", "technology")
    assert cache.resolve("K8S") == Entity("Kubernetes", "technology")
    assert cache.resolve("unknown thing") is None
    cache.add("  Shared   Brain ", Entity("shared brain", "system"))
    assert cache.resolve("shared brain") == Entity("shared brain", "system")
    assert ("shared brain", Entity("shared brain", "system")) in list(cache.items())
    assert "PSQL" in cache
    assert len(AliasCache(tech_names={})) == 0
    assert len(AliasCache(tech_names={"A1": ("a-one", "A-ONE")})) == 2


def test_alias_cache_rejects_bad_input() -> None:
    cache = AliasCache()
    with pytest.raises(ValueError, match="'alias'"):
        cache.add("   ", Entity("x", "concept"))
    with pytest.raises(TypeError, match="'entity'"):
        cache.add("x", ("x", "concept"))  # type: ignore[arg-type]


# ---------------------------------------------------------------- validation
def test_mention_role_is_validated() -> None:
    with pytest.raises(ValueError, match="'role'"):
        EntityMention(Entity("x", "concept"), "owner")


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"min_quoted": 0}, "min_quoted"),
        ({"min_quoted": 5, "max_quoted": 4}, "max_quoted"),
        ({"prose_ratio": 1.5}, "prose_ratio"),
    ],
)
def test_bad_parameters_raise_on_first_use(kwargs: dict, field: str) -> None:
    ex = EntityExtractor(**kwargs)
    with pytest.raises(ValueError, match=field):
        ex.extract("text")


def test_non_string_inputs_raise() -> None:
    ex = EntityExtractor()
    with pytest.raises(TypeError, match="'text'"):
        ex.extract(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="'client_id'"):
        ex.extract("x", client_id=3)  # type: ignore[arg-type]


def test_parameters_stored_verbatim() -> None:
    tech = {"A1": ()}
    ex = EntityExtractor(tech_names=tech, min_quoted=4)
    assert ex.tech_names is tech
    assert ex.min_quoted == 4
    assert ex.system_names is None
    assert not hasattr(ex, "aliases_")


def test_accented_capitalised_phrases() -> None:
    assert names("Réunion avec École Polytechnique et Hélène Dubois") == [
        ("École Polytechnique", "concept", "mentioned"),
        ("Hélène Dubois", "concept", "mentioned"),
    ]


def test_extraction_is_remembered_only_while_the_alias_cache_is_unchanged() -> None:
    text = 'We moved "Billing Core" from postgres to Kafka'
    a, b = EntityExtractor(), EntityExtractor()
    names = ["Billing Core", "PostgreSQL", "Kafka"]
    assert [m.entity.name for m in a.extract(text)] == names
    assert [m.entity.name for m in b.extract(text)] == names  # same answer from the memo
    # An alias learnt by one extractor's cache changes its answers and no other's.
    b.aliases_.add("Billing Core", Entity("billing-service", "system"))
    assert [m.entity.name for m in b.extract(text)] == ["billing-service", "PostgreSQL", "Kafka"]
    assert [m.entity.name for m in a.extract(text)] == names
    assert [m.entity.name for m in EntityExtractor().extract(text)] == names


# --------------------------------------------------------------- candidates kept elsewhere
def test_candidate_rows_round_trip_through_the_memo(monkeypatch) -> None:
    from memlab.memory import entities

    text = "PostgreSQL and Redis"
    found = EntityExtractor().candidate_rows([text, text])
    assert found == {
        "params": [3, 60, 0.4],
        "rows": {text: [[0, entities._TECH, "PostgreSQL", "technology"],
                        [len("PostgreSQL and "), entities._TECH, "Redis", "technology"]]},
    }
    monkeypatch.setattr(entities, "_CANDIDATES_MEMO", {})
    fresh = EntityExtractor()
    assert fresh.remember_candidates(found) == 1

    def never(self, text):
        raise AssertionError("the rules ran")

    monkeypatch.setattr(EntityExtractor, "_find_candidates", never)
    assert [(m.entity.name, m.entity.type) for m in fresh.extract(text)] == [
        ("PostgreSQL", "technology"), ("Redis", "technology"),
    ]


@pytest.mark.parametrize(
    "found",
    [
        {"params": [4, 60, 0.4], "rows": {"Redis": [[0, 0, "Redis", "technology"]]}},
        {"params": [3, 60, 0.4], "rows": {"Redis": [[0, "0", "Redis", "technology"]]}},
        {"params": [3, 60, 0.4], "rows": {"Redis": [[0, 0, "Redis"]]}},
        {"params": [3, 60, 0.4], "rows": ["Redis"]},
        None,
    ],
)
def test_candidates_of_other_parameters_or_shape_are_not_remembered(monkeypatch, found) -> None:
    from memlab.memory import entities

    monkeypatch.setattr(entities, "_CANDIDATES_MEMO", {})
    assert EntityExtractor().remember_candidates(found) == 0
    assert entities._CANDIDATES_MEMO == {}


def test_an_extractor_with_its_own_dictionary_keeps_no_candidates(monkeypatch) -> None:
    from memlab.memory import entities

    monkeypatch.setattr(entities, "_CANDIDATES_MEMO", {})
    own = EntityExtractor(tech_names={"Redis": ["redis"]})
    assert own.candidate_rows(["Redis"]) is None
    rows = {"params": [3, 60, 0.4], "rows": {"Redis": [[0, 0, "Redis", "technology"]]}}
    assert own.remember_candidates(rows) == 0
