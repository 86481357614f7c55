import dataclasses
import functools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from memlab.datasets.format import load_dataset
from memlab.embed import HashingEmbedder
from memlab.embed.frozen import FrozenEmbedder, RecordingEmbedder, unloaded
from memlab.eval import executor as executor_module
from memlab.eval.executor import available_executors, make_executor
from memlab.eval.experiment import run_experiment
from memlab.eval.replay import ReplayConfig
from memlab.eval.sweep import run_sweep

HANDMADE = Path(__file__).resolve().parents[1] / "fixtures" / "handmade"
LIFECYCLE = Path(__file__).resolve().parents[2] / "datasets" / "agent-lifecycle"


def _square_plus(shared, task):
    return shared["offset"] + task * task


def test_executors_return_results_in_task_order():
    assert available_executors() == ("serial", "joblib", "ray")
    tasks = [3, 1, 2, 5]
    for name in ("serial", "joblib"):
        ex = make_executor(name, n_jobs=2)
        assert ex.map(_square_plus, {"offset": 10}, tasks) == [19, 11, 14, 35]
    # loky's resource tracker starts with this -W option: its exit report of a semaphore it
    # removes itself stays off the user's terminal
    assert "ignore:resource_tracker:UserWarning" in sys.warnoptions


def _pid_and_modules(shared, task):
    time.sleep(task)
    return os.getpid(), sorted(m for m in shared if m in sys.modules)


def _warming_up(tmp_path, monkeypatch, module: str, seconds: int, n_jobs: int = 2):
    """An executor of a new pool (``n_jobs - 1`` workers), warming up with ``module``, whose
    import takes ``seconds`` (written to ``tmp_path``, put on the path that loky hands its
    workers)."""
    (tmp_path / f"{module}.py").write_text(f"import time\ntime.sleep({seconds})\n")
    monkeypatch.syspath_prepend(tmp_path)  # loky starts its workers with this sys.path
    executor_module._shutdown_pool(kill=False)  # a pool of its own, started with that path
    ex = make_executor("joblib", n_jobs=n_jobs)
    ex.warm((module,))
    assert len(ex._pending) == n_jobs - 1  # one import per worker
    return ex


def test_warmed_workers_import_ahead_and_serve_the_next_map(tmp_path, monkeypatch):
    # Three jobs: this process and two workers, each worker importing a module that takes two
    # seconds. Three tasks of a second each: the first two on the workers, the third here.
    module = "memlab_two_second_import"
    ex = _warming_up(tmp_path, monkeypatch, module, 2, n_jobs=3)
    out = ex.map(_pid_and_modules, (module, "colorsys"), [1.0, 1.0, 1.0])
    assert ex._pending == []  # map waited for the warm-up
    pids = [pid for pid, _ in out]
    assert pids[2] == os.getpid() and len(set(pids)) == 3
    # the workers the warm-up started had imported the module; this process never did
    assert [mods for _, mods in out[:2]] == [[module], [module]]
    assert module not in out[2][1]
    monkeypatch.undo()
    executor_module._shutdown_pool(kill=False)  # the next test's pool starts without the path


def _pid_and_clock(shared, task):
    return os.getpid(), time.time()


def test_map_does_not_wait_for_the_warm_up_to_start_here(tmp_path, monkeypatch):
    # The worker spends three seconds importing; this process takes its task at once, and the
    # worker takes the first task once its import is done (queued behind it).
    ex = _warming_up(tmp_path, monkeypatch, "memlab_three_second_import", 3)
    out = ex.map(_pid_and_clock, None, [0, 1])
    (worker_pid, worker_at), (here_pid, here_at) = out
    assert here_pid == os.getpid() and worker_pid != here_pid
    assert worker_at - here_at > 1.5  # this task ran while the worker was still importing
    assert ex._pending == []  # the warm-up's future is collected by the end of map
    monkeypatch.undo()
    executor_module._shutdown_pool(kill=False)


def test_closing_a_pool_that_only_warmed_up_stops_it_without_waiting(tmp_path, monkeypatch):
    # A warm-up whose import would take ten minutes: close() must not wait for it (a refused
    # command, or one that ran in its own process, exits at once).
    ex = _warming_up(tmp_path, monkeypatch, "memlab_slow_import", 600)
    # the worker is importing it (a module that is not found would end the warm-up at once)
    time.sleep(3)
    assert not ex._pending[0].done()
    closing = threading.Thread(target=ex.close)
    closing.start()
    closing.join(timeout=60)
    assert not closing.is_alive()
    assert ex._pending == [] and ex._pool == 0
    monkeypatch.undo()  # the next run starts a new pool, with this process's path
    assert ex.map(_square_plus, {"offset": 1}, [2, 3]) == [5, 10]


def test_a_failed_warm_up_import_is_left_to_the_tasks():
    ex = make_executor("joblib", n_jobs=2)
    ex.warm(("memlab_no_such_module",))
    assert ex.map(_square_plus, {"offset": 1}, [2, 3]) == [5, 10]


def test_warming_one_job_or_the_serial_executor_does_nothing():
    one = make_executor("joblib", n_jobs=1)
    one.warm()
    assert one._pending == []
    two = make_executor("joblib", n_jobs=2)
    two.warm(tasks=1)  # a map of one task runs in this process
    assert two._pending == []
    assert not hasattr(make_executor("serial"), "warm")


def _where_and_threads(shared, task):
    time.sleep(task)
    return os.getpid(), os.environ.get("OPENBLAS_NUM_THREADS")


def test_this_process_takes_tasks_beside_the_workers():
    # Two jobs: this process and one worker, sharing six tasks of 0.3 s: the first goes to the
    # worker, the second here, the others to whichever is free first. The worker's numerical
    # libraries get the cores per job.
    from joblib.externals.loky import cpu_count

    ex = make_executor("joblib", n_jobs=2)
    out = ex.map(_where_and_threads, None, [0.3] * 6)
    pids = [pid for pid, _ in out]
    assert pids[0] != os.getpid() and pids[1] == os.getpid() and len(set(pids)) == 2
    threads = os.environ.get("OPENBLAS_NUM_THREADS", str(max(cpu_count() // 2, 1)))
    assert {t for pid, t in out if pid != os.getpid()} == {threads}


def _mark_then_sleep(shared, task):
    """Leave a file ``started-TASK`` in ``shared``, sleep ``task`` seconds, then leave
    ``ended-TASK``."""
    (Path(shared) / f"started-{task}").write_text("", encoding="utf-8")
    time.sleep(task)
    (Path(shared) / f"ended-{task}").write_text("", encoding="utf-8")
    return os.getpid(), task


def test_meanwhile_runs_here_once_no_task_is_left_to_start(tmp_path):
    # Two jobs (this process and a worker), four tasks: the first (3 s) goes to the worker,
    # the three short ones run here, and then this process does its own work, while the
    # worker's task runs on.
    seen = []

    def meanwhile():
        seen.append((os.getpid(), sorted(p.name for p in tmp_path.iterdir())))

    ex = make_executor("joblib", n_jobs=2)
    out = ex.map(_mark_then_sleep, str(tmp_path), [3.0, 0.1, 0.2, 0.3], meanwhile=meanwhile)
    assert [task for _, task in out] == [3.0, 0.1, 0.2, 0.3]
    assert [pid == os.getpid() for pid, _ in out] == [False, True, True, True]
    assert seen == [(os.getpid(), [
        "ended-0.1", "ended-0.2", "ended-0.3",
        "started-0.1", "started-0.2", "started-0.3", "started-3.0",
    ])]


def test_meanwhile_errors_are_ignored_and_a_map_here_skips_it(tmp_path):
    calls = []

    def failing():
        calls.append("called")
        raise ImportError("a preload that fails is done again, and fails, where it is needed")

    two = make_executor("joblib", n_jobs=2)
    assert two.map(_square_plus, {"offset": 1}, [2, 3], meanwhile=failing) == [5, 10]
    assert calls == ["called"]  # once this process has no task left to take
    # the tasks run in this process: nothing to wait for, nothing done meanwhile
    assert make_executor("serial").map(_square_plus, {"offset": 1}, [2], meanwhile=failing) == [5]
    assert two.map(_square_plus, {"offset": 1}, [4], meanwhile=failing) == [17]
    assert calls == ["called"]


def _idle_mark(folder):
    """An ``idle``: after a second, leave ``idle-PID`` in ``folder``."""
    time.sleep(1.0)
    (Path(folder) / f"idle-{os.getpid()}").write_text("", encoding="utf-8")


def _idle_marks(folder):
    return sorted(p.name for p in Path(folder).iterdir() if p.name.startswith("idle-"))


def test_idle_runs_on_a_worker_after_its_last_task_and_nobody_waits_for_it(tmp_path):
    # Two jobs: the worker's task (0.2 s) ends, then it runs the idle work (1 s) while this
    # process's task runs on; map returns without waiting for it, and a submitted task queues
    # behind it on the worker.
    ex = make_executor("joblib", n_jobs=2)
    out = ex.map(_mark_then_sleep, str(tmp_path), [0.2, 0.4],
                 idle=functools.partial(_idle_mark, str(tmp_path)))
    worker = out[0][0]
    assert worker != os.getpid() and out[1][0] == os.getpid()
    assert _idle_marks(tmp_path) == []  # not waited for: still sleeping
    assert ex.submit(_square_plus, {"offset": 1}, 2)() == 5
    assert _idle_marks(tmp_path) == [f"idle-{worker}"]  # once, on the worker, before that
    # a map here (one task) skips it, and so does the serial executor
    idle = functools.partial(_idle_mark, str(tmp_path))
    assert ex.map(_square_plus, {"offset": 1}, [4], idle=idle) == [17]
    assert make_executor("serial").map(_square_plus, {"offset": 1}, [4], idle=idle) == [17]
    time.sleep(1.5)
    assert _idle_marks(tmp_path) == [f"idle-{worker}"]


def test_close_stops_the_workers_without_waiting_for_their_idle_work(tmp_path):
    # The idle work would take ten minutes: close() stops the worker instead of waiting.
    ex = make_executor("joblib", n_jobs=2)
    assert ex.map(_square_plus, {"offset": 0}, [1, 2],
                  idle=functools.partial(time.sleep, 600)) == [1, 4]
    closing = threading.Thread(target=ex.close)
    closing.start()
    closing.join(timeout=60)
    assert not closing.is_alive()
    assert ex._pending == [] and ex._pool == 0
    assert ex.map(_square_plus, {"offset": 1}, [2, 3]) == [5, 10]  # a new pool


def _fails_on_two(shared, task):
    if task == 2:
        raise ValueError(f"task {task} failed ({shared})")
    return task


def test_a_failing_task_raises_its_own_error_and_the_pool_serves_the_next_map():
    ex = make_executor("joblib", n_jobs=2)
    with pytest.raises(ValueError, match=r"^task 2 failed \(shared\)$"):
        ex.map(_fails_on_two, "shared", [0, 1, 2, 3])
    assert ex.map(_fails_on_two, "shared", [0, 1, 3]) == [0, 1, 3]


def _fails_after(shared, task):
    time.sleep(task)
    raise ValueError(f"task of {task} s failed")


def test_of_tasks_failing_at_once_the_earliest_in_task_order_is_raised():
    # The first task goes to the worker, the second runs here and fails first; no further task
    # starts, and the first task's error is the one raised, as in a serial run.
    ex = make_executor("joblib", n_jobs=2)
    with pytest.raises(ValueError, match=r"^task of 1.0 s failed$"):
        ex.map(_fails_after, None, [1.0, 0.1, 0.1, 0.1])


def test_make_executor_rejects_bad_settings():
    with pytest.raises(ValueError, match="unknown executor 'dask'"):
        make_executor("dask")
    with pytest.raises(ValueError, match="n_jobs must be >= 1"):
        make_executor("joblib", n_jobs=0)
    with pytest.raises(ValueError, match="an address is for the ray executor"):
        make_executor("joblib", address="127.0.0.1:6379")


def test_recorded_vectors_freeze_into_a_model_free_embedder():
    rec = RecordingEmbedder(HashingEmbedder(dim=8))
    first = rec.embed(["a b", "c"])
    frozen = rec.freeze(fallback=False)
    assert frozen.model_id == "hashing-d8-s0-c0" and frozen.dim == 8
    assert np.array_equal(frozen.embed(["c", "a b"]), first[[1, 0]])
    with pytest.raises(ValueError, match="text not precomputed: 'zzz'"):
        frozen.embed(["zzz"])
    with_fallback = rec.freeze()
    assert np.array_equal(with_fallback.embed(["zzz"]), HashingEmbedder(dim=8).embed(["zzz"]))
    assert with_fallback.misses_ == 1
    # The fallback's vector is kept: asked again (with a new text), only the new one misses.
    again = with_fallback.embed(["zzz", "yy"])
    assert np.array_equal(again, HashingEmbedder(dim=8).embed(["zzz", "yy"]))
    assert with_fallback.misses_ == 2
    model = HashingEmbedder(dim=8)
    model.model_ = object()  # a loaded model is not shipped
    assert not hasattr(unloaded(model), "model_")
    assert isinstance(FrozenEmbedder(["x"], first[:1], "m").embed(["x"]), np.ndarray)


def test_parallel_experiment_gives_the_serial_metrics(tmp_path):
    kw = dict(pipelines=["bm25", "dense", "hybrid"], embedder=HashingEmbedder(dim=64),
              progress=False, n_resamples=200, write_report=False)
    serial = run_experiment(HANDMADE, out=tmp_path / "s", executor="serial", **kw)
    par = run_experiment(HANDMADE, out=tmp_path / "p", executor="joblib", n_jobs=2, **kw)
    for name in ("metrics.json", "per_query.parquet", "rankings.parquet", "comparison.parquet"):
        assert (tmp_path / "s" / name).read_bytes() == (tmp_path / "p" / name).read_bytes()
    assert serial.metrics == par.metrics


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for_port(port: int, proc: subprocess.Popen, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and proc.poll() is None:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return True
        time.sleep(0.5)
    return False


def _ray_round_trip(out: str) -> None:
    """Start a Ray head on loopback, run one sweep serially and one on the head into ``out``
    (``s`` and ``r``), check what stays in this process, and stop the head. Run in a private
    network namespace (:func:`test_sweep_on_a_ray_head_started_on_loopback`): Ray binds some
    of its servers to every interface whatever ``--node-ip-address`` says."""
    out_dir = Path(out)
    ray_cli = Path(sys.executable).with_name("ray")
    port = _free_port()
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0")
    temp = tempfile.mkdtemp(prefix="rt", dir="/tmp")  # Ray's socket paths must stay short
    head = subprocess.Popen(  # its own process group: stopping it ends only what it started
        [str(ray_cli), "start", "--head", "--block", f"--port={port}",
         "--node-ip-address=127.0.0.1", "--num-cpus=1", "--include-dashboard=false",
         "--disable-usage-stats", f"--temp-dir={temp}"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
        start_new_session=True,
    )
    try:
        if not _wait_for_port(port, head, 90):
            head.kill()
            print((head.communicate(timeout=30)[0] or "").strip()[-300:])
            sys.exit(3)  # the head did not come up: skipped by the test
        grid = {"rrf__k": [1, 60]}
        kw = dict(embedder=HashingEmbedder(dim=64), progress=False, repeats=2, n_resamples=200)
        serial = run_sweep(HANDMADE, "rrf", grid, executor="serial", out=out_dir / "s", **kw)
        ray_ex = make_executor("ray", address=f"127.0.0.1:{port}")
        before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
        on_ray = run_sweep(HANDMADE, "rrf", grid, executor=ray_ex, out=out_dir / "r", **kw)
        # Ray's driver handlers (SIGTERM: sys.exit) do not outlive the run
        assert {sig: signal.getsignal(sig) for sig in before} == before
        assert on_ray.results.equals(serial.results)
    finally:
        if head.poll() is None:
            os.killpg(head.pid, signal.SIGTERM)
            try:
                head.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(head.pid, signal.SIGKILL)
                head.wait(timeout=30)
        shutil.rmtree(temp, ignore_errors=True)


@pytest.mark.slow
def test_sweep_on_a_ray_head_started_on_loopback(tmp_path):
    if not Path(sys.executable).with_name("ray").exists():
        pytest.skip(f"no ray command beside {sys.executable}")
    unshare, ip = shutil.which("unshare"), shutil.which("ip")
    if unshare is None or ip is None or subprocess.run(
        [unshare, "-rn", ip, "link", "set", "lo", "up"], capture_output=True
    ).returncode != 0:
        pytest.skip("no private network namespace (unshare -rn, ip): Ray would bind its "
                    "servers to every interface")
    src = str(Path(__file__).resolve().parents[2] / "src")
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    child = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('ray_case', {str(Path(__file__))!r})\n"
        "module = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(module)\n"
        f"module._ray_round_trip({str(tmp_path)!r})\n"
    )
    # loopback only: nothing Ray starts can be reached from another machine
    proc = subprocess.run(
        [unshare, "-rn", "sh", "-c", f'"{ip}" link set lo up && exec "$0" -c "$1"',
         sys.executable, child],
        capture_output=True, text=True, env=env, timeout=900,
    )
    if proc.returncode == 3:
        pytest.skip(f"ray start did not come up on this machine: {proc.stdout.strip()[-300:]}")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    for name in ("results.parquet", "per_query.parquet", "sweep.json"):
        assert (tmp_path / "s" / name).read_bytes() == (tmp_path / "r" / name).read_bytes()
    assert json.loads((tmp_path / "r" / "manifest.json").read_text())["executor"] == (
        "RayExecutor"
    )


def test_tail_loads_preload_the_tests_and_warm_the_renderer_in_a_fresh_process():
    code = (
        "import sys\n"
        "from memlab.eval.executor import make_executor\n"
        "from memlab.eval.experiment import charts_on_worker, tail_loads\n"
        "from memlab.eval.report import renderer_is_warm\n"
        "assert tail_loads(tests=False, charts=False) is None\n"
        "before = ('scipy.stats' in sys.modules, renderer_is_warm(),"
        " charts_on_worker(make_executor('joblib', n_jobs=2)))\n"
        "tail_loads(tests=True, charts=True)()\n"
        "after = ('scipy.stats' in sys.modules, renderer_is_warm(),"
        " charts_on_worker(make_executor('joblib', n_jobs=2)))\n"
        "print(before, after, charts_on_worker(make_executor('serial')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    # before: nothing loaded, a pool's worker draws the charts; after: both loaded, here
    assert out.stdout.split("\n")[-2] == "(False, False, True) (True, True, False) False"


def test_one_pipeline_in_shards_draws_the_charts_of_a_serial_run(tmp_path):
    # The worker warms its renderer once its shard ends and draws the charts: the same bytes
    # as a serial run, which draws them here.
    ds = load_dataset(LIFECYCLE)
    config = dataclasses.replace(ReplayConfig.from_dataset(ds), touch_k=0, expire=False)
    kw = dict(pipelines=["hybrid"], embedder=HashingEmbedder(dim=64), replay=config,
              progress=False, shards=2)
    run_experiment(ds, out=tmp_path / "s", executor="serial", **kw)
    run_experiment(ds, out=tmp_path / "p", executor="joblib", n_jobs=2, **kw)
    names = ("metrics.svg", "metrics.png", "tags.svg", "tags.png", "rankings.parquet")
    for name in names:
        assert (tmp_path / "s" / name).read_bytes() == (tmp_path / "p" / name).read_bytes()


def _interrupted_here(parent_pid, task):
    if os.getpid() == parent_pid:
        raise KeyboardInterrupt
    time.sleep(task)
    return task


def test_an_interrupt_here_stops_the_workers_instead_of_waiting_for_them():
    # The worker's task would take a minute; Ctrl-C in this process's task ends the map at
    # once, and the next map starts a new pool.
    ex = make_executor("joblib", n_jobs=2)
    assert ex.map(_square_plus, {"offset": 0}, [1, 2]) == [1, 4]  # the worker is up
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        ex.map(_interrupted_here, os.getpid(), [60, 0])
    assert time.monotonic() - start < 30
    assert ex.map(_square_plus, {"offset": 1}, [2, 3]) == [5, 10]


def _leak_limit(shared, task):
    """The memory growth loky lets this process's worker loop allow, and the process id."""
    from joblib.externals.loky import process_executor

    return process_executor._MAX_MEMORY_LEAK_SIZE, os.getpid()


def test_workers_allow_a_runs_state_to_grow_past_lokys_leak_limit():
    """loky replaces a worker grown by 300 MB since its first call as leaking (then the next
    task waits for a new process to import memlab); memlab workers keep a run's state for its
    later tasks, so each worker raises the limit to WORKER_MEMORY_GROWTH (16 GiB) before its
    first task. With two jobs each map's first task is the one worker's."""
    assert executor_module.WORKER_MEMORY_GROWTH == 16 * 2**30
    ex = make_executor("joblib", n_jobs=2)
    limit, pid = ex.map(_leak_limit, {}, ["worker", "here"])[0]
    assert pid != os.getpid() and limit == 16 * 2**30


def test_a_killed_pools_manager_thread_race_prints_nothing(monkeypatch) -> None:
    """Killing the pool can drop a work item loky's manager thread is about to queue; its
    KeyError is not printed as an unhandled thread exception. Other exceptions still are."""
    import threading

    from memlab.eval.executor import _quiet_killed_items

    seen: list[tuple[str, str]] = []
    monkeypatch.setattr(threading, "excepthook",
                        lambda args: seen.append((args.thread.name, args.exc_type.__name__)))
    _quiet_killed_items()
    _quiet_killed_items()  # installed once

    def fail(exc: BaseException) -> None:
        raise exc

    for name, exc in (("ExecutorManagerThread", KeyError(10)),
                      ("ExecutorManagerThread", ValueError("x")),
                      ("Thread-9", KeyError(3))):
        t = threading.Thread(target=fail, args=(exc,), name=name)
        t.start()
        t.join()
    assert seen == [("ExecutorManagerThread", "ValueError"), ("Thread-9", "KeyError")]
