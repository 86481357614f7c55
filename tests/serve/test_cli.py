"""``memlab serve``'s closing of the memory service when signals come at awkward moments."""

from __future__ import annotations

import signal
from typing import Any

import pytest

from memlab.serve import cli
from memlab.serve.net import Terminated


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
    real = signal.signal
    calls = [0]

    def signal_landing(sig: int, handler: Any) -> Any:
        calls[0] += 1
        old = real(sig, handler)
        if calls[0] == at_call:
            raise Terminated
        return old

    monkeypatch.setattr(cli.signal, "signal", signal_landing)
    service = _Service()
    with pytest.raises(Terminated):
        cli._close(service)
    monkeypatch.undo()
    assert service.closed == 1
    assert {sig: signal.getsignal(sig) for sig in before} == before
