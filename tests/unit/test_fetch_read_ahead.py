"""Fetch read-ahead: a consumer's next fetch is answered with records read ahead only while they are still
the records at those offsets (the same active segment), with offsets read when it is answered."""

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
from compactlog.broker.fetch_read_ahead import ReadAheads
from compactlog.protocol.record_batch import decode_batches
from compactlog.server_config import load_server_config
from support import FakeClock

RECORD_BYTES = 4 + 10 + fetch.RECORD_OVERHEAD  # key, value, overhead: as fetch counts a record


def rows(start: int, n: int) -> pa.Table:
    return pa.table({"key": [b"k%03d" % i for i in range(start, start + n)],
                     "value": [b"value-%04d" % i for i in range(start, start + n)]})


def request(offset: int, records: int, isolation_level: int = 0) -> Any:
    partition = FetchRequest.FetchTopic.FetchPartition(
        version=12, partition=0, current_leader_epoch=-1, fetch_offset=offset, last_fetched_epoch=-1,
        log_start_offset=-1, partition_max_bytes=records * RECORD_BYTES)
    return FetchRequest(version=12, replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20,
                        isolation_level=isolation_level,
                        session_id=0, session_epoch=-1, rack_id="", forgotten_topics_data=[],
                        topics=[FetchRequest.FetchTopic(version=12, topic="t", partitions=[partition])])


def answered(response: dict[str, Any]) -> tuple[list[tuple[int, bytes]], int]:
    partition = response["responses"][0]["partitions"][0]
    assert partition["error_code"] == 0
    records = []
    for batch in decode_batches(partition["records"]):
        if batch.is_control:
            continue
        table = batch.records
        for delta, key in zip(table.column("offset_delta").to_pylist(), table.column("key").to_pylist(),
                              strict=True):
            records.append((batch.base_offset + delta, key))
    return records, partition["high_watermark"]


def expected(start: int, n: int) -> list[tuple[int, bytes]]:
    return [(i, b"k%03d" % i) for i in range(start, start + n)]


def fetches(tmp_path: Path, between: Any) -> tuple[list[tuple[list[tuple[int, bytes]], int]], ReadAheads]:
    """Two sequential fetches of 15 records each from 30 records in three appends; ``between(store)`` runs
    after the first."""
    with compactlog.open(tmp_path / "data", clock=FakeClock()) as store:
        store.create_topic("t", config={"cleanup.policy": "compact"})
        for start in (0, 10, 20):
            store.append("t", 0, rows(start, 10))
        context = BrokerContext(store, load_server_config(tmp_path / "data", {}))

        async def scenario() -> list[tuple[list[tuple[int, bytes]], int]]:
            first = answered(await fetch.handle_fetch(context, request(0, 15), 12, "PLAINTEXT"))
            await asyncio.get_running_loop().run_in_executor(context.executor, between, store)
            second = answered(await fetch.handle_fetch(context, request(15, 15), 12, "PLAINTEXT"))
            return [first, second]

        try:
            return asyncio.run(scenario()), context.read_aheads
        finally:
            context.close()


def test_the_next_fetch_is_answered_from_the_read_ahead_with_the_offsets_of_its_moment(tmp_path: Path) -> None:
    (first, second), read_aheads = fetches(tmp_path, lambda store: store.append("t", 0, rows(30, 5)))
    assert first == (expected(0, 15), 30)
    assert second == (expected(15, 15), 35)  # the records read ahead; the high watermark of now
    assert read_aheads.used == 1


def test_a_clean_after_the_read_ahead_makes_the_fetch_read_again(tmp_path: Path) -> None:
    def supersede_and_clean(store: compactlog.Store) -> None:  # keys k015..k019 again, then a clean
        store.append("t", 0, rows(15, 5))
        store.log("t", 0).roll()
        store.clean(force=True)

    (first, second), read_aheads = fetches(tmp_path, supersede_and_clean)
    assert first == (expected(0, 15), 30)
    # Offsets 15-19 were cleaned away: the fetch at 15 answers from 20, as Kafka's does.
    assert second == (expected(20, 10) + [(30 + i, b"k%03d" % (15 + i)) for i in range(5)], 35)
    assert read_aheads.used == 0


def transactional_rows(store: compactlog.Store, start: int, n: int, end: str | None) -> None:
    """Records ``start`` .. ``start + n - 1`` in one transaction, then aborted, committed or (None) left open."""
    producer = store.producer(transactional_id="tx")
    producer.begin_transaction()
    for i in range(start, start + n):
        producer.send("t", key=b"k%03d" % i, value=b"value-%04d" % i, partition=0)
    producer.flush()
    if end == "abort":
        producer.abort_transaction()
    elif end == "commit":
        producer.commit_transaction()


def test_a_read_committed_fetch_is_answered_from_the_read_ahead_with_the_aborted_transactions_of_now(
        tmp_path: Path) -> None:
    with compactlog.open(tmp_path / "data", clock=FakeClock()) as store:
        store.create_topic("t", config={"cleanup.policy": "compact"})
        store.append("t", 0, rows(0, 10))
        transactional_rows(store, 10, 5, "abort")  # offsets 10-14, its ABORT marker at 15
        store.append("t", 0, rows(16, 10))
        producer_id = store.log("t", 0).aborted_transactions(0)[0].producer_id
        context = BrokerContext(store, load_server_config(tmp_path / "data", {}))

        async def scenario() -> list[dict[str, Any]]:
            first = await fetch.handle_fetch(context, request(0, 8, isolation_level=1), 12, "PLAINTEXT")
            second = await fetch.handle_fetch(context, request(8, 8, isolation_level=1), 12, "PLAINTEXT")
            return [first, second]

        try:
            first, second = asyncio.run(scenario())
        finally:
            context.close()
    assert answered(first) == (expected(0, 8), 26)
    assert context.read_aheads.used == 1
    # Records 8-14 and the marker (left out by answered()); the client drops the aborted ones by the list.
    assert answered(second) == (expected(8, 7), 26)
    partition = second["responses"][0]["partitions"][0]
    assert partition["aborted_transactions"] == [{"producer_id": producer_id, "first_offset": 10}]
    assert partition["last_stable_offset"] == 26


def test_a_read_committed_fetch_never_takes_a_read_uncommitted_read_ahead(tmp_path: Path) -> None:
    with compactlog.open(tmp_path / "data", clock=FakeClock()) as store:
        store.create_topic("t", config={"cleanup.policy": "compact"})
        store.append("t", 0, rows(0, 10))
        transactional_rows(store, 10, 5, None)  # open: the last stable offset stays at 10
        context = BrokerContext(store, load_server_config(tmp_path / "data", {}))

        async def scenario() -> list[dict[str, Any]]:
            # The read_uncommitted fetch reads ahead from 5 with these limits: records 5-14, past the LSO.
            first = await fetch.handle_fetch(context, request(0, 5), 12, "PLAINTEXT")
            second = await fetch.handle_fetch(context, request(5, 5, isolation_level=1), 12, "PLAINTEXT")
            return [first, second]

        try:
            first, second = asyncio.run(scenario())
        finally:
            context.close()
    assert answered(first) == (expected(0, 5), 15)
    assert answered(second) == (expected(5, 5), 15)  # up to the last stable offset only
    assert second["responses"][0]["partitions"][0]["last_stable_offset"] == 10
    assert context.read_aheads.used == 0


def test_read_aheads_keep_the_newest_few() -> None:
    async def scenario() -> list[object]:
        read_aheads = ReadAheads(max_entries=2)
        for offset in range(3):
            done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            done.set_result(offset)
            read_aheads.put(("t", 0, offset, 1, 1, False), done)
        return [await read_aheads.take(("t", 0, offset, 1, 1, False)) for offset in (0, 1, 2, 2)]

    assert asyncio.run(scenario()) == [None, 1, 2, None]  # the oldest dropped; each used once


def test_only_fetches_of_modest_limits_are_read_ahead() -> None:
    from compactlog.broker.fetch_read_ahead import READ_AHEAD_MAX_BYTES, worth_reading_ahead

    assert worth_reading_ahead(1 << 20, 50 << 20)  # librdkafka's defaults: 1 MiB a partition
    assert worth_reading_ahead(READ_AHEAD_MAX_BYTES + 1, READ_AHEAD_MAX_BYTES)  # the smaller limit counts
    assert not worth_reading_ahead(READ_AHEAD_MAX_BYTES + 1, 50 << 20)
