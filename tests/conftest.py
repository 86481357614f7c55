"""Suite-wide collection order: heavy tests first.

``make test`` runs two pytest-xdist workers, which take tests in collection order. A test that
takes minutes (the committed-baseline experiments, the real generator, a Ray head, the browser
tests) collected last would leave one worker busy while the other has nothing left to do, so
tests marked ``slow`` or ``browser`` are moved to the front; the order within each group stays
the order of collection.

It also registers two small embedders that tests name where a stage takes an embedder by name
(``dense(embedder="test-hash32-a")``): feature hashing at 32 dimensions, seeds 1 and 2, and
offers ``scrub_calls``: the texts the credential scrubber is given during a test.
"""

from __future__ import annotations

import pytest

from memlab.embed import HashingEmbedder, register_embedder


@register_embedder("test-hash32-a")
class HashA(HashingEmbedder):
    """``HashingEmbedder(dim=32, seed=1)`` under a registered name."""

    def __init__(self) -> None:
        super().__init__(dim=32, seed=1)


@register_embedder("test-hash32-b")
class HashB(HashingEmbedder):
    """``HashingEmbedder(dim=32, seed=2)`` under a registered name."""

    def __init__(self) -> None:
        super().__init__(dim=32, seed=2)


@pytest.fixture
def scrub_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every text :meth:`memlab.memory.scrub.Scrubber.scrub` is given during the test, in order
    (clear it to start counting later)."""
    from memlab.memory.scrub import Scrubber

    seen: list[str] = []
    scrub = Scrubber.scrub

    def counting(self: Scrubber, text: str) -> tuple[str, int]:
        seen.append(text)
        return scrub(self, text)

    monkeypatch.setattr(Scrubber, "scrub", counting)
    return seen


HEAVY_MARKERS = ("slow", "browser")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Move the tests marked ``slow`` or ``browser`` ahead of the rest (a stable sort)."""
    items.sort(key=lambda item: not any(item.get_closest_marker(m) for m in HEAVY_MARKERS))
