"""Fast-path entity extraction (no LLM), after the reference memory model (docs/design.md §D0.8).

Rules, applied to every memory text at write time and to query texts at search time:

1. Client id -- unless ``None`` or ``"global"``, becomes ``Entity(client_id, "client")``
   with role ``about``.
2. Source agent -- becomes ``Entity(agent, "agent")`` with role ``source``.
3. Domain names -- ``*.com``, ``*.ca``, ``*.io``, ... typed ``domain`` (lower-cased, a leading
   ``www.`` dropped).
4. Known technology names -- a dictionary of 70+ names with canonical forms (``nextjs`` ->
   ``Next.js``), found by ONE precompiled alternation regex (a prefix trie) with word
   boundaries, typed ``technology``. Names that are also ordinary English words need care:
   a canonical name such as ``React``, ``Swift`` or ``Slack`` only matches when written with
   that exact capitalisation (so "react quickly" is not React; a capitalised word at the start
   of a sentence still matches), and a word alias such as ``next`` (-> Next.js) or ``node``
   (-> Node.js) is never matched in free text, only resolved through the alias cache (for
   example a quoted ```next```).
5. Known system names -- internal system/product names (``agency system``, ``shared brain``),
   matched case-insensitively, typed ``system``.
6. Quoted names -- text in double, single, curly quotes or backticks, ``min_quoted`` to
   ``max_quoted`` characters, typed ``concept`` after junk filtering.
7. Capitalised multi-word phrases -- ``Capitalised Word Patterns`` of two or more words, typed
   ``concept`` after junk filtering. A phrase of exactly two alphabetic title-case words whose
   first word is a common given name (``given_names``) is typed ``person`` instead
   ("Caroline Smith"). This is a deliberately simple rule: it misses people with rare first
   names and would type a company called "Grace Hopper" as a person.

Junk filters (docs/design.md §D0.8), applied to quoted names and capitalised phrases:

* action-verb prefixes: "Fixed Something", "Added Feature" (log lines, not names);
* noise words at start: determiners, pronouns, question words, auxiliaries ("The System");
* time words anywhere: weekdays, months, "Today", "Q1", four-digit years;
* CSS-like phrases: every word is CSS vocabulary ("Background Color", "Border Radius");
* generic tail words: "Error Fix", "Data Type", "Page View";
* paths, HTML and code: any of ``/ \\ < > { } = ; ( ) [ ] |``;
* prose fragments: more than ``prose_ratio`` of the words are common English/French words;
* camelCase or snake_case words (identifiers).

Every name found by rules 3-7 is first looked up in the alias cache; a hit replaces it with the
cached canonical entity (a known alias is never junk). Names added to the cache at run time are
therefore resolved when a rule finds them; they are not searched for in free text.

Rules do not suppress one another: "Taylor Swift" yields the phrase and the technology Swift,
"Vercel Edge Functions" the phrase and Vercel. Output is deduplicated by lower-cased name (the
first occurrence wins) and ordered client, agent, then by position of first appearance in the
text (ties: rule order above).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from memlab.memory.records import ENTITY_ROLES, GLOBAL_CLIENT

TECH_NAMES: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        # Web frameworks and runtimes
        "Next.js": ("nextjs", "next.js", "next"),
        "React": ("reactjs", "react.js"),
        "React Native": ("react native", "react-native"),
        "Vue.js": ("vue", "vuejs", "vue.js"),
        "Angular": ("angularjs",),
        "Svelte": (),
        "SvelteKit": (),
        "Nuxt": ("nuxtjs", "nuxt.js"),
        "Node.js": ("node", "nodejs", "node.js"),
        "Deno": (),
        "Express": ("expressjs", "express.js"),
        "Django": (),
        "Flask": (),
        "FastAPI": (),
        "Ruby on Rails": ("rails", "ror"),
        "Spring Boot": ("springboot",),
        "Laravel": (),
        "Tailwind CSS": ("tailwind", "tailwindcss"),
        "Vite": (),
        "Webpack": (),
        "GraphQL": (),
        "gRPC": (),
        # Languages
        "TypeScript": (),
        "JavaScript": ("js",),
        "Python": ("python3",),
        "Go": ("golang",),
        "Rust": (),
        "Java": (),
        "Kotlin": (),
        "Swift": (),
        "Ruby": (),
        "PHP": (),
        "C#": ("csharp",),
        "C++": ("cpp",),
        ".NET": ("dotnet",),
        "Elixir": (),
        "Scala": (),
        "HTML": ("html5",),
        "CSS": ("css3",),
        # Data stores
        "PostgreSQL": ("postgres", "postgresql", "psql"),
        "MySQL": (),
        "SQLite": ("sqlite3",),
        "MongoDB": ("mongo",),
        "Redis": (),
        "Elasticsearch": ("elastic search",),
        "DuckDB": (),
        "Qdrant": (),
        "Pinecone": (),
        "Weaviate": (),
        "ChromaDB": ("chroma",),
        "pgvector": (),
        "Supabase": (),
        "Firebase": (),
        "DynamoDB": (),
        "ClickHouse": (),
        "Snowflake": (),
        "BigQuery": (),
        "Kafka": ("apache kafka",),
        "RabbitMQ": (),
        "Airflow": ("apache airflow",),
        # Infrastructure and hosting
        "Docker": (),
        "Kubernetes": ("k8s", "kube"),
        "Terraform": (),
        "Ansible": (),
        "AWS": ("amazon web services",),
        "AWS Lambda": (),
        "Amazon S3": ("s3",),
        "GCP": ("google cloud", "google cloud platform"),
        "Azure": ("microsoft azure",),
        "Vercel": (),
        "Netlify": (),
        "Cloudflare": (),
        "Heroku": (),
        "DigitalOcean": ("digital ocean",),
        "Nginx": (),
        "Linux": (),
        # Tooling and services
        "Git": (),
        "GitHub": (),
        "GitHub Actions": (),
        "GitLab": (),
        "Jenkins": (),
        "CircleCI": (),
        "Prometheus": (),
        "Grafana": (),
        "Datadog": (),
        "Sentry": (),
        "Stripe": (),
        "Twilio": (),
        "SendGrid": (),
        "Slack": (),
        "Notion": (),
        "Jira": (),
        "Figma": (),
        "HubSpot": (),
        "Salesforce": (),
        "Shopify": (),
        "WordPress": (),
        "Webflow": (),
        "Google Analytics": ("ga4",),
        "Zapier": (),
        "n8n": (),
        "Directus": (),
        "Playwright": (),
        "Cypress": (),
        "pytest": (),
        "npm": (),
        "pnpm": (),
        # Machine learning
        "OpenAI": (),
        "ChatGPT": (),
        "LangChain": (),
        "LlamaIndex": (),
        "PyTorch": (),
        "TensorFlow": (),
        "Hugging Face": ("huggingface",),
        "scikit-learn": ("sklearn",),
        "NumPy": (),
        "Jupyter": (),
    }
)
"""Built-in technology dictionary: canonical name -> aliases (the canonical name is always an
alias of itself; aliases are case-insensitive)."""

SYSTEM_NAMES: tuple[str, ...] = (
    "agency system",
    "shared brain",
    "consolidation engine",
    "skill graph",
    "taxonomy graph",
)
"""Built-in internal system/product names (docs/design.md §D0.8 examples)."""

GIVEN_NAMES: frozenset[str] = frozenset(
    """
    aaron adam alex alexander alice amanda amy andrew angela anna anne anthony audrey barbara
    ben benjamin brian calvin carol caroline catherine charles chris christine claire daniel
    dave david deborah dennis diana donald dorothy edward elizabeth emily emma eric evan frank
    gary george gina grace hannah harry helen henry isabelle jack jacques james jane janet jason
    jean jeff jennifer jessica jim joanna joe john jolene jon jonathan joseph julia julie karen
    kate kevin laura linda lisa louis lucas lucy margaret maria marie mark mary matthew melanie
    michael michelle mike nancy nate nathalie nicolas nicole oliver olivia patrick paul peter
    philippe pierre rachel rebecca richard robert ryan sam samuel sarah scott sophie stephen
    steve susan thomas tim timothy tom victoria william
    """.split()
)
"""Common English/French given names used by the ``person`` rule (lower case)."""

# Word aliases that are also ordinary words: never searched for in free text (alias cache only).
_UNSCANNED = frozenset({"next", "node", "go", "rails", "chroma", "kube", "ror"})
# Canonical names that are also ordinary words: searched for with their exact capitalisation.
_EXACT_CASE = frozenset(
    {
        "react", "angular", "express", "flask", "swift", "rust", "ruby", "java", "elixir",
        "slack", "notion", "sentry", "stripe", "snowflake", "vite", "scala", "airflow",
        "cypress", "pinecone", "azure",
    }
)  # fmt: skip

_ACTION_VERBS = frozenset(
    """
    add added adding fix fixed fixing update updated updating remove removed removing deploy
    deployed deploying create created creating delete deleted deleting change changed changing
    merge merged implement implemented refactor refactored move moved rename renamed migrate
    migrated release released ship shipped build built test tested configure configured install
    installed upgrade upgraded revert reverted enable enabled disable disabled improve improved
    optimize optimized optimise optimised clean cleaned resolve resolved start started finish
    finished complete completed launch launched publish published write wrote rewrote run ran
    use used using set setup check checked review reviewed discuss discussed decide decided
    agree agreed ask asked tell told send sent receive received schedule scheduled book booked
    call called meet met went got made found saw learned bumped patched
    """.split()
)
_NOISE_START = frozenset(
    """
    the this that these those a an our my your their his her its we i you they he she it some
    any all every each no new old other another what when where why how who which whose did
    does do is are was were be been can could should would will shall may might must has have
    had if and or but so then also just please hey hi hello thanks thank yes ok okay in on at
    for from to with by of after before during since until about per via le la les un une des
    du de ce cette ces notre nos votre mon ma mes son sa ses leur leurs
    """.split()
)
_TIME_WORDS = frozenset(
    """
    monday tuesday wednesday thursday friday saturday sunday mon tue tues wed thu thur thurs fri
    sat sun january february march april june july august september october november december
    jan feb mar apr jun jul aug sep sept oct nov dec today tomorrow yesterday tonight morning
    afternoon evening night week weekend weekly month monthly year yearly daily annual quarter
    quarterly q1 q2 q3 q4 h1 h2 eod eow lundi mardi mercredi jeudi vendredi samedi dimanche
    janvier février fevrier avril mai juin juillet août aout septembre octobre novembre
    décembre decembre aujourd'hui demain hier
    """.split()
)
_CSS_WORDS = frozenset(
    """
    background color colour border radius font size weight family style text align decoration
    transform line height width letter spacing margin padding top bottom left right box shadow
    z index max min display flex grid gap opacity overflow position outline cursor content
    justify items wrap direction image repeat transition animation visibility vertical
    horizontal hover focus
    """.split()
)
_GENERIC_TAIL = frozenset(
    """
    error errors fix fixes type types view views page pages issue issues update updates bug bugs
    problem problems change changes test tests file files list lists item items button field
    fields value values section component components function method class module config
    settings option options feature features request requests response message messages step
    steps task tasks note notes thing things stuff part way time version info details name id
    url link links log logs output input result results
    """.split()
)
_PROSE_WORDS = frozenset(
    """
    a an the and or but if then so of to in on at by for with from as is are was were be been
    being am it its this that these those there here i me my we us our you your he him his she
    her they them their not no yes do does did done have has had will would should could can
    may might must shall just very really also too all any some more most much many what when
    where why how who which about into over after before up down out off again only than like
    get got make made go going went know think want need see say said one because while still
    even now well good great lot way thing things something anything nothing everything
    le la les l un une des du de d et ou mais donc car ni est sont était être avoir ai as avons
    ont il elle ils elles je tu nous vous on ce cet cette ces ça qui que quoi dont où pour par
    dans sur avec sans sous en au aux pas ne plus très bien tout tous toute toutes mon ma mes ton
    ta tes son sa ses notre nos votre vos leur leurs se si y comme aussi
    """.split()
)
_CODE_CHARS = frozenset("/\\<>{}=;()[]|")
_TLDS = (
    "com", "ca", "io", "org", "net", "dev", "ai", "co", "app", "fr", "uk", "us", "de", "eu",
    "tv", "xyz", "tech", "info", "biz", "site", "online", "store", "shop", "cloud", "gg", "ly",
)  # fmt: skip

_WORD_STRIP = ".,!?:;'\"()[]"
_CAMEL = re.compile(r"[a-z][a-z0-9]*[A-Z]")
_TITLE_WORD = re.compile(r"[A-ZÀ-Þ][a-zß-ÿ]+")
_YEAR = re.compile(r"(?:19|20)\d\d")
_DOMAIN = re.compile(
    r"(?<![\w.-])((?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+(?:"
    + "|".join(sorted(_TLDS, key=lambda t: (-len(t), t)))
    + r"))(?![\w-]|\.\w)",
    re.IGNORECASE,
)
_CAP_WORD = r"[A-ZÀ-ÖØ-Þ][A-Za-zÀ-ÖØ-öø-ÿ0-9]*(?:['&-][A-Za-zÀ-ÖØ-öø-ÿ0-9]+)*"
_CAPITALISED = re.compile(r"(?<![\w.])" + _CAP_WORD + r"(?: " + _CAP_WORD + r")+(?![\w])")

# Rule priorities (tie-break at equal positions).
_TECH, _SYSTEM, _DOMAIN_RULE, _QUOTED, _CAPS = range(5)


@dataclass(frozen=True, slots=True)
class Entity:
    """A named entity: ``name`` in its canonical form and a ``type`` such as ``technology``."""

    name: str
    type: str

    def to_dict(self) -> dict[str, str]:
        """The payload form ``{"name": ..., "type": ...}`` of docs/design.md §D0.2."""
        return {"name": self.name, "type": self.type}


@dataclass(frozen=True, slots=True)
class EntityMention:
    """An entity as found in one memory, with its ``role``: about, source or mentioned."""

    entity: Entity
    role: str

    def __post_init__(self) -> None:
        if self.role not in ENTITY_ROLES:
            raise ValueError(
                f"entities.py: EntityMention field 'role' must be one of {ENTITY_ROLES}, "
                f"got {self.role!r}"
            )


class AliasCache:
    """In-memory map alias (case-insensitive) -> canonical entity (docs/design.md §D0.8).

    Pre-loaded with the technology dictionary; extended at start-up from stored aliases and at
    run time when consolidation discovers new ones (:meth:`add`).

    Args:
        tech_names: Canonical technology name -> aliases. ``None`` means :data:`TECH_NAMES`;
            pass ``{}`` for an empty cache.

    Attributes:
        added_: How many aliases :meth:`add` has mapped (absent before the first).
    """

    def __init__(self, tech_names: Mapping[str, Iterable[str]] | None = None) -> None:
        self.tech_names = tech_names

    def _table(self) -> dict[str, Entity]:
        table = getattr(self, "table_", None)
        if table is None:
            names = TECH_NAMES if self.tech_names is None else self.tech_names
            if not isinstance(names, Mapping):
                raise TypeError(
                    "entities.py: AliasCache field 'tech_names' must be a mapping of canonical "
                    f"name -> aliases, got {type(names).__name__}"
                )
            table = {}
            for canonical, aliases in names.items():
                entity = Entity(canonical, "technology")
                for alias in (canonical, *_as_names(aliases, "tech_names", canonical)):
                    table.setdefault(alias.lower(), entity)
            self.table_ = table
        return table

    def add(self, alias: str, entity: Entity) -> None:
        """Map ``alias`` (any case) to ``entity``, replacing a previous mapping.

        Raises:
            TypeError: If ``alias`` is not a string or ``entity`` not an :class:`Entity`.
            ValueError: If ``alias`` is blank.
        """
        if not isinstance(alias, str):
            raise TypeError(f"entities.py: field 'alias' must be a str, got {type(alias).__name__}")
        if not isinstance(entity, Entity):
            raise TypeError(
                f"entities.py: field 'entity' must be an Entity, got {type(entity).__name__}"
            )
        key = " ".join(alias.split()).lower()
        if not key:
            raise ValueError("entities.py: field 'alias' must not be blank")
        self._table()[key] = entity
        self.added_ = getattr(self, "added_", 0) + 1

    def resolve(self, name: str) -> Entity | None:
        """The canonical entity for ``name`` (case- and whitespace-insensitive), or ``None``."""
        table = self._table()
        hit = table.get(name.lower())
        if hit is None and ("  " in name or name != name.strip()):
            hit = table.get(" ".join(name.split()).lower())
        return hit

    def items(self) -> Iterator[tuple[str, Entity]]:
        """``(lower-cased alias, entity)`` pairs in insertion order."""
        return iter(list(self._table().items()))

    def __len__(self) -> int:
        return len(self._table())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.resolve(name) is not None


_MEMO_MAX_TEXTS = 65_536
"""Most texts whose candidates are remembered (see :meth:`EntityExtractor._candidates`)."""
_MEMO_MAX_CHARS = 4_096
"""Longest text whose candidates are remembered."""
_CANDIDATES_MEMO: dict[tuple[int, int, float, str], tuple[tuple[int, int, Entity], ...]] = {}


def _candidate_tuple(cands: Any) -> tuple[tuple[int, int, Entity], ...] | None:
    """Candidate rows ``[[start, rule, name, type], …]`` as the memo holds them, or ``None``
    when they are not of that shape."""
    if not isinstance(cands, list):
        return None
    out = []
    for row in cands:
        if not (
            isinstance(row, list)
            and len(row) == 4
            and type(row[0]) is int
            and type(row[1]) is int
            and isinstance(row[2], str)
            and isinstance(row[3], str)
        ):
            return None
        out.append((row[0], row[1], Entity(row[2], row[3])))
    return tuple(out)


class EntityExtractor:
    """Rule-based entity extractor (docs/design.md §D0.8 fast path).

    Args:
        tech_names: Canonical technology name -> aliases; ``None`` means :data:`TECH_NAMES`.
        system_names: Internal system names; ``None`` means :data:`SYSTEM_NAMES`.
        min_quoted: Shortest quoted name kept, in characters (seed: 3).
        max_quoted: Longest quoted name kept, in characters (seed: 60).
        prose_ratio: A phrase is prose (junk) when more than this fraction of its words are
            common English/French words (seed: 0.4).
        given_names: Lower-case given names for the ``person`` rule; ``None`` means
            :data:`GIVEN_NAMES`.
        aliases: Alias cache used to resolve every name found; ``None`` means a private cache
            pre-loaded with ``tech_names``.

    Attributes:
        aliases_: The alias cache in use (set on first use, as are the compiled regexes).
    """

    def __init__(
        self,
        tech_names: Mapping[str, Iterable[str]] | None = None,
        system_names: Iterable[str] | None = None,
        min_quoted: int = 3,
        max_quoted: int = 60,
        prose_ratio: float = 0.4,
        *,
        given_names: Iterable[str] | None = None,
        aliases: AliasCache | None = None,
    ) -> None:
        self.tech_names = tech_names
        self.system_names = system_names
        self.min_quoted = min_quoted
        self.max_quoted = max_quoted
        self.prose_ratio = prose_ratio
        self.given_names = given_names
        self.aliases = aliases

    # ------------------------------------------------------------------ setup
    def _fit(self) -> None:
        """Validate parameters and compile the regexes (once, on first use)."""
        for field in ("min_quoted", "max_quoted"):
            value = getattr(self, field)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(
                    f"entities.py: EntityExtractor field '{field}' must be an int >= 1, "
                    f"got {value!r}"
                )
        if self.max_quoted < self.min_quoted:
            raise ValueError(
                "entities.py: EntityExtractor field 'max_quoted' must be >= 'min_quoted', "
                f"got {self.max_quoted} < {self.min_quoted}"
            )
        ratio = self.prose_ratio
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 <= ratio <= 1:
            raise ValueError(
                f"entities.py: EntityExtractor field 'prose_ratio' must be in [0, 1], got {ratio!r}"
            )
        if self.aliases is not None and not isinstance(self.aliases, AliasCache):
            raise TypeError(
                "entities.py: EntityExtractor field 'aliases' must be an AliasCache, "
                f"got {type(self.aliases).__name__}"
            )
        tech = TECH_NAMES if self.tech_names is None else self.tech_names
        if not isinstance(tech, Mapping):
            raise TypeError(
                "entities.py: EntityExtractor field 'tech_names' must be a mapping, "
                f"got {type(tech).__name__}"
            )
        systems = SYSTEM_NAMES if self.system_names is None else self.system_names
        given = GIVEN_NAMES if self.given_names is None else self.given_names

        # Technology: one alternation regex (prefix trie); exact-case names in a scoped group.
        lookup: dict[str, str] = {}
        exact: set[str] = set()
        for canonical, aliases in tech.items():
            if not isinstance(canonical, str) or not canonical.strip():
                raise ValueError(
                    f"entities.py: EntityExtractor field 'tech_names' has a blank or non-str "
                    f"key {canonical!r}"
                )
            low = canonical.lower()
            if low in _EXACT_CASE or low in _UNSCANNED:
                if low not in _UNSCANNED:
                    exact.add(canonical)
            else:
                lookup.setdefault(low, canonical)
            for alias in _as_names(aliases, "tech_names", canonical):
                a = alias.lower()
                if a not in _UNSCANNED and a not in _EXACT_CASE:
                    lookup.setdefault(a, canonical)
        exact_lookup = {name: name for name in exact}
        parts = []
        if lookup:
            parts.append("(?i:" + _trie_regex(lookup) + ")")
        if exact_lookup:
            parts.append(_trie_regex(exact_lookup))
        self.tech_lookup_ = {**lookup, **exact_lookup}
        self.tech_regex_ = (
            re.compile(r"(?<![\w.])(?:" + "|".join(parts) + r")(?![\w]|\.\w)") if parts else None
        )

        system_map: dict[str, str] = {}
        for name in _as_names(systems, "system_names", None):
            system_map.setdefault(" ".join(name.split()).lower(), name)
        self.system_lookup_ = system_map
        self.system_regex_ = (
            re.compile(r"(?<![\w.])(?:" + _trie_regex(system_map) + r")(?![\w])", re.IGNORECASE)
            if system_map
            else None
        )

        lo, hi = self.min_quoted, self.max_quoted
        self.quoted_regex_ = re.compile(
            rf"\"([^\"\n]{{{lo},{hi}}})\"|“([^”\n]{{{lo},{hi}}})”|`([^`\n]{{{lo},{hi}}})`"
            rf"|(?<![\w])'([^'\n]{{{lo},{hi}}})'(?![\w])"
        )
        self.given_names_ = frozenset(n.lower() for n in _as_names(given, "given_names", None))
        self.aliases_ = self.aliases if self.aliases is not None else AliasCache(tech)

    # ------------------------------------------------------------------ junk
    def is_junk(self, phrase: str) -> bool:
        """Whether ``phrase`` fails the seed-000 junk filters (see module docstring)."""
        if not hasattr(self, "aliases_"):
            self._fit()
        if any(c in _CODE_CHARS for c in phrase):
            return True
        words = [w.strip(_WORD_STRIP) for w in phrase.split()]
        words = [w for w in words if w]
        if not words or not any(c.isalpha() for c in phrase):
            return True
        for w in words:
            if "_" in w or _CAMEL.match(w):
                return True
        low = [w.lower() for w in words]
        if low[0] in _ACTION_VERBS or low[0] in _NOISE_START:
            return True
        for w in low:
            if w in _TIME_WORDS or _YEAR.fullmatch(w):
                return True
        if len(low) > 1:
            if all(w in _CSS_WORDS for w in low):
                return True
            if low[-1] in _GENERIC_TAIL:
                return True
        n_prose = sum(1 for w in low if w in _PROSE_WORDS)
        return n_prose > self.prose_ratio * len(low)

    # ------------------------------------------------------------------ extraction
    def _candidates(self, text: str) -> list[tuple[int, int, Entity]]:
        """``(start, rule, entity)`` for every name found in ``text`` (before dedup).

        With the default dictionaries and an alias cache nothing was added to, the result is a
        pure function of the text and the three numeric parameters: it is remembered for every
        extractor in the process (each store has its own extractor, and a replay extracts the
        same texts again).
        """
        if not self._shared() or len(text) > _MEMO_MAX_CHARS:
            return self._find_candidates(text)
        key = (self.min_quoted, self.max_quoted, self.prose_ratio, text)
        hit = _CANDIDATES_MEMO.get(key)
        if hit is None:
            hit = tuple(self._find_candidates(text))
            if len(_CANDIDATES_MEMO) >= _MEMO_MAX_TEXTS:
                del _CANDIDATES_MEMO[next(iter(_CANDIDATES_MEMO))]
            _CANDIDATES_MEMO[key] = hit
        return list(hit)

    def _shared(self) -> bool:
        """Whether this extractor's candidates are a pure function of the text and its three
        numeric parameters (default dictionaries, an alias cache nothing was added to)."""
        if not hasattr(self, "aliases_"):
            self._fit()
        aliases = self.aliases_
        return (
            self.tech_names is None
            and self.system_names is None
            and self.given_names is None
            and getattr(aliases, "tech_names", None) is TECH_NAMES
            and not getattr(aliases, "added_", 0)
            and type(aliases) is AliasCache
        )

    def candidate_rows(self, texts: Iterable[str]) -> dict[str, Any] | None:
        """The candidates of ``texts`` in JSON form, for a cache kept elsewhere
        (:meth:`remember_candidates` takes them back): ``{"params": [min_quoted, max_quoted,
        prose_ratio], "rows": {text: [[start, rule, name, type], …]}}``. ``None`` when the
        candidates of this extractor are not a pure function of the text (see
        :meth:`_candidates`); texts too long to be remembered are left out."""
        if not self._shared():
            return None
        rows = {}
        for text in texts:
            if isinstance(text, str) and len(text) <= _MEMO_MAX_CHARS and text not in rows:
                rows[text] = [[start, rule, e.name, e.type]
                              for start, rule, e in self._candidates(text)]
        return {"params": [self.min_quoted, self.max_quoted, self.prose_ratio], "rows": rows}

    def remember_candidates(self, found: Mapping[str, Any] | None) -> int:
        """Put candidates computed by :meth:`candidate_rows` into the process's memo, so that
        extracting from those texts finds them instead of running the rules (a replay computes
        them once, in the process that prepares it, and keeps them on disk). Only candidates of
        the same parameters are taken, and only by an extractor whose candidates are a pure
        function of the text; a malformed entry is skipped.

        Returns:
            How many texts were remembered.
        """
        params = [self.min_quoted, self.max_quoted, self.prose_ratio]
        if not found or found.get("params") != params or not self._shared():
            return 0
        rows = found.get("rows")
        if not isinstance(rows, Mapping):
            return 0
        n = 0
        for text, cands in rows.items():
            if len(_CANDIDATES_MEMO) >= _MEMO_MAX_TEXTS:
                break
            hit = _candidate_tuple(cands) if isinstance(text, str) else None
            if hit is not None and len(text) <= _MEMO_MAX_CHARS:
                _CANDIDATES_MEMO[(*params, text)] = hit
                n += 1
        return n

    def _find_candidates(self, text: str) -> list[tuple[int, int, Entity]]:
        """:meth:`_candidates` computed (no memo)."""
        found: list[tuple[int, int, Entity]] = []
        resolve = self.aliases_.resolve
        if self.tech_regex_ is not None:
            lookup = self.tech_lookup_
            for m in self.tech_regex_.finditer(text):
                matched = m.group(0)
                canonical = lookup.get(matched) or lookup[" ".join(matched.split()).lower()]
                found.append(
                    (m.start(), _TECH, resolve(canonical) or Entity(canonical, "technology"))
                )
        if self.system_regex_ is not None:
            for m in self.system_regex_.finditer(text):
                name = self.system_lookup_[" ".join(m.group(0).split()).lower()]
                found.append((m.start(), _SYSTEM, resolve(name) or Entity(name, "system")))
        if "." in text:
            for m in _DOMAIN.finditer(text):
                name = m.group(1).lower()
                if name.startswith("www."):
                    name = name[4:]
                found.append((m.start(), _DOMAIN_RULE, resolve(name) or Entity(name, "domain")))
        for m in self.quoted_regex_.finditer(text):
            idx = m.lastindex or 1
            raw = m.group(idx)
            name = " ".join(raw.split())
            if len(name) < self.min_quoted:
                continue
            start = m.start(idx)
            hit = resolve(name)
            if hit is not None:
                found.append((start, _QUOTED, hit))
            elif not self.is_junk(name):
                found.append((start, _QUOTED, Entity(name, "concept")))
        for m in _CAPITALISED.finditer(text):
            name = m.group(0)
            hit = resolve(name)
            if hit is not None:
                found.append((m.start(), _CAPS, hit))
            elif not self.is_junk(name):
                found.append((m.start(), _CAPS, Entity(name, self._phrase_type(name))))
        found.sort(key=lambda t: (t[0], t[1]))
        return found

    def _phrase_type(self, phrase: str) -> str:
        words = phrase.split(" ")
        if (
            len(words) == 2
            and words[0].lower() in self.given_names_
            and _TITLE_WORD.fullmatch(words[0])
            and _TITLE_WORD.fullmatch(words[1])
        ):
            return "person"
        return "concept"

    def extract(
        self,
        text: str,
        *,
        client_id: str | None = None,
        source_agent: str | None = None,
    ) -> list[EntityMention]:
        """Extract entity mentions from one memory text.

        Args:
            text: The (scrubbed) memory text.
            client_id: Client scope; ``None`` or ``"global"`` adds no client entity.
            source_agent: Agent that stored the memory; ``None`` adds no agent entity.

        Returns:
            Deduplicated mentions: client (about), agent (source), then content entities
            (mentioned) in order of first appearance.

        Raises:
            TypeError: If ``text``, ``client_id`` or ``source_agent`` has the wrong type.
        """
        if not isinstance(text, str):
            raise TypeError(f"entities.py: field 'text' must be a str, got {type(text).__name__}")
        if not hasattr(self, "aliases_"):
            self._fit()
        out: list[EntityMention] = []
        seen: set[str] = set()
        for value, etype, role, field in (
            (client_id, "client", "about", "client_id"),
            (source_agent, "agent", "source", "source_agent"),
        ):
            if value is None:
                continue
            if not isinstance(value, str):
                raise TypeError(
                    f"entities.py: field '{field}' must be a str or None, "
                    f"got {type(value).__name__}"
                )
            name = value.strip()
            if not name or (etype == "client" and name == GLOBAL_CLIENT):
                continue
            if name.lower() not in seen:
                seen.add(name.lower())
                out.append(EntityMention(Entity(name, etype), role))
        for _, _, entity in self._candidates(text):
            key = entity.name.lower()
            if key not in seen:
                seen.add(key)
                out.append(EntityMention(entity, "mentioned"))
        return out

    def resolve(self, name: str) -> Entity | None:
        """The canonical entity for ``name`` in this extractor's alias cache, or ``None``."""
        if not isinstance(name, str):
            raise TypeError(f"entities.py: field 'name' must be a str, got {type(name).__name__}")
        if not hasattr(self, "aliases_"):
            self._fit()
        return self.aliases_.resolve(name)

    def extract_query_entities(self, text: str) -> list[Entity]:
        """Entities named in a query (content rules only: no client, no agent).

        Remembered per text (up to :data:`_MEMO_MAX_TEXTS` texts of up to
        :data:`_MEMO_MAX_CHARS` characters, then forgotten at once) until the alias cache
        changes: feature extractors ask for the entities of the same memory texts at every
        query.
        """
        if not isinstance(text, str) or len(text) > _MEMO_MAX_CHARS:
            return [m.entity for m in self.extract(text)]
        if not hasattr(self, "aliases_"):
            self._fit()
        aliases = self.aliases_
        stamp = (id(aliases), getattr(aliases, "added_", 0), self.min_quoted, self.max_quoted,
                 self.prose_ratio)
        memo = getattr(self, "query_memo_", None)
        if memo is None or memo[0] != stamp:
            memo = self.query_memo_ = (stamp, {})
        table: dict[str, tuple[Entity, ...]] = memo[1]
        hit = table.get(text)
        if hit is None:
            hit = tuple(m.entity for m in self.extract(text))
            if len(table) >= _MEMO_MAX_TEXTS:
                table.clear()  # one call: safe beside a server's other threads
            table[text] = hit
        return list(hit)


def _as_names(values: object, field: str, owner: str | None) -> list[str]:
    """Validate an iterable of non-blank strings (a lone string is one name)."""
    where = f"'{field}'" + (f" entry {owner!r}" if owner is not None else "")
    if isinstance(values, str):
        values = (values,)
    if not isinstance(values, Iterable):
        raise TypeError(f"entities.py: field {where} must be an iterable of str")
    out = []
    for v in values:
        if not isinstance(v, str) or not v.strip():
            raise ValueError(f"entities.py: field {where} holds a blank or non-str name {v!r}")
        out.append(v)
    return out


def _trie_regex(lookup: Mapping[str, str] | Sequence[str]) -> str:
    """An alternation regex for the given literal names with common prefixes factored out.

    Longer names are preferred to their prefixes (greedy optional groups), so ``node.js`` wins
    over ``node`` and ``postgresql`` over ``postgres``. Whitespace in a name matches ``\\s+``.
    """
    trie: dict = {}
    for word in sorted(lookup):
        node = trie
        for ch in word:
            node = node.setdefault(ch, {})
        node[""] = {}

    def _emit(node: dict) -> str:
        end = "" in node
        keys = sorted(k for k in node if k)
        alts = [(r"\s+" if k == " " else re.escape(k)) + _emit(node[k]) for k in keys]
        if not alts:
            return ""
        body = alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"
        if end:
            return ("(?:" + body + ")?") if len(alts) == 1 else body + "?"
        return body

    return _emit(trie)
