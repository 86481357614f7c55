"""Atomic writes: a crash never leaves a half-written file or result directory.

Result directories (``memlab eval --out DIR``, ``memlab sweep --out DIR``) carry a marker,
:data:`OUTPUT_MARKER`, listing the entries memlab wrote. Publishing a new result over ``DIR``
follows one rule: **nothing memlab did not write is ever deleted, moved or claimed**.

* ``DIR`` missing or empty: the result is published there (one rename).
* ``DIR`` a memlab result: its marker lists what memlab wrote. A result written before the
  marker existed is recognised only when it proves itself memlab's (:func:`owned_entries`):
  its ``manifest.json`` carries every field memlab has always written there (or its
  ``sweep.json`` every field of a sweep summary), and only the exact file names memlab wrote
  for it (and the charts its ``report.md`` links the way memlab links them) are claimed.
  memlab's old entries are replaced by the new ones inside ``DIR`` (:func:`replace_directory`);
  the entries memlab did not write (a note a user added) are never moved at all.
* Anything else (a non-empty directory memlab did not write or cannot prove it wrote, a file,
  a symbolic link, the working directory or one of its parents, even empty): refused with
  :class:`OutputDirError` (a :class:`ValueError` naming it) before any work is done.

Interrupts: a user's file is at every instant under its own name in ``DIR``; cleanup only ever
removes the hidden siblings ``.DIR.tmp-*`` (the new result while it is written) and
``.DIR.old-*`` (memlab's replaced entries), which hold nothing but memlab's own files. Ctrl-C
(``SIGINT``) and ``SIGTERM`` arriving while entries are swapped are held back until the swap
is complete, and any exception during it puts the old entries back, so ``DIR`` is the old
complete result or the new one. Only a hard kill (``SIGKILL``, power loss) in the middle of
the few renames of the swap can leave ``DIR`` holding some old and some new entries of
memlab's; its marker then claims both, so the next run replaces them, and a ``.DIR.tmp-*`` or
``.DIR.old-*`` sibling may be left behind (it holds only memlab's files and may be deleted).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

OUTPUT_MARKER = ".memlab-output.json"
"""The file that marks a directory memlab wrote (``{"memlab": KIND, "entries": [...]}``)."""

# Results written before the marker existed (memlab's history up to its introduction). A
# directory is such a result only when the JSON file named here is an object carrying every
# field memlab wrote into it in every version (with the JSON type it always had); then only
# the exact names listed were memlab's, plus the charts its report.md links.
_LEGACY_KINDS: tuple[tuple[str, dict[str, tuple[type, ...]], tuple[str, ...]], ...] = (
    (
        "manifest.json",
        {
            "dataset": (dict,),
            "pipelines": (dict,),
            "baseline": (str, type(None)),
            "metrics": (list,),
            "seed": (int,),
            "tests": (list,),
            "correction": (str, type(None)),
            "exclude_tags": (list,),
            "replay": (dict,),
        },
        (
            "manifest.json",
            "metrics.json",
            "per_query.parquet",
            "rankings.parquet",
            "comparison.parquet",
            "per_tag.parquet",
            "comparison_by_tag.parquet",
            "timings.parquet",
            "report.md",
        ),
    ),
    (
        "sweep.json",
        {
            "dataset": (str, type(None)),
            "pipeline": (dict,),
            "grid": (dict,),
            "seed": (int,),
            "metric": (str,),
            "best_params": (dict,),
            "best_train": (int, float),
            "best_test": (int, float),
        },
        ("sweep.json", "results.parquet", "report.md"),
    ),
)

# How memlab's report.md links a chart it saved as NAME.png and NAME.svg.
_LEGACY_CHART_LINK = re.compile(r"!\[[^\]\n]*\]\(([^()/\\\s]+)\.png\) \(\[svg\]\(\1\.svg\)\)")


class OutputDirError(ValueError):
    """An output directory memlab refuses to write into (one line, names the directory)."""


def atomic_write_text(path: Path, text: str) -> None:
    """Write text through a temporary file in the same directory and a rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _marker_text(kind: str, entries: list[str]) -> str:
    """The text of :data:`OUTPUT_MARKER` for a result of ``kind`` holding ``entries``."""
    return json.dumps({"memlab": kind, "entries": entries}, indent=2) + "\n"


def _read_marker(out: Path) -> dict[str, object] | None:
    try:
        data = json.loads((out / OUTPUT_MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if isinstance(data, dict) and isinstance(data.get("memlab"), str):
        return data
    return None


def _legacy_claims(out: Path) -> set[str] | None:
    """The names an unmarked result proves memlab wrote (``None``: it proves nothing)."""
    for proof, fields, names in _LEGACY_KINDS:
        try:
            data = json.loads((out / proof).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if not isinstance(data, dict):
            continue
        if all(
            key in data and isinstance(data[key], types) and not isinstance(data[key], bool)
            for key, types in fields.items()
        ):
            claims = set(names)
            try:
                report = (out / "report.md").read_text(encoding="utf-8")
            except (OSError, ValueError):
                report = ""
            for stem in _LEGACY_CHART_LINK.findall(report):
                claims.update((f"{stem}.png", f"{stem}.svg"))
            return claims
    return None


def owned_entries(out: Path) -> Callable[[str], bool] | None:
    """Which top-level entries of ``out`` memlab wrote (``None``: ``out`` is not a result).

    A marked result claims the entries its marker lists (and the marker). An unmarked one is a
    result only when its ``manifest.json`` (or ``sweep.json``) holds every field memlab always
    wrote there, with their types; it then claims only the exact names memlab wrote for that
    kind of result and the charts its ``report.md`` links as memlab links them
    (``![name](NAME.png) ([svg](NAME.svg))``). Any other directory claims nothing.
    """
    marker = _read_marker(out)
    if marker is not None:
        entries = marker.get("entries")
        names = {str(e) for e in entries} if isinstance(entries, list) else set()
        names.add(OUTPUT_MARKER)
        return names.__contains__
    claims = _legacy_claims(out)
    return None if claims is None else claims.__contains__


def check_output_dir(out: str | os.PathLike[str], *, what: str = "output directory") -> Path:
    """Refuse an output directory memlab must not write into (see the module docstring).

    Returns:
        The absolute path.

    Raises:
        OutputDirError: Naming the directory and what is wrong, in one line.
    """
    if not str(out).strip():
        raise OutputDirError(f"{what} {str(out)!r}: is empty; give a directory")
    path = Path(out).expanduser().absolute()
    for parent in path.parents:  # a file on the way: no directory can be made there
        if parent.exists() and not parent.is_dir():
            raise OutputDirError(f"{what} {out}: {parent} is a file, not a directory")
    if path.is_symlink():
        raise OutputDirError(
            f"{what} {out}: is a symbolic link (to {os.readlink(path)}); give the directory "
            "it points to, or a new directory"
        )
    real = path.resolve()
    cwd = Path.cwd().resolve()
    if path.exists() and not path.is_dir():
        raise OutputDirError(f"{what} {out}: exists and is not a directory")
    if not path.exists():
        return path
    if real == cwd or real in cwd.parents:
        raise OutputDirError(
            f"{what} {out}: is the working directory or one of its parents; "
            "give a new directory"
        )
    if any(path.iterdir()) and owned_entries(path) is None:
        raise OutputDirError(
            f"{what} {out}: exists, is not empty and is not a memlab result "
            f"(no {OUTPUT_MARKER}, and no manifest.json or sweep.json with every field memlab "
            "writes); give a new or empty directory"
        )
    return path


@contextmanager
def _signals_held() -> Iterator[None]:
    """Hold ``SIGINT``/``SIGTERM`` back for the duration; deliver them afterwards.

    Only the main thread can set handlers; elsewhere (and for signals whose handler is not a
    Python-settable one) nothing is held and the caller's rollback is the only protection.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []
    saved: dict[int, Any] = {}

    def hold(signum: int, frame: object) -> None:
        pending.append(signum)

    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            saved[sig] = signal.signal(sig, hold)
        except (ValueError, OSError, TypeError):
            continue
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        for sig in dict.fromkeys(pending):
            signal.raise_signal(sig)


def replace_directory(
    tmp: Path, out: Path, *, owned: Callable[[str], bool] | None = None
) -> None:
    """Publish the complete directory ``tmp`` as ``out``; never move what memlab did not write.

    ``out`` missing or empty: ``tmp`` is renamed to it. Otherwise the entries of ``out`` for
    which ``owned`` is true (none when ``owned`` is ``None``) are memlab's: they are moved into
    a hidden sibling ``.OUT.old-*`` and the entries of ``tmp`` are moved into ``out``, one
    rename each, then ``tmp`` (empty) and the sibling (memlab's old entries only) are removed.
    The other entries of ``out`` (a user's) stay where they are, under their own name, the
    whole time. When ``tmp`` holds :data:`OUTPUT_MARKER`, ``out``'s marker first claims the
    old and the new entries and the new marker is moved in last, so a hard kill mid-swap
    leaves a directory whose memlab entries are all claimed.

    The swap runs with ``SIGINT``/``SIGTERM`` held back; any exception during it (an
    ``OSError``, an interrupt raised anyway) moves every entry back, leaving ``out`` as it was
    and ``tmp`` with the new entries (memlab's only: the caller may delete it), and is
    re-raised.

    Raises:
        OutputDirError: ``out`` is a symbolic link or not a directory, or a foreign entry has a
            name the new result also uses (before anything moved).
    """
    if out.is_symlink():
        raise OutputDirError(f"{out}: is a symbolic link; memlab does not publish through it")
    if out.exists() and not out.is_dir():
        raise OutputDirError(f"{out}: exists and is not a directory")
    if not out.exists() or not any(out.iterdir()):
        os.replace(tmp, out)
        return
    present = sorted(e.name for e in out.iterdir())
    mine = [n for n in present if owned is not None and owned(n)]
    foreign = [n for n in present if n not in mine]
    new = sorted(e.name for e in tmp.iterdir())
    clash = [n for n in foreign if n in new]
    if clash:
        raise OutputDirError(
            f"{out}: holds {', '.join(clash)}, which memlab did not write and would "
            "overwrite; move it away first"
        )
    marked = OUTPUT_MARKER in new
    backup = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
    moved_old: list[str] = []
    moved_new: list[str] = []
    old_marker_saved = False
    union_written = False
    with _signals_held():
        try:
            if marked:
                if OUTPUT_MARKER in present:
                    shutil.copy2(out / OUTPUT_MARKER, backup / OUTPUT_MARKER)
                    old_marker_saved = True
                kind = str((_read_marker(tmp) or {})["memlab"])
                union = sorted((set(mine) | set(new)) - {OUTPUT_MARKER})
                atomic_write_text(out / OUTPUT_MARKER, _marker_text(kind, union))
                union_written = True
            for name in mine:
                if name != OUTPUT_MARKER:
                    os.replace(out / name, backup / name)
                    moved_old.append(name)
            for name in new:
                if name != OUTPUT_MARKER:
                    os.replace(tmp / name, out / name)
                    moved_new.append(name)
            if marked:
                os.replace(tmp / OUTPUT_MARKER, out / OUTPUT_MARKER)
        except BaseException:
            for name in reversed(moved_new):
                os.replace(out / name, tmp / name)
            for name in reversed(moved_old):
                os.replace(backup / name, out / name)
            if old_marker_saved:
                os.replace(backup / OUTPUT_MARKER, out / OUTPUT_MARKER)
            elif union_written:
                os.unlink(out / OUTPUT_MARKER)
            os.rmdir(backup)
            raise
        os.rmdir(tmp)
        shutil.rmtree(backup)  # memlab's replaced entries, nothing else


@contextmanager
def atomic_directory(out: Path, *, kind: str = "result") -> Iterator[Path]:
    """Yield a temporary sibling of ``out`` to fill; publish it as ``out`` on success.

    ``out`` is checked first (:func:`check_output_dir`). On success the entries written are
    recorded in :data:`OUTPUT_MARKER` and published with :func:`replace_directory`: memlab's
    entries of an earlier result are replaced, the entries memlab did not write stay in
    ``out`` untouched. On an exception (an interrupt included) ``out`` is left as it was and
    the temporary directory, which only ever holds what memlab wrote into it, is removed.

    Args:
        out: The result directory.
        kind: What the result is (``"experiment"``, ``"sweep"``), stored in the marker.

    Raises:
        OutputDirError: ``out`` is refused (see the module docstring).
    """
    out = check_output_dir(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        os.chmod(tmp, 0o755)
        yield tmp
        entries = sorted(e.name for e in tmp.iterdir())
        (tmp / OUTPUT_MARKER).write_text(_marker_text(kind, entries), encoding="utf-8")
        out = check_output_dir(out)  # it may have changed while the result was computed
        owned = owned_entries(out) if out.exists() and any(out.iterdir()) else None
        replace_directory(tmp, out, owned=owned)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
