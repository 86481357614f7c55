"""One test of "a finite number" for every input check: a JSON or Python number, not a bool,
that is a finite float64. ``math.isfinite`` and ``float`` raise ``OverflowError`` on an int too
large for a float (``10**400`` parses from JSON), where an input check must refuse the value
with a message naming its field."""

from __future__ import annotations

import math


def is_finite_number(value: object) -> bool:
    """True for an ``int`` or ``float`` (never a ``bool``) that is a finite float64.

    NaN, infinities and ints beyond the float range (about ``1.8e308``) are not.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def shown_number(value: object) -> str:
    """``value`` as an error message shows it: its repr, except that an int too large for a
    float is described by its size (its digits would fill the message, and past 4,300 digits
    Python refuses to print it)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 2**63:
        digits = int(value.bit_length() * math.log10(2)) + 1
        return f"an integer of about {digits} digits"
    return repr(value)


__all__ = ["is_finite_number", "shown_number"]
