"""Timestamps: ISO 8601 text written by memlab reads back as the same float, every year 1-9999."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memlab.timeutil import coerce_ts, parse_ts, to_iso

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MIN_MS = -62_135_596_800_000  # 0001-01-01T00:00:00.000Z
MAX_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z
ISO = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z")


def expected_text(ms: int) -> str:
    """The ISO 8601 text of a whole millisecond, built by datetime's own formatting."""
    dt = EPOCH + timedelta(milliseconds=ms)
    return dt.isoformat(timespec="milliseconds").replace("+00:00", "Z")


EDGES = [
    ("0001-01-01T00:00:00.000Z", MIN_MS),
    ("0001-06-01T12:30:00.250Z", -62_122_505_399_750),
    ("0999-12-31T23:59:59.999Z", -30_610_224_000_001),
    ("1000-01-01T00:00:00.000Z", -30_610_224_000_000),
    ("1969-12-31T23:59:59.999Z", -1),
    ("1969-12-31T23:59:59.000Z", -1000),
    ("1970-01-01T00:00:00.000Z", 0),
    ("2026-01-01T00:00:00.001Z", 1_767_225_600_001),
    ("9999-12-31T23:59:59.999Z", MAX_MS),
]


def test_edges_round_trip_exactly() -> None:
    wrong = []
    for text, ms in EDGES:
        ts = coerce_ts(text)
        back = to_iso(ts)
        if ts != ms / 1000 or back != text or parse_ts(back) != ts:
            wrong.append((text, ts, back))
    assert wrong == []


def test_years_before_1000_have_four_digits() -> None:
    assert to_iso(datetime(1, 1, 1, tzinfo=UTC).timestamp()) == "0001-01-01T00:00:00.000Z"
    assert to_iso(datetime(42, 3, 4, 5, 6, 7, tzinfo=UTC).timestamp()) == (
        "0042-03-04T05:06:07.000Z"
    )
    assert to_iso(datetime(999, 6, 1, tzinfo=UTC).timestamp()) == "0999-06-01T00:00:00.000Z"


def test_to_iso_truncates_a_time_between_two_milliseconds() -> None:
    assert to_iso(1.9996) == "1970-01-01T00:00:01.999Z"
    assert to_iso(1.0004) == "1970-01-01T00:00:01.000Z"
    assert to_iso(-0.0004) == "1969-12-31T23:59:59.999Z"
    assert to_iso(-0.0006) == "1969-12-31T23:59:59.999Z"
    assert to_iso(5) == "1970-01-01T00:00:05.000Z"
    # the float of a whole millisecond is that millisecond, however far from the epoch
    assert to_iso(253402300799.999) == "9999-12-31T23:59:59.999Z"
    assert to_iso(-62135596799.999) == "0001-01-01T00:00:00.001Z"


@pytest.mark.parametrize(
    "bad",
    [
        float("nan"),
        float("inf"),
        -float("inf"),
        1e300,
        -1e300,
        MIN_MS / 1000 - 1,
        MAX_MS / 1000 + 1,
    ],
)
def test_to_iso_refuses_what_is_no_moment_of_years_1_to_9999(bad: float) -> None:
    with pytest.raises(ValueError, match="outside years 1 to 9999"):
        to_iso(bad)


@pytest.mark.parametrize("bad", [True, "2026-01-01T00:00:00Z", [1.0]])
def test_to_iso_refuses_what_is_not_a_number(bad: object) -> None:
    with pytest.raises(TypeError, match="must be a number of seconds"):
        to_iso(bad)  # type: ignore[arg-type]


@settings(max_examples=3000, deadline=None)
@given(st.integers(min_value=MIN_MS, max_value=MAX_MS))
def test_every_millisecond_round_trips(ms: int) -> None:
    ts = ms / 1000
    text = to_iso(ts)
    assert text == expected_text(ms)
    assert ISO.fullmatch(text)
    assert coerce_ts(text) == ts
    assert to_iso(coerce_ts(text)) == text


@settings(max_examples=3000, deadline=None)
@given(st.floats(min_value=MIN_MS / 1000, max_value=MAX_MS / 1000, allow_nan=False))
def test_any_accepted_float_is_written_at_millisecond_precision(ts: float) -> None:
    assert coerce_ts(ts) == ts
    text = to_iso(ts)
    assert ISO.fullmatch(text)
    back = coerce_ts(text)
    slack = 1e-6 + abs(ts) * 1e-15  # the microsecond rounding, and the float's own spacing
    assert -slack <= ts - back < 0.001 + slack  # the millisecond at or below ts
    assert to_iso(back) == text
