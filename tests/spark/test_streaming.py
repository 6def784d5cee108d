"""Tests for ``spark.readStream.format("compactlog")`` (and writeStream): every record once per offset, in
offset order per partition, across compaction gaps and retention."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pytest

import compactlog

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

pytestmark = pytest.mark.spark

WAIT_S = 60


class Sink:
    """A foreachBatch sink that keeps every batch's rows, by batch id (the callback runs in this process)."""

    def __init__(self) -> None:
        self.batches: list[tuple[int, list]] = []

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        self.batches.append((batch_id, df.select("partition", "offset", "key", "value").collect()))

    def records(self) -> dict[int, list[tuple[int, bytes, bytes | None]]]:
        """Partition -> (offset, key, value) in the order the batches delivered them."""
        out: dict[int, list[tuple[int, bytes, bytes | None]]] = {}
        for _, rows in sorted(self.batches, key=lambda b: b[0]):
            for row in sorted(rows, key=lambda r: (r.partition, r.offset)):
                out.setdefault(row.partition, []).append((row.offset, row.key, row.value))
        return out


def stream(spark: SparkSession, data_dir: str, topic: str = "t", **options: str) -> DataFrame:
    reader = spark.readStream.format("compactlog").option("path", data_dir).option("topic", topic)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def append(store: compactlog.Store, partition: int, keys: list[bytes], values: list[bytes | None],
           appended: dict[int, dict[int, tuple[bytes, bytes | None]]]) -> None:
    """Append and remember offset -> (key, value), the model of what the stream may deliver."""
    result = store.append("t", partition, pa.table({"key": keys, "value": pa.array(values, pa.binary())}))
    for i, (key, value) in enumerate(zip(keys, values, strict=True)):
        appended.setdefault(partition, {})[result.base_offset + i] = (key, value)


def log_records(store: compactlog.Store, partition: int, start: int = 0, end: int | None = None,
                ) -> list[tuple[int, bytes, bytes | None]]:
    first = max(start, store.log_start_offset("t", partition))
    return [(r.offset, r.key, r.value) for r in store.read("t", partition, first, end)]


def test_a_running_query_sees_every_record_across_a_clean_that_opens_gaps(
        spark: SparkSession, tmp_path: Path) -> None:
    data_dir = str(tmp_path / "data")
    store = compactlog.open(data_dir)
    store.create_topic("t", 2, {"cleanup.policy": "compact", "segment.bytes": 1_500})
    appended: dict[int, dict[int, tuple[bytes, bytes | None]]] = {}
    keys = [b"k%d" % i for i in range(6)]

    def round_(tag: str) -> None:
        for p in range(2):
            append(store, p, keys, [b"%s-%d" % (tag.encode(), i) if i else None for i in range(6)], appended)

    sink = Sink()
    entered, gate = threading.Event(), threading.Event()
    gate.set()

    def gated(df: DataFrame, batch_id: int) -> None:
        # Holds a planned batch until the main thread has cleaned: its read then crosses the new gaps.
        entered.set()
        assert gate.wait(WAIT_S)
        sink(df, batch_id)

    round_("a")
    query = (stream(spark, data_dir).writeStream.foreachBatch(gated)
             .trigger(processingTime="100 milliseconds")
             .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
    try:
        query.processAllAvailable()
        read_before = {p: store.log_end_offset("t", p) for p in range(2)}
        assert sink.records() == {p: log_records(store, p) for p in range(2)}

        gate.clear()
        entered.clear()
        for tag in ("b", "c", "d"):
            round_(tag)
        assert entered.wait(WAIT_S)  # the next batch is planned up to here, not read yet
        planned_end = {p: store.log_end_offset("t", p) for p in range(2)}
        for p in range(2):
            store.roll("t", p)
        store.clean(force=True)
        survivors = {p: log_records(store, p, read_before[p], planned_end[p]) for p in range(2)}
        assert all(len(survivors[p]) < planned_end[p] - read_before[p] for p in range(2))  # gaps opened
        round_("e")
        gate.set()
        query.processAllAvailable()
    finally:
        gate.set()
        query.stop()

    got = sink.records()
    for p in range(2):
        offsets = [o for o, _, _ in got[p]]
        assert offsets == sorted(set(offsets))  # in offset order, each offset once
        assert all(appended[p][o] == (k, v) for o, k, v in got[p])  # exactly what was appended there
        delivered = set(got[p])
        assert set(survivors[p]) <= delivered  # nothing the log still holds was missed
        assert set(log_records(store, p, planned_end[p])) <= delivered  # nor what came after the clean
        assert [o for o in offsets if read_before[p] <= o < planned_end[p]] == [o for o, _, _ in survivors[p]]


def test_an_offset_below_the_log_start_after_retention_resumes_at_the_log_start(
        spark: SparkSession, tmp_path: Path) -> None:
    data_dir = str(tmp_path / "data")
    store = compactlog.open(data_dir)
    store.create_topic("t", 1, {"segment.bytes": 1_000, "retention.bytes": 1})
    appended: dict[int, dict[int, tuple[bytes, bytes | None]]] = {}
    sink = Sink()

    def run() -> None:
        (stream(spark, data_dir).writeStream.foreachBatch(sink).trigger(availableNow=True)
         .option("checkpointLocation", str(tmp_path / "checkpoint")).start().awaitTermination(WAIT_S))

    append(store, 0, [b"a"] * 5, [b"x" * 50] * 5, appended)
    run()
    committed = store.log_end_offset("t", 0)
    for i in range(4):
        append(store, 0, [b"b%d" % i] * 10, [b"y" * 50] * 10, appended)
    store.roll("t", 0)
    store.enforce_retention()
    assert store.log_start_offset("t", 0) > committed  # unread records are gone
    append(store, 0, [b"c"], [b"z"], appended)
    run()
    got = sink.records()[0]
    assert [o for o, _, _ in got] == list(range(committed)) + [o for o, _, _ in log_records(store, 0)]


def test_max_offsets_per_trigger_spreads_the_backlog_over_batches(
        spark: SparkSession, tmp_path: Path) -> None:
    data_dir = str(tmp_path / "data")
    store = compactlog.open(data_dir)
    store.create_topic("t", 2)
    appended: dict[int, dict[int, tuple[bytes, bytes | None]]] = {}
    for p in range(2):
        append(store, p, [b"k%d" % i for i in range(30)], [b"v%d" % i for i in range(30)], appended)
    sink = Sink()
    (stream(spark, data_dir, maxOffsetsPerTrigger="25").writeStream.foreachBatch(sink)
     .trigger(availableNow=True).option("checkpointLocation", str(tmp_path / "checkpoint")).start()
     .awaitTermination(WAIT_S))
    assert len(sink.batches) >= 3
    assert all(len(rows) <= 25 for _, rows in sink.batches)
    assert sink.records() == {p: log_records(store, p) for p in range(2)}


def test_write_stream_copies_a_topic(spark: SparkSession, tmp_path: Path) -> None:
    data_dir = str(tmp_path / "data")
    store = compactlog.open(data_dir)
    store.create_topic("t", 2)
    store.create_topic("copy", 3)
    appended: dict[int, dict[int, tuple[bytes, bytes | None]]] = {}
    for p in range(2):
        append(store, p, [b"k%d" % i for i in range(10)], [b"v%d" % i for i in range(10)], appended)
    (stream(spark, data_dir).writeStream.format("compactlog").option("path", data_dir).option("topic", "copy")
     .trigger(availableNow=True).option("checkpointLocation", str(tmp_path / "checkpoint")).start()
     .awaitTermination(WAIT_S))
    copied = sorted((r.key, r.value) for p in range(3) for r in store.read("copy", p, 0))
    assert copied == sorted((k, v) for p in range(2) for k, v in appended[p].values())


def test_a_read_committed_stream_waits_for_open_transactions(spark: SparkSession, tmp_path: Path) -> None:
    data_dir = str(tmp_path / "data")
    store = compactlog.open(data_dir)
    store.create_topic("t", 1)
    producer = store.producer(transactional_id="tx")
    producer.begin_transaction()
    producer.send("t", b"a", b"1", partition=0)
    producer.commit_transaction()
    producer.begin_transaction()
    producer.send("t", b"b", b"2", partition=0)
    producer.flush()
    sink = Sink()

    def run() -> None:
        (stream(spark, data_dir, isolationLevel="read_committed").writeStream.foreachBatch(sink)
         .trigger(availableNow=True).option("checkpointLocation", str(tmp_path / "checkpoint")).start()
         .awaitTermination(WAIT_S))

    run()
    assert [v for _, _, v in sink.records()[0]] == [b"1"]  # the open transaction is not read yet
    producer.commit_transaction()
    producer.close()
    run()
    assert [v for _, _, v in sink.records()[0]] == [b"1", b"2"]
