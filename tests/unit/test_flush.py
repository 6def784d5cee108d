"""flush_logs: every log fsynced once, concurrently, and a failure raised only after every flush returned."""

from __future__ import annotations

import threading

import pytest

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


def test_no_logs_is_nothing_to_do() -> None:
    flush_logs([])


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
