"""Timestamps: ISO 8601 in UTC on the outside, float seconds since the epoch on the inside."""

from __future__ import annotations

from datetime import UTC, datetime

SECONDS_PER_DAY = 86_400.0


def parse_ts(value: str, *, field: str = "ts", where: str = "") -> float:
    """Parse an ISO 8601 timestamp into UTC epoch seconds.

    A naive timestamp is read as UTC; a trailing ``Z`` is accepted.

    Args:
        value: The timestamp text.
        field: Field name used in the error message.
        where: Location (``file:line``) used in the error message.

    Returns:
        Seconds since the Unix epoch, UTC.

    Raises:
        TypeError: If ``value`` is not a string.
        ValueError: If it does not parse.
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
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


def to_iso(ts: float | None) -> str | None:
    """Format epoch seconds as ISO 8601 UTC with millisecond precision and a ``Z`` suffix."""
    if ts is None:
        return None
    dt = datetime.fromtimestamp(ts, tz=UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"


def coerce_ts(value: float | int | str | datetime | None, *, field: str = "ts") -> float | None:
    """Accept epoch seconds, an ISO string or a datetime; return epoch seconds (or None)."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise TypeError(f"field '{field}' must be a timestamp, got bool")
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value.timestamp()
    return parse_ts(value, field=field)
