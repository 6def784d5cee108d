"""A produced batch is appended from its decoded columns (``Log.append_producer_batch`` / ``Log.append`` of
``RecordColumns``, ``frame_plan.batch_frames``): the active segment then holds the very frames, and the
producer state the very state, that the general path gives for the same records as rows in SCHEMA
(``record.producer_rows`` -> ``Log.append`` -> ``frame_plan.table_frames``, whose omitted columns are read from
the rows' values), and Produce answers with the error codes ``Store.append`` raises for them."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

import compactlog
from compactlog.broker.error_codes import INVALID_RECORD, INVALID_REQUEST, MESSAGE_TOO_LARGE, NONE
from compactlog.broker.produce import _append_all
from compactlog.record import HEADER_TYPE, data_rows, producer_rows
from support import FakeClock

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")  # kafka-python's importlib.resources

T0 = 1_700_000_000_000
Record = tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]


def wire(records: list[Record], producer: tuple[int, int, int] = (-1, -1, -1), transactional: bool = False,
         codec: int = 0, first_timestamp: int = T0) -> bytes:
    producer_id, epoch, sequence = producer
    builder = DefaultRecordBatchBuilder(2, codec, transactional, producer_id, epoch, sequence, 1 << 30)
    for i, (key, value, headers) in enumerate(records):
        builder.append(i, first_timestamp + i, key, value, headers)
    return bytes(builder.build())


def rows_of(records: list[Record], first_timestamp: int = T0) -> pa.Table:
    """The same records as data rows in SCHEMA, built from Python values (not by the decoder)."""
    headers = [[{"key": k, "value": v} for k, v in h] if h else None for _, _, h in records]
    keys, values = pa.array([k for k, _, _ in records], pa.binary()), pa.array([v for _, v, _ in records], pa.binary())
    return data_rows(pa.array(np.arange(first_timestamp, first_timestamp + len(records), dtype=np.int64)), keys, values,
                     pa.array(headers, HEADER_TYPE))


PLAIN = [(b"k%d" % i, b"v" * (i % 13), []) for i in range(250)]
MIXED = [(b"k%d" % i, None if i % 5 == 0 else b"val%d" % i, [("h1", b"x"), ("h2", None)] if i % 3 == 0 else [])
         for i in range(100)]
EVERY_HEADER = [(b"k%d" % i, b"v" * 50, [("a", b"b")]) for i in range(40)]
BIG = [(b"k%d" % i, b"v" * 90, []) for i in range(700)]  # rolls a segment of 20,000 bytes several times
MANY = [(b"%d" % i, b"", []) for i in range(70_000)]  # more rows than one frame holds

# (topic, records, producer: "txn" | "idempotent" | None, codec)
CASES = [
    ("c", PLAIN, "txn", 0), ("c", MIXED, "txn", 0), ("c", EVERY_HEADER, "txn", 1), ("c", PLAIN, "idempotent", 2),
    ("c", PLAIN, None, 0), ("c", MIXED, None, 0), ("la", PLAIN, "txn", 0), ("la", MIXED, "idempotent", 0),
    ("la", PLAIN, None, 3), ("small", BIG, "txn", 0), ("small", BIG[:300], "idempotent", 0),
    ("small", [(k, v, [("h", b"y")]) for k, v, _ in BIG[:300]], None, 0), ("c", MANY, "idempotent", 0),
]
TOPICS = {"c": {"cleanup.policy": "compact", "max.message.bytes": "4000000"},
          "la": {"message.timestamp.type": "LogAppendTime"}, "small": {"segment.bytes": "20000"}}


def files(directory: str) -> dict[str, bytes]:
    return {name: open(os.path.join(directory, name), "rb").read() for name in sorted(os.listdir(directory))
            if name.endswith((".log", ".parquet", ".snapshot"))}


def test_a_produced_batch_stores_the_frames_and_state_its_rows_give(tmp_path: object) -> None:
    clock = FakeClock(T0 + 5000)
    wired = compactlog.open(os.path.join(str(tmp_path), "wire"), clock=clock)
    general = compactlog.open(os.path.join(str(tmp_path), "rows"), clock=clock)
    for store in (wired, general):
        for topic, config in TOPICS.items():
            store.create_topic(topic, 1, config)
    producer_id, epoch = wired.transactions.init_producer("tx", 60000)
    wired.transactions.add_to_transaction("tx", producer_id, epoch, [(topic, 0) for topic in TOPICS])
    sequences = {topic: 0 for topic in TOPICS}
    for topic, records, kind, codec in CASES:
        clock.advance(7)
        if kind is None:
            sent, rows = wire(records, codec=codec), rows_of(records)
        else:
            sent = wire(records, (producer_id, epoch, sequences[topic]), kind == "txn", codec)
            rows = producer_rows(rows_of(records), producer_id, epoch, sequences[topic], kind == "txn")
            sequences[topic] += len(records)
        results, _ = _append_all(wired, [(topic, 0, sent)], "tx" if kind == "txn" else None)
        assert results[0]["error_code"] == NONE, results
        first, _ = general.log(topic, 0).append(rows, flush=False)
        assert results[0]["base_offset"] == first
    for topic in TOPICS:
        assert files(wired.log(topic, 0).directory) == files(general.log(topic, 0).directory), topic
        assert wired.log(topic, 0)._producers.manager.to_snapshot() == \
            general.log(topic, 0)._producers.manager.to_snapshot(), topic
    assert len(wired.log("small", 0).sealed_segments()) >= 3  # the batches were cut into frames across rolls
    # and MANY into two frames of at most MAX_FRAME_ROWS
    assert len(wired.log("c", 0).active.frames) == sum(topic == "c" for topic, *_ in CASES) + 1


@pytest.mark.parametrize(("sent", "code"), [
    (wire(PLAIN[:10], first_timestamp=-5), INVALID_RECORD),  # Store.append's timestamp rule
    (wire([(b"k", b"v" * 1950, [])], codec=1), MESSAGE_TOO_LARGE),  # a small batch, a record too large
    (wire([(b"k", b"v", [("h", b"x" * 1950)])], codec=1), MESSAGE_TOO_LARGE),  # by its headers
    (wire([(None, b"v", [])]), INVALID_RECORD),  # keyless on a compacted topic
    (wire(PLAIN[:10], (5, -3, 0)), INVALID_REQUEST),  # Store.append's producer fields rule
])
def test_produce_refuses_what_store_append_refuses(tmp_path: object, sent: bytes, code: int) -> None:
    with compactlog.open(str(tmp_path), clock=FakeClock()) as store:
        store.create_topic("t", 1, {"cleanup.policy": "compact", "max.message.bytes": "2000"})
        results, _ = _append_all(store, [("t", 0, sent)], None)
        assert results[0]["error_code"] == code, results
        assert store.log("t", 0).log_end_offset == 0


def test_decoded_columns_know_their_key_and_value_bytes_and_their_timestamps_extremes() -> None:
    from compactlog.columns import binary_span, to_numpy
    from compactlog.protocol.record_batch import decode_batches

    several = decode_batches(wire(MIXED, codec=1) + wire(PLAIN, first_timestamp=5) + wire(EVERY_HEADER))
    backwards = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 1 << 20)
    for i, timestamp in enumerate([T0, T0 - 9, T0 + 4, -7, T0 + 2]):  # the extremes inside, one negative
        backwards.append(i, timestamp, b"k", b"v", [])
    for batch in (several + decode_batches(wire(MIXED, codec=1)) + decode_batches(wire(PLAIN))
                  + decode_batches(bytes(backwards.build()))):
        columns = batch.columns
        assert columns.key_value_bytes == binary_span(columns.key) + binary_span(columns.value) > 0
        timestamps = to_numpy(columns.timestamp)
        assert (columns.min_timestamp, columns.max_timestamp) == (timestamps.min(), timestamps.max())
        assert (columns.headers is None) == (batch.records.column("headers").null_count == batch.record_count)
