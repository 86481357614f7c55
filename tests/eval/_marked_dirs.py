"""Directories as memlab marks its results, for the tests of who may replace what."""

from __future__ import annotations

import json
from pathlib import Path


def marked(out: Path, kind: str, files: dict[str, str]) -> Path:
    """A directory memlab marked as a result of ``kind`` holding ``files`` (name → text)."""
    out.mkdir()
    for name, text in files.items():
        (out / name).write_text(text)
    (out / ".memlab-output.json").write_text(
        json.dumps({"memlab": kind, "entries": sorted(files)})
    )
    return out
