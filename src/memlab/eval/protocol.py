"""The evaluation protocol: which queries are scored, and how learned stages are fitted.

The scored population is a property of the dataset and the protocol, never of which pipelines
share a run: every query of the dataset is scored, by every pipeline. A pipeline with a learned
stage (``CRAG(evaluator="learned")``) is **cross-fitted** (Chernozhukov et al., "Double/debiased
machine learning for treatment and structural parameters", The Econometrics Journal 2018; in IR
the usual k-fold protocol for learning to rank): the queries are cut into ``folds`` folds, one
copy of the stage is fitted on every fold but one, and each query is answered by the copy that
did not see its fold (:class:`CrossFitted`). So ``rrf`` scores the same numbers on the same 320
queries whether ``full`` is in the run or not.

Folds are assigned deterministically from the seed and a group key
(:meth:`EvalProtocol.assign`): ``group_by="query"`` puts each query on its own, ``"client"``
keeps all queries of one client (a LoCoMo conversation) in one fold, so a copy never trained on
the conversation it answers. The groups are ordered by a SHA-256 hash of ``seed:key`` and dealt
round-robin, so the folds differ in size by at most one group.

A dataset may declare its protocol in ``dataset.toml``::

    [evaluation]
    folds = 5          # k of the cross-fit (>= 2)
    group_by = "client"

and the command line (``memlab eval --folds K --group-by client``) overrides it. The manifest
records the protocol (``manifest["protocol"]``) and every table of a run names it
(:func:`describe_run`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import polars as pl

from memlab.progress import track
from memlab.stages.base import QueryContext, Stage

if TYPE_CHECKING:
    from memlab.datasets.format import Dataset, Query
    from memlab.memory.store import MemoryStore

GROUP_BY: tuple[str, ...] = ("query", "client")
"""Group keys of the fold assignment."""
DEFAULT_FOLDS = 5
MAX_FOLDS = 10_000
"""The most folds a cross-fit may ask for (each fold needs a group of queries)."""


@dataclass(frozen=True)
class EvalProtocol:
    """How a run scores its queries (see the module docstring).

    Attributes:
        folds: ``k`` of the cross-fit of learned stages (at least 2).
        group_by: ``"query"`` or ``"client"``: what stays together in one fold.
        seed: Seeds the fold assignment.
        source: Where each non-default value came from (``dataset`` or ``override``).
    """

    folds: int = DEFAULT_FOLDS
    group_by: str = "query"
    seed: int = 0
    source: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        self.check()

    def check(self, where: str = "evaluation protocol") -> None:
        """Raise ``TypeError``/``ValueError`` naming ``where`` and the bad field."""
        if isinstance(self.folds, bool) or not isinstance(self.folds, int):
            raise TypeError(f"{where}: field 'folds' must be an integer, got {self.folds!r}")
        if self.folds < 2:
            raise ValueError(f"{where}: field 'folds' must be at least 2, got {self.folds}")
        if self.folds > MAX_FOLDS:
            from memlab.eval.replay import shown

            got = shown(self.folds)
            raise ValueError(f"{where}: field 'folds' must be at most {MAX_FOLDS}, got {got}")
        if self.group_by not in GROUP_BY:
            raise ValueError(
                f"{where}: field 'group_by' must be one of {', '.join(GROUP_BY)}, "
                f"got {self.group_by!r}"
            )
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise TypeError(f"{where}: field 'seed' must be an integer, got {self.seed!r}")

    @classmethod
    def from_mapping(
        cls, data: Mapping[str, Any], *, where: str = "[evaluation]", seed: int = 0
    ) -> EvalProtocol:
        """Build from a (TOML) mapping with ``folds`` and ``group_by``.

        Raises:
            ValueError: On an unknown key or a bad value (naming ``where`` and the field).
        """
        if not isinstance(data, Mapping):
            raise TypeError(f"{where}: must be a table, got {type(data).__name__}")
        known = ("folds", "group_by")
        for key in data:
            if key not in known:
                raise ValueError(f"{where}: unknown field {key!r}; known: {', '.join(known)}")
        values = {k: data[k] for k in known if k in data}
        try:
            return cls(seed=seed, source=tuple((k, "dataset") for k in sorted(values)), **values)
        except (TypeError, ValueError) as exc:
            msg = str(exc).replace("evaluation protocol", where, 1)
            raise type(exc)(msg) from None

    @classmethod
    def from_dataset(
        cls,
        dataset: Dataset,
        *,
        folds: int | None = None,
        group_by: str | None = None,
        seed: int = 0,
    ) -> EvalProtocol:
        """The dataset's ``[evaluation]`` table with the given overrides (``None``: not given)."""
        base = cls.from_mapping(
            dataset.meta.get("evaluation", {}), where="dataset.toml [evaluation]", seed=seed
        )
        given = {k: v for k, v in (("folds", folds), ("group_by", group_by)) if v is not None}
        if not given:
            return base
        source = dict(base.source) | {k: "override" for k in given}
        return dataclasses.replace(base, source=tuple(sorted(source.items())), **given)

    def key(self, query: Query) -> str:
        """The group key of ``query``."""
        return query.qid if self.group_by == "query" else str(query.client_id)

    def assign(self, queries: Sequence[Query]) -> dict[str, int]:
        """``qid → fold`` (``0 … folds-1``): groups ordered by ``sha256(seed:key)``, dealt
        round-robin. Depends only on the seed and the set of group keys, never on the order of
        ``queries``."""
        def rank(key: str) -> tuple[bytes, str]:
            return hashlib.sha256(f"{self.seed}:{key}".encode()).digest(), key

        order = sorted({self.key(q) for q in queries}, key=rank)
        fold_of = {k: i % self.folds for i, k in enumerate(order)}
        return {q.qid: fold_of[self.key(q)] for q in queries}

    def check_groups(self, queries: Sequence[Query], where: str = "cross-fit") -> None:
        """Raise ``ValueError`` when there are fewer groups than folds (a fold would be empty)."""
        n = len({self.key(q) for q in queries})
        if n < self.folds:
            raise ValueError(
                f"{where}: {self.folds} folds need at least {self.folds} groups, but the "
                f"queries form {n} by {self.group_by}; lower --folds (or [evaluation] folds)"
            )

    def describe(self, n_queries: int) -> str:
        """``"320 queries; learned stages cross-fitted over 5 folds (by query, seed 0)"``."""
        return (
            f"{n_queries} queries; learned stages cross-fitted over {self.folds} folds "
            f"(by {self.group_by}, seed {self.seed})"
        )

    def to_dict(self, n_queries: int, learned: Sequence[str] = ()) -> dict[str, Any]:
        """The manifest's ``protocol`` block."""
        return {
            "queries": n_queries,
            "folds": self.folds,
            "group_by": self.group_by,
            "seed": self.seed,
            "source": dict(self.source),
            "cross_fitted": list(learned),
            "description": self.describe(n_queries),
        }


def describe_run(manifest: Mapping[str, Any]) -> str:
    """The protocol sentence of a run's manifest (also for runs written before cross-fitting,
    which held out a share of the queries when a learned stage was present)."""
    proto = manifest.get("protocol")
    if isinstance(proto, Mapping) and proto.get("description"):
        return str(proto["description"])
    ds = manifest.get("dataset", {}) if isinstance(manifest.get("dataset"), Mapping) else {}
    n_eval = ds.get("evaluated_queries")
    n_all = ds.get("queries")
    split = manifest.get("held_out_split")
    if isinstance(split, Mapping):
        return (
            f"{n_eval} of {n_all} queries (a held-out split: test fraction "
            f"{split.get('test_fraction')}, seed {manifest.get('seed')}; learned stages fitted "
            "on the other queries)"
        )
    if n_eval is None:
        return "protocol unknown (the manifest does not record it)"
    return f"{n_eval} queries; no learned stage"


def run_query_count(manifest: Mapping[str, Any]) -> int | None:
    """How many queries a run scored (``None`` when the manifest does not say)."""
    proto = manifest.get("protocol")
    if isinstance(proto, Mapping) and isinstance(proto.get("queries"), int):
        return int(proto["queries"])
    ds = manifest.get("dataset")
    n = ds.get("evaluated_queries") if isinstance(ds, Mapping) else None
    return int(n) if isinstance(n, int) else None


def _qid(query: Any) -> str:
    if isinstance(query, QueryContext):
        return query.qid
    if isinstance(query, Mapping) and "qid" in query:
        return str(query["qid"])
    raise TypeError(
        f"protocol.py: CrossFitted.fit field 'queries' entries must be QueryContext objects or "
        f"mappings with a qid, got {type(query).__name__}"
    )


class CrossFitted(Stage):
    """One fitted copy of a learned stage per fold; a query is answered by the copy fitted
    without its fold.

    Not a registered stage: :func:`memlab.eval.experiment.cross_fit_learned_stages` puts it
    in place of a learned step for the length of a run. A query outside every fold (a free-text
    query in an app) was seen by no copy; the copy of fold 0 answers it.

    Args:
        stage: The unfitted learned stage (cloned once per fold).
        folds: ``qid → fold``, as :meth:`EvalProtocol.assign` gives it.

    Attributes:
        fitted_: The fitted copies, one per fold (copy ``f`` never saw fold ``f``).
    """

    def __init__(self, stage: Stage, folds: Mapping[str, int] | None = None) -> None:
        self.stage = stage
        self.folds = folds

    @property
    def requires_fit(self) -> bool:
        return True

    @property
    def needs_generator(self) -> bool:
        return self.stage.needs_generator

    def declared_columns(self) -> dict[str, pl.DataType] | None:
        return self.stage.declared_columns()

    def fit(self, store: MemoryStore, **kwargs: Any) -> CrossFitted:
        """Fit one clone of :attr:`stage` per fold, each without the queries of its fold.

        ``queries``, ``relevant`` and ``candidates`` (when given) are restricted per fold;
        the other keyword arguments reach every copy unchanged.

        Raises:
            ValueError: When ``folds`` is empty.
        """
        folds = dict(self.folds or {})
        if not folds:
            raise ValueError("protocol.py: CrossFitted needs a non-empty folds= mapping")
        n = max(folds.values()) + 1
        queries = kwargs.pop("queries", None)
        relevant = kwargs.pop("relevant", None)
        candidates = kwargs.pop("candidates", None)
        fitted = []
        name = self.stage.stage_name or type(self.stage).__name__
        # A stage that takes fit_cache= computes what does not depend on the fold (e.g. a
        # query's features) once for all the copies.
        shared: dict[Any, Any] | None = (
            {} if "fit_cache" in inspect.signature(self.stage.fit).parameters else None
        )
        for f in track(range(n), f"cross-fit {name}", unit="folds"):
            def keep(qid: str, f: int = f) -> bool:
                return folds.get(qid, -1) != f

            part: dict[str, Any] = dict(kwargs)
            if queries is not None:
                part["queries"] = [q for q in queries if keep(_qid(q))]
            if relevant is not None:
                part["relevant"] = {k: v for k, v in relevant.items() if keep(k)}
            if isinstance(candidates, pl.DataFrame):
                part["candidates"] = candidates.filter(
                    pl.col("qid").map_elements(keep, return_dtype=pl.Boolean)
                )
            elif candidates is not None:
                part["candidates"] = {k: v for k, v in candidates.items() if keep(k)}
            if shared is not None:
                part["fit_cache"] = shared
            copy = self.stage.clone()
            copy.fit(store, **part)
            fitted.append(copy)
        self.fitted_ = fitted
        return self

    def transform(self, frame: pl.DataFrame, ctx: QueryContext) -> pl.DataFrame:
        fitted = getattr(self, "fitted_", None)
        if not fitted:
            raise ValueError("protocol.py: CrossFitted is not fitted; call fit(...) first")
        fold = (self.folds or {}).get(ctx.qid, 0)
        return fitted[fold].transform(frame, ctx)
