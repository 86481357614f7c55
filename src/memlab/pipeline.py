"""Pipelines: named steps, parallel branches fused by a fusion stage, TOML configurations.

A pipeline is a list of named steps run in order; a :class:`Parallel` step runs named branches on
the same input and merges them with a fusion stage (e.g. ``rrf``). Stage names are unique across
the whole pipeline, so ``set_params(rrf__k=30)`` reaches the ``rrf`` stage wherever it sits. Each
stage's output is checked against the columns of its input plus the columns the stage declares
(:attr:`Stage.columns`): the vocabulary is open, each stage brings its own.

Configuration files (``eval/configs/NAME.toml``)::

    name = "hybrid"
    description = "dense + BM25 + graph, fused by RRF, then lifecycle scoring"
    steps = ["retrieve", "lifecycle"]

    [retrieve]
    parallel = ["dense", "bm25", "graph"]
    fuse = "rrf"

    [dense]
    stage = "dense"
    top_k = 100

    [rrf]
    stage = "rrf"
    k = 60

    [lifecycle]
    stage = "lifecycle"

:meth:`Pipeline.to_config` writes the same structure back (every parameter spelled out), and
:func:`load_pipeline` reads it, naming the file, the step and the key of any error.
:meth:`Pipeline.to_toml` quotes every key that is not a bare TOML key (``["my step.x"]``), so
``load → to_toml → load`` gives back an equal configuration.

Limits checked at load time (a :class:`ConfigError` naming the file and the field):

* a file that cannot be read (missing, not UTF-8, not TOML, nested too deeply for the parser,
  an integer of more than 4300 digits) is refused, and so is a value of the wrong type however
  it is nested (a configuration read from a run's ``manifest.json`` too);
* parallel steps nest at most :data:`MAX_NESTING` deep (a parallel step whose branch is a
  parallel step is depth 2);
* the pipeline ``name``, its ``description`` and every step name hold no control character
  (``U+0000``–``U+001F``, ``U+007F``–``U+009F``, a newline included): names end up in file
  names, charts and reports, and the description is one line of a report's table.

:meth:`Pipeline.save` follows memlab's rule for single files (:func:`memlab.io.publish_file`):
it writes a new file, an empty one or a configuration exactly as memlab writes it (the text
:meth:`Pipeline.to_toml` gives for the pipeline the file describes, every parameter spelled
out), atomically, and refuses any other file (a configuration written or edited by hand, a
shipped one), a symbolic link or a directory. Every number is written so that it reads back
equal (``0.1``, ``1e-300``, integers of any size up to 4300 digits, NumPy scalars as the
Python number they equal).
"""

from __future__ import annotations

import copy
import numbers
import os
import re
import time
import unicodedata
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import polars as pl

from memlab.io import first_line, publish_file, read_bytes, read_toml
from memlab.stages.base import (
    CANDIDATE_SCHEMA,
    FusionStage,
    QueryContext,
    Stage,
    StageError,
    _type_ok,
    check_frame,
    empty_candidates,
    get_stage_class,
    stage_error,
    stage_reference,
)
from memlab.stages.constraints import InvalidParameterError

CONFIG_DIR_ENV = "MEMLAB_CONFIG_DIR"

MAX_NESTING = 32
"""How deep parallel steps may nest inside each other in a configuration file."""

RESERVED_KEYS = ("name", "description", "steps")
"""Top-level keys of a configuration, never step names."""

Observer = Callable[[str, Stage, pl.DataFrame, pl.DataFrame], None]
"""Called as ``observer(name, stage, before, after)`` after every stage a pipeline runs (a
parallel step's branches and fusion stage too, then the step itself), with the frame the stage
received and the frame it returned (PyTerrier's debug transformers, without changing the
pipeline). A fusion stage's ``before`` is the parallel step's input."""


class ConfigError(ValueError):
    """A pipeline configuration that cannot be loaded (names file, step and key)."""


def _control_char(text: str) -> str | None:
    """The first control character of ``text`` (as ``U+XXXX``), or ``None``."""
    for ch in text:
        if unicodedata.category(ch) == "Cc":
            return f"U+{ord(ch):04X}"
    return None


# ---------------------------------------------------------------------------- parameter checks
# Pipeline and Parallel check their parameters here, in one place: after ``__init__``, in
# ``set_params`` (before anything is set) and in :meth:`Pipeline.validate`.

_PAIRS = "a sequence of (str, Stage) pairs"
_FUSE = "None or a (str, fusion stage) pair"
_OWN_PARAMS = ("steps", "name", "description")
"""A pipeline's own parameters (any other key of ``set_params`` is ``step__param``)."""


def _is_pair(value: Any) -> bool:
    """A ``(str, Stage)`` pair (a tuple, or a list of two)."""
    return (
        isinstance(value, (tuple, list))
        and len(value) == 2
        and isinstance(value[0], str)
        and isinstance(value[1], Stage)
    )


def _check_pairs(owner: str, field: str, value: Any) -> None:
    """Raise :class:`InvalidParameterError` unless ``value`` is a list or tuple of
    ``(name, stage)`` pairs."""
    if not isinstance(value, (tuple, list)):
        raise InvalidParameterError(
            f"{owner}: parameter '{field}' must be {_PAIRS}; got {_shown(value)}"
        )
    for i, item in enumerate(value):
        if not _is_pair(item):
            raise InvalidParameterError(
                f"{owner}: parameter '{field}' must be {_PAIRS}; item {i} is {_shown(item)}"
            )


def _check_fuse(value: Any) -> None:
    """Raise :class:`InvalidParameterError` unless ``value`` is ``None`` or a ``(name, stage)``
    pair whose stage can fuse (has a ``fuse`` method: a :class:`FusionStage`, or a wrapper of
    one)."""
    if value is None or (_is_pair(value) and callable(getattr(value[1], "fuse", None))):
        return
    raise InvalidParameterError(f"Parallel: parameter 'fuse' must be {_FUSE}; got {_shown(value)}")


def _check_nested(pairs: Sequence[tuple[str, Stage]]) -> None:
    """Check the shape of every pipeline and parallel step inside ``pairs`` (their attributes
    may have been assigned past ``set_params``)."""
    for _, stage in pairs:
        if isinstance(stage, Pipeline):
            _check_pairs("Pipeline", "steps", stage.steps)
            _check_nested(stage.steps)
        elif isinstance(stage, Parallel):
            _check_pairs("Parallel", "branches", stage.branches)
            _check_fuse(stage.fuse)
            _check_nested(stage.branches)


def _walk(
    pairs: Sequence[tuple[str, Stage]], fuse: tuple[str, Stage] | None = None
) -> Iterator[tuple[str, Stage]]:
    """Every named stage of ``pairs`` (then ``fuse``), depth first."""
    for name, stage in pairs:
        yield name, stage
        if isinstance(stage, (Pipeline, Parallel)):
            yield from stage.named_stages()
    if fuse is not None:
        yield fuse


def _check_names(prefix: str, named: Iterator[tuple[str, Stage]], *, weights: bool) -> None:
    """Raise ``ValueError`` if a stage name repeats or holds ``__`` or a control character;
    with ``weights``, also if a fusion stage's weights do not match its branches."""
    seen: set[str] = set()
    for n, s in named:
        if n in seen:
            raise ValueError(f"{prefix}: stage name {n!r} is used twice")
        if "__" in n:
            raise ValueError(
                f"{prefix}: stage name {n!r} holds '__' (it separates a step from its "
                "parameter: step__param)"
            )
        bad = _control_char(n)
        if bad is not None:
            raise ValueError(f"{prefix}: stage name {n!r} holds control character {bad}")
        seen.add(n)
        if weights and isinstance(s, Parallel) and s.fuse is not None:
            w = getattr(s.fuse[1], "weights", None)
            if isinstance(w, (list, tuple)) and len(w) != len(s.branches):
                raise ValueError(
                    f"{prefix}: stage {s.fuse[0]!r} has {len(w)} weight(s) for the "
                    f"{len(s.branches)} branches of {n!r}"
                )


def _check_parallel(branches: Any, fuse: Any) -> None:
    """The checks of a :class:`Parallel`'s parameters."""
    _check_pairs("Parallel", "branches", branches)
    _check_fuse(fuse)
    _check_nested(branches)
    _check_names("Parallel", _walk(branches, fuse), weights=False)


def _check_pipeline(name: Any, description: Any, steps: Any) -> None:
    """The checks of a :class:`Pipeline`'s parameters (see :meth:`Pipeline.validate`)."""
    if not isinstance(name, str):
        raise InvalidParameterError(f"Pipeline: parameter 'name' must be a str; got {_shown(name)}")
    if not name.strip():
        raise ValueError(f"pipeline name must be a non-empty string, got {name!r}")
    if not isinstance(description, str):
        raise InvalidParameterError(
            f"Pipeline: parameter 'description' must be a str; got {_shown(description)}"
        )
    bad = _control_char(name)
    if bad is not None:
        raise ValueError(f"pipeline {name!r}: the name holds control character {bad}")
    bad = _control_char(description)
    if bad is not None:
        raise ValueError(f"pipeline {name!r}: the description holds control character {bad}")
    _check_pairs("Pipeline", "steps", steps)
    _check_nested(steps)
    _check_names(f"pipeline {name!r}", _walk(steps), weights=True)


_S = TypeVar("_S", bound=Stage)


def _trial(stage: _S) -> _S:
    """A shallow copy of ``stage`` to try ``set_params`` on: pipeline and parallel steps are
    copied down to their leaves, each leaf is a shallow copy (setting a parameter on it
    leaves the original alone; nothing is deep-copied or re-validated)."""
    twin = copy.copy(stage)
    if isinstance(stage, Pipeline):
        twin.steps = [(n, _trial(s)) for n, s in stage.steps]  # type: ignore[attr-defined]
    elif isinstance(stage, Parallel):
        twin.branches = [(n, _trial(s)) for n, s in stage.branches]  # type: ignore[attr-defined]
        if stage.fuse is not None:
            twin.fuse = (stage.fuse[0], _trial(stage.fuse[1]))  # type: ignore[attr-defined]
    return twin


def _trial_value(value: Any) -> Any:
    """``value`` with every stage in it (at any depth of lists and tuples) a :func:`_trial`
    copy, so that trying later keys on it leaves the caller's stages alone."""
    if isinstance(value, Stage):
        return _trial(value)
    if type(value) in (list, tuple):
        return type(value)(_trial_value(v) for v in value)
    return value


class Parallel(Stage):
    """Run named branches on the same candidates and fuse their outputs.

    Args:
        branches: ``(name, stage)`` pairs.
        fuse: ``(name, fusion stage)``.
    """

    def __init__(
        self,
        branches: Sequence[tuple[str, Stage]] = (),
        fuse: tuple[str, FusionStage] | None = None,
    ) -> None:
        self.branches = branches
        self.fuse = fuse

    def _validate_params(self, params: dict[str, Any] | None = None) -> None:
        """Check ``branches`` (``(name, stage)`` pairs, names unique, without ``__`` or a
        control character) and ``fuse`` (``None`` or a ``(name, fusion stage)`` pair), with
        ``params`` in place of the current values (after ``__init__`` and in ``set_params``,
        before anything is set).

        Raises:
            ValueError: Naming ``Parallel``, the parameter and the value at fault.
        """
        values = {"branches": self.branches, "fuse": self.fuse, **(params or {})}
        _check_parallel(values["branches"], values["fuse"])

    def clone(self) -> Parallel:
        return Parallel(
            branches=[(n, s.clone()) for n, s in self.branches],
            fuse=None if self.fuse is None else (self.fuse[0], self.fuse[1].clone()),
        )

    def named_stages(self) -> Iterator[tuple[str, Stage]]:
        """Every named stage inside, depth first."""
        return _walk(self.branches, self.fuse)

    def declared_columns(self) -> dict[str, pl.DataType] | None:
        """The columns any branch or the fusion stage declares."""
        return _declared(self.named_stages())

    def transform(
        self, frame: pl.DataFrame, ctx: QueryContext, observer: Observer | None = None
    ) -> pl.DataFrame:
        """Run the branches on ``frame`` and fuse them; ``observer`` sees every stage."""
        if self.fuse is None:
            raise ValueError("a parallel step needs a fusion stage (fuse=)")
        outs = []
        for name, stage in self.branches:
            outs.append(run_step(name, stage, frame, ctx, observer=observer))
        start = time.perf_counter()
        fused = self.fuse[1].fuse(outs, ctx)
        _record_time(ctx, self.fuse[0], start)
        own = self.fuse[1].declared_columns()
        declared = None if own is None else dict(own)
        for out in outs:
            if declared is not None:
                declared.update(_extra_columns(out))
        check_frame(fused, f"stage '{self.fuse[0]}'", declared)
        if observer is not None:
            observer(self.fuse[0], self.fuse[1], frame, fused)
        return fused


def _declared(stages: Iterator[tuple[str, Stage]]) -> dict[str, pl.DataType] | None:
    """The union of the stages' declarations (``None`` if one of them declares nothing)."""
    out: dict[str, pl.DataType] = {}
    for _, stage in stages:
        if not isinstance(stage, (Pipeline, Parallel)):
            own = stage.declared_columns()
            if own is None:
                return None
            out.update(own)
    return out


def _extra_columns(frame: pl.DataFrame) -> dict[str, pl.DataType]:
    """The stage columns of ``frame`` with their types."""
    return {
        c: t
        for c, t in zip(frame.columns, frame.dtypes, strict=True)
        if c not in CANDIDATE_SCHEMA
    }


def _record_time(ctx: QueryContext, name: str, start: float) -> None:
    timings = ctx.trace.setdefault("timings", {})
    timings[name] = timings.get(name, 0.0) + (time.perf_counter() - start)


def run_step(
    name: str,
    stage: Stage,
    frame: pl.DataFrame,
    ctx: QueryContext,
    *,
    observer: Observer | None = None,
) -> pl.DataFrame:
    """Run one named step: time it into ``ctx.trace["timings"]``, check its output frame, then
    hand ``(name, stage, frame, output)`` to ``observer`` (which also sees the stages inside a
    pipeline or parallel step, before the step itself)."""
    start = time.perf_counter()
    try:
        if observer is not None and isinstance(stage, (Pipeline, Parallel)):
            out = stage.transform(frame, ctx, observer=observer)
        else:
            out = stage.transform(frame, ctx)
    except StageError:
        raise
    except Exception as exc:  # noqa: BLE001 - reported with the step and query that failed
        raise stage_error(name, stage, ctx.qid, exc) from exc
    if not isinstance(stage, (Pipeline, Parallel)):
        _record_time(ctx, name, start)
    own = stage.declared_columns()
    declared = None if own is None else {**_extra_columns(frame), **own}
    check_frame(out, f"stage '{name}'", declared)
    if observer is not None:
        observer(name, stage, frame, out)
    return out


class Pipeline(Stage):
    """Named steps run in order (PyTerrier's ``>>``, scikit-learn's ``Pipeline``).

    Args:
        steps: ``(name, stage)`` pairs; names are unique across the pipeline, branches included.
        name: The pipeline's name (its configuration file's stem).
        description: One line for reports.
    """

    def __init__(
        self,
        steps: Sequence[tuple[str, Stage]] = (),
        name: str = "pipeline",
        description: str = "",
    ) -> None:
        self.steps = steps
        self.name = name
        self.description = description

    def _validate_params(self, params: dict[str, Any] | None = None) -> None:
        """The checks of :meth:`validate`, with ``params`` (``steps``, ``name``,
        ``description``) in place of the current values (after ``__init__`` and in
        :meth:`set_params`, before anything is set)."""
        values = {
            "steps": self.steps, "name": self.name, "description": self.description,
            **(params or {}),
        }
        _check_pipeline(values["name"], values["description"], values["steps"])

    # ------------------------------------------------------------------ composition
    @classmethod
    def chain(cls, left: Stage, right: Stage) -> Pipeline:
        """``left >> right`` with names taken from the stages' registry names (``dense``,
        then ``dense_2`` … for a name already taken).

        Raises:
            TypeError: A side is not a :class:`Stage`.
        """
        for side, part in (("left", left), ("right", right)):
            if not isinstance(part, Stage):
                raise TypeError(
                    f"{_shown(left)} >> {_shown(right)}: the {side} side must be a Stage, got "
                    f"{type(part).__name__}"
                )
        steps: list[tuple[str, Stage]] = []
        for part in (left, right):
            if isinstance(part, Pipeline):
                steps.extend(part.steps)
            else:
                steps.append((part.stage_name or type(part).__name__.lower(), part))
        taken: set[str] = set()
        named = []
        for name, stage in steps:
            new, k = name, 1
            while new in taken:
                k += 1
                new = f"{name}_{k}"
            named.append((new, stage))
            taken.add(new)
            if isinstance(stage, (Pipeline, Parallel)):
                taken.update(n for n, _ in stage.named_stages())
        name = left.name if isinstance(left, Pipeline) else "pipeline"
        return cls(steps=named, name=name)

    def declared_columns(self) -> dict[str, pl.DataType] | None:
        """The columns any stage of the pipeline declares."""
        return _declared(self.named_stages())

    def named_stages(self) -> Iterator[tuple[str, Stage]]:
        """Every named stage, depth first (parallel groups and their branches included)."""
        return _walk(self.steps)

    def stage(self, name: str) -> Stage:
        """The stage named ``name`` anywhere in the pipeline."""
        for n, s in self.named_stages():
            if n == name:
                return s
        raise ValueError(
            f"pipeline '{self.name}' has no stage {name!r}; stages: "
            f"{', '.join(n for n, _ in self.named_stages())}"
        )

    def validate(self) -> None:
        """Raise ``ValueError`` if the name is not a non-empty string, the description not a
        string, the steps not ``(name, stage)`` pairs (a parallel step's branches and fusion
        stage included), stage names repeat, a name holds a control character or ``__``
        (which ``set_params`` could never reach), or a fusion stage's weights do not match the
        branches it fuses.

        The same checks run after ``__init__`` and in :meth:`set_params`; this one catches
        what was assigned past them (``pipe.steps = ...``)."""
        _check_pipeline(self.name, self.description, self.steps)

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {
            "steps": self.steps,
            "name": self.name,
            "description": self.description,
        }
        if deep:
            for n, s in self.named_stages():
                out[n] = s
                if not isinstance(s, (Pipeline, Parallel)):
                    for k, v in s.get_params(deep=False).items():
                        out[f"{n}__{k}"] = v
        return out

    def set_params(self, **params: Any) -> Pipeline:
        """Set ``stage__param`` values and the pipeline's own ``steps``, ``name`` and
        ``description``; nothing is set when any value is invalid.

        Every value is tried first on a shallow copy of the pipeline (its own parameters
        first, then each stage's, stage by stage in the order the keys name them), and the
        copy is checked as a whole (:meth:`validate`); only then is the pipeline itself
        changed, in the same order.

        Raises:
            ValueError: A key that is neither a parameter of the pipeline nor
                ``stage__param``, an unknown stage or parameter, or a value a check refuses
                (naming the class and the parameter).
        """
        own = {k: v for k, v in params.items() if k in _OWN_PARAMS}
        nested: dict[str, dict[str, Any]] = {}
        for key, value in params.items():
            if key in _OWN_PARAMS:
                continue
            stage_name, sep, param = key.partition("__")
            if not sep:
                raise ValueError(
                    f"pipeline parameter {key!r} must be written stage__param "
                    f"(stages: {', '.join(n for n, _ in self.named_stages())})"
                )
            nested.setdefault(stage_name, {})[param] = value
        self._validate_params(own)
        if nested:
            candidate = copy.copy(self)
            for key, value in own.items():
                setattr(candidate, key, value)
            trial = _trial(candidate)
            for stage_name, group in nested.items():
                trial.stage(stage_name).set_params(
                    **{k: _trial_value(v) for k, v in group.items()}
                )
            trial._validate_params()
        for key, value in own.items():
            setattr(self, key, value)
        for stage_name, group in nested.items():
            self.stage(stage_name).set_params(**group)
        return self

    def clone(self) -> Pipeline:
        return Pipeline(
            steps=[(n, s.clone()) for n, s in self.steps],
            name=self.name,
            description=self.description,
        )

    def fit(self, store: Any, **kwargs: Any) -> Pipeline:
        for _, s in self.named_stages():
            if not isinstance(s, (Pipeline, Parallel)):
                s.fit(store, **kwargs)
        return self

    # ------------------------------------------------------------------ running
    def transform(
        self, frame: pl.DataFrame, ctx: QueryContext, observer: Observer | None = None
    ) -> pl.DataFrame:
        """Run the steps in order on ``frame``; ``observer`` sees every stage (see
        :data:`Observer`)."""
        for name, stage in self.steps:
            frame = run_step(name, stage, frame, ctx, observer=observer)
        return frame

    def run(self, ctx: QueryContext, *, observer: Observer | None = None) -> pl.DataFrame:
        """Answer one query: run the steps on an empty candidate frame.

        Args:
            ctx: The query.
            observer: Called as ``observer(name, stage, before, after)`` after every stage,
                through the same :func:`run_step` (timings, frame checks) as without it.
        """
        return self.transform(empty_candidates(), ctx, observer=observer)

    # ------------------------------------------------------------------ configuration
    def to_config(self) -> dict[str, Any]:
        """The pipeline as a configuration dictionary (every parameter spelled out).

        Raises:
            ValueError: If a step is named like a top-level key (``name``, ``description``,
                ``steps``), a parallel step has no fusion stage, a pipeline is nested, or a
                ``None`` parameter cannot be written.
        """
        self.validate()  # a file load_pipeline would refuse is never written
        for n, _ in self.named_stages():
            if n in RESERVED_KEYS:
                raise ValueError(
                    f"step {n!r}: {', '.join(RESERVED_KEYS)} are top-level keys of a "
                    "configuration, not step names"
                )
        cfg: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "steps": [n for n, _ in self.steps],
        }
        for n, s in self.named_stages():
            if isinstance(s, Parallel):
                if s.fuse is None:
                    raise ValueError(f"parallel step {n!r} has no fusion stage")
                cfg[n] = {"parallel": [bn for bn, _ in s.branches], "fuse": s.fuse[0]}
            elif isinstance(s, Pipeline):
                raise ValueError(f"step {n!r}: nested pipelines are written as their steps")
            else:
                table: dict[str, Any] = {"stage": stage_reference(s)}
                defaults = s.param_defaults()
                for k, v in s.get_params(deep=False).items():
                    if v is None:
                        if defaults.get(k) is not None:
                            raise ValueError(
                                f"step {n!r}: parameter {k!r} is None but defaults to "
                                f"{defaults[k]!r}; TOML has no null, so it cannot be written"
                            )
                        continue
                    table[k] = plain_value(v)
                cfg[n] = table
        return cfg

    def to_toml(self) -> str:
        """The configuration as TOML text."""
        return dumps_toml(self.to_config())

    def save(self, path: str | Path, *, what: str = "configuration file") -> Path:
        """Write the configuration atomically (see the module docstring).

        Args:
            path: The TOML file: new, empty, or a configuration memlab wrote.
            what: How messages name ``path``.

        Returns:
            The absolute path written.

        Raises:
            memlab.io.OutputFileError: ``path`` is a file memlab did not write, a symbolic
                link or a directory (nothing is written).
            ValueError: The pipeline cannot be written (see :meth:`to_config`).
        """
        return publish_file(
            path, self.to_toml(), what=what, owned=is_saved_config, kind=SAVED_CONFIG
        )


SAVED_CONFIG = "a pipeline configuration memlab wrote"
"""How :meth:`Pipeline.save` describes the files it replaces."""


def is_saved_config(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` holds a configuration exactly as :meth:`Pipeline.save` writes it: its
    text is what :meth:`Pipeline.to_toml` gives for the pipeline it describes (every parameter
    spelled out, in memlab's layout), which a configuration written by hand is not."""
    try:
        data = read_bytes(path)
        pipe = pipeline_from_config(read_toml(path), source=str(path))
        return pipe.to_toml().encode("utf-8") == data
    except (ValueError, TypeError, RecursionError):
        return False


def pipeline_from_config(cfg: dict[str, Any], *, source: str = "<config>") -> Pipeline:
    """Build a pipeline from a configuration dictionary (see the module docstring).

    Raises:
        ConfigError: Naming ``source``, the step and the key at fault.
    """
    if not isinstance(cfg, dict):
        raise ConfigError(f"{source}: a configuration is a table")
    for key in ("name", "steps"):
        if key not in cfg:
            raise ConfigError(f"{source}: missing top-level key '{key}'")
    if not isinstance(cfg["steps"], list) or not all(isinstance(s, str) for s in cfg["steps"]):
        raise ConfigError(f"{source}: key 'steps' must be a list of step names")
    if not cfg["steps"]:
        raise ConfigError(f"{source}: key 'steps' lists no step (a pipeline needs one)")
    if not isinstance(cfg["name"], str) or not cfg["name"].strip():
        raise ConfigError(f"{source}: key 'name' must be a non-empty string")
    allowed_top = {"name", "description", "steps"}
    tables = {k: v for k, v in cfg.items() if k not in allowed_top}
    for k, v in tables.items():
        if not isinstance(v, dict):
            raise ConfigError(f"{source}: top-level key '{k}' is not a step table")
    if isinstance(cfg["name"], str):
        bad = _control_char(cfg["name"])
        if bad is not None:
            raise ConfigError(
                f"{source}: key 'name': the pipeline name holds control character {bad}"
            )
    used: set[str] = set()

    def build(name: str, parent: str, depth: int = 0) -> Stage:
        bad = _control_char(name)
        if bad is not None:
            raise ConfigError(
                f"{source}: step {name!r} (named in {parent}): a step name holds no control "
                f"character, found {bad}"
            )
        if "__" in name:
            raise ConfigError(
                f"{source}: step {name!r} (named in {parent}): a step name holds no '__' (it "
                "separates a step from its parameter: step__param)"
            )
        if name not in tables:
            raise ConfigError(f"{source}: step '{name}' (named in {parent}) has no [{name}] table")
        if name in used:
            raise ConfigError(f"{source}: step '{name}' is used twice")
        used.add(name)
        table = dict(tables[name])
        if "parallel" in table:
            branches = table.pop("parallel")
            fuse = table.pop("fuse", None)
            if table:
                raise ConfigError(
                    f"{source}: step '{name}': unknown key(s) {', '.join(sorted(table))} "
                    "(a parallel step has 'parallel' and 'fuse')"
                )
            if (
                not isinstance(branches, list)
                or not branches
                or not all(isinstance(b, str) for b in branches)
            ):
                raise ConfigError(
                    f"{source}: step '{name}': key 'parallel' must list branch step names"
                )
            if not isinstance(fuse, str):
                raise ConfigError(f"{source}: step '{name}': key 'fuse' must name a fusion step")
            if depth >= MAX_NESTING:
                raise ConfigError(
                    f"{source}: step '{name}': parallel steps nest more than {MAX_NESTING} deep"
                )
            built = [(b, build(b, f"step '{name}'", depth + 1)) for b in branches]
            fusion = build(fuse, f"step '{name}'", depth + 1)
            if not isinstance(fusion, FusionStage):
                raise ConfigError(
                    f"{source}: step '{name}': key 'fuse': stage '{fuse}' cannot fuse branches"
                )
            try:
                return Parallel(branches=built, fuse=(fuse, fusion))
            except ValueError as exc:
                raise ConfigError(f"{source}: step '{name}': {first_line(exc)}") from None
        stage_type = table.pop("stage", None)
        if not isinstance(stage_type, str):
            raise ConfigError(f"{source}: step '{name}': key 'stage' must name a stage type")
        try:
            cls = get_stage_class(stage_type)
        except ValueError as exc:
            raise ConfigError(f"{source}: step '{name}': key 'stage': {exc}") from None
        hints = cls.param_hints()
        for key, value in table.items():
            if key not in hints:
                raise ConfigError(
                    f"{source}: step '{name}': unknown parameter '{key}' for stage "
                    f"'{stage_type}' (parameters: {', '.join(sorted(hints))})"
                )
            if not _type_ok(value, hints[key]):
                raise ConfigError(
                    f"{source}: step '{name}': key '{key}': {_shown(value)} is not of type "
                    f"{hints[key]}"
                )
        params = {k: tuple(v) if isinstance(v, list) else v for k, v in table.items()}
        try:
            return cls(**params)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{source}: step '{name}': {first_line(exc)}") from None
        except RecursionError:
            raise ConfigError(
                f"{source}: step '{name}': a value is nested too deeply to read"
            ) from None

    steps = [(s, build(s, "'steps'")) for s in cfg["steps"]]
    unused = sorted(set(tables) - used)
    if unused:
        raise ConfigError(f"{source}: step table(s) {', '.join(unused)} are not used by any step")
    desc = cfg.get("description", "")
    if not isinstance(cfg["name"], str) or not isinstance(desc, str):
        raise ConfigError(f"{source}: keys 'name' and 'description' must be strings")
    bad = _control_char(desc)
    if bad is not None:
        raise ConfigError(
            f"{source}: key 'description' holds control character {bad} (it is "
            f"one line of a report)"
        )
    try:
        return Pipeline(steps=steps, name=cfg["name"], description=desc)  # validated
    except ValueError as exc:
        raise ConfigError(f"{source}: {exc}") from None


def config_dirs() -> list[Path]:
    """Where pipeline names are looked up: ``$MEMLAB_CONFIG_DIR``, ``./eval/configs``."""
    dirs = []
    if os.environ.get(CONFIG_DIR_ENV):
        dirs.append(Path(os.environ[CONFIG_DIR_ENV]))
    dirs.append(Path.cwd() / "eval" / "configs")
    dirs.append(Path(__file__).resolve().parents[2] / "eval" / "configs")
    return dirs


def available_pipelines() -> list[str]:
    """Names of the pipelines in the configuration directories."""
    names: set[str] = set()
    for d in config_dirs():
        if d.is_dir():
            names.update(p.stem for p in d.glob("*.toml"))
    return sorted(names)


def resolve_config_path(name_or_path: str | Path) -> Path:
    """A configuration file from a path or a pipeline name.

    A :class:`~pathlib.Path`, or text that ends in ``.toml`` or contains a slash, is a path;
    any other text is a pipeline name, looked up in :func:`config_dirs` only, so a file or
    folder of the same name in the working directory (``./bm25/``) never shadows a shipped
    pipeline.
    """
    text = str(name_or_path)
    if isinstance(name_or_path, Path) or text.endswith(".toml") or "/" in text or (os.sep in text):
        p = Path(name_or_path)
        if not p.is_file():
            raise ConfigError(f"{p}: no such configuration file")
        return p
    if not text.strip():
        raise ConfigError("an empty pipeline name")
    for d in config_dirs():
        cand = d / f"{name_or_path}.toml"
        if cand.is_file():
            return cand
    known = available_pipelines()
    raise ConfigError(
        f"unknown pipeline {str(name_or_path)!r}; known pipelines: {', '.join(known) or 'none'}"
    )


def load_pipeline(name_or_path: str | Path) -> Pipeline:
    """Load a pipeline by name (from the configuration directories) or by path.

    Raises:
        ConfigError: Naming the file (and the step and key) of anything that cannot be read
            or built (see the module docstring).
    """
    path = resolve_config_path(name_or_path)
    return pipeline_from_config(_read_config(path), source=str(path))


def _read_config(path: Path) -> dict[str, Any]:
    """The TOML document in ``path``; every way it cannot be read a :class:`ConfigError`."""
    try:
        return read_toml(path)
    except ValueError as exc:
        message = first_line(exc)
        if not message.startswith(f"{path}:"):  # a failure the reader did not name it in
            message = f"{path}: invalid TOML: {message}"
        raise ConfigError(message) from None


def _shown(value: Any, limit: int = 80) -> str:
    """``repr(value)`` for a message, cut to ``limit`` characters; a value nested too deeply
    or an integer too long to print is described instead."""
    try:
        text = repr(value)
    except RecursionError:
        return f"a {type(value).__name__} nested too deeply to show"
    except ValueError:  # an int of more than sys.get_int_max_str_digits() digits
        return f"an {type(value).__name__} too long to show"
    return text if len(text) <= limit else text[: limit - 3] + "..."


_TOML_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t", "\r": "\\r"}


def _is_bool(value: Any) -> bool:
    """A Python or NumPy boolean."""
    return isinstance(value, bool) or getattr(getattr(value, "dtype", None), "kind", "") == "b"


def plain_value(value: Any) -> Any:
    """``value`` with NumPy scalars as the Python ``bool``, ``int`` or ``float`` they equal and
    tuples as lists, so that TOML and JSON write it and read it back equal."""
    if _is_bool(value):
        return bool(value)
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, (list, tuple)):
        return [plain_value(v) for v in value]
    return value


def _toml_value(value: Any) -> str:
    """``value`` as a TOML value that :mod:`tomllib` reads back equal.

    Raises:
        TypeError: A value TOML cannot hold (``None``, a mapping, an object).
        ValueError: An integer too long to write, or a string holding a lone surrogate.
    """
    if _is_bool(value):
        return "true" if value else "false"
    if isinstance(value, numbers.Integral):
        try:
            return str(int(value))
        except ValueError:  # more than sys.get_int_max_str_digits() digits
            raise ValueError("an integer too long to write to TOML") from None
    if isinstance(value, numbers.Real):
        return repr(float(value))  # shortest text that reads back equal: 0.1, 1e-300, inf
    if isinstance(value, str):
        bad = next((ch for ch in value if "\ud800" <= ch <= "\udfff"), None)
        if bad is not None:
            raise ValueError(
                f"{_shown(value)} holds U+{ord(bad):04X}, a lone surrogate, which TOML cannot hold"
            )
        escaped = "".join(
            _TOML_ESCAPES.get(ch, f"\\u{ord(ch):04X}" if ch < " " or ch == "\x7f" else ch)
            for ch in value
        )
        return f'"{escaped}"'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {type(value).__name__} to TOML")


_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def _toml_key(key: str) -> str:
    """``key`` as a TOML key: bare when TOML allows it, a quoted basic string otherwise."""
    if not isinstance(key, str):
        raise TypeError(f"cannot write a {type(key).__name__} key to TOML")
    return key if _BARE_KEY.fullmatch(key) else _toml_value(key)


def dumps_toml(cfg: dict[str, Any]) -> str:
    """Write a configuration (scalars, lists and one level of tables) as TOML.

    Keys that are not bare TOML keys (``A-Za-z0-9_-``) are written quoted, so any string key
    reads back unchanged; numbers are written so that they read back equal.

    Raises:
        TypeError: A key or value TOML cannot hold.
        ValueError: An integer too long to write, a string holding a lone surrogate, or a
            list nested too deeply to write.
    """
    try:
        return _dumps_toml(cfg)
    except RecursionError:
        raise ValueError("a value is nested too deeply to write to TOML") from None


def _dumps_toml(cfg: dict[str, Any]) -> str:
    lines = []
    for k, v in cfg.items():
        if not isinstance(v, dict):
            lines.append(f"{_toml_key(k)} = {_toml_value(v)}")
    for k, v in cfg.items():
        if isinstance(v, dict):
            lines.append("")
            lines.append(f"[{_toml_key(k)}]")
            for kk, vv in v.items():
                lines.append(f"{_toml_key(kk)} = {_toml_value(vv)}")
    return "\n".join(lines) + "\n"
