"""Flushing several partitions' logs at once: one fsync each, run concurrently.

The fsync of each log waits on the disk; on a journaling file system concurrent fsyncs of different files
share the journal's commit, so N logs flushed together cost about one fsync's wait, where N in a row cost
N. Used where one answer waits for several partitions (EndTxn's markers). Every log is flushed even when
another's flush fails; the first failure (a :class:`~compactlog.errors.KafkaStorageError`) is raised after
all have returned, so a caller never answers "durable" for a set with one unflushed log.

The caller's thread flushes the first log; the others go to a pool of threads kept for this (started on
first use, up to :data:`FLUSH_THREADS`; a thread started per log cost more CPU than the fsync it waited
for). Beyond that many logs flushed at once, the rest wait for a free thread. A pool thread only fsyncs:
it never waits for another flush, so callers in any thread (the storage threads included) cannot deadlock.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Protocol

__all__ = ["FLUSH_THREADS", "flush_logs"]

# Logs fsynced at the same time by the pool, at most (the caller's thread flushes one more).
FLUSH_THREADS = 32
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _flush_pool() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(FLUSH_THREADS, thread_name_prefix="log-flush")
        return _pool


class Flushable(Protocol):
    def flush(self) -> None: ...


def flush_logs(logs: Sequence[Flushable]) -> None:
    """Fsync every log of ``logs`` (each once, concurrently: all but the first in the pool's threads);
    return when all are durable, else raise the first error once every flush has returned."""
    errors: list[Exception] = []

    def flush(log: Flushable) -> None:
        try:
            log.flush()
        except Exception as e:  # reported below, after every other log was flushed
            errors.append(e)

    pool = _flush_pool() if len(logs) > 1 else None
    others: list[Future[None]] = [pool.submit(flush, log) for log in logs[1:]] if pool is not None else []
    if logs:
        flush(logs[0])
    for other in others:
        other.result()  # flush() catches every Exception: this only waits
    if errors:
        raise errors[0]
