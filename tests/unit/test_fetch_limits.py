"""A Fetch's limits on the broker's side: ``fetch.max.bytes`` caps a response as Kafka's KafkaApis does (the
smaller of it and the request's max_bytes; min_bytes at most that), the first record still goes out whole;
a delayed fetch whose connection closes is dropped (no response) and leaves the purgatory."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

pytest.importorskip("kafka")
from kafka.protocol.consumer import FetchRequest

import compactlog
from compactlog.broker import fetch
from compactlog.broker.context import BrokerContext
from compactlog.limits import INT_MAX
from compactlog.network.request_channel import CONNECTION_CLOSED
from compactlog.protocol.record_batch import decode_batches
from compactlog.server_config import server_config
from support import FakeClock

DEADLINE_S = 10
VALUE_BYTES = 1000
RECORD_BYTES = 4 + VALUE_BYTES + fetch.RECORD_OVERHEAD  # as fetch counts a record: key, value, overhead


def request(topic: str, max_bytes: int = INT_MAX, min_bytes: int = 1, max_wait_ms: int = 0) -> Any:
    partition = FetchRequest.FetchTopic.FetchPartition(
        version=12, partition=0, current_leader_epoch=-1, fetch_offset=0, last_fetched_epoch=-1,
        log_start_offset=-1, partition_max_bytes=INT_MAX)
    return FetchRequest(version=12, replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=min_bytes, max_bytes=max_bytes,
                        isolation_level=0, session_id=0, session_epoch=-1, rack_id="", forgotten_topics_data=[],
                        topics=[FetchRequest.FetchTopic(version=12, topic=topic, partitions=[partition])])


def fetched_values(response: dict[str, Any]) -> list[int]:
    """The value sizes of the records a response carries."""
    partition = response["responses"][0]["partitions"][0]
    assert partition["error_code"] == 0
    return [len(v) for batch in decode_batches(partition["records"]) for v in batch.records.column("value").to_pylist()]


def run_with_broker(tmp_path: Path, configs: dict[str, Any], scenario: Any) -> Any:
    with compactlog.open(tmp_path / "data", clock=FakeClock()) as store:
        store.create_topic("small", config={"max.message.bytes": "100000"})
        store.append("small", 0, pa.table({"key": [b"k%03d" % i for i in range(10)],
                                           "value": [b"v" * VALUE_BYTES] * 10}))
        store.create_topic("large_first", config={"max.message.bytes": "100000"})
        store.append("large_first", 0, pa.table({"key": [b"big", b"k001"], "value": [b"v" * 10 * 1024, b"v"]}))
        store.create_topic("empty")
        context = BrokerContext(store, server_config(configs))
        try:
            return asyncio.run(scenario(context))
        finally:
            context.close()


def test_fetch_max_bytes_caps_a_response_below_the_requests_max_bytes(tmp_path: Path) -> None:
    async def scenario(context: BrokerContext) -> list[list[int]]:
        return [fetched_values(await fetch.handle_fetch(context, request("small", max_bytes), 12, "PLAINTEXT"))
                for max_bytes in (INT_MAX, 2 * RECORD_BYTES)]
    capped, asked = run_with_broker(tmp_path, {"fetch.max.bytes": 4 * RECORD_BYTES}, scenario)
    assert capped == [VALUE_BYTES] * 4  # the broker's limit, not the request's 2^31-1
    assert asked == [VALUE_BYTES] * 2  # the request's, when smaller


def test_the_first_record_larger_than_fetch_max_bytes_still_goes_out_whole(tmp_path: Path) -> None:
    async def scenario(context: BrokerContext) -> list[int]:
        return fetched_values(await fetch.handle_fetch(context, request("large_first"), 12, "PLAINTEXT"))
    assert run_with_broker(tmp_path, {"fetch.max.bytes": 1024}, scenario) == [10 * 1024]


def test_min_bytes_is_at_most_fetch_max_bytes(tmp_path: Path) -> None:
    async def scenario(context: BrokerContext) -> list[int]:  # min_bytes 2^31-1 would never be reached
        response = fetch.handle_fetch(context, request("small", min_bytes=INT_MAX, max_wait_ms=INT_MAX), 12, "P")
        return fetched_values(await asyncio.wait_for(response, DEADLINE_S))
    assert run_with_broker(tmp_path, {"fetch.max.bytes": 4 * RECORD_BYTES}, scenario) == [VALUE_BYTES] * 4


@pytest.mark.timeout(60)  # a fetch that goes on after the close keeps the loop busy: failed by the timeout
def test_a_delayed_fetch_whose_connection_closes_is_dropped_and_leaves_the_purgatory(tmp_path: Path) -> None:
    async def scenario(context: BrokerContext) -> tuple[Any, int]:
        closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        async def on_connection() -> Any:
            CONNECTION_CLOSED.set(closed)  # as the connection's task sets it
            return await fetch.handle_fetch(context, request("empty", max_wait_ms=INT_MAX), 12, "PLAINTEXT")

        waiting = asyncio.ensure_future(on_connection())
        for _ in range(DEADLINE_S * 100):
            if context.purgatory.waiting():
                break
            await asyncio.sleep(0.01)  # the fetch reads in a storage thread before it waits
        assert context.purgatory.waiting() == 1
        closed.set_result(None)
        return await asyncio.wait_for(waiting, DEADLINE_S), context.purgatory.waiting()
    assert run_with_broker(tmp_path, {}, scenario) == (None, 0)
