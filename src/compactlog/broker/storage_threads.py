"""The storage threads: a fixed set of threads that run the broker's blocking store calls (appends, fsyncs,
Parquet reads) off the event loop, the role of Kafka's I/O threads.

:meth:`StorageThreads.run` is the event loop's handoff: the call goes on one queue (``queue.SimpleQueue``,
in C) with a future of the loop, and the thread that runs it settles the future with
``loop.call_soon_threadsafe``. That is all of a handoff: ``loop.run_in_executor`` on a
``ThreadPoolExecutor`` also makes a ``concurrent.futures.Future`` (with its Condition), checks its thread
count with a Python Semaphore at every call, and chains the two futures by callbacks, which was the largest
cost of the event loop's thread per request. :meth:`StorageThreads.submit` keeps the ``Executor`` interface
(``run_in_executor`` and code outside the loop use it).

The threads are daemons: a process that exits without :meth:`shutdown` stops them where they are, which the
log treats as it treats a crash (its recovery at the next open; nothing is acknowledged before its fsync).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["StorageThreads"]

_T = TypeVar("_T")
# A call: the function, its arguments, and the loop and future to settle (no loop: a concurrent future).
_Call = tuple[Callable[..., Any], tuple[Any, ...], "asyncio.AbstractEventLoop | None", Any]


class StorageThreads(concurrent.futures.Executor):
    """``threads`` threads taking calls from one queue, in the order they were queued."""

    def __init__(self, threads: int, name: str) -> None:
        self._calls: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._shutdown = False
        self._threads = [threading.Thread(target=self._work, name=f"{name}_{i}", daemon=True)
                         for i in range(threads)]
        for thread in self._threads:
            thread.start()

    def run(self, fn: Callable[..., _T], *args: Any) -> asyncio.Future[_T]:
        """``fn(*args)`` in a storage thread: a future of the running loop, settled by the thread."""
        if self._shutdown:
            raise RuntimeError("the storage threads are shut down")
        future: asyncio.Future[_T] = asyncio.get_running_loop().create_future()
        self._calls.put((fn, args, future.get_loop(), future))
        return future

    def submit(self, fn: Callable[..., _T], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[_T]:
        if self._shutdown:
            raise RuntimeError("the storage threads are shut down")
        future: concurrent.futures.Future[_T] = concurrent.futures.Future()
        self._calls.put((functools.partial(fn, *args, **kwargs), (), None, future))
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """The calls queued so far still run; then the threads end (joined if ``wait``)."""
        self._shutdown = True
        for _ in self._threads:
            self._calls.put(None)
        if wait:
            for thread in self._threads:
                thread.join()

    def _work(self) -> None:
        while (call := self._calls.get()) is not None:
            fn, args, loop, future = call
            if loop is None:
                if future.set_running_or_notify_cancel():
                    try:
                        result = fn()
                    except BaseException as e:
                        future.set_exception(e)
                    else:
                        future.set_result(result)
                continue
            try:
                result = fn(*args)
            except BaseException as e:
                _settle(loop, _set_exception, future, e)
            else:
                _settle(loop, _set_result, future, result)


def _settle(loop: asyncio.AbstractEventLoop, setter: Callable[[Any, Any], None], future: Any, value: Any) -> None:
    with contextlib.suppress(RuntimeError):  # the loop is closed: no one waits for the call any more
        loop.call_soon_threadsafe(setter, future, value)


def _set_result(future: asyncio.Future[Any], result: Any) -> None:
    if not future.done():  # cancelled meanwhile (the server shut down)
        future.set_result(result)


def _set_exception(future: asyncio.Future[Any], error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)
