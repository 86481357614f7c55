"""Importing :mod:`memlab.stages` registers every stage and loads nothing it does not need."""

from __future__ import annotations

import subprocess
import sys

from memlab.stages.base import STAGES


def test_importing_the_stages_loads_neither_numba_nor_altair():
    # numba (the kernels) loads when a kernel first runs, altair when a chart is drawn: the
    # workers of a parallel run import every stage, and charts are drawn by one process
    code = (
        "import sys, memlab.stages, memlab.eval.experiment, memlab.eval.sweep; "
        "print(sorted(m for m in ('numba', 'altair') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_every_public_stage_module_registers_its_stage():
    for name in ("mmr", "entropy_gate", "bm25", "rrf", "lif", "maxp"):
        assert name in STAGES
