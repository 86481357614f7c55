"""``judgments.jsonl``: relevance judgments of a dataset, one per line, written durably.

Each line is ``{"qid", "mem_id", "grade", "source", "judge", "ts", "note"?}``: ``grade`` an
integer 0..2, ``source`` ``"agent"`` (implicit feedback: useful 1, not useful 0) or ``"human"``
(the judging app), ``judge`` a name, ``ts`` ISO 8601 UTC. The file is append-only; a judge who
judges the same pair again revises it (the later line counts). Each append is flushed and
fsynced under a file lock, so a crash loses at most the judgment being written; a torn last line
left by a crash is cut off before the next append.

Qrels are built from one source (``human`` by default, ``agent`` or ``all``) with an
aggregation across judges registered in :data:`AGGREGATIONS` (``majority`` by default).
"""

from __future__ import annotations

import json
import math
import os
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl
from filelock import FileLock

from memlab.registry import Registry
from memlab.timeutil import parse_ts, to_iso

JUDGMENTS_FILE = "judgments.jsonl"
SOURCES: tuple[str, ...] = ("agent", "human")
QRELS_SOURCES: tuple[str, ...] = ("human", "agent", "all")
GRADES: tuple[int, ...] = (0, 1, 2)
_KEYS = ("qid", "mem_id", "grade", "source", "judge", "ts", "note")


@dataclass(frozen=True, slots=True)
class Judgment:
    """One line of ``judgments.jsonl``.

    Attributes:
        qid: The query judged.
        mem_id: The memory judged (dataset id).
        grade: 0 (not relevant), 1 (relevant), 2 (highly relevant).
        source: ``"agent"`` or ``"human"``.
        judge: Who judged.
        ts: When, ISO 8601 UTC.
        note: Optional free text.
        line: 1-based line in the file it was read from (0 when built in code).
    """

    qid: str
    mem_id: str
    grade: int
    source: str
    judge: str
    ts: str
    note: str | None = None
    line: int = 0

    def to_json(self) -> dict[str, Any]:
        """The line as a JSON object in the canonical key order."""
        out: dict[str, Any] = {
            "qid": self.qid,
            "mem_id": self.mem_id,
            "grade": self.grade,
            "source": self.source,
            "judge": self.judge,
            "ts": self.ts,
        }
        if self.note is not None:
            out["note"] = self.note
        return out


def judgments_path(path: str | os.PathLike[str]) -> Path:
    """``path`` itself when its name ends in ``.jsonl``, else ``path/judgments.jsonl``."""
    p = Path(path)
    return p if p.suffix == ".jsonl" else p / JUDGMENTS_FILE


def check_judgment(obj: Any, where: str) -> Judgment:
    """Build a :class:`Judgment` from a parsed JSON line; ``where`` is ``file:line``.

    Raises:
        ValueError: Naming ``where`` and the field at fault.
    """
    if not isinstance(obj, dict):
        raise ValueError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    for key in obj:
        if key not in _KEYS:
            raise ValueError(f"{where}: field {key!r}: unknown field for a judgment")
    for key in ("qid", "mem_id", "source", "judge", "ts"):
        value = obj.get(key)
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"{where}: field {key!r}: must be a non-empty string, got {value!r}")
        bad = next((c for c in value if unicodedata.category(c) in ("Cc", "Cs")), None)
        if bad is not None:  # a name is one line of text (reports and agreement print it)
            raise ValueError(
                f"{where}: field {key!r}: holds U+{ord(bad):04X} (a name is one line of text)"
            )
    grade = obj.get("grade")
    if isinstance(grade, bool) or not isinstance(grade, int) or grade not in GRADES:
        raise ValueError(f"{where}: field 'grade': must be 0, 1 or 2, got {grade!r}")
    if obj["source"] not in SOURCES:
        raise ValueError(
            f"{where}: field 'source': must be one of {', '.join(SOURCES)}, got {obj['source']!r}"
        )
    try:
        parse_ts(obj["ts"], field="ts")
    except ValueError:
        raise ValueError(f"{where}: field 'ts': not an ISO 8601 timestamp: {obj['ts']!r}") from None
    note = obj.get("note")
    if note is not None and not isinstance(note, str):
        raise ValueError(f"{where}: field 'note': must be a string, got {type(note).__name__}")
    if note is not None and any(unicodedata.category(c) == "Cs" for c in note):
        raise ValueError(f"{where}: field 'note': holds bytes that are not UTF-8 text")
    line = int(where.rsplit(":", 1)[-1]) if where.rsplit(":", 1)[-1].isdigit() else 0
    return Judgment(
        obj["qid"], obj["mem_id"], grade, obj["source"], obj["judge"], obj["ts"], note, line
    )


def read_judgments(path: str | os.PathLike[str]) -> list[Judgment]:
    """Every judgment of a dataset directory (or a ``.jsonl`` file); ``[]`` when absent.

    A last line without its newline that does not parse is a write torn by a crash and is
    ignored; any other bad line raises.

    Raises:
        ValueError: Naming ``judgments.jsonl:LINE`` and the field at fault.
    """
    file = judgments_path(path)
    if not file.is_file():
        return []
    data = file.read_bytes()
    pieces = data.split(b"\n")
    torn = pieces[-1] != b""
    out = []
    for number, raw in enumerate(pieces, start=1):
        if not raw.strip():
            continue
        where = f"{file.name}:{number}"
        try:
            obj = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            if torn and number == len(pieces):
                break
            raise ValueError(f"{where}: not a JSON line: {exc}") from None
        except RecursionError:
            raise ValueError(f"{where}: not a JSON line: nested too deeply to read") from None
        except ValueError as exc:  # an integer of more than 4300 digits
            raise ValueError(f"{where}: not a JSON line: {exc}") from None
        out.append(check_judgment(obj, where))
    return out


def _torn(tail: bytes) -> bool:
    """Whether the unterminated last line ``tail`` is a write torn by a crash (it does not
    parse as JSON), not a complete line that only lacks its newline (a hand-edited file)."""
    try:
        json.loads(tail.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return True
    return False


def append_judgment(path: str | os.PathLike[str], judgment: Judgment) -> None:
    """Append one judgment durably (file lock, flush, fsync).

    A torn last line (a crash during an earlier append: an unterminated line that does not
    parse) is cut off first; a complete last line that only lacks its newline (a file edited
    by hand) is kept and ended. ``path``'s ``judgments.jsonl`` must be a regular file (not a
    symbolic link or a directory).

    Raises:
        ValueError: If ``judgments.jsonl`` is a symbolic link or not a regular file.
    """
    check_judgment(judgment.to_json(), "judgment")
    file = judgments_path(path)
    if file.is_symlink() or (file.exists() and not file.is_file()):
        raise ValueError(
            f"{file}: is {'a symbolic link' if file.is_symlink() else 'not a regular file'}; "
            "memlab appends judgments only to a regular file"
        )
    file.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps(judgment.to_json(), ensure_ascii=False, separators=(",", ":")) + "\n"
    with FileLock(str(file.with_name(f".{file.name}.lock"))):
        new = not file.exists()
        with open(file, "ab+") as fh:
            size = fh.seek(0, os.SEEK_END)
            if size:
                fh.seek(max(0, size - 65536))
                tail = fh.read()
                if not tail.endswith(b"\n"):
                    cut = tail.rfind(b"\n")
                    if cut < 0 and size > len(tail):
                        fh.seek(0)  # one line longer than the window: read all of it
                        tail = fh.read()
                        cut = tail.rfind(b"\n")
                    if _torn(tail[cut + 1:]):
                        fh.truncate(size - len(tail) + cut + 1 if cut >= 0 else 0)
                    else:
                        fh.write(b"\n")
                    fh.seek(0, os.SEEK_END)
            fh.write(line.encode("utf-8"))
            fh.flush()
            os.fsync(fh.fileno())
        if new:
            fd = os.open(file.parent, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)


def judge(
    path: str | os.PathLike[str],
    qid: str,
    mem_id: str,
    grade: int,
    *,
    judge: str,
    source: str = "human",
    note: str | None = None,
    now: float | str | None = None,
) -> Judgment:
    """Record one judgment into ``path`` (a dataset directory or ``.jsonl`` file) and return it.

    The judging app and scripts both call this.
    """
    import time

    ts = to_iso(time.time() if now is None else parse_ts(now) if isinstance(now, str) else now)
    made = Judgment(qid, mem_id, grade, source, judge, ts, note)
    append_judgment(path, made)
    return made


def latest(judgments: Iterable[Judgment]) -> list[Judgment]:
    """The last judgment of each (source, judge, qid, mem_id), in file order."""
    last: dict[tuple[str, str, str, str], Judgment] = {}
    for j in judgments:
        key = (j.source, j.judge, j.qid, j.mem_id)
        last.pop(key, None)
        last[key] = j
    return list(last.values())


def judgments_frame(judgments: Iterable[Judgment]) -> pl.DataFrame:
    """``qid, mem_id, grade, source, judge, ts, note`` (latest per judge and pair)."""
    rows = [j.to_json() | {"note": j.note} for j in latest(judgments)]
    schema = {
        "qid": pl.String,
        "mem_id": pl.String,
        "grade": pl.Int64,
        "source": pl.String,
        "judge": pl.String,
        "ts": pl.String,
        "note": pl.String,
    }
    return pl.DataFrame(rows, schema=schema, orient="row")


Aggregation = Callable[[Sequence[int]], int]
AGGREGATIONS: Registry[Aggregation] = Registry("aggregation")


@AGGREGATIONS.register("majority")
def _majority(grades: Sequence[int]) -> int:
    """The most frequent grade; a tie goes to the lower grade (the conservative reading)."""
    counts = Counter(grades)
    return min(counts, key=lambda g: (-counts[g], g))


@AGGREGATIONS.register("mean")
def _mean(grades: Sequence[int]) -> int:
    """The mean grade rounded half up."""
    return int(math.floor(sum(grades) / len(grades) + 0.5))


@AGGREGATIONS.register("min")
def _min(grades: Sequence[int]) -> int:
    """The lowest grade (relevant only when every judge says so)."""
    return min(grades)


@AGGREGATIONS.register("max")
def _max(grades: Sequence[int]) -> int:
    """The highest grade (relevant when any judge says so)."""
    return max(grades)


def qrels_from_judgments(
    judgments: Iterable[Judgment], *, source: str = "human", aggregate: str = "majority"
) -> pl.DataFrame:
    """``qid, mem_id, relevance`` from the judgments of ``source`` aggregated across judges.

    Args:
        judgments: As read by :func:`read_judgments`.
        source: ``"human"``, ``"agent"`` or ``"all"``.
        aggregate: A name in :data:`AGGREGATIONS`.

    Raises:
        ValueError: On an unknown source or aggregation.
    """
    if source not in QRELS_SOURCES:
        raise ValueError(
            f"unknown qrels source {source!r}; expected one of {', '.join(QRELS_SOURCES)}"
        )
    combine = AGGREGATIONS.lookup(aggregate)
    grades: dict[tuple[str, str], list[int]] = {}
    for j in latest(judgments):
        if source == "all" or j.source == source:
            grades.setdefault((j.qid, j.mem_id), []).append(j.grade)
    rows = [(q, m, combine(g)) for (q, m), g in sorted(grades.items())]
    return pl.DataFrame(
        rows, schema={"qid": pl.String, "mem_id": pl.String, "relevance": pl.Int64}, orient="row"
    )
