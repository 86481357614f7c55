"""The stage contract: a candidate frame in, a candidate frame out.

Every stage reads and writes a polars frame with the fixed columns ``qid, mem_id, score, rank``
plus optional stage columns from :data:`STAGE_COLUMNS` (``dense_score``, ``bm25_score``,
``activation`` …). Retrievers ignore the candidates they receive and produce new ones; re-rankers
and filters transform them. Stages read the store only through its API and the
:class:`QueryContext`, so scope, ``active`` and ``at_time`` filters apply the same way everywhere.

Parameters follow scikit-learn: every tunable constant is an explicit keyword argument of
``__init__``, stored verbatim; :meth:`Stage.get_params`, :meth:`Stage.set_params` and
:meth:`Stage.clone` work from the signature. Stages register under a name with
:func:`register_stage`, which is how configuration files find them.
"""

from __future__ import annotations

import collections.abc
import copy
import functools
import inspect
import types
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal, TypeVar, Union

import numpy as np
import polars as pl

from memlab.registry import Registry
from memlab.stages.constraints import validate_params

if TYPE_CHECKING:
    from memlab.memory.store import MemoryStore

CANDIDATE_SCHEMA: dict[str, pl.DataType] = {
    "qid": pl.String(),
    "mem_id": pl.String(),
    "score": pl.Float64(),
    "rank": pl.Int64(),
}
"""The columns every candidate frame has, in this order."""

STAGE_COLUMNS: dict[str, pl.DataType] = {
    "dense_score": pl.Float64(),
    "maxp_score": pl.Float64(),
    "bm25_score": pl.Float64(),
    "graph_score": pl.Float64(),
    "rrf_score": pl.Float64(),
    "combsum_score": pl.Float64(),
    "neighbor_score": pl.Float64(),
    "activation": pl.Float64(),
    "lifecycle_factor": pl.Float64(),
    "effective_score": pl.Float64(),
    "mmr_score": pl.Float64(),
    "entropy": pl.Float64(),
    "redundancy": pl.Float64(),
    "tokens": pl.Int64(),
    "crag_score": pl.Float64(),
    "crag_action": pl.String(),
    "low_confidence": pl.Boolean(),
    "text": pl.String(),
    "source": pl.String(),
}
"""The optional columns stages may add (the vocabulary is fixed: no other columns)."""


def score_columns() -> set[str]:
    """Columns a stage may rank by: ``score`` and every float column of the vocabulary."""
    return {"score"} | {n for n, t in STAGE_COLUMNS.items() if t == pl.Float64()}


def empty_candidates(extra: dict[str, pl.DataType] | None = None) -> pl.DataFrame:
    """An empty candidate frame (with optional extra stage columns)."""
    return pl.DataFrame(schema={**CANDIDATE_SCHEMA, **(extra or {})})


def rerank(frame: pl.DataFrame, by: str = "score") -> pl.DataFrame:
    """Sort by ``by`` descending (ties: ``mem_id`` ascending), copy it to ``score``, set ``rank``.

    The tie-break makes every ranking deterministic.
    """
    if frame.height == 0:
        return frame
    out = frame.with_columns(pl.col(by).cast(pl.Float64).alias("score")).sort(
        ["score", "mem_id"], descending=[True, False], nulls_last=True
    )
    return out.with_columns(pl.int_range(1, out.height + 1, dtype=pl.Int64).alias("rank"))


def candidates_from_rows(
    ctx: QueryContext,
    rows: np.ndarray,
    scores: np.ndarray,
    column: str,
    *,
    top_k: int | None = None,
) -> pl.DataFrame:
    """Build a ranked candidate frame from store rows and their scores.

    Args:
        ctx: The query context (for ``qid`` and the store).
        rows: Store row indices.
        scores: One score per row; the frame is ranked by it (ties by ``mem_id``).
        column: The stage column that also keeps the score (e.g. ``"dense_score"``).
        top_k: Keep the best ``top_k`` only.
    """
    rows = np.asarray(rows, dtype=np.int64)
    scores = np.asarray(scores, dtype=np.float64)
    ids = ctx.store.ids_of(rows)
    frame = pl.DataFrame(
        {
            "qid": [ctx.qid] * len(rows),
            "mem_id": ids,
            "score": scores,
            "rank": np.zeros(len(rows), dtype=np.int64),
            column: scores,
        },
        schema={**CANDIDATE_SCHEMA, column: STAGE_COLUMNS[column]},
    )
    frame = rerank(frame)
    if top_k is not None:
        frame = frame.head(top_k)
    return frame


def check_frame(frame: pl.DataFrame, where: str) -> None:
    """Raise ``TypeError`` if ``frame`` breaks the column vocabulary."""
    for name, dtype in CANDIDATE_SCHEMA.items():
        if name not in frame.schema:
            raise TypeError(f"{where}: candidate frame lacks column '{name}'")
        if frame.schema[name] != dtype:
            raise TypeError(
                f"{where}: column '{name}' has type {frame.schema[name]}, expected {dtype}"
            )
    for name, dtype in frame.schema.items():
        if name in CANDIDATE_SCHEMA:
            continue
        if name not in STAGE_COLUMNS:
            raise TypeError(
                f"{where}: column '{name}' is not in the stage vocabulary "
                f"({', '.join(STAGE_COLUMNS)})"
            )
        if dtype != STAGE_COLUMNS[name] and dtype != pl.Null():
            raise TypeError(
                f"{where}: column '{name}' has type {dtype}, expected {STAGE_COLUMNS[name]}"
            )


@dataclass
class QueryContext:
    """Everything a stage may know about the query it is answering.

    Attributes:
        qid: Query id.
        text: Query text.
        store: The memory store, read only through its API.
        now: The replay clock (epoch seconds): the store as it is at this moment.
        client_id: Scope (``None`` = every client).
        at_time: Temporal query: what was valid then.
        include_superseded: Show inactive history too.
        embedder: Embeds query text (and HyDE documents).
        generator: Text generator for HyDE / LLM judges, if any.
        query_vector: Set by a stage that rewrites the query representation (HyDE); ``None``
            means "embed ``text``".
        cache: Experiment-wide cache shared by stages (query embeddings, shared prefixes).
        trace: Per-query diagnostics written by stages (timings, eviction reports, LIF traces).
        context_text: The prompt addition a ``context`` stage rendered.
    """

    qid: str
    text: str
    store: MemoryStore
    now: float
    client_id: str | None = None
    at_time: float | None = None
    include_superseded: bool = False
    embedder: Any | None = None
    generator: Any | None = None
    query_vector: np.ndarray | None = None
    cache: dict[Any, Any] = field(default_factory=dict)
    trace: dict[str, Any] = field(default_factory=dict)
    context_text: str | None = None

    def visible_mask(self, *, relaxed: bool = False) -> np.ndarray:
        """The store rows this query may see (``relaxed`` drops the scope and ``at_time``)."""
        if relaxed:
            return self.store.visible_mask(now=self.now)
        return self.store.visible_mask(
            client_id=self.client_id,
            at_time=self.at_time,
            include_superseded=self.include_superseded,
            now=self.now,
        )

    def embed(self, texts: list[str]) -> np.ndarray:
        """Embed texts with the context's embedder, cached by (model, text) for the experiment."""
        if self.embedder is None:
            raise ValueError("this stage needs an embedder: give the experiment one")
        model = getattr(self.embedder, "model_id", type(self.embedder).__name__)
        missing = [t for t in dict.fromkeys(texts) if ("emb", model, t) not in self.cache]
        if missing:
            vecs = np.asarray(self.embedder.embed(missing), dtype=np.float32)
            for t, v in zip(missing, vecs, strict=True):
                self.cache[("emb", model, t)] = v
        return np.stack([self.cache[("emb", model, t)] for t in texts])

    def vector(self, *, mask_entity_types: Sequence[str] = ()) -> np.ndarray:
        """The query vector: the HyDE-rewritten one if set, else the embedded query text.

        Args:
            mask_entity_types: Embed the text without the names of the store's entities of
                these types (:meth:`MemoryStore.mask_known_names`); ignored when a HyDE vector
                is set.
        """
        if self.query_vector is not None:
            return self.query_vector
        text = self.text
        if mask_entity_types:
            text = self.store.mask_known_names(text, known_types=mask_entity_types)
        return self.embed([text])[0]


STAGES: Registry[type[Stage]] = Registry("stage")
"""Registered stage classes by name."""

S = TypeVar("S", bound="type[Stage]")


def register_stage(name: str) -> Callable[[S], S]:
    """Class decorator: register a stage under ``name`` (used by configuration files)."""

    def deco(cls: S) -> S:
        STAGES.register(name)(cls)
        cls.stage_name = name
        return cls

    return deco


ENTRY_POINT_GROUP = "memlab.stages"
"""Installed packages offer stages under this entry-point group (name → stage class)."""


class StageError(RuntimeError):
    """A stage raised while answering a query (names the step, its class and the query).

    Attributes:
        step: The pipeline step's name.
        qid: The query being answered.
    """

    def __init__(self, step: str, stage: object, qid: str, cause: BaseException) -> None:
        self.step = step
        self.qid = qid
        super().__init__(
            f"stage '{step}' ({type(stage).__name__}) failed on query {qid!r}: "
            f"{type(cause).__name__}: {cause}"
        )


class StageValueError(StageError, ValueError):
    """A :class:`StageError` whose cause was a ``ValueError`` (bad input, not a crash)."""


class StageTypeError(StageError, TypeError):
    """A :class:`StageError` whose cause was a ``TypeError``."""


def stage_error(step: str, stage: object, qid: str, cause: BaseException) -> StageError:
    """The :class:`StageError` for ``cause``, still a ``ValueError``/``TypeError`` when it was."""
    if isinstance(cause, ValueError):
        return StageValueError(step, stage, qid, cause)
    if isinstance(cause, TypeError):
        return StageTypeError(step, stage, qid, cause)
    return StageError(step, stage, qid, cause)


def _import_stage(path: str) -> type[Stage]:
    """The class named by ``"package.module:ClassName"``."""
    import importlib

    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise ValueError(f"stage {path!r}: an import path reads 'package.module:ClassName'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"stage {path!r}: cannot import module {module_name!r} ({exc})") from None
    obj: Any = module
    for part in attr.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise ValueError(f"stage {path!r}: module {module_name!r} has no {attr!r}")
    if not (isinstance(obj, type) and issubclass(obj, Stage)):
        raise ValueError(f"stage {path!r}: {attr!r} is not a memlab Stage subclass")
    return obj


def _load_entry_point_stages() -> None:
    """Register the stages installed packages offer under :data:`ENTRY_POINT_GROUP`."""
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name in STAGES:
            continue
        try:
            cls = ep.load()
        except Exception as exc:  # noqa: BLE001 - a broken plugin must not hide the others
            raise ValueError(
                f"entry point {ep.name!r} ({ep.value}) of group {ENTRY_POINT_GROUP!r} "
                f"cannot be loaded: {exc}"
            ) from None
        if not (isinstance(cls, type) and issubclass(cls, Stage)):
            raise ValueError(
                f"entry point {ep.name!r} ({ep.value}) is not a memlab Stage subclass"
            )
        STAGES.register(ep.name)(cls)
        if not cls.stage_name:
            cls.stage_name = ep.name


def get_stage_class(name: str) -> type[Stage]:
    """The stage class a configuration names.

    ``name`` is a registered name (``"rrf"``), a stage offered by an installed package under
    the ``memlab.stages`` entry-point group, or an import path ``"package.module:ClassName"``
    (any :class:`Stage` subclass, registered or not).

    Raises:
        ValueError: Listing the known names, or saying why an import path does not resolve.
    """
    import memlab.stages  # noqa: F401  (fills the registry)

    if ":" in name:
        return _import_stage(name)
    if name not in STAGES:
        _load_entry_point_stages()
    return STAGES.lookup(name)


def stage_reference(stage: Stage) -> str:
    """How a configuration names ``stage``'s class: its registered name, else its import path."""
    cls = type(stage)
    if cls.stage_name and STAGES.get(cls.stage_name) is cls:
        return cls.stage_name
    return f"{cls.__module__}:{cls.__qualname__}"


def _type_ok(value: Any, hint: Any) -> bool:
    """A small runtime check of ``value`` against a type hint (config validation)."""
    if hint is Any or hint is inspect.Parameter.empty:
        return True
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (Union, types.UnionType):
        return any(_type_ok(value, a) for a in args)
    if origin is Literal:
        return value in args
    if hint is type(None):
        return value is None
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is bool:
        return isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    if origin in (tuple, list, typing.Sequence, collections.abc.Sequence) or hint in (
        tuple,
        list,
    ):
        if not isinstance(value, (tuple, list)):
            return False
        if args and (len(args) == 2 and args[1] is Ellipsis or origin is not tuple):
            return all(_type_ok(v, args[0]) for v in value)
        if args:
            return len(args) == len(value) and all(
                _type_ok(v, a) for v, a in zip(value, args, strict=True)
            )
        return True
    if origin is dict or hint is dict:
        return isinstance(value, dict)
    if isinstance(hint, type):
        return isinstance(value, hint)
    return True


class Stage:
    """Base class of every stage.

    Subclasses declare their constants as keyword arguments of ``__init__`` and store each one
    verbatim under the same attribute name. They implement :meth:`transform`.
    """

    stage_name: ClassVar[str] = ""
    _parameter_constraints: ClassVar[dict[str, list[Any]]] = {}
    """Parameter name → admissible constraints (:mod:`memlab.stages.constraints`), checked
    after ``__init__``, in :meth:`set_params` (so in :meth:`clone`) and when a configuration
    is loaded."""
    cacheable: ClassVar[bool] = False
    """True when the output depends only on the query, the memories written and which of them
    are visible (not on access counts or the clock): a replay may then share it between
    pipelines."""

    @property
    def requires_fit(self) -> bool:
        """True when :meth:`fit` must see training queries before the stage can run."""
        return False

    @property
    def needs_generator(self) -> bool:
        """True when the stage asks ``ctx.generator`` for text."""
        return False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        init = cls.__dict__.get("__init__")
        if init is None or getattr(init, "_validates_params", False):
            return

        @functools.wraps(init)
        def checked_init(self: Stage, *args: Any, **kw: Any) -> None:
            init(self, *args, **kw)
            # Only the outermost __init__ checks (a subclass calling super().__init__ does it).
            if type(self).__init__ is checked_init:
                self._validate_params()

        checked_init._validates_params = True  # type: ignore[attr-defined]
        cls.__init__ = checked_init  # type: ignore[method-assign]

    # ------------------------------------------------------------------ parameters
    def _validate_params(self, params: dict[str, Any] | None = None) -> None:
        """Check parameters against :attr:`_parameter_constraints` (all of them by default).

        Raises:
            InvalidParameterError: A ``ValueError`` naming the class, the parameter, what it
                must be and the value it got.
        """
        values = self.get_params(deep=False) if params is None else params
        validate_params(type(self).__name__, self._parameter_constraints, values)

    @classmethod
    def _param_names(cls) -> list[str]:
        sig = inspect.signature(cls.__init__)
        return [
            p.name
            for p in sig.parameters.values()
            if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        ]

    @classmethod
    def param_hints(cls) -> dict[str, Any]:
        """Type hints of the ``__init__`` parameters (for configuration checks)."""
        module = inspect.getmodule(cls)
        hints = typing.get_type_hints(
            cls.__init__, globalns=vars(module) if module else None, localns=None
        )
        return {name: hints.get(name, Any) for name in cls._param_names()}

    @classmethod
    def param_defaults(cls) -> dict[str, Any]:
        """Default value of every ``__init__`` parameter."""
        sig = inspect.signature(cls.__init__)
        return {
            p.name: p.default
            for p in sig.parameters.values()
            if p.name in cls._param_names()
        }

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """The constructor parameters as stored (scikit-learn ``get_params``)."""
        return {name: getattr(self, name) for name in self._param_names()}

    def set_params(self, **params: Any) -> Stage:
        """Set constructor parameters; unknown names raise ``ValueError``."""
        valid = set(self._param_names())
        for name in params:
            if name not in valid:
                raise ValueError(
                    f"{type(self).__name__} has no parameter {name!r}; "
                    f"valid parameters: {', '.join(sorted(valid))}"
                )
        self._validate_params(dict(params))  # nothing is set when a value is invalid
        for name, value in params.items():
            setattr(self, name, value)
        return self

    def clone(self) -> Stage:
        """A fresh, unfitted copy with deep-copied parameters."""
        params = {}
        for name, value in self.get_params(deep=False).items():
            params[name] = value.clone() if isinstance(value, Stage) else copy.deepcopy(value)
        return type(self)(**params)

    def __repr__(self) -> str:
        defaults = self.param_defaults()
        shown = [
            f"{k}={v!r}"
            for k, v in self.get_params(deep=False).items()
            if not (k in defaults and _same(defaults[k], v))
        ]
        return f"{type(self).__name__}({', '.join(shown)})"

    # ------------------------------------------------------------------ behaviour
    def fit(self, store: MemoryStore, **kwargs: Any) -> Stage:
        """Learn state from a store (and training queries); most stages need nothing."""
        return self

    def transform(self, frame: pl.DataFrame, ctx: QueryContext) -> pl.DataFrame:
        """Turn candidates into candidates (override)."""
        raise NotImplementedError

    def __call__(self, frame: pl.DataFrame, ctx: QueryContext) -> pl.DataFrame:
        return self.transform(frame, ctx)

    def __rshift__(self, other: Stage) -> Stage:
        from memlab.pipeline import Pipeline

        return Pipeline.chain(self, other)


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - arrays and odd types compare ambiguously
        return a is b


class FusionStage(Stage):
    """A stage that merges the candidate frames of parallel branches."""

    def fuse(self, frames: list[pl.DataFrame], ctx: QueryContext) -> pl.DataFrame:
        """Merge several ranked candidate frames into one (override)."""
        raise NotImplementedError

    def transform(self, frame: pl.DataFrame, ctx: QueryContext) -> pl.DataFrame:
        return self.fuse([frame], ctx)
