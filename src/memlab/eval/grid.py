"""Sweep grids: ``stage__param=v1,v2`` expressions, their points, and which names set the replay.

Kept apart from :mod:`memlab.eval.sweep` (which imports every stage) so that the command line
can read a grid before it imports the rest.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any


def _parse_value(text: str) -> Any:
    t = text.strip()
    if t.lower() in ("true", "false"):
        return t.lower() == "true"
    if t.lower() in ("none", "null"):
        return None
    for cast in (int, float):
        try:
            return cast(t)
        except ValueError:
            pass
    return t


def _split_values(text: str) -> list[str] | None:
    """Split at the commas outside brackets (``None`` when brackets do not pair up)."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                return None
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth != 0:
        return None
    parts.append(text[start:])
    return parts


def _parse_item(text: str) -> Any:
    t = text.strip()
    if t.startswith("[") and t.endswith("]"):
        inner = _split_values(t[1:-1])
        if inner is None:
            raise ValueError(f"unpaired brackets in {t!r}")
        return tuple(_parse_item(v) for v in inner if v.strip())
    if "[" in t or "]" in t:
        raise ValueError(f"unpaired brackets in {t!r}")
    return _parse_value(t)


def parse_grid(expressions: Sequence[str]) -> dict[str, list[Any]]:
    """Parse ``stage__param=v1,v2,…`` expressions into a grid dict.

    A value in brackets is a tuple (``[0.7,0.3]`` → ``(0.7, 0.3)``), for list-valued
    constants such as fusion weights.

    Raises:
        ValueError: Naming the expression at fault.
    """
    grid: dict[str, list[Any]] = {}
    for expr in expressions:
        name, sep, values = expr.partition("=")
        name = name.strip()
        if not sep or "__" not in name or not values.strip():
            raise ValueError(
                f"bad grid expression {expr!r}: write stage__param=value1,value2 "
                "(e.g. rrf__k=10,30,60)"
            )
        if name in grid:
            raise ValueError(f"bad grid expression {expr!r}: {name} is given twice")
        items = _split_values(values)
        if items is None:
            raise ValueError(f"bad grid expression {expr!r}: unpaired brackets")
        try:
            parsed = [_parse_item(v) for v in items if v.strip()]
        except ValueError as error:
            raise ValueError(f"bad grid expression {expr!r}: {error}") from None
        if not parsed:
            raise ValueError(f"bad grid expression {expr!r}: no values")
        grid[name] = parsed
    return grid


REPLAY_PREFIXES: tuple[str, ...] = ("consolidation__", "replay__")


def split_point(point: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(pipeline parameters, replay parameters)`` of one grid point."""
    pipe = {k: v for k, v in point.items() if not k.startswith(REPLAY_PREFIXES)}
    replay = {k: v for k, v in point.items() if k.startswith(REPLAY_PREFIXES)}
    return pipe, replay


def grid_points(grid: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """The Cartesian product of a grid, in a stable order."""
    keys = list(grid)
    return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*grid.values())]


__all__ = ["REPLAY_PREFIXES", "grid_points", "parse_grid", "split_point"]
