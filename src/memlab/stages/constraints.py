"""Declared constraints on stage parameters, checked in one place.

Modelled on scikit-learn's ``sklearn.utils._param_validation``: each stage class declares::

    _parameter_constraints: ClassVar[dict[str, list]] = {
        "k": [Interval(Real, 0, None, closed="left")],
        "weights": [SequenceOf(Interval(Real, 0, None, closed="left")), None],
        "top_k": [Interval(Integral, 1, None, closed="left"), None],
    }

A value is valid when it satisfies at least one constraint of its list. A constraint is a
:class:`Constraint` object, ``None`` (the value ``None``), or a type (``str``, ``bool``,
``int``, ``float``; ``bool`` never passes for a number). :func:`validate_params` is the one
check; :class:`~memlab.stages.base.Stage` calls it after ``__init__``, in ``set_params``
(before anything is set) and so in ``clone`` and in configuration loading. Messages read::

    RRF: parameter 'k' must be a float in [0, inf); got -1

``NaN`` satisfies no :class:`Interval`; an unbounded side is open, so ``inf`` never passes.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Collection, Mapping
from numbers import Integral, Real
from typing import Any

from memlab.numeric import shown_number

__all__ = [
    "Constraint",
    "Interval",
    "InvalidParameterError",
    "Options",
    "Predicate",
    "SequenceOf",
    "Integral",
    "Real",
    "describe",
    "is_regex",
    "make_constraint",
    "validate_params",
]


class InvalidParameterError(ValueError):
    """A stage parameter that breaks its declared constraints."""


class Constraint:
    """One admissible set of values (override :meth:`is_satisfied_by` and ``__str__``)."""

    def is_satisfied_by(self, value: Any) -> bool:
        """Whether ``value`` belongs to the set."""
        raise NotImplementedError

    def __str__(self) -> str:
        raise NotImplementedError


class _NoneConstraint(Constraint):
    def is_satisfied_by(self, value: Any) -> bool:
        return value is None

    def __str__(self) -> str:
        return "None"


class _InstanceOf(Constraint):
    """An instance of a type; for ``int`` and ``float`` booleans are refused, and ``float``
    accepts integers too (finite values only)."""

    def __init__(self, kind: type) -> None:
        self.kind = kind

    def is_satisfied_by(self, value: Any) -> bool:
        if self.kind is bool:
            return isinstance(value, bool)
        if self.kind in (int, float) and isinstance(value, bool):
            return False
        if self.kind is int:
            return isinstance(value, Integral)
        if self.kind is float:
            if not isinstance(value, Real):
                return False
            try:
                return math.isfinite(value)
            except OverflowError:  # an int too large for a float
                return False
        return isinstance(value, self.kind)

    def __str__(self) -> str:
        return {bool: "a bool", int: "an int", float: "a float", str: "a str"}.get(
            self.kind, f"an instance of {self.kind.__name__!r}"
        )


def _is_number(value: Any, kind: type) -> bool:
    if isinstance(value, bool):
        return False
    if kind is Integral:
        return isinstance(value, Integral)
    return isinstance(value, Real)


class Interval(Constraint):
    """Numbers of a kind between two bounds.

    Args:
        kind: :class:`numbers.Integral` (ints, numpy ints) or :class:`numbers.Real` (ints and
            floats). Booleans never pass; ``NaN`` never passes.
        left: Lower bound, ``None`` for minus infinity (always open).
        right: Upper bound, ``None`` for infinity (always open).
        closed: Which finite bounds belong to the interval: ``"both"``, ``"left"``,
            ``"right"`` or ``"neither"``.
    """

    def __init__(
        self,
        kind: type,
        left: float | None,
        right: float | None,
        *,
        closed: str = "both",
    ) -> None:
        if kind not in (Integral, Real):
            raise TypeError(f"Interval kind must be Integral or Real, got {kind!r}")
        if closed not in ("both", "left", "right", "neither"):
            raise ValueError(f"Interval closed must be both, left, right or neither: {closed!r}")
        if left is not None and right is not None and left > right:
            raise ValueError(f"Interval bounds out of order: {left} > {right}")
        self.kind = kind
        self.left = left
        self.right = right
        self.closed = closed

    def is_satisfied_by(self, value: Any) -> bool:
        if not _is_number(value, self.kind):
            return False
        try:
            x = float(value)
        except OverflowError:
            return False
        if math.isnan(x) or math.isinf(x):
            return False
        if self.left is not None:
            if self.closed in ("both", "left"):
                if x < self.left:
                    return False
            elif x <= self.left:
                return False
        if self.right is not None:
            if self.closed in ("both", "right"):
                if x > self.right:
                    return False
            elif x >= self.right:
                return False
        return True

    def __str__(self) -> str:
        what = "an int" if self.kind is Integral else "a float"
        lo = "-inf" if self.left is None else _num(self.left)
        hi = "inf" if self.right is None else _num(self.right)
        lb = "[" if self.left is not None and self.closed in ("both", "left") else "("
        rb = "]" if self.right is not None and self.closed in ("both", "right") else ")"
        return f"{what} in {lb}{lo}, {hi}{rb}"


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(x)


class Options(Constraint):
    """One of a set of values of a kind.

    Args:
        kind: The values' type (``str``).
        options: The admissible values; a registry (or any container) is read at check time,
            so names registered later count; a zero-argument callable is called then.
    """

    def __init__(
        self, kind: type, options: Collection[Any] | Callable[[], Collection[Any]]
    ) -> None:
        self.kind = kind
        self.options = options

    def _current(self) -> Collection[Any]:
        opts = self.options
        return opts() if callable(opts) and not isinstance(opts, Mapping) else opts

    def is_satisfied_by(self, value: Any) -> bool:
        if not isinstance(value, self.kind) or isinstance(value, bool) and self.kind is not bool:
            return False
        return value in self._current()

    def __str__(self) -> str:
        names = ", ".join(repr(o) for o in sorted(self._current(), key=str))
        return f"a {self.kind.__name__} among {{{names}}}"


class SequenceOf(Constraint):
    """A tuple or list (not a string) whose every item satisfies ``item``.

    Args:
        item: Constraint of each item (a :class:`Constraint` or a type).
        min_length: Fewest items allowed.
    """

    def __init__(self, item: Any, *, min_length: int = 0) -> None:
        self.item = make_constraint(item)
        self.min_length = min_length

    def is_satisfied_by(self, value: Any) -> bool:
        if not isinstance(value, (tuple, list)) or len(value) < self.min_length:
            return False
        return all(self.item.is_satisfied_by(v) for v in value)

    def __str__(self) -> str:
        if self.min_length == 1:
            return f"a non-empty sequence of ({self.item})"
        least = f" of at least {self.min_length} items" if self.min_length else ""
        return f"a sequence{least} of ({self.item})"


class Predicate(Constraint):
    """A value of a type for which a test holds.

    Args:
        kind: The type the value must have.
        test: Returns true for admissible values (exceptions count as false).
        description: What the test means, e.g. ``"a str containing {query}"``.
    """

    def __init__(self, kind: type, test: Callable[[Any], bool], description: str) -> None:
        self.kind = kind
        self.test = test
        self.description = description

    def is_satisfied_by(self, value: Any) -> bool:
        if not isinstance(value, self.kind):
            return False
        try:
            return bool(self.test(value))
        except Exception:  # noqa: BLE001 - a failing test means "not admissible"
            return False

    def __str__(self) -> str:
        return self.description


def is_regex(kind_description: str = "a str that compiles as a regular expression") -> Predicate:
    """A string that ``re.compile`` accepts."""
    return Predicate(str, lambda v: re.compile(v) is not None, kind_description)


def make_constraint(spec: Any) -> Constraint:
    """Turn a declaration (``None``, a type or a :class:`Constraint`) into a constraint."""
    if spec is None:
        return _NoneConstraint()
    if isinstance(spec, Constraint):
        return spec
    if isinstance(spec, type):
        return _InstanceOf(spec)
    raise TypeError(f"not a parameter constraint: {spec!r}")


def describe(specs: list[Any]) -> str:
    """The constraints of one parameter as English (``"an int in [1, inf) or None"``)."""
    parts = [str(make_constraint(s)) for s in specs]
    if len(parts) <= 1:
        return "".join(parts)
    return ", ".join(parts[:-1]) + " or " + parts[-1]


def validate_params(
    owner: str, constraints: Mapping[str, list[Any]], params: Mapping[str, Any]
) -> None:
    """Check ``params`` against ``constraints`` (parameters without a declaration pass).

    Args:
        owner: Named in the message (the stage class, e.g. ``"RRF"``).
        constraints: Parameter name → list of admissible constraints.
        params: Parameter name → value.

    Raises:
        InvalidParameterError: Naming the first parameter at fault, what it must be and the
            value it got.
    """
    for name, value in params.items():
        specs = constraints.get(name)
        if specs is None:
            continue
        if any(make_constraint(s).is_satisfied_by(value) for s in specs):
            continue
        raise InvalidParameterError(
            f"{owner}: parameter '{name}' must be {describe(specs)}; got {shown_number(value)}"
        )
