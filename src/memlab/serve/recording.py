"""Durable recordings: every write and recall of a live server, appended to a dataset.

A recording directory is a dataset in format v1 (:mod:`memlab.datasets.format`):

* ``dataset.toml`` — written once, atomically, when the directory is new;
* ``memories.jsonl`` — each write as a memory operation (store, forget, relate, correct,
  promote, consolidate) with the server's timestamp; dataset ids are store ids;
* ``queries.jsonl`` — each recall as a query: ``qid`` is the ``recall_id`` returned to the
  agent, with its ``ts``, client, reader (``agent``, ``projects``), ``at_time``,
  ``include_superseded``, ``relevant: {}``, the ranked ids ``served`` and ``tags: ["live"]``;
* ``judgments.jsonl`` — agent and human feedback on recalls (``feedback`` tool).

Appends are durable: each file is opened with ``O_APPEND``, a call's lines are written with one
``write`` of complete lines and ``fsync``-ed before the call is acknowledged. A killed server
loses at most the call in flight; a torn last line (no newline) left by a crash mid-write is
cut off when the recording is reopened, so the files stay valid JSONL.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from memlab.datasets.format import (
    JUDGMENTS_FILE,
    MEMORIES_FILE,
    META_FILE,
    QUERIES_FILE,
    dumps_meta,
)
from memlab.io import atomic_write_text
from memlab.timeutil import parse_ts

_FILES = (MEMORIES_FILE, QUERIES_FILE, JUDGMENTS_FILE)


def _dumps(obj: Mapping[str, Any]) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


class Recorder:
    """Appends a live server's calls to a dataset directory.

    Args:
        path: The recording directory (created when missing; an existing recording is
            continued).
        name: ``name`` of ``dataset.toml`` when the directory is new.
        description: ``description`` of ``dataset.toml`` when the directory is new.

    Attributes:
        last_ts: The latest ``ts`` in the recording (epoch seconds; ``None`` when empty).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        name: str = "live-recording",
        description: str = "Calls recorded by a memlab server",
    ) -> None:
        self.path = Path(path)
        if self.path.exists() and not self.path.is_dir():
            raise ValueError(f"{self.path}: --record needs a directory, this is a file")
        self.path.mkdir(parents=True, exist_ok=True)
        meta = self.path / META_FILE
        if not meta.exists():
            others = [p.name for p in self.path.iterdir() if not p.name.startswith(".")]
            if others:
                raise ValueError(
                    f"{self.path}: not empty and holds no {META_FILE}; record into a new "
                    "directory or an earlier recording"
                )
            atomic_write_text(
                meta,
                dumps_meta(
                    {
                        "name": name,
                        "version": "1",
                        "description": description,
                        "license": "as the recorded content",
                        "source": "memlab serve --record",
                    }
                ),
            )
        self._lock = threading.Lock()
        self._fds: dict[str, int] = {}
        self.last_ts: float | None = None
        for fname in _FILES:
            self._repair(self.path / fname)
            self._fds[fname] = os.open(
                self.path / fname, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644
            )
        self._fsync_dir()

    def _repair(self, file: Path) -> None:
        """Cut a torn last line (a crash mid-write) and read the latest ``ts``."""
        if not file.exists():
            return
        data = file.read_bytes()
        if data and not data.endswith(b"\n"):
            keep = data.rfind(b"\n") + 1
            with open(file, "r+b") as fh:
                fh.truncate(keep)
                fh.flush()
                os.fsync(fh.fileno())
            data = data[:keep]
        for raw in data.splitlines():
            try:
                ts = json.loads(raw).get("ts")
                t = parse_ts(ts) if isinstance(ts, str) else None
            except (ValueError, TypeError, AttributeError):
                continue
            if t is not None and (self.last_ts is None or t > self.last_ts):
                self.last_ts = t

    def _fsync_dir(self) -> None:
        fd = os.open(self.path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def append(self, fname: str, lines: Sequence[Mapping[str, Any]]) -> None:
        """Append complete JSON lines to one file of the recording and make them durable."""
        if not lines:
            return
        data = "".join(_dumps(obj) + "\n" for obj in lines).encode("utf-8")
        with self._lock:
            fd = self._fds[fname]
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            os.fsync(fd)

    def memories(self, lines: Sequence[Mapping[str, Any]]) -> None:
        """Append write operations to ``memories.jsonl``."""
        self.append(MEMORIES_FILE, lines)

    def query(self, line: Mapping[str, Any]) -> None:
        """Append one recall to ``queries.jsonl``."""
        self.append(QUERIES_FILE, [line])

    def judgments(self, lines: Sequence[Mapping[str, Any]]) -> None:
        """Append feedback to ``judgments.jsonl``."""
        self.append(JUDGMENTS_FILE, lines)

    def close(self) -> None:
        """Close the files (everything appended is already on disk)."""
        with self._lock:
            for fd in self._fds.values():
                os.close(fd)
            self._fds = {}
