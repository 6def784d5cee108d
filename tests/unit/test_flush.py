"""flush_logs: every log fsynced once, concurrently, and a failure raised only after every flush returned."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from compactlog import flush
from compactlog.errors import KafkaStorageError
from compactlog.flush import flush_logs


class BarrierLog:
    """A log whose flush returns only once ``parties`` flushes are running at the same time."""

    def __init__(self, name: str, barrier: threading.Barrier, flushed: list[str], fail: bool = False) -> None:
        self.name, self.barrier, self.flushed, self.fail = name, barrier, flushed, fail

    def flush(self) -> None:
        self.barrier.wait()  # BrokenBarrierError (after the timeout) when the flushes run one after another
        self.flushed.append(self.name)
        if self.fail:
            raise KafkaStorageError(f"{self.name}: fsync failed")


def test_the_logs_are_flushed_at_the_same_time_each_once() -> None:
    barrier, flushed = threading.Barrier(4, timeout=10), []
    flush_logs([BarrierLog(f"p{i}", barrier, flushed) for i in range(4)])
    assert sorted(flushed) == ["p0", "p1", "p2", "p3"]


def test_a_failed_flush_is_raised_after_every_other_log_was_flushed() -> None:
    barrier, flushed = threading.Barrier(3, timeout=10), []
    logs = [BarrierLog("p0", barrier, flushed), BarrierLog("p1", barrier, flushed, fail=True),
            BarrierLog("p2", barrier, flushed)]
    with pytest.raises(KafkaStorageError, match="p1: fsync failed"):
        flush_logs(logs)
    assert sorted(flushed) == ["p0", "p1", "p2"]


def test_no_logs_is_nothing_to_do(monkeypatch: pytest.MonkeyPatch) -> None:
    # No flush thread is started or handed anything, no wait: it returns at once.
    monkeypatch.setattr(flush, "_flush_queue", lambda: pytest.fail("flush_logs([]) used the flush threads"))
    assert flush_logs([]) is None
    one = ThreadRecordingLog([])
    flush_logs([one])  # one log is flushed in the caller's thread, without the flush threads either
    assert one.threads == [threading.current_thread()]


class ThreadRecordingLog:
    """A log whose flush notes the thread it ran in."""

    def __init__(self, threads: list[threading.Thread]) -> None:
        self.threads = threads

    def flush(self) -> None:
        self.threads.append(threading.current_thread())


def test_the_flush_threads_are_kept_between_calls_not_started_per_log() -> None:
    threads: list[threading.Thread] = []  # held: a finished thread's object is never confused with a new one
    for _ in range(20):
        flush_logs([ThreadRecordingLog(threads) for _ in range(3)])
    others = {id(thread) for thread in threads if thread is not threading.current_thread()}
    assert len(threads) == 60 and len(others) <= 8  # the same few pool threads again, not 40 of their own


def test_a_forked_child_flushes_with_a_pool_of_its_own() -> None:
    # The child of a fork has none of its parent's threads: had it kept the parent's pool, its flushes would
    # wait forever for threads that do not exist in it.
    flush_logs([ThreadRecordingLog([]) for _ in range(3)])  # the pool and its threads exist in this process
    child = os.fork()
    if child == 0:  # pragma: no cover - the child's outcome is its exit code
        threads: list[threading.Thread] = []
        try:
            flush_logs([ThreadRecordingLog(threads) for _ in range(3)])
        finally:
            os._exit(0 if len(threads) == 3 else 1)
    deadline = time.monotonic() + 30
    while (status := os.waitpid(child, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    if status[0] == 0:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
        pytest.fail("the forked child's flush did not return within 30 s")
    assert os.waitstatus_to_exitcode(status[1]) == 0
