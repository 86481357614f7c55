"""Timestamps: ISO 8601 in UTC on the outside, float seconds since the epoch on the inside."""

from __future__ import annotations

import math
import numbers
from datetime import UTC, datetime, timedelta

SECONDS_PER_DAY = 86_400.0


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MIN_TS = datetime(1, 1, 1, tzinfo=UTC).timestamp()
_MAX_TS = datetime(9999, 12, 31, 23, 59, 59, 999000, tzinfo=UTC).timestamp()
_MIN_MS = round(_MIN_TS * 1000)
_MAX_MS = round(_MAX_TS * 1000)
TS_MIN, TS_MAX = _MIN_TS, _MAX_TS
"""The first and last epoch seconds memlab writes (years 1 to 9999, UTC)."""


def _check_range(ts: float, shown: object, prefix: str, field: str) -> float:
    if not _MIN_TS <= ts <= _MAX_TS:  # also refuses NaN
        raise ValueError(f"{prefix}field '{field}': {shown!r} is outside years 1 to 9999 in UTC")
    return ts


def parse_ts(value: str, *, field: str = "ts", where: str = "") -> float:
    """Parse an ISO 8601 timestamp with a time zone into UTC epoch seconds.

    A trailing ``Z`` is accepted. A timestamp without a time zone is refused (it would mean
    different moments on different machines), and so is one outside years 1 to 9999 once
    converted to UTC (it could not be written back).

    Args:
        value: The timestamp text.
        field: Field name used in the error message.
        where: Location (``file:line``) used in the error message.

    Returns:
        Seconds since the Unix epoch, UTC.

    Raises:
        TypeError: If ``value`` is not a string.
        ValueError: If it does not parse, has no time zone or is out of range.
    """
    prefix = f"{where}: " if where else ""
    if not isinstance(value, str):
        raise TypeError(
            f"{prefix}field '{field}' must be an ISO 8601 string, got {type(value).__name__}"
        )
    text = value.strip()
    if text.endswith("Z") or text.endswith("z"):
        text = text[:-1] + "+00:00"
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(
            f"{prefix}field '{field}' is not an ISO 8601 timestamp: {value!r}"
        ) from None
    if dt.tzinfo is None or dt.utcoffset() is None:
        raise ValueError(
            f"{prefix}field '{field}': {value!r} has no time zone; add Z (UTC) or an offset "
            "such as +02:00"
        )
    try:
        ts = dt.timestamp()
    except (OverflowError, ValueError, OSError):
        raise ValueError(
            f"{prefix}field '{field}': {value!r} is outside years 1 to 9999 in UTC"
        ) from None
    return _check_range(ts, value, prefix, field)


def _millis(ts: float) -> int:
    """Whole milliseconds since the epoch that ``ts`` is written as: the millisecond whose
    float ``ts`` is, when it is one (what :func:`parse_ts` returns for any text this module
    writes); else ``ts`` rounded to the microsecond (half to even, as :mod:`datetime` does)
    and truncated to the millisecond below, in exact integer arithmetic."""
    grid = round(ts * 1000.0)  # within 0.06 of the exact product for every year 1 to 9999
    if grid / 1000 == ts:
        return grid
    num, den = ts.as_integer_ratio()
    micros, rest = divmod(num * 1_000_000, den)
    if 2 * rest > den or (2 * rest == den and micros % 2):
        micros += 1
    return micros // 1000


def to_iso(ts: float | None) -> str | None:
    """Format epoch seconds as ISO 8601 UTC: ``YYYY-MM-DDTHH:MM:SS.mmmZ``.

    The year always has four digits (``0999-06-01T00:00:00.000Z``) and the text is computed in
    integer milliseconds (:func:`_millis`: a time between two milliseconds is truncated to the
    first), so that a timestamp of whole milliseconds round-trips exactly through
    :func:`parse_ts` and :func:`coerce_ts` for every year 1 to 9999.

    Args:
        ts: Seconds since the Unix epoch (UTC), or ``None``.

    Returns:
        The ISO 8601 text, or ``None`` for ``None``.

    Raises:
        TypeError: If ``ts`` is not a number (a bool included).
        ValueError: If ``ts`` is NaN, infinite or outside years 1 to 9999 in UTC.
    """
    if ts is None:
        return None
    if isinstance(ts, bool) or not isinstance(ts, numbers.Real):
        raise TypeError(f"a timestamp must be a number of seconds, got {type(ts).__name__}")
    if isinstance(ts, numbers.Integral):
        ms = int(ts) * 1000
    else:
        value = float(ts)
        if not math.isfinite(value):
            raise ValueError(f"timestamp {value!r} is outside years 1 to 9999 in UTC")
        ms = _millis(value)
    if not _MIN_MS <= ms <= _MAX_MS:
        raise ValueError(f"timestamp {ts!r} is outside years 1 to 9999 in UTC")
    dt = _EPOCH + timedelta(milliseconds=ms)
    return (
        f"{dt.year:04d}-{dt.month:02d}-{dt.day:02d}T{dt.hour:02d}:{dt.minute:02d}:"
        f"{dt.second:02d}.{dt.microsecond // 1000:03d}Z"
    )


def coerce_ts(value: float | int | str | datetime | None, *, field: str = "ts") -> float | None:
    """Accept epoch seconds, an ISO string or an aware datetime; return epoch seconds (or None).

    Raises:
        TypeError: For a bool or another type.
        ValueError: For a naive timestamp, NaN, or a moment outside years 1 to 9999 (UTC).
    """
    if value is None:
        return None
    if isinstance(value, bool):
        raise TypeError(f"field '{field}' must be a timestamp, got bool")
    if isinstance(value, (int, float)):
        try:
            ts = float(value)
        except OverflowError:
            ts = math.inf
        return _check_range(ts, value, "", field)
    if isinstance(value, datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError(f"field '{field}': datetime {value!r} has no time zone")
        try:
            ts = value.timestamp()
        except (OverflowError, ValueError, OSError):
            ts = math.inf
        return _check_range(ts, value, "", field)
    return parse_ts(value, field=field)
