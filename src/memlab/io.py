"""Atomic writes: a crash never leaves a half-written file or result directory.

Result directories (``memlab eval --out DIR``, ``memlab sweep --out DIR``) carry a marker,
:data:`OUTPUT_MARKER`, listing the entries memlab wrote. Publishing a new result over ``DIR``
follows one rule: **nothing memlab did not write is ever deleted**.

* ``DIR`` missing or empty: the result is published there.
* ``DIR`` a memlab result (it has the marker; results written before the marker existed are
  recognised by their ``manifest.json`` or ``sweep.json``): it is replaced atomically, and the
  entries memlab did not write (a note a user added) are carried over into the new result.
* Anything else (a non-empty directory memlab did not write, a file, the working directory or
  one of its parents, even empty): refused with :class:`OutputDirError` before any work is done.
"""

from __future__ import annotations

import fnmatch
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

OUTPUT_MARKER = ".memlab-output.json"
"""The file that marks a directory memlab wrote (``{"memlab": KIND, "entries": [...]}``)."""

# What results written before the marker existed contained (their entries count as memlab's).
_LEGACY_RESULT_FILES = ("manifest.json", "metrics.json", "sweep.json", "report.md", "*.parquet",
                        "*.png", "*.svg")


class OutputDirError(ValueError):
    """An output directory memlab refuses to write into (one line, names the directory)."""


def atomic_write_text(path: Path, text: str) -> None:
    """Write text through a temporary file in the same directory and a rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _read_marker(out: Path) -> dict[str, object] | None:
    try:
        data = json.loads((out / OUTPUT_MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if isinstance(data, dict) and isinstance(data.get("memlab"), str):
        return data
    return None


def _legacy_result(out: Path) -> bool:
    for name, key in (("manifest.json", "pipelines"), ("sweep.json", "best_params")):
        try:
            data = json.loads((out / name).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and key in data:
            return True
    return False


def owned_entries(out: Path) -> Callable[[str], bool] | None:
    """Which top-level entries of ``out`` memlab wrote (``None``: ``out`` is not a result)."""
    marker = _read_marker(out)
    if marker is not None:
        entries = marker.get("entries")
        names = {str(e) for e in entries} if isinstance(entries, list) else set()
        names.add(OUTPUT_MARKER)
        return names.__contains__
    if _legacy_result(out):
        return lambda name: any(fnmatch.fnmatch(name, pat) for pat in _LEGACY_RESULT_FILES)
    return None


def check_output_dir(out: str | os.PathLike[str], *, what: str = "output directory") -> Path:
    """Refuse an output directory memlab must not write into (see the module docstring).

    Returns:
        The absolute path.

    Raises:
        OutputDirError: Naming the directory and what is wrong, in one line.
    """
    path = Path(out).expanduser().absolute()
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
            f"(no {OUTPUT_MARKER}); give a new or empty directory"
        )
    return path


def replace_directory(
    tmp: Path, out: Path, *, owned: Callable[[str], bool] | None = None
) -> None:
    """Publish the complete directory ``tmp`` as ``out`` (rename), keeping foreign entries.

    Entries of an existing ``out`` for which ``owned`` is false (or all of them when ``owned``
    is ``None`` and ``out`` is empty) are moved into ``tmp`` first; a foreign entry whose name
    the new result also uses makes the call fail with :class:`OutputDirError`, before
    anything moved. The old directory is removed only once it holds nothing but memlab's
    entries.
    """
    if out.exists():
        keep = sorted(
            e.name for e in out.iterdir() if owned is None or not owned(e.name)
        )
        clash = [name for name in keep if (tmp / name).exists()]
        if clash:
            raise OutputDirError(
                f"{out}: holds {', '.join(clash)}, which memlab did not write and would "
                "overwrite; move it away first"
            )
        for name in keep:
            os.replace(out / name, tmp / name)
        old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
        os.rmdir(old)
        os.replace(out, old)
        try:
            os.replace(tmp, out)
        except BaseException:
            os.replace(old, out)
            raise
        shutil.rmtree(old)
    else:
        os.replace(tmp, out)


@contextmanager
def atomic_directory(out: Path, *, kind: str = "result") -> Iterator[Path]:
    """Yield a temporary sibling of ``out`` to fill; publish it as ``out`` on success.

    ``out`` is checked first (:func:`check_output_dir`). On success the entries written are
    recorded in :data:`OUTPUT_MARKER` and the directory replaces ``out`` atomically, keeping
    the entries of an earlier result that memlab did not write. On an exception the temporary
    directory is removed and ``out`` is left as it was.

    Args:
        out: The result directory.
        kind: What the result is (``"experiment"``, ``"sweep"``), stored in the marker.
    """
    out = check_output_dir(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        os.chmod(tmp, 0o755)
        yield tmp
        entries = sorted(e.name for e in tmp.iterdir())
        (tmp / OUTPUT_MARKER).write_text(
            json.dumps({"memlab": kind, "entries": entries}, indent=2) + "\n", encoding="utf-8"
        )
        owned = owned_entries(out) if out.exists() and any(out.iterdir()) else None
        replace_directory(tmp, out, owned=owned if owned is not None else lambda _: True)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
