"""The environment of a memlab server started by a test in a subprocess."""

from __future__ import annotations

import os
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[2] / "src")
"""memlab's source, put on the subprocess's path."""


def server_env() -> dict[str, str]:
    """This process's environment without memlab's tokens (a test gives its own), with
    memlab's source on the path and every model library offline."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("MEMLAB_INGEST_TOKEN", "MEMLAB_MCP_TOKEN")}
    return {**env, "PYTHONPATH": SRC, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
            "ANONYMIZED_TELEMETRY": "False", "TOKENIZERS_PARALLELISM": "false"}
