"""One progress facility for long work: a tqdm bar in a terminal, log lines everywhere else.

Every long step (embedding, a pipeline's replay, a sweep's points, tuning trials, scoring,
statistics, a LoCoMo import) runs inside a :class:`Progress` (or :func:`track` over its items).
What it shows depends on the *mode*:

``"bar"``
    a tqdm bar on stderr (the default when stderr is a terminal).
``"lines"``
    a status line at most every ``interval`` seconds while the step runs and one line when it
    ends (the default when stderr is not a terminal: logs, CI, ``make``); a step shorter than
    the interval writes only its end line, and one that fails before its first line writes
    nothing (the error says enough). Lines carry no carriage return. ``--quiet`` selects this
    mode: no bar, but every step still says how far it got and when it ended.
``"off"``
    nothing (library calls with ``progress=False``, tests, the apps).

A heartbeat thread keeps every step talking: when no line (or bar refresh) was written for
``interval`` seconds (default 5), the innermost running step writes how far it is, so no step
is silent for more than twice the interval even while one item takes minutes (a batch of
embeddings, a pipeline replayed in a worker process).

The heartbeat thread never keeps the process from ending: it is stopped (and joined) when the
interpreter starts to exit (:mod:`atexit`), and a step that closes while the interpreter
finalizes (a :func:`track` generator left suspended by an exception, closed by the garbage
collector) does not wait for a lock a thread that can no longer run may hold: a daemon thread
is stopped by the interpreter at whatever point it is, a lock it held is never released, and
waiting for it hung the process. A forked child starts with a fresh lock and no heartbeat.

Steps nest: a :class:`Progress` created with ``mode=None`` takes the mode of the innermost
running step (``"off"`` when none runs), so library code deep inside a command (an embedder,
a stage) can report without knowing whether anyone listens.

The ``progress`` arguments of the API map to modes with :func:`resolve_mode`: ``None``/``True``
→ automatic (bar on a terminal, lines otherwise; lines under ``CI=true``), ``False`` → off, or a
mode name.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import IO, Any, TypeVar

T = TypeVar("T")

MODES: tuple[str, ...] = ("bar", "lines", "off")
DEFAULT_INTERVAL = 5.0
"""Seconds between progress lines (and heartbeats)."""

SETTINGS: dict[str, Any] = {"stream": None, "clock": time.monotonic, "interval": DEFAULT_INTERVAL}
"""Defaults of every :class:`Progress` that is not given its own: ``stream`` (``None``:
stderr), ``clock`` and ``interval`` (tests replace them to drive a whole command)."""

_lock = threading.RLock()
_active: list[Progress] = []
_last_output = [0.0]
_heartbeat: list[threading.Thread | None] = [None]
_wake = threading.Event()
_stopping = [False]
"""Set when the interpreter exits: the heartbeat thread ends and no new one starts."""
HEARTBEAT_JOIN_TIMEOUT = 2.0
"""Seconds the exit waits for the heartbeat thread to finish a line it is writing."""


@contextmanager
def _locked() -> Iterator[None]:
    """Hold ``_lock``, except while the interpreter finalizes and another thread has it.

    Once the interpreter finalizes, no other thread runs again: a lock one of them holds
    (a daemon thread stopped mid-line) is never released, and waiting for it would hang the
    exit. The caller then runs alone, which is what the lock guarantees anyway.
    """
    if sys.is_finalizing():
        got = _lock.acquire(blocking=False)
    else:
        got = _lock.acquire()
    try:
        yield
    finally:
        if got:
            _lock.release()


def resolve_mode(progress: bool | str | None, stream: IO[str] | None = None) -> str:
    """The mode for an API's ``progress`` argument (see the module docstring).

    Raises:
        ValueError: On an unknown mode name.
    """
    if progress is False:
        return "off"
    if progress is None or progress is True or progress == "auto":
        if os.environ.get("CI", "").strip().lower() in ("1", "true", "yes"):
            return "lines"
        target = sys.stderr if stream is None else stream
        isatty = getattr(target, "isatty", None)
        return "bar" if callable(isatty) and isatty() else "lines"
    if progress in MODES:
        return str(progress)
    raise ValueError(
        f"unknown progress mode {progress!r}; expected one of auto, {', '.join(MODES)}"
    )


def current_mode() -> str:
    """The mode of the innermost running step (``"off"`` when none runs)."""
    with _locked():
        return _active[-1].mode if _active else "off"


def _fmt_seconds(s: float) -> str:
    s = max(0.0, s)
    if s < 60:
        return f"{s:.0f} s"
    m, sec = divmod(int(round(s)), 60)
    if m < 60:
        return f"{m} min {sec:02d} s"
    h, m = divmod(m, 60)
    return f"{h} h {m:02d} min"


class Progress:
    """A step of long work that reports how far it got (see the module docstring).

    Use it as a context manager; call :meth:`update` as items finish.

    Args:
        desc: What the step does (``"replay rrf"``).
        total: How many items it has (``None``: unknown).
        unit: What an item is (``"queries"``).
        mode: ``"bar"``, ``"lines"``, ``"off"``, ``"auto"``/``True``/``False`` (see
            :func:`resolve_mode`) or ``None``: the mode of the innermost running step.
        interval: Seconds between lines, and between heartbeats (default:
            ``SETTINGS["interval"]``, 5).
        stream: Where to write (default: ``SETTINGS["stream"]``, else stderr).
        clock: Monotonic clock in seconds (default: ``SETTINGS["clock"]``).
        heartbeat: Run the heartbeat thread (tests drive :meth:`beat` themselves).
    """

    def __init__(
        self,
        desc: str,
        total: int | None = None,
        *,
        unit: str = "items",
        mode: bool | str | None = None,
        interval: float | None = None,
        stream: IO[str] | None = None,
        clock: Callable[[], float] | None = None,
        heartbeat: bool = True,
    ) -> None:
        interval = SETTINGS["interval"] if interval is None else interval
        stream = SETTINGS["stream"] if stream is None else stream
        clock = SETTINGS["clock"] if clock is None else clock
        if interval <= 0:
            raise ValueError(f"progress interval must be positive, got {interval}")
        self.desc = desc
        self.total = total
        self.unit = unit
        self.stream = stream
        self.mode = current_mode() if mode is None else resolve_mode(mode, stream)
        self.interval = float(interval)
        self.clock = clock
        self.heartbeat = heartbeat
        self.n = 0
        self.started = 0.0
        self.last_line = 0.0
        self.written = False
        self._bar: Any = None

    # ------------------------------------------------------------------ output
    def _out(self) -> IO[str]:
        return sys.stderr if self.stream is None else self.stream

    def _write(self, text: str) -> None:
        stamp = time.strftime("%H:%M:%S", time.gmtime())
        out = self._out()
        with _locked():  # the heartbeat thread writes too: whole lines only
            out.write(f"memlab {stamp} {self.desc}: {text}\n")
            out.flush()
            now = self.clock()
            self.last_line = now
            self.written = True
            _last_output[0] = now

    def _status(self) -> str:
        elapsed = self.clock() - self.started
        if self.total:
            pct = 100.0 * self.n / self.total
            text = f"{self.n}/{self.total} {self.unit} ({pct:.0f}%), {_fmt_seconds(elapsed)}"
            if 0 < self.n < self.total:
                left = elapsed / self.n * (self.total - self.n)
                text += f", about {_fmt_seconds(left)} left"
            return text
        return f"{self.n} {self.unit}, {_fmt_seconds(elapsed)}"

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> Progress:
        self.started = self.clock()
        self.last_line = self.started
        if self.mode == "bar":
            from tqdm import tqdm

            self._bar = tqdm(
                total=self.total, desc=self.desc, unit=f" {self.unit}", leave=False,
                file=self._out(), dynamic_ncols=True,
            )
        if self.mode != "off":
            with _locked():
                _active.append(self)
                _last_output[0] = self.clock()
            if self.heartbeat:
                _ensure_heartbeat()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if self.mode == "off":
            return
        with _locked():
            if self in _active:
                _active.remove(self)
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        if self.mode == "lines":
            elapsed = _fmt_seconds(self.clock() - self.started)
            if exc_type is None:
                count = f"{self.n} {self.unit} " if self.total is not None or self.n else ""
                self._write(f"done, {count}in {elapsed}")
            elif self.written:
                self._write(f"stopped after {self._status()} ({exc_type.__name__})")

    def update(self, n: int = 1) -> None:
        """``n`` more items are done (a line when ``interval`` passed since the last one)."""
        self.n += n
        if self.mode == "bar" and self._bar is not None:
            self._bar.update(n)
            _last_output[0] = self.clock()
        elif self.mode == "lines" and self.clock() - self.last_line >= self.interval:
            self._write(self._status())

    def beat(self) -> None:
        """Write the status if nothing was written for ``interval`` seconds (the heartbeat)."""
        now = self.clock()
        if self.mode == "lines" and now - max(self.last_line, _last_output[0]) >= self.interval:
            self._write(f"{self._status()} (working)")
        elif self.mode == "bar" and self._bar is not None:
            self._bar.refresh()
            _last_output[0] = now


def _ensure_heartbeat() -> None:
    with _locked():
        if _stopping[0] or sys.is_finalizing():
            return  # the interpreter is exiting: no new thread
        thread = _heartbeat[0]
        if thread is not None and thread.is_alive():
            _wake.set()  # a thread waiting out a longer interval re-reads the innermost step
            return
        thread = threading.Thread(target=_beat_loop, name="memlab-progress", daemon=True)
        _heartbeat[0] = thread
        thread.start()


def _innermost() -> Progress | None:
    """The innermost running step with a heartbeat (call with ``_lock`` held)."""
    running = [p for p in _active if p.heartbeat]
    return running[-1] if running else None


def _beat_loop() -> None:
    while True:
        with _locked():
            inner = _innermost()
            if inner is None or _stopping[0]:
                _heartbeat[0] = None
                return
            wait = inner.interval
        _wake.wait(wait)
        _wake.clear()
        if _stopping[0]:
            continue  # ends at the top, without a last line
        with _locked():
            # Only if it is still the innermost step: one that started while this thread
            # waited (and woke it) speaks instead, after its own interval.
            if _innermost() is inner:
                try:
                    inner.beat()
                except Exception:  # noqa: BLE001 - a closed stream must not kill the work
                    pass


def stop_heartbeat(timeout: float | None = None) -> None:
    """End the heartbeat thread and wait up to ``timeout`` seconds for it (at exit; default
    :data:`HEARTBEAT_JOIN_TIMEOUT`).

    Registered with :mod:`atexit`, which runs while every thread still runs: the thread
    finishes the line it may be writing, releases the lock and ends, so nothing the
    interpreter's finalization does afterwards can wait on it.
    """
    _stopping[0] = True
    _wake.set()
    thread = _heartbeat[0]
    if thread is not None and thread is not threading.current_thread():
        thread.join(HEARTBEAT_JOIN_TIMEOUT if timeout is None else timeout)


def _after_fork_in_child() -> None:
    """A forked child gets a fresh lock and no heartbeat: the parent's thread (which may have
    held the lock at the fork) does not exist there."""
    global _lock, _wake
    _lock = threading.RLock()
    _wake = threading.Event()
    _heartbeat[0] = None


atexit.register(stop_heartbeat)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def track(
    items: Iterable[T],
    desc: str,
    *,
    total: int | None = None,
    unit: str = "items",
    mode: bool | str | None = None,
    **kwargs: Any,
) -> Iterator[T]:
    """Iterate ``items`` inside a :class:`Progress` (one update per item)."""
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    with Progress(desc, total, unit=unit, mode=mode, **kwargs) as bar:
        for item in items:
            yield item
            bar.update()
