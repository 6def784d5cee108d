"""Tests for the ``compactlog`` PySpark data source: batch reads (offset options, gaps, splitting) and
writes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pytest

import compactlog
from compactlog.spark import tasks
from compactlog.spark.datasource import SPARK_SCHEMA

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

pytestmark = pytest.mark.spark


@pytest.fixture
def data_dir(tmp_path: Path) -> str:
    return str(tmp_path / "data")


def source(spark: SparkSession, data_dir: str, topic: str = "t", **options: str) -> DataFrame:
    reader = spark.read.format("compactlog").option("path", data_dir).option("topic", topic)
    for name, value in options.items():
        reader = reader.option(name, value)
    return reader.load()


def offsets(df: DataFrame) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for row in df.select("partition", "offset").collect():
        out.setdefault(row.partition, []).append(row.offset)
    return {p: sorted(o) for p, o in sorted(out.items())}


def fill(store: compactlog.Store, partitions: int, per_partition: int, keys: int = 1_000_000) -> None:
    for p in range(partitions):
        store.append("t", p, pa.table({"key": [b"p%d-k%d" % (p, i % keys) for i in range(per_partition)],
                                       "value": [b"v%d" % i for i in range(per_partition)]}))


def test_schema_is_kafkas_and_matches_the_arrow_batches(spark: SparkSession, data_dir: str) -> None:
    from pyspark.sql.pandas.types import to_arrow_schema

    compactlog.open(data_dir).create_topic("t", 1)
    assert source(spark, data_dir).schema == SPARK_SCHEMA
    assert SPARK_SCHEMA.fieldNames() == ["topic", "partition", "offset", "timestamp", "key", "value",
                                         "headers"]
    assert to_arrow_schema(SPARK_SCHEMA, timezone="UTC") == tasks.OUTPUT_SCHEMA


def test_starting_and_ending_offsets_as_in_kafkas_source(spark: SparkSession, data_dir: str) -> None:
    store = compactlog.open(data_dir)
    store.create_topic("t", 2)
    fill(store, 2, 20)
    assert offsets(source(spark, data_dir)) == {0: list(range(20)), 1: list(range(20))}
    ranged = source(spark, data_dir, startingOffsets=json.dumps({"t": {"0": 5, "1": -2}}),
                    endingOffsets=json.dumps({"t": {"0": 8, "1": -1}}))
    assert offsets(ranged) == {0: [5, 6, 7], 1: list(range(20))}
    assert offsets(source(spark, data_dir, startingOffsets="earliest", endingOffsets="latest")) == \
        {0: list(range(20)), 1: list(range(20))}
    with pytest.raises(Exception, match="not allowed in a batch read"):
        source(spark, data_dir, startingOffsets="latest").collect()
    with pytest.raises(Exception, match="OffsetOutOfRangeError"):
        source(spark, data_dir, endingOffsets=json.dumps({"t": {"0": 21}})).collect()


def test_reads_skip_the_offset_gaps_compaction_leaves(spark: SparkSession, data_dir: str) -> None:
    store = compactlog.open(data_dir)
    store.create_topic("t", 1, {"cleanup.policy": "compact", "segment.bytes": 1_500})
    model: dict[bytes, bytes] = {}
    for round_ in range(6):
        keys = [b"k%d" % i for i in range(8)]
        values = [b"r%d-%d" % (round_, i) for i in range(8)]
        store.append("t", 0, pa.table({"key": keys, "value": values}))
        model.update(zip(keys, values, strict=True))
    store.roll("t", 0)
    store.clean(force=True)
    remaining = [r.offset for r in store.read("t", 0, 0)]
    assert len(remaining) < 48 and remaining[-1] == 47  # compaction opened gaps

    assert offsets(source(spark, data_dir)) == {0: remaining}
    # a starting offset inside a gap starts at the next record
    assert offsets(source(spark, data_dir, startingOffsets=json.dumps({"t": {"0": 3}}))) == \
        {0: [o for o in remaining if o >= 3]}
    latest = source(spark, data_dir, mode="latest").collect()
    assert {r.key: r.value for r in latest} == model


def test_latest_mode_with_ending_offsets_is_the_state_as_of_that_offset(
        spark: SparkSession, data_dir: str) -> None:
    store = compactlog.open(data_dir)
    store.create_topic("t", 1, {"cleanup.policy": "compact"})
    store.append("t", 0, pa.table({"key": [b"a", b"b", b"a", b"b", b"c"],
                                   "value": pa.array([b"a1", b"b1", b"a2", None, b"c1"], pa.binary())}))
    as_of_3 = source(spark, data_dir, mode="latest", endingOffsets=json.dumps({"t": {"0": 3}})).collect()
    assert sorted((r.key, r.value, r.offset) for r in as_of_3) == [(b"a", b"a2", 2), (b"b", b"b1", 1)]
    now = source(spark, data_dir, mode="latest").collect()
    assert sorted((r.key, r.value) for r in now) == [(b"a", b"a2"), (b"c", b"c1")]


def test_min_partitions_splits_a_partition_at_segment_boundaries(spark: SparkSession, data_dir: str) -> None:
    store = compactlog.open(data_dir)
    store.create_topic("t", 2, {"segment.bytes": 3_000})
    for _ in range(4):
        fill(store, 2, 30)
    segments = sum(1 for p in range(2) for s in store.log("t", p).segments_meta() if s.record_count)
    assert segments > 2
    expected = {p: list(range(store.log_end_offset("t", p))) for p in range(2)}
    # More tasks wanted than segments: every segment becomes a task of its own, and no segment is cut.
    df = source(spark, data_dir, minPartitions="1000")
    assert df.rdd.getNumPartitions() == segments
    assert offsets(df) == expected
    assert source(spark, data_dir).rdd.getNumPartitions() == 2  # small partitions: one task each
    assert source(spark, data_dir, mode="latest", minPartitions="1000").rdd.getNumPartitions() == 2


def test_dataframe_writer_appends_with_kafka_style_columns(spark: SparkSession, data_dir: str) -> None:
    store = compactlog.open(data_dir)
    store.create_topic("t", 3, {"cleanup.policy": "compact"})
    df = spark.createDataFrame(
        [("a", "1", 1_000, [("h", b"x")], 9), ("b", "2", 2_000, None, 9), ("a", None, 3_000, None, 9)],
        "id string, body string, timestamp long, headers array<struct<key:string,value:binary>>, "
        "partition int")
    (df.coalesce(1).write.format("compactlog").option("path", data_dir).option("topic", "t")
     .option("keyColumn", "id").option("valueColumn", "body").mode("append").save())
    records = [(r.key, r.value, r.timestamp, r.headers) for p in range(3) for r in store.read("t", p, 0)]
    assert sorted(records, key=lambda r: r[2]) == [
        (b"a", b"1", 1_000, [("h", b"x")]), (b"b", b"2", 2_000, []), (b"a", None, 3_000, [])]
    assert source(spark, data_dir, mode="latest").select("key").collect()[0].key == b"b"


def test_dataframe_writer_refuses_overwrite_unknown_options_and_missing_columns(
        spark: SparkSession, data_dir: str) -> None:
    compactlog.open(data_dir).create_topic("t", 1)
    df = spark.createDataFrame([("a", "1")], "key string, value string")

    def save(frame: DataFrame, mode: str = "append", **options: str) -> None:
        writer = frame.write.format("compactlog").option("path", data_dir).option("topic", "t").mode(mode)
        for name, value in options.items():
            writer = writer.option(name, value)
        writer.save()

    with pytest.raises(Exception, match="append-only"):
        save(df, mode="overwrite")
    with pytest.raises(Exception, match="unknown option 'acks'"):
        save(df, acks="all")
    with pytest.raises(Exception, match="no column 'k'"):
        save(df, keyColumn="k")
    with pytest.raises(Exception, match="unknown topic 'nope'"):
        df.write.format("compactlog").option("path", data_dir).option("topic", "nope").mode("append").save()


def test_read_committed_ends_at_the_last_stable_offset_without_aborted_records(
        spark: SparkSession, data_dir: str) -> None:
    store = compactlog.open(data_dir)
    store.create_topic("t", 1, {"cleanup.policy": "compact"})
    producer = store.producer(transactional_id="tx")
    for value, commit in ((b"committed", True), (b"aborted", False), (b"open", None)):
        producer.begin_transaction()
        producer.send("t", b"k-" + value, value, partition=0)
        producer.flush()
        if commit:
            producer.commit_transaction()
        elif commit is False:
            producer.abort_transaction()
    committed = source(spark, data_dir, isolationLevel="read_committed")
    assert [r.value for r in committed.collect()] == [b"committed"]
    assert sorted(r.value for r in source(spark, data_dir).collect()) == [b"aborted", b"committed", b"open"]
    producer.commit_transaction()
    producer.close()
    latest = source(spark, data_dir, mode="latest", isolationLevel="read_committed").collect()
    assert sorted(r.value for r in latest) == [b"committed", b"open"]
