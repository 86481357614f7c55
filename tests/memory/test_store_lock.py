"""One writer process per store directory: a second writer waits for the lock, or gets a clear
error naming the store; readers (``memlab store check``) take no lock."""

import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from memlab.cli import main
from memlab.memory.records import StoreLockedError
from memlab.memory.store import MemoryStore

T0 = 1_767_225_600.0
ENV = {**os.environ, "ANONYMIZED_TELEMETRY": "False"}

HOLDER = textwrap.dedent(
    """
    import sys
    from memlab.memory.store import MemoryStore

    store = MemoryStore(sys.argv[1], chroma=False)
    store.store("held by the first process", source_agent="holder", now=1767225600.0)
    print("READY", flush=True)
    sys.stdin.readline()
    store.close()
    print("CLOSED", flush=True)
    """
)

RELATER = textwrap.dedent(
    """
    import sys
    from memlab.memory.store import MemoryStore

    path, tag = sys.argv[1], sys.argv[2]
    with MemoryStore(path, chroma=False, lock_timeout=120) as store:
        for i in range(15):
            store.relate(f"{tag}-src-{i}", "uses", f"{tag}-dst-{i}")
    print("DONE", flush=True)
    """
)


def start(tmp_path, source, *args):
    script = tmp_path / f"script{abs(hash(source))}.py"
    script.write_text(source)
    return subprocess.Popen(
        [sys.executable, str(script), *map(str, args)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=ENV,
    )


def wait_for(proc, word, timeout=120):
    deadline = time.monotonic() + timeout
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        if line.strip() == word:
            return
    proc.kill()
    pytest.fail(f"the child process never printed {word}")


def test_second_writer_gets_a_clear_error_then_opens_once_the_first_closes(tmp_path, capsys):
    path = tmp_path / "s"
    holder = start(tmp_path, HOLDER, path)
    try:
        wait_for(holder, "READY")
        with pytest.raises(StoreLockedError) as info:
            MemoryStore(path, chroma=False, lock_timeout=0.2)
        assert isinstance(info.value, ValueError)
        assert str(info.value).startswith(f"{path}: the store is open for writing in another")
        # a reader takes no lock
        assert main(["store", "check", str(path)]) == 0
        assert capsys.readouterr().out.strip() == "1 memories, 0 problem(s)"
        assert holder.stdin is not None
        holder.stdin.write("\n")
        holder.stdin.flush()
        wait_for(holder, "CLOSED")
    finally:
        holder.kill()
        holder.wait()
    with MemoryStore(path, chroma=False, lock_timeout=30) as store:
        assert store.texts == ["held by the first process"]


def release_after(holder: subprocess.Popen, seconds: float) -> None:
    """Have ``holder`` close its store ``seconds`` from now (a line on its stdin), in a thread."""

    def release() -> None:
        time.sleep(seconds)
        assert holder.stdin is not None
        holder.stdin.write("\n")
        holder.stdin.flush()

    threading.Thread(target=release, daemon=True).start()


def test_second_writer_waits_for_the_lock(tmp_path):
    path = tmp_path / "s"
    holder = start(tmp_path, HOLDER, path)
    try:
        wait_for(holder, "READY")

        release_after(holder, 1.0)
        start_t = time.monotonic()
        with MemoryStore(path, chroma=False, lock_timeout=120) as store:
            waited = time.monotonic() - start_t
            store.store("second writer", source_agent="b", now=T0 + 1)
        assert waited >= 0.9
    finally:
        holder.kill()
        holder.wait()
    with MemoryStore(path, chroma=False) as store:
        assert store.texts == ["held by the first process", "second writer"]


def test_two_processes_relating_at_once_keep_every_entity(tmp_path):
    path = tmp_path / "s"
    procs = [start(tmp_path, RELATER, path, tag) for tag in ("alpha", "beta")]
    for proc in procs:
        out, _ = proc.communicate(timeout=300)
        assert proc.returncode == 0 and out.strip() == "DONE"
    with MemoryStore(path, chroma=False) as store:
        names = sorted(store.graph.entity(i).name for i in range(store.graph.n_entities))
        assert names == sorted(
            f"{tag}-{end}-{i}"
            for tag in ("alpha", "beta")
            for end in ("src", "dst")
            for i in range(15)
        )
        assert store.graph.n_edges == 30
        for tag in ("alpha", "beta"):
            a, b = store.graph.find(f"{tag}-src-3"), store.graph.find(f"{tag}-dst-3")
            assert store.graph.strength(a, b, "uses") == 1.0


def test_a_second_store_in_the_same_process_is_refused(tmp_path):
    path = tmp_path / "s"
    with MemoryStore(path, chroma=False):
        with pytest.raises(StoreLockedError):
            MemoryStore(path, chroma=False, lock_timeout=0)
        with MemoryStore(path, read_only=True) as reader:
            assert len(reader) == 0
    with MemoryStore(path, chroma=False, lock_timeout=0):
        pass


# Opens, closes and reopens the store as told on stdin: "open SECONDS", "write TEXT", "close".
DRIVEN = textwrap.dedent(
    """
    import sys
    from memlab.memory.store import MemoryStore

    path, store, t = sys.argv[1], None, 1767225600.0
    for line in sys.stdin:
        cmd, _, arg = line.strip().partition(" ")
        if cmd == "open":
            try:
                store = MemoryStore(path, chroma=False, lock_timeout=float(arg))
            except ValueError as exc:
                print("LOCKED", exc, flush=True)
                continue
            print("OPENED", flush=True)
        elif cmd == "write":
            t += 1
            store.store(arg, source_agent="driven", now=t)
            print("WRITTEN", flush=True)
        elif cmd == "close":
            store.close()
            print("CLOSED", flush=True)
    """
)

# Says WAITING as it starts waiting for memlab.lock, then writes once and closes.
WAITER = textwrap.dedent(
    """
    import sys
    import filelock
    from memlab.memory.store import MemoryStore

    acquire = filelock.FileLock.acquire

    def announced(self, *args, **kwargs):
        print("WAITING", flush=True)
        return acquire(self, *args, **kwargs)

    filelock.FileLock.acquire = announced
    with MemoryStore(sys.argv[1], chroma=False, lock_timeout=300) as store:
        store.store("written by the waiter", source_agent="waiter", now=1767229200.0)
    print("DONE", flush=True)
    """
)


def tell(proc, command, answer):
    """Send one command to a DRIVEN child and return its answer line (starting with ``answer``)."""
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(command + "\n")
    proc.stdin.flush()
    line = proc.stdout.readline().strip()
    assert line.startswith(answer), (command, line)
    return line


def test_a_writer_that_reopens_queues_behind_the_one_waiting(tmp_path):
    """A writer that closes the store and opens it again at once does not take the lock back
    from a writer already waiting for it (filelock polls: alone, the reopening process won
    nearly every time, and writers of batches in a loop starved the others into
    StoreLockedError). A waiter stopped in the queue keeps nobody out for long."""
    import signal

    path = tmp_path / "s"
    driven = start(tmp_path, DRIVEN, path)
    waiter = None
    try:
        tell(driven, "open 30", "OPENED")
        tell(driven, "write first", "WRITTEN")
        waiter = start(tmp_path, WAITER, path)
        wait_for(waiter, "WAITING")  # in the queue, waiting for the lock
        os.kill(waiter.pid, signal.SIGSTOP)  # it cannot take the lock while stopped ...
        tell(driven, "close", "CLOSED")
        # ... yet the lock stays its turn: reopening at once waits, then gives up
        line = tell(driven, "open 0.5", "LOCKED")
        assert line == (
            f"LOCKED {path}: the store is open for writing in another process (waited 0.5 s "
            f"for its lock {path / 'memlab.lock'}: lock_timeout); one writer process per store "
            "directory — close the other one, retry, or open with read_only=True"
        )
        # a waiter that stays stopped is passed after a while, not waited for until timeout
        tell(driven, "open 120", "OPENED")
        tell(driven, "write while the waiter was stopped", "WRITTEN")
        os.kill(waiter.pid, signal.SIGCONT)
        tell(driven, "close", "CLOSED")
        wait_for(waiter, "DONE")
    finally:
        for proc in (driven, waiter):
            if proc is not None:
                proc.kill()
                proc.wait()
    with MemoryStore(path, read_only=True) as store:
        assert store.texts == ["first", "while the waiter was stopped", "written by the waiter"]
        assert store.check() == []


@pytest.mark.parametrize("how", ["removed", "replaced"])
def test_a_lock_file_removed_under_a_writer_keeps_a_second_writer_out(tmp_path, how):
    path = tmp_path / "s"
    holder = start(tmp_path, HOLDER, path)
    try:
        wait_for(holder, "READY")
        (path / "memlab.lock").unlink()
        if how == "replaced":
            (path / "memlab.lock").write_text("someone else's file\n")
        with pytest.raises(StoreLockedError) as info:
            MemoryStore(path, chroma=False, lock_timeout=0.3)
        assert str(info.value) == (
            f"{path}: the store is open for writing in another process that no longer holds "
            f"its lock file {path / 'memlab.lock'} (removed or replaced while that process ran; "
            "waited 0.3 s: lock_timeout); one writer process per store directory — stop the "
            "other one, then retry"
        )

        release_after(holder, 0.5)
        # a writer that waits opens once the first one has closed
        with MemoryStore(path, chroma=False, lock_timeout=60) as store:
            store.store("second writer", source_agent="b", now=T0 + 1)
            assert store.texts == ["held by the first process", "second writer"]
    finally:
        holder.kill()
        holder.wait()
    with MemoryStore(path, chroma=False) as store:
        assert store.texts == ["held by the first process", "second writer"]
        assert store.check() == []


def test_a_check_sees_a_writer_whose_lock_file_was_removed(tmp_path):
    # The writer's chromadb lag is a note while it is open, never a problem: with memlab.lock
    # removed under it, its byte on memlab.sqlite3 still says it is open.
    from memlab.memory.sqlite_io import writer_byte_held

    path = tmp_path / "s"
    writer = MemoryStore(path, chroma_sync="deferred")
    try:
        for i in range(3):
            writer.store(f"memory {i}", "event", source_agent="a", now=T0 + i,
                         embedding=[1.0, float(i), 0.5])
        assert writer_byte_held(path / "memlab.sqlite3")
        (path / "memlab.lock").unlink()
        with MemoryStore(path, read_only=True) as reader:
            assert reader.check() == []
    finally:
        writer.close()
    assert not writer_byte_held(path / "memlab.sqlite3")
