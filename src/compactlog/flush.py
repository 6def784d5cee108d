"""Flushing several partitions' logs at once: one fsync each, run concurrently.

The fsync of each log waits on the disk; on a journaling file system concurrent fsyncs of different files
share the journal's commit, so N logs flushed together cost about one fsync's wait, where N in a row cost
N. Used where one answer waits for several partitions (EndTxn's markers, a group commit). Every log is
flushed even when another's flush fails; the first failure (a :class:`~compactlog.errors.KafkaStorageError`)
is raised after all have returned, so a caller never answers "durable" for a set with one unflushed log.
The flushes beyond the first run in flush threads kept for the process (started on first use), which take
them from one queue: a thread started per flush cost more than the fsync it waited for, and a
``ThreadPoolExecutor`` (a Future with its Condition per flush, a Semaphore per submit) about as much again
as the fsync's own CPU. A call waits on one lock that its last flush releases.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Sequence
from typing import Protocol

__all__ = ["flush_logs"]

FLUSH_THREADS = 8  # flushes of one call beyond this many wait for a free thread, still concurrently


class Flushable(Protocol):
    def flush(self) -> None: ...


class _Call:
    """One flush_logs call's flushes in the threads: how many are left, the errors, the lock its caller waits
    on (held until the last one is done)."""

    __slots__ = ("done", "errors", "left", "lock")

    def __init__(self, flushes: int) -> None:
        self.left = flushes
        self.errors: list[BaseException] = []
        self.lock = threading.Lock()
        self.done = threading.Lock()
        self.done.acquire()

    def finished(self, error: BaseException | None) -> None:
        with self.lock:
            if error is not None:
                self.errors.append(error)
            self.left -= 1
            last = not self.left
        if last:
            self.done.release()


_flushes: queue.SimpleQueue[tuple[Flushable, _Call]] | None = None
_started_lock = threading.Lock()


def _forget_threads() -> None:
    """A forked child has none of the parent's threads: it starts threads of its own on first use."""
    global _flushes
    _flushes = None


os.register_at_fork(after_in_child=_forget_threads)


def _flush_queue() -> queue.SimpleQueue[tuple[Flushable, _Call]]:
    global _flushes
    with _started_lock:
        if _flushes is None:
            _flushes = queue.SimpleQueue()
            for i in range(FLUSH_THREADS):
                threading.Thread(target=_work, args=(_flushes,), name=f"log-flush_{i}", daemon=True).start()
        return _flushes


def _work(flushes: queue.SimpleQueue[tuple[Flushable, _Call]]) -> None:
    while True:
        log, call = flushes.get()
        try:
            log.flush()
        except BaseException as e:  # handed to the caller, which raises it once every flush has returned
            call.finished(e)
        else:
            call.finished(None)


def flush_logs(logs: Sequence[Flushable]) -> None:
    """Fsync every log of ``logs`` (each once, concurrently: all but the first in the flush threads);
    return when all are durable, else raise the first error once every flush has returned."""
    if not logs:
        return
    call = None
    if len(logs) > 1:
        call = _Call(len(logs) - 1)
        flushes = _flush_queue()
        for log in logs[1:]:
            flushes.put((log, call))
    error: BaseException | None = None
    try:
        logs[0].flush()
    except Exception as e:  # reported below, after every other log was flushed
        error = e
    if call is not None:
        call.done.acquire()  # released by the last of its flushes
        if error is None and call.errors:
            error = call.errors[0]
    if error is not None:
        raise error
