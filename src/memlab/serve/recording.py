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
``write`` of complete lines and ``fsync``-ed before the call is acknowledged. A live server
appends a call's lines before its store commits the call's writes, and the store's commit
records the files' lengths (:meth:`Recorder.append_all`, ``MemoryService._unit``): lines past
that mark at the next start belong to a call that never committed, and are cut
(:meth:`Recorder.cut_to`). A killed server loses at most the calls in flight, from the store
and the recording alike.

One server at a time: a :class:`Recorder` holds an exclusive lock on ``<dir>/.memlab-record.lock``
(``filelock``) from opening to :meth:`Recorder.close`; a second recorder on the same directory
raises :class:`RecordingLockedError` instead of interleaving its calls with the first one's.

Reopening a recording checks it before anything is appended (see :meth:`Recorder._scan`):
``dataset.toml`` must parse, every complete line must be a JSON object, and the bytes after the
last newline (a "tail") are handled by one rule — nothing memlab did not write is ever cut:

* a tail that is a whole JSON object (or blank), e.g. a file saved by an editor without a final
  newline, is kept and the missing newline is added;
* a tail that is a strict prefix of a compact JSON object line — what a crash in the middle of
  memlab's own append leaves (memlab writes ``{"key":value,...}`` without spaces), and what a
  line someone was typing by hand can look like — is moved to ``.FILE.uncommitted`` beside the
  file (appended with a newline, durably, before the file is cut; a warning names it);
* anything else (random bytes, a broken hand-edited line, NUL bytes) is refused with a
  :class:`ValueError` naming the file and line, and the directory is left as it was.
"""

from __future__ import annotations

import codecs
import json
import logging
import os
import re
import threading
import tomllib
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

log = logging.getLogger("memlab.serve")

_FILES = (MEMORIES_FILE, QUERIES_FILE, JUDGMENTS_FILE)
#: The files a live server's store commits mark (see :meth:`Recorder.append_all`): its writes
#: and its recalls. Feedback (``judgments.jsonl``) changes no store, and is appended alone.
MARKED_FILES = (MEMORIES_FILE, QUERIES_FILE)
#: The lock file a recorder holds in its directory (hidden: not part of the dataset).
LOCK_NAME = ".memlab-record.lock"
#: Ops of ``memories.jsonl`` whose ``id`` names a memory (a store line has no ``op``).
_MEMORY_OPS = ("store", "correct")

_STR_CHAR = r'(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})'
_STRING = re.compile(rf'"{_STR_CHAR}*"')
_STRING_PART = re.compile(rf'"{_STR_CHAR}*(?:\\(?:u[0-9a-fA-F]{{0,3}})?)?')
_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?")
_NUMBER_PART = re.compile(r"-?(?:(?:0|[1-9]\d*)(?:\.\d*|(?:\.\d+)?[eE][+-]?\d*)?)?")
_LITERALS = ("true", "false", "null")


class RecordingLockedError(ValueError):
    """Another recorder (another server) holds the recording directory's lock."""


def _dumps(obj: Mapping[str, Any]) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _parse_line(raw: bytes) -> dict[str, Any]:
    """One JSONL line as an object.

    Raises:
        ValueError: The line is not UTF-8, not JSON (``NaN``, ``Infinity`` and nesting deeper
            than Python can parse included) or not an object; the message says why.
    """
    try:
        obj = json.loads(raw.decode("utf-8"), parse_constant=_refuse_constant)
    except UnicodeDecodeError as exc:
        raise ValueError(f"not valid UTF-8 (byte 0x{raw[exc.start]:02x})") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"invalid JSON: {exc.msg} (column {exc.colno})") from None
    except RecursionError:
        raise ValueError("invalid JSON: nested too deeply") from None
    except ValueError as exc:  # NaN, Infinity, an int of 5000 digits
        raise ValueError(f"invalid JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    return obj


def _compact_object_prefix(text: str) -> bool:
    """Whether ``text`` is a strict prefix of a compact JSON object: ``{`` then keys, values,
    ``:`` and ``,`` without whitespace between them (how memlab writes a line), cut anywhere,
    including inside a string, an escape, a number or a literal."""
    if not text.startswith("{"):
        return False
    n = len(text)
    stack: list[str] = []
    expect = "value"  # value | key | key_or_close | value_or_close | colon | next | end
    i = 0
    while i < n:
        c = text[i]
        if expect in ("value", "value_or_close", "key", "key_or_close"):
            if _STRING_PART.fullmatch(text, i):  # a string cut short at the end
                return True
            if expect in ("value", "value_or_close") and (
                _NUMBER_PART.fullmatch(text, i)
                or (n - i < 5 and any(lit.startswith(text[i:]) for lit in _LITERALS))
            ):
                return True
        if expect == "end":
            return False
        if expect == "colon":
            if c != ":":
                return False
            i, expect = i + 1, "value"
            continue
        if expect == "next":
            if c == ",":
                i, expect = i + 1, "key" if stack[-1] == "{" else "value"
                continue
            if c != ("}" if stack[-1] == "{" else "]"):
                return False
            stack.pop()
            i, expect = i + 1, "next" if stack else "end"
            continue
        if (expect, c) in (("key_or_close", "}"), ("value_or_close", "]")):
            stack.pop()
            i, expect = i + 1, "next" if stack else "end"
            continue
        if expect in ("key", "key_or_close"):
            match = _STRING.match(text, i)
            if match is None:
                return False
            i, expect = match.end(), "colon"
            continue
        if c in "{[":
            stack.append(c)
            i, expect = i + 1, "key_or_close" if c == "{" else "value_or_close"
            continue
        match = _STRING.match(text, i) or _NUMBER.match(text, i)
        if match is not None:
            i = match.end()
        else:
            lit = next((lit for lit in _LITERALS if text.startswith(lit, i)), None)
            if lit is None:
                return False
            i += len(lit)
        expect = "next" if stack else "end"
    return expect != "end"


def _torn_append(tail: bytes) -> bool:
    """Whether ``tail`` (the bytes after a file's last newline) is what a crash in the middle of
    one of memlab's appends leaves: valid UTF-8 up to a character cut at the very end, and a
    strict prefix of a compact JSON object (see :func:`_compact_object_prefix`)."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    try:
        text = decoder.decode(tail, final=False)
    except UnicodeDecodeError:
        return False
    if decoder.getstate()[0]:
        text += "x"  # a multi-byte character cut short: only possible inside a string
    return _compact_object_prefix(text)


def _write_durably(fd: int, data: bytes) -> None:
    """Write all of ``data`` to ``fd`` (opened ``O_APPEND``) and ``fsync`` it."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]
    os.fsync(fd)


class Recorder:
    """Appends a live server's calls to a dataset directory.

    Args:
        path: The recording directory (created when missing; an existing recording is
            continued).
        name: ``name`` of ``dataset.toml`` when the directory is new.
        description: ``description`` of ``dataset.toml`` when the directory is new.
        lock_timeout: Seconds to wait for another recorder to release the directory before
            raising :class:`RecordingLockedError`.

    Attributes:
        last_ts: The latest ``ts`` in the recording (epoch seconds; ``None`` when empty).

    Raises:
        ValueError: ``path`` is a file, a foreign non-empty directory, its ``dataset.toml`` does
            not parse, or a ``.jsonl`` file holds a line that is not a JSON object (nothing is
            changed then; see :meth:`_scan`).
        RecordingLockedError: Another recorder has the directory open.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        name: str = "live-recording",
        description: str = "Calls recorded by a memlab server",
        lock_timeout: float = 10.0,
    ) -> None:
        if isinstance(lock_timeout, bool) or not isinstance(lock_timeout, (int, float)):
            raise TypeError(f"field 'lock_timeout' must be a number, got {lock_timeout!r}")
        self.path = Path(path)
        if self.path.exists() and not self.path.is_dir():
            raise ValueError(f"{self.path}: --record needs a directory, this is a file")
        self.path.mkdir(parents=True, exist_ok=True)
        self._check_foreign()
        self._lock = threading.Lock()
        self._fds: dict[str, int] = {}
        # id -> end offset of its line in memories.jsonl (store and correct lines)
        self._ids: dict[str, int] = {}
        self._dir_lock = self._acquire(float(lock_timeout))
        try:
            self._open(name, description)
        except BaseException:
            self.close()
            raise

    def _check_foreign(self) -> None:
        """Refuse a non-empty directory that is not a recording (before creating anything)."""
        if (self.path / META_FILE).exists():
            return
        others = [p.name for p in self.path.iterdir() if not p.name.startswith(".")]
        if others:
            raise ValueError(
                f"{self.path}: not empty and holds no {META_FILE}; record into a new "
                "directory or an earlier recording"
            )

    def _acquire(self, timeout: float) -> Any:
        from filelock import FileLock, Timeout

        lock_file = self.path / LOCK_NAME
        lock = FileLock(lock_file, timeout=timeout)
        try:
            lock.acquire()
        except Timeout:
            raise RecordingLockedError(
                f"{self.path}: the recording is in use by another server (lock {lock_file} "
                f"held for more than {timeout:g} s); one server per --record directory — stop "
                "the other one or record into another directory"
            ) from None
        except OSError as exc:
            raise ValueError(
                f"{lock_file}: cannot take the recording lock ({exc.strerror or exc})"
            ) from None
        return lock

    def _open(self, name: str, description: str) -> None:
        meta = self.path / META_FILE
        if meta.exists():
            self._check_meta(meta)
        else:
            self._check_foreign()  # again, under the lock
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
        self.last_ts: float | None = None
        for fname in _FILES:
            file = self.path / fname
            if file.exists() and not file.is_file():
                raise ValueError(f"{file}: not a regular file")
        for fname in _FILES:
            self._scan(self.path / fname)
        for fname in _FILES:
            self._fds[fname] = os.open(
                self.path / fname, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644
            )
        self._fsync_dir()

    def settle_replay(self, settings: Mapping[str, Any]) -> None:
        """Keep the server settings that decide what a recall serves (``ttl_days``,
        ``expire``, ``touch_k``, ``depth``) in ``dataset.toml``'s ``[replay]`` table, from
        which a replay of the recording takes its defaults, so that ``memlab eval`` on the
        recording replays what was served.

        A recording without the table gets it appended (the rest of the file is kept as it
        is); one that holds calls already was made with the replay defaults, so it takes
        settings that differ from them only while it is empty. A recording whose table says
        otherwise than ``settings`` is refused: one log cannot replay two settings.

        Raises:
            ValueError: Naming ``dataset.toml``, each setting that differs, and both values.
        """
        from memlab.eval.replay import ReplayConfig

        meta_file = self.path / META_FILE
        text = meta_file.read_bytes().decode("utf-8")
        table = tomllib.loads(text).get("replay")
        given = ReplayConfig.from_mapping(settings, where="the server's settings")
        if table is None:
            recorded = ReplayConfig()
            empty = not any(self.sizes().values())
        else:
            recorded = ReplayConfig.from_mapping(table, where=f"{meta_file} [replay]")
            empty = False
        differ = [k for k in settings if getattr(recorded, k) != getattr(given, k)]
        if differ and not empty:
            shown = ", ".join(
                f"{k} = {getattr(recorded, k)!r} (this server: {getattr(given, k)!r})"
                for k in differ
            )
            raise ValueError(
                f"{meta_file}: the recording's calls were served with {shown}; a replay "
                "cannot reproduce both: start the server with the recording's settings, or "
                "record into a new directory"
            )
        if table is None:
            lines = dumps_meta({"replay": dict(settings)})
            atomic_write_text(meta_file, text + ("" if text.endswith("\n") else "\n")
                              + "\n" + lines)

    @staticmethod
    def _check_meta(meta: Path) -> None:
        """Refuse a ``dataset.toml`` that is not UTF-8 TOML."""
        if not meta.is_file():
            raise ValueError(f"{meta}: not a regular file")
        try:
            tomllib.loads(meta.read_bytes().decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise ValueError(f"{meta}: not valid UTF-8 (byte offset {exc.start})") from None
        except tomllib.TOMLDecodeError as exc:
            raise ValueError(
                f"{meta}: invalid TOML ({exc}); this is not a recording memlab can continue"
            ) from None

    def _scan(self, file: Path) -> None:
        """Check one file of an existing recording, mend its tail and read the latest ``ts``.

        Every complete line (ending with a newline) must be blank or a JSON object, else a
        :class:`ValueError` names the file and line and nothing is changed. The bytes after the
        last newline, when there are any, follow one rule:

        * blank or a whole JSON object (an editor saved the file without a final newline): kept,
          and the newline is appended and ``fsync``-ed;
        * a strict prefix of a compact JSON object line — exactly what a crash in the middle of
          memlab's own append leaves, since memlab writes ``{"key":value,...}`` with no spaces
          (a multi-byte character may be cut at the very end), but also what a hand-written
          line cut short can be: moved to ``.FILE.uncommitted`` (appended there with a
          newline and ``fsync``-ed before the file is cut), with a warning naming it;
        * anything else: :class:`ValueError` naming the file and line; nothing is cut, because
          memlab did not write it.

        Raises:
            ValueError: A line is not a JSON object, or the tail is not memlab's torn write.
        """
        if not file.exists():
            return
        data = file.read_bytes()
        keep = data.rfind(b"\n") + 1
        lines = data[:keep].split(b"\n")[:-1]
        tail = data[keep:]
        objs: list[dict[str, Any]] = []
        ids: dict[str, int] = {}
        end = 0
        for number, raw in enumerate(lines, start=1):
            end += len(raw) + 1
            if not raw.strip():
                continue
            try:
                obj = _parse_line(raw)
            except ValueError as exc:
                raise ValueError(
                    f"{file}:{number}: {exc}; memlab appends only after valid lines — fix or "
                    "remove this line, or record into a new directory"
                ) from None
            objs.append(obj)
            if obj.get("op", "store") in _MEMORY_OPS and isinstance(obj.get("id"), str):
                ids.setdefault(obj["id"], end)
        if file.name == MEMORIES_FILE:
            self._ids = ids
        if tail:
            number = len(lines) + 1
            try:
                obj = _parse_line(tail) if tail.strip() else None
            except ValueError as exc:
                if not _torn_append(tail):
                    raise ValueError(
                        f"{file}:{number}: the last line has no newline and is not a line "
                        f"memlab was writing ({exc}); memlab does not delete it — fix or "
                        "remove it, or record into a new directory"
                    ) from None
                # Moved aside, never deleted: a start-up cannot tell memlab's torn append from
                # a line someone was typing (both are a prefix of a compact JSON object).
                aside = self.path / f".{file.name}.uncommitted"
                with open(aside, "ab") as fh:
                    fh.write(tail + b"\n")
                    fh.flush()
                    os.fsync(fh.fileno())
                self._fsync_dir()
                with open(file, "r+b") as fh:
                    fh.truncate(keep)
                    fh.flush()
                    os.fsync(fh.fileno())
                log.warning(
                    "%s:%d: moved a torn last line (%d bytes, left by a crash mid-write or "
                    "an unfinished edit) to %s",
                    file,
                    number,
                    len(tail),
                    aside,
                )
            else:
                if obj is not None:
                    objs.append(obj)
                fd = os.open(file, os.O_WRONLY | os.O_APPEND)
                try:
                    os.write(fd, b"\n")
                    os.fsync(fd)
                finally:
                    os.close(fd)
        for obj in objs:
            ts = obj.get("ts")
            try:
                t = parse_ts(ts) if isinstance(ts, str) else None
            except (ValueError, TypeError):
                continue
            if t is not None and (self.last_ts is None or t > self.last_ts):
                self.last_ts = t

    def has_memory(self, memory_id: str) -> bool:
        """Whether ``memories.jsonl`` writes the memory ``memory_id`` (a store or correct line
        of that id, in the file as it now is). A live server changes (forgets, corrects,
        promotes) only such memories: a replay of the recording knows no other."""
        with self._lock:
            return memory_id in self._ids

    def _appended(self, fname: str, start: int, encoded: Sequence[bytes],
                  lines: Sequence[Mapping[str, Any]]) -> None:
        """Note the memory ids of lines just appended to ``fname`` from offset ``start``."""
        if fname != MEMORIES_FILE:
            return
        end = start
        for raw, obj in zip(encoded, lines, strict=True):
            end += len(raw)
            ident = obj.get("id")
            if obj.get("op", "store") in _MEMORY_OPS and isinstance(ident, str):
                self._ids.setdefault(ident, end)

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
        encoded = [(_dumps(obj) + "\n").encode("utf-8") for obj in lines]
        with self._lock:
            fd = self._fds[fname]
            start = os.fstat(fd).st_size
            _write_durably(fd, b"".join(encoded))
            self._appended(fname, start, encoded, lines)

    def sizes(self) -> dict[str, int]:
        """Byte lengths of the files a store's commits mark (:data:`MARKED_FILES`)."""
        with self._lock:
            return {f: os.fstat(self._fds[f]).st_size for f in MARKED_FILES}

    def append_all(self, lines: Mapping[str, Sequence[Mapping[str, Any]]]) -> dict[str, int]:
        """Append each file's lines and make them durable, as one call's unit of a live server
        does before its store commits; the new :meth:`sizes`. Every line is serialised first,
        so a line that cannot be written leaves every file as it was."""
        unknown = sorted(set(lines) - set(MARKED_FILES))
        if unknown:
            raise ValueError(f"append_all takes {', '.join(MARKED_FILES)}, got {unknown}")
        data = {
            f: [(_dumps(obj) + "\n").encode("utf-8") for obj in ls]
            for f, ls in lines.items() if ls
        }
        with self._lock:
            for fname, encoded in data.items():
                fd = self._fds[fname]
                start = os.fstat(fd).st_size
                _write_durably(fd, b"".join(encoded))
                self._appended(fname, start, encoded, lines[fname])
            return {f: os.fstat(self._fds[f]).st_size for f in MARKED_FILES}

    def cut_to(self, sizes: Mapping[str, int], *, keep: bool = False) -> None:
        """Cut files back to the given lengths (only ever shorter): what lies beyond was
        appended by a call whose store writes never committed (the append of a failed commit,
        or one a killed server left behind, found at the next start).

        With ``keep``, the bytes cut from ``F`` are first appended to ``.F.uncommitted`` in the
        directory (durably): a start-up cannot tell them from lines someone appended by hand
        while no server ran, and nothing memlab did not write is deleted."""
        with self._lock:
            for fname, size in sizes.items():
                if fname not in MARKED_FILES:
                    raise ValueError(f"cut_to cuts {', '.join(MARKED_FILES)}, not {fname!r}")
                fd = self._fds[fname]
                end = os.fstat(fd).st_size
                if end <= size:
                    continue
                if keep:
                    with open(self.path / fname, "rb") as src:  # appended files: write-only
                        src.seek(size)
                        tail = src.read(end - size)
                    with open(self.path / f".{fname}.uncommitted", "ab") as fh:
                        fh.write(tail)
                        fh.flush()
                        os.fsync(fh.fileno())
                os.ftruncate(fd, size)
                os.fsync(fd)
                if fname == MEMORIES_FILE:
                    self._ids = {i: e for i, e in self._ids.items() if e <= size}

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
        """Close the files and release the directory's lock (everything appended is already on
        disk). Closing twice is harmless."""
        with self._lock:
            for fd in self._fds.values():
                os.close(fd)
            self._fds = {}
            lock, self._dir_lock = self._dir_lock, None
            if lock is not None:
                lock.release()
