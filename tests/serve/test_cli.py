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


_SLOW_CLOSE = """
import sys, time
from memlab.serve import cli

class Service:
    def close(self):
        print("closing", flush=True)
        time.sleep(60)

cli._close(Service(), stopping=sys.argv[1] == "1")
"""


@pytest.mark.parametrize("stopping", [True, False])
def test_a_signal_while_closing_after_a_signal_ends_the_process_at_once(
    tmp_path: Path, stopping: bool
) -> None:
    """Closing after a signal stopped the server: the next signal ends the process at once.
    Closing for another reason: the first signal waits for the close, a second one ends it."""
    import subprocess
    import time

    err = open(tmp_path / "err", "wb")  # noqa: SIM115 - closed below
    src = str(Path(__file__).resolve().parents[2] / "src")
    proc = subprocess.Popen([sys.executable, "-c", _SLOW_CLOSE, "1" if stopping else "0"],
                            env={"PYTHONPATH": src, "PATH": "/usr/bin:/bin"},
                            stdout=subprocess.PIPE, stderr=err)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"closing\n"
        if not stopping:
            proc.send_signal(signal.SIGTERM)
            time.sleep(1.0)
            assert proc.poll() is None  # held until the service is closed
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        err.close()
    assert proc.returncode == 130
    assert (tmp_path / "err").read_text() == (
        "memlab: interrupted again: stopped at once, without waiting for open requests or "
        "closing the store (its next open recovers it)\n"
    )
