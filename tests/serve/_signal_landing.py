"""``signal.signal`` with a signal landing while handlers are swapped, for the shutdown tests."""

from __future__ import annotations

import signal
from collections.abc import Callable
from typing import Any

from memlab.serve.net import Terminated


def signal_landing(at_call: int) -> Callable[[int, Any], Any]:
    """A replacement for ``signal.signal`` that installs each handler as asked, and on its
    ``at_call``-th call (1-based) raises ``Terminated`` just after, as an old SIGTERM handler
    would if the signal landed then."""
    real = signal.signal
    calls = [0]

    def landing(sig: int, handler: Any) -> Any:
        calls[0] += 1
        old = real(sig, handler)
        if calls[0] == at_call:
            raise Terminated
        return old

    return landing
