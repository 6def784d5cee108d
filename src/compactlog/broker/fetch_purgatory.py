"""The fetch purgatory: Fetch requests waiting (``max.wait.ms``) for records to arrive (Kafka's
``DelayedFetch`` purgatory).

A waiting fetch registers for its partitions; a Produce that appended to a partition wakes every fetch
waiting on it. Appends by other processes (the Python API, the command line) send no wake-up: a waiting
fetch also wakes every :data:`POLL_INTERVAL_S` to look at the log end again. A fetch whose connection
closes wakes at once (its ``closed`` future), and is dropped by its handler. Everything here runs on the
event loop's thread.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Iterable

__all__ = ["POLL_INTERVAL_S", "FetchPurgatory"]

TopicPartition = tuple[str, int]
# How often a waiting fetch re-reads the log end, for appends made by other processes.
POLL_INTERVAL_S = 0.1


class FetchPurgatory:
    """Partitions -> the futures of the fetches waiting on them."""

    def __init__(self) -> None:
        self._waiting: dict[TopicPartition, set[asyncio.Future[None]]] = {}

    def waiting(self) -> int:
        """How many fetches wait (for tests)."""
        return len(set().union(*self._waiting.values()))

    def notify(self, partitions: Iterable[TopicPartition]) -> None:
        """Wake the fetches waiting on any of ``partitions``."""
        for tp in partitions:
            for future in self._waiting.pop(tp, ()):
                if not future.done():
                    future.set_result(None)

    async def wait(self, partitions: Iterable[TopicPartition], timeout_s: float,
                   closed: asyncio.Future[None] | None = None) -> None:
        """Return when one of ``partitions`` was appended to, ``closed`` is done (the fetch's connection has
        closed), after ``timeout_s`` or after :data:`POLL_INTERVAL_S`, whichever comes first."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        tps = list(partitions)
        for tp in tps:
            self._waiting.setdefault(tp, set()).add(future)
        wake = functools.partial(_wake, future)
        if closed is not None:
            closed.add_done_callback(wake)
        try:
            await asyncio.wait_for(future, max(0.0, min(timeout_s, POLL_INTERVAL_S)))
        except asyncio.TimeoutError:
            pass
        finally:
            if closed is not None:
                closed.remove_done_callback(wake)
            for tp in tps:
                waiting = self._waiting.get(tp)
                if waiting is not None:
                    waiting.discard(future)
                    if not waiting:
                        del self._waiting[tp]


def _wake(future: asyncio.Future[None], _: object) -> None:
    if not future.done():
        future.set_result(None)

