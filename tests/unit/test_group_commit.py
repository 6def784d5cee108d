"""The broker's group commit: requests share fsyncs, none is answered before its fsync, a failed fsync fails
its round's requests."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from compactlog.broker.group_commit import GroupCommit
from compactlog.errors import KafkaStorageError


class FakeLog:
    def __init__(self, name: str, flushes: list[str], fail: bool = False) -> None:
        self.name, self.flushes, self.fail = name, flushes, fail

    def flush(self) -> None:
        self.flushes.append(self.name)
        if self.fail:
            raise KafkaStorageError(f"{self.name}: fsync failed")


def test_concurrent_requests_share_rounds_and_each_log_is_fsynced_once_a_round() -> None:
    flushes: list[str] = []
    logs = [FakeLog(f"p{i}", flushes) for i in range(3)]

    async def scenario() -> tuple[GroupCommit, list[int]]:
        gate = asyncio.Event()
        order: list[int] = []

        async def run(fn: Any, *args: Any) -> Any:
            await gate.wait()  # the first round's fsync is slow: everything below asks meanwhile
            return fn(*args)

        commit = GroupCommit(run)

        async def request(i: int) -> None:
            await commit.durable([logs[i % 3]])
            order.append(i)

        first = asyncio.create_task(request(0))
        await asyncio.sleep(0)  # the first round begins, with request 0 alone
        later = [asyncio.create_task(request(i)) for i in range(1, 10)]
        for _ in range(20):  # every task runs as far as it can
            await asyncio.sleep(0)
        assert order == []  # nobody is answered before the fsync returns
        gate.set()
        await asyncio.gather(first, *later)
        return commit, order

    commit, order = asyncio.run(scenario())
    assert sorted(order) == list(range(10)) and order[0] == 0
    assert commit.rounds == 2 and commit.requests == 10  # ten requests, two rounds
    assert flushes[0] == "p0" and sorted(flushes[1:]) == ["p0", "p1", "p2"]  # the second: each of its logs once


def test_a_round_fsyncs_its_logs_at_the_same_time() -> None:
    barrier = threading.Barrier(3, timeout=10)  # broken (an error) unless the three fsyncs overlap
    flushes: list[str] = []

    class OverlappingLog(FakeLog):
        def flush(self) -> None:
            barrier.wait()
            super().flush()

    async def run(fn: Any, *args: Any) -> Any:
        return fn(*args)

    async def scenario() -> GroupCommit:
        commit = GroupCommit(run)
        await commit.durable([OverlappingLog(f"p{i}", flushes) for i in range(3)])
        return commit

    assert asyncio.run(scenario()).rounds == 1 and sorted(flushes) == ["p0", "p1", "p2"]


def test_a_failed_fsync_fails_every_request_of_its_round() -> None:
    flushes: list[str] = []

    async def run(fn: Any, *args: Any) -> Any:
        return fn(*args)

    async def scenario() -> list[BaseException | None]:
        commit = GroupCommit(run)
        bad, good = FakeLog("bad", flushes, fail=True), FakeLog("good", flushes)
        results = await asyncio.gather(commit.durable([bad]), commit.durable([good]), return_exceptions=True)
        return [r if isinstance(r, BaseException) else None for r in results]

    results = asyncio.run(scenario())
    assert all(isinstance(r, KafkaStorageError) for r in results)
    assert sorted(flushes) == ["bad", "good"]  # the other log was still fsynced


@pytest.mark.parametrize("requests", [1, 5])
def test_an_idle_server_fsyncs_at_once(requests: int) -> None:
    async def run(fn: Any, *args: Any) -> Any:
        return fn(*args)

    async def scenario() -> GroupCommit:
        commit = GroupCommit(run)
        for _ in range(requests):  # one after another: each its own round
            await commit.durable([FakeLog("p", [])])
        return commit

    assert asyncio.run(scenario()).rounds == requests


def test_the_requests_of_one_turn_of_the_loop_share_a_round_and_its_future() -> None:
    flushes: list[str] = []

    async def run(fn: Any, *args: Any) -> Any:
        return fn(*args)

    async def scenario() -> GroupCommit:
        commit = GroupCommit(run)
        # asked one after another without yielding: the round starts at the next turn, with all three
        futures = [commit.durable([FakeLog(f"p{i}", flushes)]) for i in range(3)]
        assert futures[0] is futures[1] is futures[2]
        await asyncio.gather(*futures)
        return commit

    commit = asyncio.run(scenario())
    assert commit.rounds == 1 and commit.requests == 3 and sorted(flushes) == ["p0", "p1", "p2"]
