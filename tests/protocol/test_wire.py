"""The broker on the wire, request by request, with kafka-python's message classes over a plain socket:
idempotent retries, sequence gaps, long-polling fetches, and bad frames (fuzzed) that close only their own
connection."""

from __future__ import annotations

import random
import struct
import threading
import time
from typing import Any

import pyarrow as pa
import pytest
from kafka.protocol.consumer import FetchRequest, FetchResponse, ListOffsetsRequest, ListOffsetsResponse
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse
from kafka.protocol.producer import InitProducerIdRequest, InitProducerIdResponse, ProduceRequest, ProduceResponse
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords
from wire_client import TIMEOUT_S, Connection

import compactlog
from compactlog.broker.error_codes import NONE, OFFSET_OUT_OF_RANGE, OUT_OF_ORDER_SEQUENCE_NUMBER, UNSUPPORTED_VERSION

pytestmark = pytest.mark.integration


def batch(records: list[tuple[bytes, bytes]], producer_id: int = -1, epoch: int = -1, sequence: int = -1,
          timestamps: list[int] | None = None) -> bytes:
    builder = DefaultRecordBatchBuilder(2, 0, False, producer_id, epoch, sequence, 1 << 20)
    for i, (key, value) in enumerate(records):
        builder.append(i, timestamps[i] if timestamps else 1_700_000_000_000 + i, key, value, [])
    return bytes(builder.build())


def produce(conn: Connection, topic: str, records: bytes, version: int = 9) -> Any:
    request = ProduceRequest(version=version, transactional_id=None, acks=-1, timeout_ms=TIMEOUT_S * 1000,
                             topic_data=[ProduceRequest.TopicProduceData(version=version, name=topic, partition_data=[
                                 ProduceRequest.TopicProduceData.PartitionProduceData(version=version, index=0,
                                                                                      records=records)])])
    return conn.call(request, ProduceResponse).responses[0].partition_responses[0]


def fetch(conn: Connection, topic: str, offset: int, max_wait_ms: int = 0, version: int = 12,
          partition_max_bytes: int = 1 << 20) -> Any:
    request = FetchRequest(version=version, replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 20,
                           isolation_level=0, session_id=0, session_epoch=-1, topics=[FetchRequest.FetchTopic(
                               version=version, topic=topic, partitions=[FetchRequest.FetchTopic.FetchPartition(
                                   version=version, partition=0, fetch_offset=offset,
                                   partition_max_bytes=partition_max_bytes)])],
                           forgotten_topics_data=[], rack_id="")
    return conn.call(request, FetchResponse).responses[0].partitions[0]


@pytest.fixture
def conn(data_dir: str, broker: str):
    with compactlog.open(data_dir) as store:
        store.create_topic("t", 1, {"cleanup.policy": "compact"})
    connection = Connection(broker)
    yield connection
    connection.close()


def test_an_idempotent_retry_is_not_appended_again_and_a_gap_is_refused(data_dir: str, conn: Connection) -> None:
    init = conn.call(InitProducerIdRequest(version=4, transactional_id=None, transaction_timeout_ms=60000,
                                           producer_id=-1, producer_epoch=-1), InitProducerIdResponse)
    assert init.error_code == NONE and init.producer_id >= 0
    first = batch([(b"a", b"1"), (b"b", b"2")], init.producer_id, init.producer_epoch, 0)
    assert (produce(conn, "t", first).error_code, produce(conn, "t", first).base_offset) == (NONE, 0)
    retried = produce(conn, "t", first)  # as a client retries after a lost response
    assert (retried.error_code, retried.base_offset) == (NONE, 0)  # Kafka: the first append's offsets
    gap = produce(conn, "t", batch([(b"c", b"3")], init.producer_id, init.producer_epoch, 5))
    assert gap.error_code == OUT_OF_ORDER_SEQUENCE_NUMBER
    with compactlog.open(data_dir) as store:
        assert [(r.offset, r.key) for r in store.read("t", 0)] == [(0, b"a"), (1, b"b")]


def test_a_waiting_fetch_is_answered_when_records_arrive(broker: str, conn: Connection) -> None:
    answer: list[Any] = []
    waiting = threading.Thread(target=lambda: answer.append(fetch(conn, "t", 0, max_wait_ms=TIMEOUT_S * 1000)))
    started = time.monotonic()
    waiting.start()
    producer = Connection(broker)
    try:
        assert produce(producer, "t", batch([(b"k", b"v")])).error_code == NONE
    finally:
        producer.close()
    waiting.join(TIMEOUT_S)
    assert answer and answer[0].error_code == NONE and answer[0].high_watermark == 1 and answer[0].records
    assert time.monotonic() - started < TIMEOUT_S / 2  # woken, not timed out


def test_a_waiting_fetch_sees_an_append_by_another_process(data_dir: str, conn: Connection) -> None:
    assert fetch(conn, "t", 0).high_watermark == 0
    answer: list[Any] = []
    waiting = threading.Thread(target=lambda: answer.append(fetch(conn, "t", 0, max_wait_ms=TIMEOUT_S * 1000)))
    started = time.monotonic()
    waiting.start()
    with compactlog.open(data_dir) as store:  # this test's process, not the broker's: no wake-up is sent
        store.append("t", 0, pa.table({"key": [b"x"], "value": [b"y"]}))
    waiting.join(TIMEOUT_S)
    assert answer and answer[0].high_watermark == 1 and answer[0].records
    assert time.monotonic() - started < TIMEOUT_S / 2  # seen by re-reading the log end, not at the timeout


def fetched_offsets(part: Any) -> list[int]:
    return [record.offset for batch in MemoryRecords(part.records) for record in batch]


def test_fetch_byte_limits_and_offsets_out_of_range(conn: Connection) -> None:
    assert produce(conn, "t", batch([(b"k%d" % i, b"v" * 100) for i in range(100)])).error_code == NONE
    assert fetched_offsets(fetch(conn, "t", 0)) == list(range(100))
    some = fetched_offsets(fetch(conn, "t", 10, partition_max_bytes=1000))  # about 125 bytes a record
    assert some == list(range(10, 10 + len(some))) and 1 < len(some) < 10
    assert fetched_offsets(fetch(conn, "t", 10, partition_max_bytes=1)) == [10]  # at least one record
    assert fetched_offsets(fetch(conn, "t", 100)) == []  # at the high watermark: nothing yet
    assert fetch(conn, "t", 101).error_code == OFFSET_OUT_OF_RANGE


def list_offsets(conn: Connection, topic: str, timestamp: int, version: int = 7) -> tuple[int, int, int]:
    """(error code, timestamp, offset) ListOffsets answers for partition 0 of ``topic``."""
    partition = ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
        version=version, partition_index=0, current_leader_epoch=-1, timestamp=timestamp)
    request = ListOffsetsRequest(version=version, replica_id=-1, isolation_level=0, topics=[
        ListOffsetsRequest.ListOffsetsTopic(version=version, name=topic, partitions=[partition])])
    answer = conn.call(request, ListOffsetsResponse).topics[0].partitions[0]
    return answer.error_code, answer.timestamp, answer.offset


def test_list_offsets_answers_the_found_records_own_timestamp_and_the_largest_one(data_dir: str,
                                                                                  conn: Connection) -> None:
    keys = [(b"k%d" % i, b"v") for i in range(5)]
    assert produce(conn, "t", batch(keys, timestamps=[1000, 3000, 2000, 3000, 1500])).error_code == NONE
    with compactlog.open(data_dir) as store:  # the first batch sealed: both segment kinds are searched
        store.roll("t", 0)
    assert produce(conn, "t", batch(keys[:3], timestamps=[2500, 3000, 1200])).error_code == NONE
    assert list_offsets(conn, "t", -3) == (NONE, 3000, 1)  # MAX_TIMESTAMP: the first record at the largest
    assert list_offsets(conn, "t", 2500) == (NONE, 3000, 1)  # the record's own timestamp, not the one asked
    assert list_offsets(conn, "t", 1001) == (NONE, 3000, 1)
    assert list_offsets(conn, "t", 1000) == (NONE, 1000, 0)
    assert list_offsets(conn, "t", 3001) == (NONE, -1, -1)  # no record that late
    assert list_offsets(conn, "t", -2) == (NONE, -1, 0)
    assert list_offsets(conn, "t", -1) == (NONE, -1, 8)
    assert produce(conn, "t", batch(keys[:1], timestamps=[4000])).error_code == NONE
    assert list_offsets(conn, "t", -3) == (NONE, 4000, 8)  # in the active segment
    assert list_offsets(conn, "t", 3500) == (NONE, 4000, 8)


def test_list_offsets_max_timestamp_of_an_empty_partition_is_none(conn: Connection) -> None:
    assert list_offsets(conn, "t", -3) == (NONE, -1, -1)


def api_versions_answered(broker: str) -> bool:
    conn = Connection(broker)
    try:
        response = conn.call(ApiVersionsRequest(version=3, client_software_name="t", client_software_version="1"),
                             ApiVersionsResponse)
        return response.error_code == NONE and any(k.api_key == 0 for k in response.api_keys)
    finally:
        conn.close()


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def test_bad_frames_close_only_their_own_connection(broker: str, conn: Connection) -> None:
    rng = random.Random(18)
    valid_header = struct.pack(">hhih", 18, 3, 1, 4) + b"test"
    stalled = [Connection(broker), Connection(broker)]  # slow clients, open throughout: they block no one
    stalled[0].sock.sendall(b"\x00\x00")  # half a size prefix
    stalled[1].sock.sendall(frame(valid_header + b"\x00" * 100)[:20])  # a frame's first bytes
    newer = Connection(broker)  # an ApiVersions newer than ours: answered v0 UNSUPPORTED_VERSION, not closed
    try:
        newer.sock.sendall(frame(struct.pack(">hhih", 18, 99, 5, -1)))
        (size,) = struct.unpack(">i", newer.recv_exactly(4))
        response = ApiVersionsResponse.decode(newer.recv_exactly(size), version=0, header=True)
        assert response.error_code == UNSUPPORTED_VERSION and response.api_keys
    finally:
        newer.close()
    bad_frames = [
        struct.pack(">i", 2_000_000_000),  # larger than socket.request.max.bytes
        struct.pack(">i", -5),  # a negative size
        frame(b"\x00"),  # shorter than a request header
        frame(struct.pack(">hhih", 999, 0, 1, -1)),  # an unknown API key
        frame(struct.pack(">hhih", 1, 99, 1, -1)),  # a version we do not speak
        frame(struct.pack(">hhih", 3, 9, 1, 30000) + b"x"),  # a client id longer than the frame
        frame(struct.pack(">hhih", 3, 9, 1, -1) + b"\x00\x05"),  # a topic array cut short
    ]
    for bad in bad_frames:
        victim = Connection(broker)
        try:
            victim.sock.sendall(bad)
            assert victim.closed_by_peer(), bad[:16]
        finally:
            victim.close()
    for _ in range(60):  # random bodies: each answered or its connection closed, nothing else harmed
        victim = Connection(broker)
        victim.sock.settimeout(0.5)
        try:
            victim.sock.sendall(frame(struct.pack(">hhih", rng.choice([0, 1, 2, 3, 19, 20, 22, 32, 33, 44]),
                                                  rng.choice([1, 3, 4, 5, 9]), 1, -1)
                                      + rng.randbytes(rng.randrange(0, 300))))
            victim.sock.recv(1)
        except TimeoutError:
            pass  # a long-polling fetch, say: the closing below ends it
        finally:
            victim.close()
    # a frame cut short by its client's going away, and random bytes
    for data in (frame(valid_header + b"\x00" * 10)[:9], rng.randbytes(3000)):
        victim = Connection(broker)
        victim.sock.sendall(data)
        victim.close()
    assert api_versions_answered(broker)
    assert fetch(conn, "t", 0).error_code == NONE  # the connection open all along still works
    for slow in stalled:
        slow.close()
