"""The storage threads: a call's result or error reaches the event loop's future, calls run in their
threads (never on the loop's), run_in_executor works through submit, and shutdown runs what was queued."""

from __future__ import annotations

import asyncio
import threading

import pytest

from compactlog.broker.storage_threads import StorageThreads
from compactlog.errors import KafkaStorageError


def test_a_call_runs_in_a_storage_thread_and_its_result_or_error_reaches_the_loop() -> None:
    threads = StorageThreads(2, "test-storage")

    def fail() -> None:
        raise KafkaStorageError("fsync failed")

    async def scenario() -> tuple[str, int, BaseException | None]:
        name = await threads.run(lambda: threading.current_thread().name)
        total = await asyncio.get_running_loop().run_in_executor(threads, sum, [1, 2, 3])
        try:
            await threads.run(fail)
        except KafkaStorageError as e:
            return name, total, e
        return name, total, None

    try:
        name, total, error = asyncio.run(scenario())
    finally:
        threads.shutdown()
    assert name.startswith("test-storage_") and total == 6 and isinstance(error, KafkaStorageError)


def test_shutdown_runs_the_calls_queued_before_it_and_refuses_later_ones() -> None:
    threads = StorageThreads(1, "test-storage")
    gate, ran = threading.Event(), []
    held = threads.submit(gate.wait, 10)  # the one thread is busy: the next calls queue
    queued = [threads.submit(ran.append, i) for i in range(3)]
    gate.set()
    threads.shutdown(wait=True)
    assert held.result(10) is True and [f.result(10) for f in queued] == [None] * 3 and ran == [0, 1, 2]
    with pytest.raises(RuntimeError):
        threads.submit(ran.append, 4)
