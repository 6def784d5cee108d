"""Group commit: Produce requests of every connection share fsyncs.

A Produce appends its batches without fsyncing them (``store.append(..., flush=False)``), then asks
:meth:`GroupCommit.durable` for its partitions' logs and answers once that returns. One flush round at a
time runs in the storage threads: it fsyncs every log asked for since the previous round began (each once,
however many requests appended to it; the logs concurrently, :func:`compactlog.flush.flush_logs`) and then
releases exactly the requests that asked before it began.
Requests that ask while a round runs wait for the next round, which starts as soon as this one ends: so
under load the fsyncs of many small requests on many partitions become one round, and an idle server
still fsyncs a lone request at once.

No response says "durable" before its records' fsync has returned. An fsync that fails fails every request
waiting on that round (KAFKA_STORAGE_ERROR), as none can know its records survived; the records stay in the
log (readers may already see them, as Kafka's readers see records not yet flushed).

Runs on the event loop's thread; the fsyncs run in the broker's storage threads.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from ..flush import flush_logs
from ..log import Log

__all__ = ["GroupCommit"]

Runner = Callable[..., Awaitable[Any]]


class GroupCommit:
    """Coalesces the fsyncs that Produce requests wait for."""

    def __init__(self, run: Runner) -> None:
        self._run = run  # runs a blocking call in the storage threads
        self._logs: dict[int, Log] = {}
        self._waiters: list[asyncio.Future[None]] = []
        self._round: asyncio.Task[None] | None = None
        self.rounds = 0  # flush rounds run, for tests and metrics
        self.requests = 0  # requests made durable

    async def durable(self, logs: Iterable[Log]) -> None:
        """Return once everything appended to ``logs`` before this call is fsynced; raise the round's error
        (a :class:`~compactlog.errors.KafkaStorageError`) if an fsync failed."""
        for log in logs:
            self._logs[id(log)] = log
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(future)
        if self._round is None:
            self._round = asyncio.get_running_loop().create_task(self._flush_rounds())
        await future

    async def _flush_rounds(self) -> None:
        try:
            while self._waiters:
                logs, waiters = list(self._logs.values()), self._waiters
                self._logs, self._waiters = {}, []
                try:
                    await self._run(flush_logs, logs)
                except Exception as e:
                    for waiter in waiters:
                        if not waiter.done():
                            waiter.set_exception(e)
                    continue
                self.rounds += 1
                self.requests += len(waiters)
                for waiter in waiters:
                    if not waiter.done():
                        waiter.set_result(None)
        finally:
            self._round = None

