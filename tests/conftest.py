"""Suite-wide collection order: heavy tests first.

``make test`` runs two pytest-xdist workers, which take tests in collection order. A test that
takes minutes (the committed-baseline experiments, the real generator, a Ray head, the browser
tests) collected last would leave one worker busy while the other has nothing left to do, so
tests marked ``slow`` or ``browser`` are moved to the front; the order within each group stays
the order of collection.
"""

from __future__ import annotations

import pytest

HEAVY_MARKERS = ("slow", "browser")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Move the tests marked ``slow`` or ``browser`` ahead of the rest (a stable sort)."""
    items.sort(key=lambda item: not any(item.get_closest_marker(m) for m in HEAVY_MARKERS))
