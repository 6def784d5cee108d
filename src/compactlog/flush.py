"""Flushing several partitions' logs at once: one fsync each, run concurrently.

The fsync of each log waits on the disk; on a journaling file system concurrent fsyncs of different files
share the journal's commit, so N logs flushed together cost about one fsync's wait, where N in a row cost
N. Used where one answer waits for several partitions (EndTxn's markers). Every log is flushed even when
another's flush fails; the first failure (a :class:`~compactlog.errors.KafkaStorageError`) is raised after
all have returned, so a caller never answers "durable" for a set with one unflushed log.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Protocol

__all__ = ["flush_logs"]


class Flushable(Protocol):
    def flush(self) -> None: ...


def flush_logs(logs: Sequence[Flushable]) -> None:
    """Fsync every log of ``logs`` (each once, concurrently: all but the first in threads of their own);
    return when all are durable, else raise the first error once every flush has returned."""
    errors: list[Exception] = []

    def flush(log: Flushable) -> None:
        try:
            log.flush()
        except Exception as e:  # reported below, after every other log was flushed
            errors.append(e)

    threads = [threading.Thread(target=flush, args=(log,), name="log-flush") for log in logs[1:]]
    for thread in threads:
        thread.start()
    if logs:
        flush(logs[0])
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
