"""Tests for compactlog.spark.io: DataFrame writes and reads, checked against a plain-dict model."""

from __future__ import annotations

import datetime as dt
import os
import random
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pytest

import compactlog
from compactlog import ConfigError, InvalidRecordError, ReadOnlyStoreError, UnknownTopicOrPartitionError
from compactlog.partitioner import partition_for_key
from compactlog.spark import read, write
from support import read_only_view

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark

COMPACT = {"cleanup.policy": "compact"}


@pytest.fixture
def data_dir(tmp_path: Path) -> str:
    return str(tmp_path / "data")


def apply(model: dict[bytes, bytes], rows: list[tuple[str, str | None]]) -> None:
    """The dict model of a compacted topic: the last value per key; a None value deletes the key."""
    for key, value in rows:
        if value is None:
            model.pop(key.encode(), None)
        else:
            model[key.encode()] = value.encode()


def by_partition(rows: list) -> dict[int, list]:
    out: dict[int, list] = {}
    for row in sorted(rows, key=lambda r: (r.partition, r.offset)):
        out.setdefault(row.partition, []).append(row)
    return out


def test_write_then_read_log_is_every_row_in_order_per_partition(spark: SparkSession, data_dir: str) -> None:
    store = compactlog.open(data_dir)
    store.create_topic("users", 3, COMPACT)
    rng = random.Random(1)
    rows = [(f"user-{rng.randrange(40)}", None if rng.random() < 0.1 else f"v{i}") for i in range(400)]
    # One Spark partition: one task appends every row, so the per-partition order is the DataFrame's.
    df = spark.createDataFrame(rows, "key string, value string").coalesce(1)

    result = write(df, data_dir, "users")  # the default columns are the data source's: key, value

    assert result.record_count == 400
    got = by_partition(read(spark, data_dir, "users").collect())  # the default mode is the data source's: log
    for partition in range(3):
        expected = [(k.encode(), v.encode() if v else None) for k, v in rows
                    if partition_for_key(k.encode(), 3) == partition]
        assert [(r.key, r.value) for r in got[partition]] == expected
        assert [r.offset for r in got[partition]] == list(range(len(expected)))
        assert result.offsets[partition] == (0, len(expected) - 1)
        assert result.record_counts[partition] == len(expected)
    assert {r.topic for rs in got.values() for r in rs} == {"users"}


def test_every_record_lands_in_the_partition_kafkas_partitioner_picks(
        spark: SparkSession, data_dir: str) -> None:
    compactlog.open(data_dir).create_topic("t", 7, COMPACT)
    rng = random.Random(2)
    keys = [bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40))) for _ in range(1_000)]
    df = spark.createDataFrame([(k, b"x") for k in keys], "key binary, value binary")
    write(df, data_dir, "t")
    got = read(spark, data_dir, "t", mode="log").select("partition", "key").collect()
    assert len(got) == 1_000
    assert all(row.partition == partition_for_key(row.key, 7) for row in got)


def test_many_spark_partitions_keep_each_ones_order(spark: SparkSession, data_dir: str) -> None:
    compactlog.open(data_dir).create_topic("t", 2, COMPACT)
    # Four slices with disjoint keys: each key's values must appear in its slice's order.
    slices = [[(f"s{s}-k{i % 5}", f"s{s}-{i}") for i in range(50)] for s in range(4)]
    rdd = spark.sparkContext.parallelize([row for rows in slices for row in rows], 4)
    df = rdd.toDF("key string, value string")
    write(df, data_dir, "t")
    got = read(spark, data_dir, "t", mode="log").collect()
    for rows in slices:
        for key in {k for k, _ in rows}:
            written = [v.encode() for k, v in rows if k == key]
            logged = [r.value for r in sorted(got, key=lambda r: r.offset) if r.key == key.encode()]
            assert logged == written


def test_latest_reflects_updates_and_drops_tombstoned_keys(spark: SparkSession, data_dir: str) -> None:
    compactlog.open(data_dir).create_topic("t", 3, COMPACT)
    model: dict[bytes, bytes] = {}
    first = [(f"k{i % 30}", f"a{i}") for i in range(90)]
    write(spark.createDataFrame(first, "key string, value string").coalesce(1), data_dir, "t")
    apply(model, first)
    assert {r.key: r.value for r in read(spark, data_dir, "t", mode="latest").collect()} == model

    second = [(f"k{i}", None if i % 3 == 0 else f"b{i}") for i in range(0, 30, 2)]
    write(spark.createDataFrame(second, "key string, value string").coalesce(1), data_dir, "t")
    apply(model, second)
    latest = read(spark, data_dir, "t", mode="latest").collect()
    assert {r.key: r.value for r in latest} == model
    assert len(latest) == len(model)  # one row per live key
    assert all(r.value is not None for r in latest)


def test_timestamp_and_header_columns_are_written(spark: SparkSession, data_dir: str) -> None:
    compactlog.open(data_dir).create_topic("t", 1)
    when = dt.datetime(2024, 3, 1, 10, 30, 0, 250_000)
    df = spark.createDataFrame(
        [("a", "1", when, [("trace", b"x")]), ("b", "2", None, None)],
        "id string, body string, at timestamp, meta array<struct<key:string,value:binary>>")
    write(df, data_dir, "t", key="id", value="body", timestamp="at", headers="meta")
    rows = sorted(read(spark, data_dir, "t", mode="log").collect(), key=lambda r: r.key)  # two tasks wrote
    assert rows[0].timestamp == when
    assert [(h.key, h.value) for h in rows[0].headers] == [("trace", b"x")]
    assert rows[1].headers is None and rows[1].timestamp is not None  # the append time


def test_keyless_rows_fail_the_write_on_a_compacted_topic(spark: SparkSession, data_dir: str) -> None:
    compactlog.open(data_dir).create_topic("t", 2, COMPACT)
    df = spark.createDataFrame([("a", "1"), (None, "2")], "key string, value string").coalesce(1)
    with pytest.raises(InvalidRecordError, match="without a key"):
        write(df, data_dir, "t")


def test_writes_to_a_missing_topic_or_column_fail_before_any_task(spark: SparkSession, data_dir: str) -> None:
    df = spark.createDataFrame([("a", "1")], "key string, value string")
    with pytest.raises(UnknownTopicOrPartitionError):
        write(df, data_dir, "nope")
    assert not os.path.exists(data_dir)  # a failed write creates no data directory
    compactlog.open(data_dir).create_topic("t", 1)
    with pytest.raises(InvalidRecordError, match="no column"):
        write(df, data_dir, "t", key="id")


def test_read_options_are_checked(spark: SparkSession, data_dir: str) -> None:
    compactlog.open(data_dir).create_topic("t", 2)
    with pytest.raises(ConfigError, match="allowed: log, latest"):
        read(spark, data_dir, "t", mode="changes")
    with pytest.raises(ConfigError, match="isolation level"):
        read(spark, data_dir, "t", isolation_level="serializable")
    assert read(spark, data_dir, "t", isolation_level="read_committed").collect() == []


def test_start_offsets_skip_earlier_records(spark: SparkSession, data_dir: str) -> None:
    store = compactlog.open(data_dir)
    store.create_topic("t", 2, COMPACT)
    rows = [(f"k{i}", f"v{i}") for i in range(40)]
    write(spark.createDataFrame(rows, "key string, value string"), data_dir, "t")
    end = {p: store.log_end_offset("t", p) for p in range(2)}
    rows = read(spark, data_dir, "t", mode="log", start_offsets={0: 5}).collect()
    assert sorted(r.offset for r in rows if r.partition == 0) == list(range(5, end[0]))
    assert sorted(r.offset for r in rows if r.partition == 1) == list(range(end[1]))


def test_a_read_only_data_directory_is_read_and_refuses_writes(spark: SparkSession, tmp_path: Path) -> None:
    """A read-only mount (or snapshot): the driver and the tasks open it read-only (no lock file is opened
    for writing); a write fails before any task runs."""
    data = tmp_path / "data"
    with compactlog.open(data) as store:
        store.create_topic("users", 2, COMPACT)
        for partition in range(2):
            store.append("users", partition, pa.table({"key": [b"a", b"b", b"a"],
                                                       "value": [b"1", b"2", f"3-{partition}".encode()]}))
    with read_only_view(data) as view:
        log = sorted((r.partition, r.offset, r.key, r.value) for r in read(spark, str(view), "users", "log").collect())
        assert log == [(p, o, k, v) for p in range(2)
                       for o, k, v in [(0, b"a", b"1"), (1, b"b", b"2"), (2, b"a", f"3-{p}".encode())]]
        latest = sorted((r.partition, r.key, r.value) for r in read(spark, str(view), "users", mode="latest").collect())
        assert latest == [(p, k, v) for p in range(2) for k, v in [(b"a", f"3-{p}".encode()), (b"b", b"2")]]
        with pytest.raises(ReadOnlyStoreError, match="read-only"):
            write(spark.createDataFrame([("c", "4")], "k string, v string"), str(view), "users")
