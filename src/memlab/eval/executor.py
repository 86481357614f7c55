"""Executors: run independent tasks (sweep points, experiment pipelines) on cores or a cluster.

An executor maps ``fn(shared, task)`` over tasks and returns the results **in task order**, so a
parallel run writes exactly what a serial run writes. ``shared`` (the replayer with its frozen
embeddings, the dataset, the base pipeline) is pickled once; each worker unpickles it once per
run and keeps it, with its caches, for every task it is given.

* ``serial``: in this process, one task after another (``shared`` is used as is).
* ``joblib``: local cores: this process and ``n_jobs - 1`` workers of joblib's loky process
  pool (``n_jobs``; default all cores). :meth:`JoblibExecutor.warm` starts the workers and has
  them import memlab while this process prepares the data; ``map`` then finds them ready.
* ``ray``: a Ray cluster (``address="HOST:PORT"`` of a running head; default: a local Ray
  started for the run). Every node needs memlab installed (or on ``PYTHONPATH``).

``fn`` must be a module-level function so that workers can import it.
"""

from __future__ import annotations

import os
import pickle
import sys
import threading
import uuid
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

from memlab.registry import Registry

T = TypeVar("T")
R = TypeVar("R")
Meanwhile = Callable[[], object]
"""Work for the parent process while it waits for its workers (see :meth:`Executor.map`)."""

__all__ = [
    "EXECUTORS",
    "Executor",
    "JoblibExecutor",
    "Meanwhile",
    "RayExecutor",
    "SerialExecutor",
    "available_executors",
    "make_executor",
]


class Executor(Protocol):
    """Runs ``fn(shared, task)`` for every task; results in task order."""

    def map(self, fn: Callable[[Any, T], R], shared: Any, tasks: Sequence[T], *,
            meanwhile: Meanwhile | None = None, idle: Meanwhile | None = None) -> list[R]:
        """Return ``[fn(shared, t) for t in tasks]``, computed wherever the executor runs.

        ``meanwhile``: work for this process while it waits for the tasks (loading what it
        needs next); an executor that runs the tasks here may skip it. ``idle``: a
        module-level function each worker runs once no task is left for it, that nobody waits
        for (warming what the work after the tasks will ask of that worker); an executor
        without workers of its own skips it. The errors of both are ignored: what needs the
        work does it again and fails there.
        """
        ...


EXECUTORS: Registry[Callable[..., Executor]] = Registry("executor")
register_executor = EXECUTORS.register


def available_executors() -> tuple[str, ...]:
    """Names of the registered executors."""
    return tuple(EXECUTORS)


def make_executor(name: str, *, n_jobs: int | None = None, address: str | None = None) -> Executor:
    """Build the executor registered under ``name``.

    Raises:
        ValueError: Unknown name, ``n_jobs < 1``, or an address for an executor other than ray.
    """
    factory = EXECUTORS.lookup(name)
    if n_jobs is not None and (isinstance(n_jobs, bool) or not isinstance(n_jobs, int)):
        raise TypeError(f"n_jobs must be an int, got {n_jobs!r}")
    if n_jobs is not None and n_jobs < 1:
        raise ValueError(f"n_jobs must be >= 1, got {n_jobs}")
    if address is not None and name != "ray":
        raise ValueError(f"an address is for the ray executor, not {name!r}")
    if name == "ray":
        return factory(n_jobs=n_jobs, address=address)
    return factory(n_jobs=n_jobs)


# ------------------------------------------------------------------ worker side
_STATE: dict[str, Any] = {}


def _shared_state(token: str, blob: Any) -> Any:
    """The unpickled shared object of run ``token`` (kept in the worker for its later tasks)."""
    state = _STATE.get(token)
    if state is None:
        if not isinstance(blob, bytes):  # a Ray object reference, passed inside a list
            import ray

            blob = ray.get(blob[0])
        _STATE.clear()
        state = _STATE[token] = pickle.loads(blob)
    return state


WORKER_MEMORY_GROWTH = 16 * 2**30
"""How far (bytes) a worker's memory may grow past its size after its first call before loky
replaces it (loky's own limit, 300 MB, is raised to this in each worker: :func:`_keep_worker`)."""


def _keep_worker() -> None:
    """Raise loky's limit on a worker's memory growth (:data:`WORKER_MEMORY_GROWTH`).

    loky takes a worker that grew by 300 MB since its first call for a leak and replaces it
    with a new process once its task ends. A memlab worker keeps each run's shared state and
    its caches (a replay's query prefixes, entity and scrub memos) for the run's later tasks,
    by design; one LoCoMo shard grows it past that, and the replacement then imported memlab
    again before it could draw the report's charts (~1 s of the run's tail). The pool lives as
    long as the command, so nothing accumulates across commands."""
    try:
        from joblib.externals.loky import process_executor
    except ImportError:  # another worker kind (Ray): nothing to raise
        return
    limit = getattr(process_executor, "_MAX_MEMORY_LEAK_SIZE", None)
    if isinstance(limit, int) and limit < WORKER_MEMORY_GROWTH:
        process_executor._MAX_MEMORY_LEAK_SIZE = WORKER_MEMORY_GROWTH


def _call(fn: Callable[[Any, T], R], token: str, blob: Any, task: T) -> R:
    _keep_worker()
    return fn(_shared_state(token, blob), task)


def _idle_call(work: Meanwhile) -> None:
    """Run ``work`` (an ``idle``) in a worker, ignoring its errors (see :meth:`Executor.map`)."""
    _quietly(work)


def _quietly(work: Meanwhile | None) -> None:
    """Run ``work`` (a ``meanwhile``), ignoring its errors (see :meth:`Executor.map`)."""
    if work is None:
        return
    try:
        work()
    except Exception:  # noqa: BLE001 - a preload; what needs it loads it again and fails there
        pass


WORKER_MODULES: tuple[str, ...] = ("memlab.eval.experiment", "memlab.eval.sweep")
"""What a warmed worker imports (the task functions and every stage: what unpickling the
shared replayer and running a pipeline would import first)."""


CHART_MODULES: tuple[str, ...] = ("altair",)
"""What a warmed worker also imports when the run will draw charts (a report's or a sweep's,
drawn by an idle worker once the tasks end): altair, about a quarter of a second that a worker
otherwise spends after its last task, on the run's critical path. A worker that finished its
imports waits a while for its first task anyway (the parent is still loading and preparing the
data). vl-convert's JavaScript runtime is still started after the last task
(``warm_renderer``): started here, it would delay the worker's first task."""


def _import(modules: tuple[str, ...]) -> int:
    """Import ``modules`` in this worker; its process id (which worker did it)."""
    import importlib

    _keep_worker()
    for name in modules:
        importlib.import_module(name)
    return os.getpid()


def _shutdown_pool(*, kill: bool) -> None:
    """Stop joblib's shared loky pool, if it has one: at once (``kill``) or once its workers
    have finished what they hold."""
    from joblib.externals.loky import reusable_executor

    executor = getattr(reusable_executor, "_executor", None)
    if executor is not None:
        if kill:
            _quiet_killed_items()
        try:
            executor.shutdown(wait=not kill, kill_workers=kill)
        except Exception:  # noqa: BLE001 - the pool stops at exit anyway
            pass


def _quiet_killed_items() -> None:
    """Keep loky's manager thread from printing a traceback when a kill races it.

    Killing the pool (an interrupt) drops its pending work items while the pool's manager
    thread may still be moving one of them to the workers' queue; that thread then dies with a
    ``KeyError`` on the dropped item, which Python prints as an unhandled thread exception: a
    traceback on the terminal of a user who pressed Ctrl-C. Exactly that exception (a
    ``KeyError`` in loky's ``ExecutorManagerThread``) is dropped; every other goes to the hook
    that was installed before."""
    previous = threading.excepthook
    if getattr(previous, "memlab_quiet_kill", False):
        return

    def hook(args: Any) -> None:
        thread = args.thread
        if args.exc_type is KeyError and thread is not None and (
            thread.name == "ExecutorManagerThread"
        ):
            return
        previous(args)

    hook.memlab_quiet_kill = True  # type: ignore[attr-defined]
    threading.excepthook = hook


_QUIET_TRACKER = "ignore:resource_tracker:UserWarning"
"""The ``-W`` option loky's resource tracker is started with (see :func:`_loky_pool`)."""

_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS", "BLIS_NUM_THREADS")
"""Thread-pool sizes of numerical libraries, set in the workers' environment."""


def _loky_pool(workers: int) -> Any:
    """joblib's loky pool (one per process, reused between calls) with ``workers`` workers.

    As joblib does for its own pools, each worker's numerical libraries get the cores left per
    job (``cpu_count // (workers + 1)``, this process being a job too) unless this process's
    environment already sets them, so that the jobs do not oversubscribe the cores. The
    arguments are the same at every call for the same number of workers, so the pool is
    reused rather than restarted."""
    from joblib.externals.loky import cpu_count, get_reusable_executor

    # loky's resource tracker (a process it starts with this interpreter's -W options) can
    # report at exit a semaphore "leaked" by the pool's shutdown, which it then removes itself:
    # a harmless line on every user's terminal, so it is silenced there.
    if _QUIET_TRACKER not in sys.warnoptions:
        sys.warnoptions.append(_QUIET_TRACKER)
    threads = str(max(cpu_count() // (workers + 1), 1))
    env = {var: os.environ.get(var, threads) for var in _THREAD_VARS}
    return get_reusable_executor(max_workers=workers, timeout=300, env=env)


def _signal_handlers() -> dict[int, Any]:
    """This process's ``SIGINT``/``SIGTERM`` handlers (main thread only; elsewhere none)."""
    import signal

    if threading.current_thread() is not threading.main_thread():
        return {}
    return {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}


def _restore_signal_handlers(handlers: dict[int, Any]) -> None:
    """Put back handlers saved by :func:`_signal_handlers`."""
    import signal

    for sig, handler in handlers.items():
        signal.signal(sig, handler if handler is not None else signal.SIG_DFL)


# ------------------------------------------------------------------ executors
@register_executor("serial")
class SerialExecutor:
    """One task after another in this process.

    Args:
        n_jobs: Ignored (always 1).
    """

    def __init__(self, n_jobs: int | None = None) -> None:
        self.n_jobs = n_jobs

    def map(self, fn: Callable[[Any, T], R], shared: Any, tasks: Sequence[T], *,
            meanwhile: Meanwhile | None = None, idle: Meanwhile | None = None) -> list[R]:
        """The tasks in order, here (``meanwhile`` and ``idle`` are skipped: nothing runs
        while this process waits, and there is no worker)."""
        return [fn(shared, t) for t in tasks]


@register_executor("joblib")
class JoblibExecutor:
    """Local cores: this process and the worker processes of joblib's loky pool.

    This process takes tasks too: of ``n_jobs`` jobs, one is this process and ``n_jobs - 1``
    are loky workers. It already holds the data and has imported what the tasks need, where a
    worker first starts, imports memlab and unpickles ``shared``, so on two cores the work of
    a whole worker is saved. Each task still runs whole in one process, on ``shared`` as it
    was when the run began (workers get a pickled copy, this process the object itself), so
    the results are those of a serial run.

    Args:
        n_jobs: Jobs, this process included (default: every core); with one job or one task,
            the tasks run in this process alone.
    """

    def __init__(self, n_jobs: int | None = None) -> None:
        self.n_jobs = n_jobs
        # started without waiting: warm-up futures, and submissions nobody has asked for yet
        self._pending: list[Any] = []
        self._pool = 0  # workers of the loky pool this executor last used (0: none)
        self._used = False  # whether a map or submit gave the pool work (not only a warm-up)

    def _jobs(self, tasks: int | None) -> int:
        """Jobs for ``tasks`` tasks, this process included (``None``: as many as allowed)."""
        jobs = self.n_jobs or os.cpu_count() or 1
        return jobs if tasks is None else min(jobs, tasks)

    def warm(self, modules: Sequence[str] = WORKER_MODULES, tasks: int | None = None) -> None:
        """Start the worker processes now and have them import ``modules``, without waiting
        (one import task per worker). ``tasks``: how many tasks the coming :meth:`map` will
        have, if known (its pool has no more workers than that needs, and a pool of another
        size would be resized).

        A worker spends a second or two starting and importing before its first task. Started
        here, before the caller loads and prepares its data, that time overlaps the caller's
        own instead of following it. The next :meth:`map` reuses them (loky keeps its pool
        alive between calls) once the imports are done; a failed import is left to the tasks,
        which import what they need themselves. Nothing happens with one job.
        """
        workers = self._jobs(tasks) - 1
        if workers < 1 or not modules:
            return
        pool = _loky_pool(workers)
        self._pool = workers
        self._pending.extend(pool.submit(_import, tuple(modules)) for _ in range(workers))

    def _drain(self) -> None:
        """Wait for the work started without waiting (warm-ups, unclaimed submissions); their
        errors are left to what runs next (the tasks import what they need themselves)."""
        pending, self._pending = self._pending, []
        for future in pending:
            try:
                future.result()
            except Exception:  # noqa: BLE001 - see above
                pass

    def map(self, fn: Callable[[Any, T], R], shared: Any, tasks: Sequence[T], *,
            meanwhile: Meanwhile | None = None, idle: Meanwhile | None = None) -> list[R]:
        """The tasks on this process and the pool's workers, results in task order.

        Tasks are handed out one at a time, in order: the first to the workers, one each, the
        next to this process, and then each to whichever job is free first. ``meanwhile`` runs
        here once no task is left to start (this process's tasks have ended, the workers' last
        ones are under way): a core is then free, and the work takes none from the tasks.
        ``idle`` is handed to the pool as each worker's last task ends, and ``map`` returns
        without waiting for it: a worker that finishes first warms up for what the caller
        will :meth:`submit` next (it queues behind), while this process still works. With one
        job (or one task) the tasks run here and both are skipped. If tasks fail, no further
        task starts, the ones under way end, and the error of the earliest failed task is
        raised.
        """
        jobs = self._jobs(len(tasks))
        if jobs <= 1:  # here, without waiting for a warm-up (close() does)
            return SerialExecutor().map(fn, shared, tasks)
        workers = jobs - 1
        if self._pool != workers:  # a pool of another size is resized: its warm-up ends first
            self._drain()
        # Otherwise nothing waits for the warm-up: this process starts on its first task at
        # once, and each worker takes its first after its own imports (queued behind them).
        pool = _loky_pool(workers)
        self._pool, self._used = workers, True
        token, blob = uuid.uuid4().hex, pickle.dumps(shared, protocol=pickle.HIGHEST_PROTOCOL)
        out: list[Any] = [None] * len(tasks)
        errors: dict[int, BaseException] = {}
        lock = threading.Lock()
        order = iter(range(len(tasks)))

        def take() -> int | None:
            with lock:
                return None if errors else next(order, None)

        def feed(i: int | None) -> None:  # one per worker: its tasks, one after another
            while i is not None:
                try:
                    out[i] = pool.submit(_call, fn, token, blob, tasks[i]).result()
                except BaseException as exc:  # noqa: BLE001 - raised by map, in task order
                    with lock:
                        errors[i] = exc
                i = take()
            if idle is not None:
                with lock:
                    if not errors:  # nobody waits for it (close() does not either)
                        pool.submit(_idle_call, idle)

        # The workers' first tasks are the first ones, then this process takes the next:
        # where each task runs first does not depend on which thread is quicker.
        feeders = [threading.Thread(target=feed, args=(take(),), daemon=True)
                   for _ in range(workers)]
        for feeder in feeders:
            feeder.start()
        try:
            while (i := take()) is not None:
                try:
                    out[i] = fn(shared, tasks[i])
                except Exception as exc:  # noqa: BLE001 - raised below, in task order
                    with lock:
                        errors[i] = exc
            if not errors:
                _quietly(meanwhile)
        except BaseException:
            # Interrupted (Ctrl-C): no task starts, and the workers are stopped rather than
            # waited for.
            with lock:
                errors[-1] = RuntimeError("interrupted")
            self._pool = 0
            _shutdown_pool(kill=True)
            raise
        finally:
            for feeder in feeders:
                feeder.join()
        self._drain()  # the warm-up's imports ran before the tasks queued behind them
        if errors:
            raise errors[min(errors)]
        return out

    def close(self) -> None:
        """Stop the worker processes of the pool (a command about to exit).

        Work submitted and still under way (a task nobody asked for) is waited for first, so
        that nothing is dropped half-done; then the workers, which hold nothing but imports
        and warm-ups, are stopped at once. Neither a warm-up (of a pool that only warmed up:
        the run was refused, or ran in this process) nor ``idle`` work is waited for.
        """
        pool, used = self._pool, self._used
        self._pool, self._used = 0, False
        if used:
            self._drain()
        self._pending = []
        if pool >= 1:
            _shutdown_pool(kill=True)

    def submit(self, fn: Callable[..., R], *args: Any) -> Callable[[], R]:
        """Start ``fn(*args)`` on a worker of the pool the last :meth:`map` (or :meth:`warm`)
        used, without waiting; the returned function waits for its result.

        For work this process would otherwise do alone after the parallel part (a report's
        charts), while it does something else. Without a pool, or if the worker fails to
        deliver, ``fn`` runs here when the result is asked for (an error ``fn`` raises is
        raised there either way). ``fn`` must be a module-level function of picklable
        arguments.
        """
        if self._pool < 1:
            return lambda: fn(*args)
        try:
            future = _loky_pool(self._pool).submit(fn, *args)
        except Exception:  # noqa: BLE001 - no pool to hand it to: run it here
            return lambda: fn(*args)
        self._used = True
        self._pending.append(future)  # waited for by close() if nobody asks

        def result() -> R:
            if future in self._pending:
                self._pending.remove(future)
            try:
                return future.result()
            except Exception:  # noqa: BLE001 - computed again here; its own error shows
                return fn(*args)

        return result


@register_executor("ray")
class RayExecutor:
    """Tasks on a Ray cluster (one CPU each).

    Args:
        n_jobs: Ignored: Ray schedules on every CPU the cluster offers.
        address: ``HOST:PORT`` of a running Ray head (``ray start --head``); ``None`` starts a
            local Ray for the run. A connection this executor opened is closed after ``map``.
    """

    def __init__(self, n_jobs: int | None = None, address: str | None = None) -> None:
        self.n_jobs = n_jobs
        self.address = address

    def map(self, fn: Callable[[Any, T], R], shared: Any, tasks: Sequence[T], *,
            meanwhile: Meanwhile | None = None, idle: Meanwhile | None = None) -> list[R]:
        """The tasks on the cluster, results in task order; ``meanwhile`` runs here once they
        are submitted (``idle`` is skipped: nothing is submitted to the cluster after the
        tasks)."""
        if not tasks:
            return []
        import ray

        opened = not ray.is_initialized()
        # ray.init sets SIGINT/SIGTERM handlers of its own in the driver (SIGTERM: sys.exit)
        # and ray.shutdown leaves them: this process's own come back once the run ends.
        handlers = _signal_handlers() if opened else {}
        if opened:
            env = {k: os.environ[k] for k in ("PYTHONPATH",) if k in os.environ}
            extra: dict[str, Any] = {}
            host = (self.address or "").rpartition(":")[0].removeprefix("ray://")
            if host == "localhost" or host.startswith("127."):
                # A head on loopback: keep the driver's own endpoints on loopback too (Ray
                # otherwise advertises the machine's first network address).
                extra["_node_ip_address"] = "127.0.0.1" if host == "localhost" else host
            ray.init(
                address=self.address,
                include_dashboard=False,
                log_to_driver=False,
                runtime_env={"env_vars": env} if env else None,
                **extra,
            )
        try:
            token = uuid.uuid4().hex
            ref = ray.put(pickle.dumps(shared, protocol=pickle.HIGHEST_PROTOCOL))
            remote = ray.remote(num_cpus=1)(_call)
            refs = [remote.remote(fn, token, [ref], t) for t in tasks]
            _quietly(meanwhile)  # the cluster's cores are not this machine's
            return list(ray.get(refs))
        finally:
            if opened:
                ray.shutdown()
                _restore_signal_handlers(handlers)
