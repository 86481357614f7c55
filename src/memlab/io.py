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
  the entries memlab did not write (a note a user added) are never moved at all. The marker
  also records each entry's sha256 (:func:`entry_digest`): an entry changed since memlab wrote
  it (a report a user edited, a directory put under a chart's name) is the user's from then
  on, never replaced, and a new result that would overwrite it is refused before anything
  moves (:func:`unchanged_entries`).
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

Single-file outputs (``memlab judge pool --out FILE``) follow the same rule
(:func:`check_output_file`, :func:`publish_file`): a missing path is created; an existing one is
replaced only when it is a regular file whose content proves memlab wrote it (each kind of file
says how: a judging queue is recognised by its lines) or holds nothing (an empty file); a
symbolic link, a directory or any other file is refused before any work. The new content is
written to a hidden sibling ``.FILE.tmp-*`` and renamed over ``FILE``; the sibling is removed on
any failure.

Readers (:func:`read_json`, :func:`read_toml`, :func:`read_parquet` and their text forms) turn
every way a user's or a run's file can be unreadable (missing, not UTF-8, not JSON or TOML,
nested too deeply for the parser, a parquet file a library cannot decode) into one
:class:`ValueError` naming the file.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import secrets
import shutil
import signal
import stat
import tempfile
import threading
from collections.abc import Callable, Collection, Iterator
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
    (
        "tune.json",
        {
            "metric": (str,),
            "best_params": (dict,),
            "best_train": (int, float),
            "best_test": (int, float),
            "defaults_test": (int, float),
            "tests": (list,),
            "study_name": (str,),
            "storage": (str,),
            "trials": (int,),
        },
        (
            "tune.json",
            "manifest.json",
            "best.toml",
            "trials.parquet",
            "study.db",
            "history.png",
            "history.svg",
            "importance.png",
            "importance.svg",
        ),
    ),
)

# The kind of result each legacy proof file stands for (what :func:`output_kind` reports).
_LEGACY_KIND_NAMES = {"manifest.json": "experiment", "sweep.json": "sweep", "tune.json": "tune"}

# Before ``memlab export`` and ``memlab compare --out`` had kinds of their own, both marked
# their directories ``"result"``. Such a marker's entries tell which wrote it: a comparison
# writes only its CSV tables, an export always writes aggregate.csv and comparison.tex too.
LEGACY_RESULT_KIND = "result"
_LEGACY_RESULT_NAMES: tuple[tuple[str, frozenset[str]], ...] = (
    ("compare", frozenset({"comparison.csv", "comparison_by_tag.csv", "per_query.csv"})),
    (
        "export",
        frozenset({
            "runs", "qrels.trec", "aggregate.csv", "per_query.csv", "comparison.csv",
            "comparison_by_tag.csv", "comparison.tex",
        }),
    ),
)

# How memlab's report.md links a chart it saved as NAME.png and NAME.svg.
_LEGACY_CHART_LINK = re.compile(r"!\[[^\]\n]*\]\(([^()/\\\s]+)\.png\) \(\[svg\]\(\1\.svg\)\)")


class OutputDirError(ValueError):
    """An output directory memlab refuses to write into (one line, names the directory)."""


class OutputFileError(ValueError):
    """An output file memlab refuses to write (one line, names the file)."""


def _write_sibling(path: Path, data: bytes) -> Path:
    """``data`` in a new hidden sibling ``.NAME.tmp-*`` of ``path`` (flushed to disk).

    The sibling is created exclusively with the permissions of any new file (the umask
    applies) and removed again when writing it fails.
    """
    while True:
        tmp = path.with_name(f".{path.name}.tmp-{secrets.token_hex(4)}")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            continue
        break
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp


def _keep_mode(tmp: Path, target: Path) -> None:
    """Give ``tmp`` the permission bits of the regular file ``target`` it is about to replace
    (a replaced file keeps its mode, e.g. a recording a user made private); nothing when
    ``target`` is absent."""
    try:
        st = os.stat(target, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISREG(st.st_mode):
        os.chmod(tmp, stat.S_IMODE(st.st_mode))


def atomic_write_text(path: Path, text: str) -> None:
    """Write text through a temporary file in the same directory and a rename.

    For memlab's own files (a marker, a cache entry, a file inside a result being built): it
    does not check what ``path`` holds (see :func:`publish_file` for a user's ``--out``). The
    temporary file never outlives a failure.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _write_sibling(path, text.encode("utf-8"))
    try:
        _keep_mode(tmp, path)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _marker_text(kind: str, entries: list[str], **extra: Any) -> str:
    """The text of :data:`OUTPUT_MARKER` for a result of ``kind`` holding ``entries``."""
    return json.dumps({"memlab": kind, "entries": entries, **extra}, indent=2) + "\n"


def write_marker(out: Path, kind: str, entries: list[str], **extra: Any) -> None:
    """Write ``out``'s :data:`OUTPUT_MARKER` (atomically): ``kind``, ``entries`` and ``extra``
    fields (a dataset's ``sha256`` of each file)."""
    atomic_write_text(out / OUTPUT_MARKER, _marker_text(kind, sorted(entries), **extra))


def _read_marker(out: Path) -> dict[str, object] | None:
    try:
        data = json.loads((out / OUTPUT_MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    if isinstance(data, dict) and isinstance(data.get("memlab"), str):
        return data
    return None


def read_marker(out: Path) -> dict[str, object] | None:
    """``out``'s :data:`OUTPUT_MARKER` as an object with a string ``memlab`` kind (``None``:
    no readable marker)."""
    return _read_marker(Path(out))


def output_kind(out: Path) -> str | None:
    """What kind of memlab result ``out`` is: its marker's kind (``"experiment"``,
    ``"sweep"``, ``"tune"``, ``"dataset"``, ``"export"``, ``"compare"`` …), for a result
    written before the marker the kind its proof file stands for, else ``None``.

    A marker of the old shared kind ``"result"`` is reported as the kind its entries prove
    (``"compare"``: only a comparison's CSV tables; ``"export"``: only an export's files, its
    ``aggregate.csv`` or ``comparison.tex`` among them), or as ``"result"`` when they prove
    neither (no writer of today replaces it)."""
    return _kinds_of(Path(out))[0]


def _kinds_of(out: Path) -> tuple[str | None, str | None]:
    """``out``'s kind (:func:`output_kind`) and the kind its marker names verbatim (``None``:
    no marker; the two differ only for a marker of the old kind ``"result"``)."""
    marker = _read_marker(out)
    if marker is not None:
        raw = str(marker["memlab"])
        return (_legacy_result_kind(marker) if raw == LEGACY_RESULT_KIND else raw), raw
    proof = _legacy_proof(out)
    return (None if proof is None else _LEGACY_KIND_NAMES[proof]), None


def _legacy_result_kind(marker: dict[str, object]) -> str:
    """The kind a ``"result"`` marker's entries prove (see :func:`output_kind`)."""
    entries = marker.get("entries")
    if not isinstance(entries, list) or not entries:
        return LEGACY_RESULT_KIND
    names = {str(e) for e in entries}
    for kind, allowed in _LEGACY_RESULT_NAMES:
        if names <= allowed:
            return kind
    return LEGACY_RESULT_KIND


def _legacy_proof(out: Path) -> str | None:
    """The proof file (``manifest.json``, ``sweep.json``, ``tune.json``) by which an unmarked
    directory proves itself a memlab result (``None``: it proves nothing)."""
    for proof, fields, _ in _LEGACY_KINDS:
        try:
            data = json.loads((out / proof).read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError):
            continue
        if not isinstance(data, dict):
            continue
        if all(
            key in data and isinstance(data[key], types) and not isinstance(data[key], bool)
            for key, types in fields.items()
        ):
            return proof
    return None


def _legacy_claims(out: Path) -> set[str] | None:
    """The names an unmarked result proves memlab wrote (``None``: it proves nothing)."""
    proof = _legacy_proof(out)
    for name, _, names in _LEGACY_KINDS:
        if name == proof:
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
    result only when its ``manifest.json`` (or ``sweep.json``, or a tune's ``tune.json``) holds
    every field memlab always wrote there, with their types; it then claims only the exact
    names memlab wrote for that kind of result and the charts its ``report.md`` links as
    memlab links them
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


def check_output_dir(
    out: str | os.PathLike[str],
    *,
    what: str = "output directory",
    kinds: Collection[str] | None = None,
) -> Path:
    """Refuse an output directory memlab must not write into (see the module docstring).

    Args:
        out: The directory.
        what: How messages name it (``--out``).
        kinds: The kinds of memlab result the caller writes (:func:`output_kind`); a
            non-empty directory memlab wrote as another kind (a dataset under a sweep, a run
            under an export, a comparison under an export) is refused. A directory marked with
            the old shared kind ``"result"`` counts as the kind its entries prove (or as
            ``"result"`` itself, named in ``kinds``). ``None``: any kind.

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
            f"(no {OUTPUT_MARKER}, and no manifest.json, sweep.json or tune.json with every "
            "field memlab writes); give a new or empty directory"
        )
    if kinds is not None and any(path.iterdir()):
        kind, named = _kinds_of(path)
        if kind is not None and kind not in kinds and named not in kinds:
            raise OutputDirError(
                f"{what} {out}: is a memlab {kind} directory, which only a result of its own "
                f"kind replaces (this writes: {', '.join(sorted(set(kinds)))}); give a new or "
                "empty directory"
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
    tmp: Path,
    out: Path,
    *,
    owned: Callable[[str], bool] | None = None,
    keep: Collection[str] = (),
) -> None:
    """Publish the complete directory ``tmp`` as ``out``; never move what memlab did not write.

    ``out`` missing or empty: ``tmp`` is renamed to it. Otherwise the entries of ``out`` for
    which ``owned`` is true (none when ``owned`` is ``None``) are memlab's: they are moved into
    a hidden sibling ``.OUT.old-*`` and the entries of ``tmp`` are moved into ``out``, one
    rename each, then ``tmp`` (empty) and the sibling (memlab's old entries only) are removed.
    The other entries of ``out`` (a user's, or memlab's changed since it wrote them:
    :func:`unchanged_entries`) stay where they are, under their own name, the whole time.
    When ``tmp`` holds :data:`OUTPUT_MARKER`, ``out``'s marker first claims the old and the
    new entries and the new marker is moved in last, so a hard kill mid-swap leaves a
    directory whose memlab entries are all claimed. ``keep`` names entries of memlab's
    that stay where they are (a tune's ``study.db``, which later runs continue): never moved,
    and claimed by every marker written. A marker's ``sha256`` (a dataset's digest of each
    file) is carried into the interim marker as the digests of either version of each file.

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
    kept = set(keep)
    mine = [n for n in present if owned is not None and owned(n) and n not in kept]
    present = [n for n in present if n not in kept]
    foreign = [n for n in present if n not in mine]
    new = sorted(e.name for e in tmp.iterdir())
    clash = [n for n in foreign if n in new]
    if clash:
        raise OutputDirError(
            f"{out}: holds {', '.join(clash)}, which memlab did not write (or which changed "
            "since it did) and would overwrite; move it away first (nothing was written)"
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
                new_marker = _read_marker(tmp) or {}
                kind = str(new_marker["memlab"])
                union = sorted((set(mine) | set(new) | (kept & set(os.listdir(out))))
                               - {OUTPUT_MARKER})
                digests = _digest_union(_read_marker(out), new_marker)
                extra = {"sha256": digests} if digests else {}
                atomic_write_text(out / OUTPUT_MARKER, _marker_text(kind, union, **extra))
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


def _digest_union(*markers: dict[str, object] | None) -> dict[str, list[str]]:
    """Every marker's ``sha256`` digests per name (lists: either version may be present)."""
    union: dict[str, list[str]] = {}
    for marker in markers:
        digests = (marker or {}).get("sha256")
        if not isinstance(digests, dict):
            continue
        for name, value in digests.items():
            values = value if isinstance(value, list) else [value]
            for digest in values:
                if isinstance(digest, str) and digest not in union.setdefault(name, []):
                    union[name].append(digest)
    return union


def entry_digest(path: Path) -> str | None:
    """The sha256 of a result's entry as memlab wrote it: a regular file's bytes, or for a
    directory every file and directory below it (relative names, in order, and each file's
    digest). ``None`` for anything else (a symbolic link, a device), which memlab never
    writes, so that it never matches a digest."""
    if path.is_symlink():
        return None
    if path.is_file():
        digest = hashlib.sha256()
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
        return digest.hexdigest()
    if not path.is_dir():
        return None
    tree = hashlib.sha256(b"dir\0")
    for child in sorted(path.iterdir(), key=lambda c: c.name):
        sub = entry_digest(child)
        if sub is None:
            return None
        tree.update(f"{child.name}\0{sub}\0".encode("utf-8", "surrogateescape"))
    return tree.hexdigest()


def unchanged_entries(out: Path) -> Callable[[str], bool] | None:
    """:func:`owned_entries`, less the entries that changed since memlab wrote them: a
    marker that records each entry's ``sha256`` (:func:`entry_digest`) claims an entry only
    while it still has one of the digests recorded for it. A marker without digests (written
    before they were recorded), or an unmarked result, claims by name alone."""
    owned = owned_entries(out)
    marker = _read_marker(out)
    if owned is None or marker is None or not isinstance(marker.get("sha256"), dict):
        return owned

    def claimed(name: str) -> bool:
        if not owned(name):
            return False
        if name == OUTPUT_MARKER:
            return True
        digests = marker_digests(marker, name)
        return digests is not None and entry_digest(out / name) in digests

    return claimed


def marker_digests(marker: dict[str, object] | None, name: str) -> list[str] | None:
    """The digests a marker accepts for ``name`` (``None``: it records none)."""
    digests = (marker or {}).get("sha256")
    if not isinstance(digests, dict) or name not in digests:
        return None
    value = digests[name]
    values = value if isinstance(value, list) else [value]
    return [v for v in values if isinstance(v, str)]


@contextmanager
def atomic_directory(
    out: Path,
    *,
    kind: str = "result",
    keep: Collection[str] = (),
    replaces: Collection[str] | None = None,
) -> Iterator[Path]:
    """Yield a temporary sibling of ``out`` to fill; publish it as ``out`` on success.

    ``out`` is checked first (:func:`check_output_dir`). On success the entries written are
    recorded in :data:`OUTPUT_MARKER` and published with :func:`replace_directory`: memlab's
    entries of an earlier result are replaced, the entries memlab did not write stay in
    ``out`` untouched. On an exception (an interrupt included) ``out`` is left as it was and
    the temporary directory, which only ever holds what memlab wrote into it, is removed.

    Args:
        out: The result directory.
        kind: What the result is (``"experiment"``, ``"sweep"``, ``"tune"``), stored in the
            marker.
        keep: Entries of memlab's in ``out`` that stay in place and stay claimed (a tune's
            ``study.db``; see :func:`replace_directory`).
        replaces: The kinds of result ``out`` may already be (default: ``kind`` only;
            :func:`check_output_dir`'s ``kinds``).

    Raises:
        OutputDirError: ``out`` is refused (see the module docstring).
    """
    kinds = (kind,) if replaces is None else tuple(replaces)
    out = check_output_dir(out, kinds=kinds)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        os.chmod(tmp, 0o755)
        yield tmp
        kept = {n for n in keep if out.exists() and (out / n).exists()}
        written = sorted(e.name for e in tmp.iterdir())
        digests = {n: entry_digest(tmp / n) for n in written if n not in keep}
        entries = sorted(set(written) | kept)
        (tmp / OUTPUT_MARKER).write_text(
            _marker_text(kind, entries, sha256=digests), encoding="utf-8"
        )
        out = check_output_dir(out, kinds=kinds)  # it may have changed meanwhile
        owned = unchanged_entries(out) if out.exists() and any(out.iterdir()) else None
        replace_directory(tmp, out, owned=owned, keep=kept)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)


_FLOCK_CONTENTION = frozenset({errno.EACCES, errno.EAGAIN, errno.EWOULDBLOCK})


class DirectoryGate:
    """An exclusive ``flock`` on a directory itself (no file is created), taken without
    waiting (:meth:`try_take`) and let go by :meth:`release`.

    The store's writers queue at their store directory's gate in front of ``memlab.lock``
    (the one holding it waits for the lock, so a writer that closes the store and opens it
    again queues behind the writer that was waiting); runs recording generations take turns
    at their recording's directory. Where the directory cannot be locked (no ``flock``, some
    network file systems) there is no gate: :meth:`try_take` always succeeds.
    """

    def __init__(self, directory: Path) -> None:
        self.fd: int | None = None
        self.held = False
        try:
            import fcntl  # noqa: F401 - POSIX only
        except ImportError:  # pragma: no cover - Windows: no gate
            return
        try:
            self.fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        except OSError:
            self.fd = None

    def try_take(self) -> bool:
        """Take the gate without waiting: True when held (or when there is no gate)."""
        if self.fd is None:
            return True
        import fcntl

        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in _FLOCK_CONTENTION:
                return False
            self.release()  # the directory cannot be locked here: no gate
            return True
        self.held = True
        return True

    def release(self) -> None:
        """Let the gate go (closing the descriptor drops the ``flock``)."""
        if self.fd is not None:
            os.close(self.fd)
        self.fd = None
        self.held = False



# ---------------------------------------------------------------------------- single files


def check_output_file(
    path: str | os.PathLike[str],
    *,
    what: str = "output file",
    owned: Callable[[Path], bool] | None = None,
    kind: str = "a file memlab wrote",
) -> Path:
    """Refuse an output file memlab must not write (see the module docstring).

    A missing path (in a directory that exists or can be made) and an empty regular file are
    accepted; an existing regular file only when ``owned`` proves memlab wrote it. A symbolic
    link (even a dangling one), a directory, any other kind of file (a device, a pipe) and a
    path below a file are refused.

    Args:
        path: The file.
        what: How the message names it (``"--out"``).
        owned: Whether an existing non-empty file is memlab's (its content proves it).
        kind: What ``owned`` recognises, for the message (``"a judging queue"``).

    Returns:
        The absolute path.

    Raises:
        OutputFileError: Naming the file and what is wrong, in one line.
    """
    if not str(path).strip():
        raise OutputFileError(f"{what} {str(path)!r}: is empty; give a file name")
    target = Path(path).expanduser().absolute()
    for parent in target.parents:  # a file on the way: no file can be made there
        if parent.exists() and not parent.is_dir():
            raise OutputFileError(f"{what} {path}: {parent} is a file, not a directory")
    if target.is_symlink():
        raise OutputFileError(
            f"{what} {path}: is a symbolic link (to {os.readlink(target)}); memlab does not "
            "write through it: give the file it points to, or a new file name"
        )
    if not target.exists():
        return target
    if target.is_dir():
        raise OutputFileError(f"{what} {path}: is a directory; give a file name")
    if not target.is_file():
        raise OutputFileError(f"{what} {path}: exists and is not a regular file")
    if target.stat().st_size == 0:
        return target  # holds nothing that could be lost
    if owned is not None and owned(target):
        return target
    raise OutputFileError(
        f"{what} {path}: exists and is not {kind}; memlab replaces only a file it wrote: "
        "give a new file name, or move it away first"
    )


def publish_file(
    path: str | os.PathLike[str],
    data: str | bytes,
    *,
    what: str = "output file",
    owned: Callable[[Path], bool] | None = None,
    kind: str = "a file memlab wrote",
) -> Path:
    """Write a single-file output atomically, by the rule of :func:`check_output_file`.

    The content goes to a hidden sibling ``.NAME.tmp-*`` first; ``path`` is checked again
    just before the rename (it may have changed meanwhile) and the sibling is removed on any
    failure, so ``path`` is the old file or the complete new one and nothing else is left. A
    file replaced keeps its permission bits.

    Returns:
        The absolute path written.

    Raises:
        OutputFileError: ``path`` is refused (nothing was written).
    """
    checks = {"what": what, "owned": owned, "kind": kind}
    target = check_output_file(path, **checks)  # type: ignore[arg-type]
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = _write_sibling(target, data.encode("utf-8") if isinstance(data, str) else data)
    try:
        check_output_file(path, **checks)  # type: ignore[arg-type]
        _keep_mode(tmp, target)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return target


# ---------------------------------------------------------------------------- readers


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (its type's name when it has none)."""
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def read_bytes(path: str | os.PathLike[str]) -> bytes:
    """The bytes of a file; every failure a :class:`ValueError` naming it."""
    file = Path(path)
    try:
        return file.read_bytes()
    except FileNotFoundError:
        raise ValueError(f"{file}: no such file") from None
    except IsADirectoryError:
        raise ValueError(f"{file}: is a directory, not a file") from None
    except OSError as exc:
        raise ValueError(f"{file}: cannot be read ({exc.strerror or exc})") from None


def decode_utf8(data: bytes, where: str) -> str:
    """``data`` as UTF-8 text; ``ValueError`` naming ``where``, the byte and its line if not."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ValueError(
            f"{where}: not valid UTF-8 (byte 0x{data[exc.start]:02x} on line {line})"
        ) from None


def loads_json(text: str | bytes, where: str, **kwargs: Any) -> Any:
    """:func:`json.loads` with every failure one :class:`ValueError` naming ``where``.

    Args:
        text: The JSON text (bytes are decoded as UTF-8).
        where: What the message names: the file, or ``file:line`` for a JSONL line.
        **kwargs: Passed to :func:`json.loads` (hooks).

    Raises:
        ValueError: ``WHERE: not valid UTF-8 …`` or ``WHERE: invalid JSON: …`` (syntax, a
            nesting too deep for the parser, an integer of more than 4300 digits).
    """
    if isinstance(text, bytes):
        text = decode_utf8(text, where)
    try:
        return json.loads(text, **kwargs)
    except json.JSONDecodeError as exc:
        at = f"column {exc.colno}" if exc.lineno == 1 else f"line {exc.lineno}, column {exc.colno}"
        raise ValueError(f"{where}: invalid JSON: {exc.msg} ({at})") from None
    except RecursionError:
        raise ValueError(f"{where}: invalid JSON: nested too deeply to read") from None
    except ValueError as exc:
        raise ValueError(f"{where}: invalid JSON: {first_line(exc)}") from None


def read_json(path: str | os.PathLike[str], **kwargs: Any) -> Any:
    """The JSON document in a file (see :func:`loads_json`; the message names the file)."""
    return loads_json(read_bytes(path), str(path), **kwargs)


def loads_toml(text: str, where: str) -> dict[str, Any]:
    """:func:`tomllib.loads` with every failure one :class:`ValueError` naming ``where``.

    Raises:
        ValueError: ``WHERE: invalid TOML: …`` (syntax, or a nesting too deep to read).
    """
    import tomllib

    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{where}: invalid TOML: {exc}") from None
    except RecursionError:
        raise ValueError(f"{where}: invalid TOML: nested too deeply to read") from None
    except ValueError as exc:  # an integer of more than 4,300 digits
        raise ValueError(f"{where}: invalid TOML: {str(exc).splitlines()[0]}") from None


def read_toml(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The TOML document in a file (see :func:`loads_toml`; the message names the file)."""
    return loads_toml(decode_utf8(read_bytes(path), str(path)), str(path))


def read_parquet(path: str | os.PathLike[str], **kwargs: Any) -> Any:
    """``polars.read_parquet(path)``; a file polars cannot decode (empty, truncated, corrupt:
    whatever polars raises, a Rust panic included) is one :class:`ValueError` naming it.

    Args:
        path: The parquet file.
        **kwargs: Passed to :func:`polars.read_parquet` (``columns``).
    """
    import polars as pl
    from polars.exceptions import PanicException

    file = Path(path)
    if not file.is_file():
        raise ValueError(f"{file}: {'not a file' if file.exists() else 'no such file'}")
    try:
        return pl.read_parquet(file, **kwargs)
    except (Exception, PanicException) as exc:  # noqa: BLE001 - polars raises many types
        raise ValueError(f"{file}: not a readable parquet file ({first_line(exc)})") from None
