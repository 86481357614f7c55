"""``memlab serve``'s closing of the memory service when signals come at awkward moments."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import pytest

from memlab.serve import cli
from memlab.serve.net import Terminated

if str(Path(__file__).parent) not in sys.path:  # --import-mode=importlib: helpers by path
    sys.path.insert(0, str(Path(__file__).parent))
from _signal_landing import signal_landing  # noqa: E402


class _Service:
    def __init__(self) -> None:
        self.closed = 0

    def close(self) -> None:
        self.closed += 1


@pytest.mark.parametrize("at_call", [1, 2, 3])  # install SIGINT, SIGTERM hold; put SIGINT back
def test_close_closes_even_when_a_signal_raises_while_it_swaps_its_handlers(
    monkeypatch: pytest.MonkeyPatch, at_call: int
) -> None:
    """A signal whose (old) handler raises while ``_close`` puts its holding handlers in place,
    or puts the old ones back, still leaves the service closed and every old handler back,
    and is raised afterwards."""
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    monkeypatch.setattr(cli.signal, "signal", signal_landing(at_call))
    service = _Service()
    with pytest.raises(Terminated):
        cli._close(service)
    monkeypatch.undo()
    assert service.closed == 1
    assert {sig: signal.getsignal(sig) for sig in before} == before
