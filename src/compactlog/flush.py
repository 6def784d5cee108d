"""Flushing several partitions' logs at once: one fsync each, run concurrently.

The fsync of each log waits on the disk; on a journaling file system concurrent fsyncs of different files
share the journal's commit, so N logs flushed together cost about one fsync's wait, where N in a row cost
N. Used where one answer waits for several partitions (EndTxn's markers, a group commit). Every log is
flushed even when another's flush fails; the first failure (a :class:`~compactlog.errors.KafkaStorageError`)
is raised after all have returned, so a caller never answers "durable" for a set with one unflushed log.
The flushes beyond the first run in a pool of threads kept for the process (started on first use): a
thread started per flush cost more than the fsync it waited for.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Protocol

__all__ = ["flush_logs"]

_POOL_THREADS = 8  # flushes of one call beyond this many wait for a free thread, still concurrently
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


class Flushable(Protocol):
    def flush(self) -> None: ...


def _forget_pool() -> None:
    """A forked child has none of the parent's threads: it starts a pool of its own on first use."""
    global _pool
    _pool = None


os.register_at_fork(after_in_child=_forget_pool)


def _flush_pool() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(_POOL_THREADS, thread_name_prefix="log-flush")
        return _pool


def flush_logs(logs: Sequence[Flushable]) -> None:
    """Fsync every log of ``logs`` (each once, concurrently: all but the first in the pool's threads);
    return when all are durable, else raise the first error once every flush has returned."""
    futures: list[Future[None]] = [_flush_pool().submit(log.flush) for log in logs[1:]] if len(logs) > 1 else []
    errors: list[BaseException] = []
    if logs:
        try:
            logs[0].flush()
        except Exception as e:  # reported below, after every other log was flushed
            errors.append(e)
    for future in futures:
        error = future.exception()  # waits for it
        if error is not None:
            errors.append(error)
    if errors:
        raise errors[0]
