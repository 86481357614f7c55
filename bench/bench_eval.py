"""Whole-benchmark speed: warm LoCoMo ``conversational``, warm ``make eval``, a parallel sweep.

Usage: python bench/bench_eval.py [LOCOMO_DIR] [--jobs N] [--skip-locomo] [--rounds N]

* LoCoMo is imported (read by path) into a temporary directory and evaluated with
  ``conversational`` (``--no-expire --touch-k 0``) twice; the second, warm run is timed
  (goal: ≤ 5 s wall on 2 cores).
* ``make eval``'s work (its two commands: every shipped pipeline on ``datasets/agent-memories``
  and on ``datasets/agent-lifecycle``, reports written) is run twice through the CLI in
  subprocesses; the second pass is timed (goal: ≤ 30 s for both).
* A 12-point sweep of ``hybrid`` on ``datasets/agent-memories`` runs serially and with joblib
  on ``--jobs`` cores (goal: ≥ 1.7× on 2 cores; the outputs are compared byte for byte).

Every line printed names the command that reproduces it. Numbers depend on what else the
machine is doing: run it on an idle machine. ``--rounds N`` times each measurement N times
(the sweep as N serial/parallel pairs, back to back) and ends with the median of each: on a
shared machine one run of the same tree can be 1.5× another.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


CPU: list[float] = [0.0]
"""CPU seconds (user + system) of the last :func:`_memlab` command and the workers it waited
for."""


def _memlab(*args: str) -> float:
    """Wall seconds of one ``memlab`` command (a fresh process, as a user runs it); its CPU
    seconds go to :data:`CPU`."""
    env = dict(os.environ, CI="true")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "memlab.cli", *args], check=True, env=env, cwd=ROOT,
        stdout=subprocess.DEVNULL,
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU[0] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall


def _load() -> str:
    return "load average " + ", ".join(f"{x:.1f}" for x in os.getloadavg())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("locomo", nargs="?", default=str(ROOT.parent / "shared/datasets/locomo10"))
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--skip-locomo", action="store_true")
    ap.add_argument("--rounds", type=int, default=1, help="time each measurement N times")
    args = ap.parse_args()
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    medians: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        if not args.skip_locomo:
            _memlab("datasets", "import-locomo", args.locomo, str(t / "locomo"))
            cmd = ["eval", str(t / "locomo"), "--pipelines", "conversational", "--no-expire",
                   "--touch-k", "0", "--quiet", "--jobs", str(args.jobs)]
            _memlab(*cmd, "--out", str(t / "l0"))  # warms the caches
            warms = []
            for r in range(args.rounds):
                warms.append(_memlab(*cmd, "--out", str(t / f"l{r + 1}")))
                print(f"LoCoMo conversational, warm: {warms[-1]:.1f} s wall, {CPU[0]:.1f} s "
                      f"CPU (goal ≤ 5 s wall; {_load()})  [memlab {' '.join(cmd)} --out DIR]",
                      flush=True)
            medians.append(f"LoCoMo {statistics.median(warms):.1f} s")
        # make eval's two commands, once to warm the caches, then timed
        datasets = ("agent-memories", "agent-lifecycle")
        cmds = [["eval", f"datasets/{d}", "--quiet", "--jobs", str(args.jobs)] for d in datasets]
        for k, cmd in enumerate(cmds):
            _memlab(*cmd, "--out", str(t / f"e0-{k}"))
        totals = []
        for r in range(args.rounds):
            walls, cpus = [], []
            for k, cmd in enumerate(cmds):
                walls.append(_memlab(*cmd, "--out", str(t / f"e{r + 1}-{k}")))
                cpus.append(CPU[0])
            totals.append(sum(walls))
            parts = ", ".join(f"{d} {w:.1f} s" for d, w in zip(datasets, walls, strict=True))
            print(f"make eval, warm: {sum(walls):.1f} s wall ({parts}), {sum(cpus):.1f} s CPU "
                  f"(goal ≤ 30 s wall; {_load()})  [memlab eval datasets/agent-memories, then "
                  f"datasets/agent-lifecycle, --quiet --jobs {args.jobs} --out DIR]", flush=True)
        medians.append(f"make eval {statistics.median(totals):.1f} s")
        sweep = ["sweep", "datasets/agent-memories", "--pipeline", "hybrid",
                 "--grid", "rrf__k=10,30,60", "--grid", "lifecycle__decay_factor=0.98,1.0",
                 "--grid", "lifecycle__boost_weight=0,0.3", "--quiet", "--repeats", "5"]
        ratios = []
        for r in range(args.rounds):
            s_dir, p_dir = t / f"s{r}-serial", t / f"s{r}-joblib"
            serial = _memlab(*sweep, "--executor", "serial", "--out", str(s_dir))
            serial_cpu = CPU[0]
            par = _memlab(*sweep, "--executor", "joblib", "--jobs", str(args.jobs),
                          "--out", str(p_dir))
            same = all(
                (s_dir / n).read_bytes() == (p_dir / n).read_bytes()
                for n in ("results.parquet", "per_query.parquet", "sweep.json")
            )
            ratios.append(serial / par)
            print(f"12-point sweep: serial {serial:.1f} s wall ({serial_cpu:.1f} s CPU), joblib "
                  f"--jobs {args.jobs} {par:.1f} s wall ({CPU[0]:.1f} s CPU), speed-up "
                  f"{serial / par:.2f}× (goal ≥ 1.7× on 2 cores), identical outputs: {same} "
                  f"({_load()})  [memlab {' '.join(sweep)} --executor serial|joblib]",
                  flush=True)
        medians.append(f"sweep speed-up {statistics.median(ratios):.2f}× "
                       f"({min(ratios):.2f}–{max(ratios):.2f}×)")
    if args.rounds > 1:
        print(f"medians over {args.rounds} rounds: {', '.join(medians)}", flush=True)


if __name__ == "__main__":
    main()
