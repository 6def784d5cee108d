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

# Runs a blocking call in the storage threads: a future (no Task is made for it) or a coroutine.
Runner = Callable[..., Awaitable[Any]]


class GroupCommit:
    """Coalesces the fsyncs that Produce requests wait for.

    Callbacks, not Tasks: the requests that ask before a round begins share one future, which the round's
    end settles; the next round is started from the end of the previous one (or, on an idle server, at the
    next turn of the event loop, so that the requests of one turn share their round)."""

    def __init__(self, run: Runner) -> None:
        self._run = run
        self._logs: dict[int, Log] = {}
        self._next: asyncio.Future[None] | None = None  # the future of the requests waiting for the next round
        self._waiting = 0  # requests waiting for the next round
        self._running = False  # a round is running or about to start
        self.rounds = 0  # flush rounds run, for tests and metrics
        self.requests = 0  # requests made durable

    def durable(self, logs: Iterable[Log]) -> asyncio.Future[None]:
        """A future done once everything appended to ``logs`` before this call is fsynced; its exception is the
        round's error (a :class:`~compactlog.errors.KafkaStorageError`) if an fsync failed. The future is
        shared by the requests of its round: a waiter must not cancel it (``asyncio.shield`` it)."""
        for log in logs:
            self._logs[id(log)] = log
        if self._next is None:
            self._next = asyncio.get_running_loop().create_future()
        self._waiting += 1
        if not self._running:
            self._running = True
            self._next.get_loop().call_soon(self._start_round)
        return self._next

    def _start_round(self) -> None:
        logs, done, waiting = list(self._logs.values()), self._next, self._waiting
        self._logs, self._next, self._waiting = {}, None, 0
        assert done is not None
        flushed = asyncio.ensure_future(self._run(flush_logs, logs))
        flushed.add_done_callback(lambda flushed: self._end_round(flushed, done, waiting))

    def _end_round(self, flushed: asyncio.Future[Any], done: asyncio.Future[None], waiting: int) -> None:
        if flushed.cancelled():  # the loop shuts down: no request of the round is known to be durable
            done.cancel()
        elif (error := flushed.exception()) is not None:
            if not done.done():
                done.set_exception(error)
        else:
            self.rounds += 1
            self.requests += waiting
            if not done.done():
                done.set_result(None)
        if self._next is not None:  # requests asked while this round ran: the next round starts now
            self._start_round()
        else:
            self._running = False
