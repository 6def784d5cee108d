"""Compressed produce from parallel connections against a real broker: eight connections, each pipelining
requests of one large record (1 MB of records, eight zstd blocks of 128 KiB) compressed with zstd, lz4, gzip
or snappy. The broker's storage threads decompress them at the same time: every request must be
acknowledged, and every acknowledged record must read back with the bytes that were sent (a zstd context
shared by the threads: requests answered CORRUPT_MESSAGE, records stored with other bytes, or a crash)."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from broker import start_broker, stop_broker
from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.protocol.producer import ProduceRequest, ProduceResponse
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords
from wire_client import TIMEOUT_S, Connection

import compactlog
from compactlog.broker.error_codes import NONE
from compactlog.protocol import compression

pytestmark = [pytest.mark.integration, pytest.mark.filterwarnings("ignore::DeprecationWarning")]
CONNECTIONS = 8
REQUESTS = 24  # per connection
VALUE_BYTES = 1_000_000
# Per request, in turn: zstd (the codec whose shared context broke) half the time, then each other codec.
CODECS = [compression.ZSTD, compression.LZ4, compression.ZSTD, compression.GZIP, compression.ZSTD,
          compression.SNAPPY]
TOPIC = "codecs"
PRODUCE_VERSION, FETCH_VERSION = 3, 11


def large_value(rng: random.Random) -> bytes:
    """A value that the codecs compress 6 to 9 times: 100 random bytes, then 900 of one byte, over and over
    (much decompression per byte received, so that the threads' decompressions overlap)."""
    return b"".join(rng.randbytes(100) + bytes([rng.randrange(256)]) * 900 for _ in range(VALUE_BYTES // 1000))


def one_record_batch(codec: int, key: bytes, value: bytes) -> bytes:
    builder = DefaultRecordBatchBuilder(2, codec, False, -1, -1, -1, 1 << 21)
    builder.append(0, int(time.time() * 1000), key, value, [])
    return bytes(builder.build())


def produce_request(partition: int, records: bytes) -> ProduceRequest:
    return ProduceRequest(version=PRODUCE_VERSION, transactional_id=None, acks=-1, timeout_ms=TIMEOUT_S * 1000,
                          topic_data=[ProduceRequest.TopicProduceData(
                              version=PRODUCE_VERSION, name=TOPIC, partition_data=[
                                  ProduceRequest.TopicProduceData.PartitionProduceData(
                                      version=PRODUCE_VERSION, index=partition, records=records)])])


def fetch_records(conn: Connection, partition: int, offset: int) -> list[Any]:
    request = FetchRequest(version=FETCH_VERSION, replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 24,
                           isolation_level=0, session_id=0, session_epoch=-1, topics=[FetchRequest.FetchTopic(
                               version=FETCH_VERSION, topic=TOPIC, partitions=[FetchRequest.FetchTopic.FetchPartition(
                                   version=FETCH_VERSION, partition=partition, fetch_offset=offset,
                                   partition_max_bytes=1 << 22)])],
                           forgotten_topics_data=[], rack_id="")
    part = conn.call(request, FetchResponse).responses[0].partitions[0]
    assert part.error_code == NONE
    return [record for batch in MemoryRecords(part.records or b"") for record in batch]


@pytest.fixture
def broker_address(data_dir: str) -> Iterator[str]:
    """A broker with topic ``codecs``, one partition per connection (delete policy, no retention)."""
    with compactlog.open(data_dir) as store:
        store.create_topic(TOPIC, CONNECTIONS, {"cleanup.policy": "delete", "retention.ms": "-1",
                                                "max.message.bytes": str(1 << 21)})
    proc, port = start_broker(data_dir)
    try:
        yield f"127.0.0.1:{port}"
    finally:
        stop_broker(proc)


def test_parallel_connections_store_every_compressed_record_as_sent(broker_address: str) -> None:
    rng = random.Random(26)
    sent: dict[int, list[tuple[int, bytes, bytes]]] = {}  # partition -> (codec, key, value) per request
    requests: dict[int, list[bytes]] = {}
    for partition in range(CONNECTIONS):
        sent[partition] = []
        for i in range(REQUESTS):
            codec, key, value = CODECS[(partition + i) % len(CODECS)], b"%d-%d" % (partition, i), large_value(rng)
            sent[partition].append((codec, key, value))
        requests[partition] = [one_record_batch(*record) for record in sent[partition]]
    answers: dict[int, list[tuple[int, int, str | None]]] = {partition: [] for partition in range(CONNECTIONS)}
    errors: list[BaseException] = []
    start = threading.Barrier(CONNECTIONS)

    def producer(partition: int) -> None:
        try:
            conn = Connection(broker_address)
            start.wait()
            # Pipelined: the broker decodes a connection's next request while the previous one waits for
            # its fsync, so the storage threads decompress several requests at once.
            correlation_ids = [conn.send(produce_request(partition, records)) for records in requests[partition]]
            for correlation_id in correlation_ids:
                answer = conn.receive(ProduceResponse, PRODUCE_VERSION)
                assert answer.header.correlation_id == correlation_id
                result = answer.responses[0].partition_responses[0]
                answers[partition].append((result.error_code, result.base_offset, result.error_message))
            conn.close()
        except BaseException as e:  # reported by the test's thread
            errors.append(e)

    threads = [threading.Thread(target=producer, args=(partition,)) for partition in range(CONNECTIONS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    refused = [(partition, i, answer) for partition, partition_answers in answers.items()
               for i, answer in enumerate(partition_answers) if answer[0] != NONE]
    reader = Connection(broker_address)
    differ = []
    for partition in range(CONNECTIONS):
        stored: dict[int, Any] = {}
        while len(stored) < REQUESTS - sum(1 for p, _, _ in refused if p == partition):
            records = fetch_records(reader, partition, len(stored))
            assert records, f"partition {partition}: nothing at offset {len(stored)}"
            stored.update((record.offset, record) for record in records)
        for (codec, key, value), (code, offset, _) in zip(sent[partition], answers[partition], strict=True):
            if code == NONE and (stored[offset].key, stored[offset].value) != (key, value):
                differ.append((partition, offset, compression.NAMES[codec]))
    reader.close()
    total = CONNECTIONS * REQUESTS
    assert not refused and not differ, (f"of {total} requests, {len(refused)} refused ({refused[:3]}); "
                                        f"{len(differ)} acknowledged records read back with other bytes "
                                        f"(partition, offset, codec): {differ[:5]}")
