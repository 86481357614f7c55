"""Live serving: HTTP bulk ingest under concurrent load, and recall latency.

Usage: python bench/bench_serve.py [CLIENTS] [BATCHES] [BATCH_SIZE] [--time-limit S]

Starts ``memlab serve http`` (hashing embedder, a persisted store with chromadb, ``--record``)
on 127.0.0.1 and runs CLIENTS threads, each posting BATCHES batches of BATCH_SIZE distinct
memories (default 8 x 200 x 50 = 80,000), for at most ``--time-limit`` seconds. Reports
throughput of acknowledged memories, p50 / p95 request latency, the CPU per memory of the
server and of the clients (with the 2-core throughput they imply), how long the server takes
after the burst to bring chromadb up to date (it is not on the acknowledgement path), and
checks that every acknowledged item is in the store and in the recording. Then times
``recall`` with the ``rrf`` pipeline at 10,000 memories (in process, hashing embedder).

Goals (2 cores): >= 1,000 memories/s persisted through HTTP; recall p50 < 50 ms at 10k.
Each line prints memlab's number next to its goal, and the load average of the machine
(``os.getloadavg()``) before and after, since a shared machine slows every number down.
``--repeat N`` runs each measurement N times. ``--skip-ingest`` / ``--skip-recall`` run one half.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import numpy as np

WORDS = (
    "deploy billing api PostgreSQL Redis Kubernetes invoice customer outage latency cache "
    "release migration schema dashboard alert token budget review contract renewal Stripe "
    "Next.js onboarding sprint ticket incident rollback feature flag metrics"
).split()
MEMLAB = ("-c", "import sys; from memlab.cli import main; sys.exit(main())")
TOKEN = "bench-token-not-a-secret"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_health(url: str, proc: subprocess.Popen, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            if httpx.get(f"{url}/health", timeout=2.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError("server did not become healthy")


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux ``/proc``; NaN elsewhere): on a
    shared machine the server's CPU per memory is steadier than the wall clock."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return float("nan")


def ingest(clients: int, batches: int, size: int, time_limit: float) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="memlab-bench-serve-"))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "MEMLAB_INGEST_TOKEN": TOKEN}
    cmd = [sys.executable, *MEMLAB, "serve", "http", str(tmp / "store"), "--human",
           "--embedder", "hashing", "--no-cache", "--record", str(tmp / "rec"),
           "--port", str(port), "--max-batch", str(max(size, 1))]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    latencies: list[float] = []
    acked: list[str] = []
    lock = threading.Lock()
    try:
        wait_health(url, proc)
        deadline = time.monotonic() + time_limit  # the server's start does not count
        cpu_at_start = _cpu_seconds(proc.pid)

        def client(c: int) -> None:
            rng = random.Random(c)
            with httpx.Client(base_url=url, timeout=60.0,
                              headers={"Authorization": f"Bearer {TOKEN}"}) as http:
                for b in range(batches):
                    if time.monotonic() > deadline:
                        return
                    items = [
                        {"content": f"{' '.join(rng.choices(WORDS, k=10))} c{c} b{b} i{i}",
                         "memory_type": "event" if i % 2 else "fact",
                         **({} if i % 2 else {"key": f"c{c}-b{b}-i{i}"})}
                        for i in range(size)
                    ]
                    t0 = time.perf_counter()
                    r = http.post("/memories", json=items)
                    dt = time.perf_counter() - t0
                    ids = [x["id"] for x in r.json()["results"] if x["ok"]]
                    with lock:
                        latencies.append(dt)
                        acked.extend(ids)

        start, client_cpu0 = time.perf_counter(), time.process_time()
        threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - start
        client_cpu = time.process_time() - client_cpu0
        server_cpu = _cpu_seconds(proc.pid) - cpu_at_start
        # chromadb is not on the acknowledgement path: the server sends it the new vectors
        # once idle. Wait for that and report what it costs.
        t_idle, cpu_idle = time.perf_counter(), _cpu_seconds(proc.pid)
        backlog = -1
        while time.perf_counter() - t_idle < 600:
            backlog = httpx.get(f"{url}/health", timeout=30.0).json().get("chroma_backlog", 0)
            if backlog == 0:
                break
            time.sleep(0.5)
        catch_up = time.perf_counter() - t_idle
        catch_up_cpu = _cpu_seconds(proc.pid) - cpu_idle
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)

    from memlab.memory.store import MemoryStore

    with MemoryStore(tmp / "store", chroma=False) as store:
        in_store = set(store.ids)
    recorded = {
        json.loads(line)["id"]
        for line in (tmp / "rec" / "memories.jsonl").read_text().splitlines()
    }
    lat = np.asarray(latencies) * 1000.0
    acked_set = set(acked)
    return {
        "acknowledged": len(acked),
        "seconds": wall,
        "memories_per_s": len(acked) / wall,
        "p50_ms": float(np.percentile(lat, 50)) if len(lat) else float("nan"),
        "p95_ms": float(np.percentile(lat, 95)) if len(lat) else float("nan"),
        "missing_from_store": len(acked_set - in_store),
        "missing_from_recording": len(acked_set - recorded),
        "duplicate_acks": len(acked) - len(acked_set),
        "requests": len(latencies),
        "server_cpu_ms_per_memory": 1000.0 * server_cpu / max(len(acked), 1),
        "client_cpu_ms_per_memory": 1000.0 * client_cpu / max(len(acked), 1),
        "chroma_catch_up_s": catch_up,
        "chroma_catch_up_cpu_ms_per_memory": 1000.0 * catch_up_cpu / max(len(acked), 1),
        "chroma_backlog_left": backlog,
    }


def write_cpu(clients: int, size: int, blocks: int = 12) -> dict:
    """The write path without HTTP: the bench's items through ``MemoryService.store_many`` in
    process (persisted SQLite, a recording, chromadb deferred as the server has it), one group
    commit of ``clients`` calls of ``size`` items per block. CPU per memory of the process, min
    and median over the blocks (on a shared machine the minimum is the least disturbed)."""
    import logging

    logging.getLogger("memlab.store").setLevel(logging.ERROR)
    from memlab.embed import HashingEmbedder
    from memlab.memory.store import MemoryStore
    from memlab.pipeline import load_pipeline
    from memlab.serve.recording import Recorder
    from memlab.serve.service import MemoryService

    tmp = Path(tempfile.mkdtemp(prefix="memlab-bench-write-"))
    store = MemoryStore(tmp / "store", embedder=HashingEmbedder(), chroma_sync="deferred")
    svc = MemoryService(store, load_pipeline("rrf"), recorder=Recorder(tmp / "rec"))

    def batch(c: int, b: int) -> list[dict]:
        rng = random.Random(b * 1000 + c)
        return [{"content": f"{' '.join(rng.choices(WORDS, k=10))} c{c} b{b} i{i}",
                 "memory_type": "event" if i % 2 else "fact",
                 **({} if i % 2 else {"key": f"c{c}-b{b}-i{i}"})} for i in range(size)]

    svc.store_many(batch(0, -1))
    per: list[float] = []
    for b in range(blocks):
        calls = [batch(c, b) for c in range(clients)]
        c0 = time.process_time()
        with svc.lock:  # queue the calls as concurrent requests would, then commit them once
            threads = [threading.Thread(target=svc.store_many, args=(x,)) for x in calls]
            for t in threads:
                t.start()
            while len(svc._queue) < clients:
                time.sleep(0.001)
        for t in threads:
            t.join()
        per.append(1000.0 * (time.process_time() - c0) / (clients * size))
    svc.close()
    return {"min_ms": min(per), "median_ms": float(np.median(per))}


def recall_latency(n: int = 10_000, queries: int = 200) -> dict:
    import logging

    logging.getLogger("memlab.store").setLevel(logging.ERROR)  # keyless facts warn each time
    from memlab.embed import HashingEmbedder
    from memlab.memory.store import MemoryStore
    from memlab.pipeline import load_pipeline
    from memlab.serve.service import MemoryService

    rng = random.Random(0)
    store = MemoryStore(embedder=HashingEmbedder())
    svc = MemoryService(store, load_pipeline("rrf"), clock=lambda: 1.77e9)
    items = [{"content": f"{' '.join(rng.choices(WORDS, k=10))} #{i}"} for i in range(n)]
    for start in range(0, n, 1000):
        svc.store_many(items[start : start + 1000])
    times, cpu = [], []
    for _ in range(queries):
        q = " ".join(rng.choices(WORDS, k=4))
        t0, c0 = time.perf_counter(), time.thread_time()
        svc.recall(q, limit=10)
        times.append(time.perf_counter() - t0)
        cpu.append(time.thread_time() - c0)
    ms = np.asarray(times[10:]) * 1000.0
    cpu_ms = np.asarray(cpu[10:]) * 1000.0
    return {"memories": len(store), "p50_ms": float(np.percentile(ms, 50)),
            "p95_ms": float(np.percentile(ms, 95)),
            "cpu_p50_ms": float(np.percentile(cpu_ms, 50))}


def _load() -> str:
    return "load average " + " ".join(f"{x:.1f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("clients", nargs="?", type=int, default=8)
    parser.add_argument("batches", nargs="?", type=int, default=200)
    parser.add_argument("size", nargs="?", type=int, default=50)
    parser.add_argument("--time-limit", type=float, default=600.0)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--skip-ingest", action="store_true")
    parser.add_argument("--skip-recall", action="store_true")
    args = parser.parse_args()
    for run in range(1, args.repeat + 1):
        if not args.skip_ingest:
            before = _load()
            res = ingest(args.clients, args.batches, args.size, args.time_limit)
            ok = res["missing_from_store"] == 0 and res["missing_from_recording"] == 0
            server, client = res["server_cpu_ms_per_memory"], res["client_cpu_ms_per_memory"]
            # Idle 2-core estimate from CPU time alone: both processes share 2 cores, and the
            # server's Python runs on one core at a time (the GIL).
            estimate = min(2000.0 / (server + client), 1000.0 / server)
            print(
                f"[run {run}] ingest: {args.clients} clients x {args.batches} batches x "
                f"{args.size}: {res['acknowledged']} acknowledged in {res['seconds']:.1f} s = "
                f"{res['memories_per_s']:.0f} memories/s (goal >= 1000); request p50 "
                f"{res['p50_ms']:.0f} ms, p95 {res['p95_ms']:.0f} ms; acknowledged but missing "
                f"from the store: {res['missing_from_store']}, from the recording: "
                f"{res['missing_from_recording']} ({'verified' if ok else 'FAILED'}); server "
                f"CPU {server:.2f} ms/memory, client CPU {client:.2f} ms/memory (CPU-time "
                f"estimate on 2 idle cores: {estimate:.0f} memories/s); chromadb caught up "
                f"{res['chroma_catch_up_s']:.1f} s after the burst (server CPU "
                f"{res['chroma_catch_up_cpu_ms_per_memory']:.2f} ms/memory, backlog left "
                f"{res['chroma_backlog_left']}); {before} -> {_load()}"
            )
            before = _load()
            w = write_cpu(args.clients, args.size)
            print(
                f"[run {run}] write path in process ({args.clients} calls x {args.size} per "
                f"group commit, persisted, recording, chromadb deferred): CPU "
                f"{w['min_ms']:.2f} ms/memory min, {w['median_ms']:.2f} median over blocks; "
                f"{before} -> {_load()}"
            )
        if not args.skip_recall:
            before = _load()
            rec = recall_latency()
            print(
                f"[run {run}] recall (rrf, {rec['memories']} memories): p50 "
                f"{rec['p50_ms']:.1f} ms (goal < 50), p95 {rec['p95_ms']:.1f} ms; CPU of the "
                f"calling thread p50 {rec['cpu_p50_ms']:.1f} ms; {before} -> {_load()}"
            )


if __name__ == "__main__":
    main()
