"""Produce on the raw wire against what a client may not send: decompression bombs (refused fast, the
broker's memory bounded, nothing appended, the connection still usable) and Kafka's LogValidator checks,
each answered with Kafka's error code."""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator

import pytest
from broker import start_broker, stop_broker
from kafka.protocol.producer import ProduceRequest, ProduceResponse
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from test_wire import TIMEOUT_S, Connection, batch, fetch, fetched_offsets, produce

import compactlog
from bombs import MIB, gzip_bomb, lz4_bomb, snappy_bomb, zstd_bomb
from compactlog.broker.error_codes import (
    INVALID_PRODUCER_ID_MAPPING,
    INVALID_RECORD,
    INVALID_REQUIRED_ACKS,
    MESSAGE_TOO_LARGE,
    NONE,
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
)
from compactlog.protocol import _record_batch, compression

pytestmark = pytest.mark.integration
HEADER = struct.Struct(">qiibIhiqqqhii")  # the 61 bytes of a v2 batch header (record_batch.py)


def raw_batch(records: bytes, *, codec: int = 0, count: int = 1, last_offset_delta: int | None = None,
              attributes: int = 0, producer_id: int = -1, sequence: int = -1) -> bytes:
    """A v2 batch around ``records`` (a records section as it goes on the wire), its CRC-32C right."""
    last = count - 1 if last_offset_delta is None else last_offset_delta
    body = bytearray(HEADER.pack(0, 49 + len(records), 0, 2, 0, attributes | codec, last, 1, 1, producer_id,
                                 0 if producer_id >= 0 else -1, sequence, count) + records)
    struct.pack_into(">I", body, 17, _record_batch.crc32c(memoryview(body)[21:]))
    return bytes(body)


def peak_rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmHWM:"))


@pytest.fixture
def served(data_dir: str) -> Iterator[tuple[int, Connection]]:
    """A broker on a data directory with topic ``t`` (delete policy: keyless records are allowed): its pid
    and a connection. Retention is off: the batches carry timestamps years old, which the broker's cleaner
    service would otherwise roll (segment.ms) and delete (retention.ms) on its first pass, as Kafka does."""
    with compactlog.open(data_dir) as store:
        store.create_topic("t", 1, {"cleanup.policy": "delete", "retention.ms": "-1"})
    proc, port = start_broker(data_dir)
    conn = Connection(f"127.0.0.1:{port}")
    try:
        yield proc.pid, conn
    finally:
        conn.close()
        stop_broker(proc)


# codec, the records section (expanding to 1 GiB, 1 GiB claimed, 512 MiB, 200 MiB), each within the default
# max.message.bytes. Real xerial blocks expand at most about 21 times, so within max.message.bytes they cannot
# pass the limit: tests/unit/test_decompression_limits.py checks their summing.
BOMBS = [(compression.ZSTD, zstd_bomb), (compression.SNAPPY, snappy_bomb),
         (compression.GZIP, lambda: gzip_bomb(512 * MIB)), (compression.LZ4, lambda: lz4_bomb(200 * MIB))]


def test_decompression_bombs_are_refused_fast_and_nothing_is_appended(served: tuple[int, Connection]) -> None:
    pid, conn = served
    assert produce(conn, "t", batch([(b"warm", b"up")])).error_code == NONE  # the broker's usual footprint
    before = peak_rss_bytes(pid)
    for codec, build in BOMBS:
        bomb = raw_batch(build(), codec=codec, count=1000)
        started = time.monotonic()
        answer = produce(conn, "t", bomb)
        assert (answer.error_code, answer.base_offset) == (MESSAGE_TOO_LARGE, -1), compression.NAMES[codec]
        assert "decompress to more than" in answer.error_message
        assert time.monotonic() - started < 10  # the whole expansion takes far longer
    # 32 MiB of records at most (32 x max.message.bytes), and their columns: not the bombs' sizes
    assert peak_rss_bytes(pid) - before < 160 * MIB, (before, peak_rss_bytes(pid))
    assert produce(conn, "t", batch([(b"k", b"v")])).base_offset == 1  # the same connection: nothing appended
    assert fetched_offsets(fetch(conn, "t", 0)) == [0, 1]


def produce_with(conn: Connection, records: bytes | None, *, acks: int = -1, transactional_id: str | None = None,
                 ) -> ProduceResponse:
    request = ProduceRequest(version=9, transactional_id=transactional_id, acks=acks, timeout_ms=TIMEOUT_S * 1000,
                             topic_data=[ProduceRequest.TopicProduceData(version=9, name="t", partition_data=[
                                 ProduceRequest.TopicProduceData.PartitionProduceData(version=9, index=0,
                                                                                      records=records)])])
    return conn.call(request, ProduceResponse).responses[0].partition_responses[0]


def transactional_batch() -> bytes:
    builder = DefaultRecordBatchBuilder(2, 0, True, 7, 0, 0, 1 << 20)
    builder.append(0, 1, b"k", b"v", [])
    return bytes(builder.build())


def legacy_message_set(magic: int) -> bytes:
    builder = LegacyRecordBatchBuilder(magic, 0, 1 << 20)
    builder.append(0, 1 if magic else None, b"k", b"v")
    return bytes(builder.build())


def one_record(key: bytes = b"k") -> bytes:
    """The records section of one record (offsetDelta 0), as kafka-python writes it."""
    return batch([(key, b"v")])[61:]


def test_what_kafkas_log_validator_refuses_is_refused_with_its_code(served: tuple[int, Connection]) -> None:
    _, conn = served
    refused = {
        "lastOffsetDelta past the records": (raw_batch(one_record(), last_offset_delta=1), INVALID_RECORD),
        "a count of no records": (raw_batch(b"", count=0, last_offset_delta=0), INVALID_RECORD),
        "two batches": (batch([(b"a", b"1")]) + batch([(b"b", b"2")]), INVALID_RECORD),
        "an idempotent batch without a sequence": (raw_batch(one_record(), producer_id=5, sequence=-1),
                                                   INVALID_RECORD),
        "a magic 0 message set": (legacy_message_set(0), INVALID_RECORD),
        "a magic 1 message set": (legacy_message_set(1), INVALID_RECORD),
        "no records at all": (b"", INVALID_RECORD),
    }
    for name, (records, code) in refused.items():
        answer = produce_with(conn, records)
        assert (answer.error_code, answer.base_offset) == (code, -1), (name, answer)
    answer = produce_with(conn, transactional_batch())  # no transactional id in the request: not authorised
    assert answer.error_code == TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    answer = produce_with(conn, transactional_batch(), transactional_id="tx")  # an id no producer registered
    assert answer.error_code == INVALID_PRODUCER_ID_MAPPING
    for acks in (2, -2, 5):
        assert produce_with(conn, batch([(b"k", b"v")]), acks=acks).error_code == INVALID_REQUIRED_ACKS
    assert produce_with(conn, batch([(b"k", b"v")])).base_offset == 0  # nothing above was appended


def test_inner_offsets_out_of_step_are_renumbered_as_kafka_rewrites_them(served: tuple[int, Connection]) -> None:
    _, conn = served
    builder = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 1 << 20)
    builder.append(0, 1, b"a", b"1", [])
    builder.append(5, 1, b"b", b"2", [])  # offsetDelta 5 for the second of two records
    records = bytes(builder.build())[61:]
    answer = produce_with(conn, raw_batch(records, count=2, last_offset_delta=1))
    assert (answer.error_code, answer.base_offset) == (NONE, 0)
    assert fetched_offsets(fetch(conn, "t", 0)) == [0, 1]
