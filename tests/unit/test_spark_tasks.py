"""Tests for compactlog.spark.tasks: what a Spark task does, run in process (no Spark)."""

from __future__ import annotations

import datetime as dt
import random
from pathlib import Path

import pyarrow as pa
import pytest

import compactlog
from compactlog import ExecutorError, InvalidRecordError
from compactlog.partitioner import partition_for_key
from compactlog.record import HEADER_TYPE
from compactlog.spark import tasks


@pytest.fixture
def data_dir(tmp_path: Path) -> str:
    return str(tmp_path / "data")


def make_topic(data_dir: str, partitions: int = 3, **config: object) -> compactlog.Store:
    store = compactlog.open(data_dir)
    store.create_topic("t", partitions, {"cleanup.policy": "compact", **config})
    return store


def read_all(data_dir: str, partitions: int, latest: bool = False) -> dict[int, list[dict]]:
    reader = tasks.read_latest if latest else tasks.read_range
    return {p: pa.Table.from_batches(list(reader(data_dir, "t", p, 0, None)), tasks.OUTPUT_SCHEMA).to_pylist()
            for p in range(partitions)}


def test_a_task_that_cannot_see_the_data_directory_says_so(tmp_path: Path) -> None:
    missing = str(tmp_path / "not-shared")
    with pytest.raises(ExecutorError, match=r"cannot see the data directory.*shared filesystem"):
        list(tasks.read_range(missing, "t", 0, 0, None))
    assert not (tmp_path / "not-shared").exists()  # nothing was created on the "executor"
    compactlog.open(missing).close()  # a directory without the topic: a local copy, not the driver's
    with pytest.raises(ExecutorError, match="no topic 't'"):
        tasks.append_batches(missing, "t", [])


def test_appends_go_where_kafkas_partitioner_sends_them_in_arrival_order(data_dir: str) -> None:
    make_topic(data_dir, 5)
    rng = random.Random(7)
    keys = [bytes(rng.randrange(256) for _ in range(rng.randrange(1, 12))) for _ in range(300)]
    values = [b"v%d" % i for i in range(300)]
    batches = [pa.table({"key": keys[i:i + 70], "value": values[i:i + 70]}).to_batches()[0]
               for i in range(0, 300, 70)]
    results = tasks.append_batches(data_dir, "t", batches, flush_bytes=2_000)
    assert sum(r.record_count for r in results) == 300
    got = read_all(data_dir, 5)
    for partition, rows in got.items():
        expected = [(k, v) for k, v in zip(keys, values, strict=True) if partition_for_key(k, 5) == partition]
        assert [(r["key"], r["value"]) for r in rows] == expected
        assert [r["offset"] for r in rows] == list(range(len(expected)))


def test_strings_timestamps_and_headers_are_converted(data_dir: str) -> None:
    make_topic(data_dir, 1)
    when = dt.datetime(2024, 5, 1, 12, 0, 0, 123_999, tzinfo=dt.timezone.utc)
    table = pa.table({
        "k": pa.array(["é", "b"], pa.large_string()),
        "v": ["x", None],
        "ts": pa.array([when, None], pa.timestamp("us", tz="UTC")),
        "h": pa.array([[{"key": "a", "value": b"1"}], None],
                      pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
        "ignored": [1, 2],
    })
    tasks.append_batches(data_dir, "t", [table], key_column="k", value_column="v", timestamp_column="ts",
                         headers_column="h")
    rows = read_all(data_dir, 1)[0]
    assert [r["key"] for r in rows] == ["é".encode(), b"b"]
    assert rows[0]["value"] == b"x" and rows[1]["value"] is None
    assert rows[0]["timestamp"] == when.replace(microsecond=123_000)  # floored to the millisecond
    assert rows[0]["headers"] == [{"key": "a", "value": b"1"}] and rows[1]["headers"] is None


def test_integer_timestamps_are_epoch_milliseconds(data_dir: str) -> None:
    make_topic(data_dir, 1)
    tasks.append_batches(data_dir, "t", [pa.table({"key": [b"a"], "value": [b"1"], "timestamp": [1_000]})],
                         timestamp_column="timestamp")
    assert compactlog.open(data_dir).read_arrow("t", 0).column("timestamp").to_pylist() == [1_000]


def test_bad_columns_are_refused(data_dir: str) -> None:
    make_topic(data_dir, 1)
    with pytest.raises(InvalidRecordError, match="no column"):
        tasks.append_batches(data_dir, "t", [pa.table({"key": [b"a"]})])
    with pytest.raises(InvalidRecordError, match="must be binary or string"):
        tasks.append_batches(data_dir, "t", [pa.table({"key": [1], "value": [b"a"]})])


def test_keyless_rows_are_refused_by_compacted_topics_and_stick_otherwise(data_dir: str) -> None:
    store = make_topic(data_dir, 3)
    with pytest.raises(InvalidRecordError, match="without a key"):
        tasks.append_batches(data_dir, "t", [pa.table({"key": [b"a", None], "value": [b"1", b"2"]})])
    store.create_topic("plain", 3)
    batch = pa.table({"key": pa.nulls(10, pa.binary()), "value": [b"v"] * 10})
    results = tasks.append_batches(data_dir, "plain", [batch, batch])
    assert sum(r.record_count for r in results) == 20
    # one sticky partition per batch, and the second batch moves to another partition (KIP-480)
    assert [r.record_count for r in results if r.record_count] == [10, 10]
    assert len({r.partition for r in results}) == 2


def test_latest_per_key_keeps_the_newest_live_value_in_offset_order() -> None:
    table = pa.table({
        "offset": [0, 1, 2, 3, 4, 5, 6],
        "key": [b"a", b"b", b"a", None, b"c", b"b", b"c"],
        "value": [b"a1", b"b1", b"a2", b"x", b"c1", None, b"c2"],
    })
    latest = tasks.latest_per_key(table)
    assert latest.column("offset").to_pylist() == [2, 6]
    assert latest.column("value").to_pylist() == [b"a2", b"c2"]


def test_read_latest_folds_segments_with_a_small_reduce_budget(data_dir: str) -> None:
    store = make_topic(data_dir, 1, **{"segment.bytes": 2_000})
    model: dict[bytes, bytes] = {}
    rng = random.Random(3)
    for round_ in range(12):
        keys = [b"k%d" % rng.randrange(30) for _ in range(20)]
        values = [None if rng.random() < 0.2 else b"r%d-%d" % (round_, i) for i in range(20)]
        store.append("t", 0, pa.table({"key": keys, "value": pa.array(values, pa.binary())}))
        for k, v in zip(keys, values, strict=True):
            if v is None:
                model.pop(k, None)
            else:
                model[k] = v
    assert len(store.log("t", 0).sealed_segments()) > 3
    batches = list(tasks.read_latest(data_dir, "t", 0, 0, None, reduce_bytes=1))
    rows = pa.Table.from_batches(batches).to_pylist()
    assert {r["key"]: r["value"] for r in rows} == model
    assert [r["offset"] for r in rows] == sorted(r["offset"] for r in rows)


def test_reads_start_at_the_log_start_when_asked_for_less(data_dir: str) -> None:
    store = compactlog.open(data_dir)
    store.create_topic("t", 1, {"segment.bytes": 1_000, "retention.bytes": 1})
    for i in range(5):
        store.append("t", 0, pa.table({"key": [b"k%d" % i] * 10, "value": [b"x" * 50] * 10}))
    store.roll("t", 0)
    store.enforce_retention()
    start = store.log_start_offset("t", 0)
    assert start > 0
    rows = pa.Table.from_batches(list(tasks.read_range(data_dir, "t", 0, 0, None))).to_pylist()
    assert [r["offset"] for r in rows] == list(range(start, store.log_end_offset("t", 0)))


def test_output_schema_casts_headers_from_the_log_type() -> None:
    table = pa.table({"offset": [0], "timestamp": [1], "key": [b"k"], "value": [b"v"],
                      "headers": pa.array([[{"key": "h", "value": b"1"}]], HEADER_TYPE)})
    out = tasks.to_output(table, "t", 4)
    assert out.schema == tasks.OUTPUT_SCHEMA
    assert out.to_pylist()[0]["timestamp"] == dt.datetime(1970, 1, 1, 0, 0, 0, 1000, tzinfo=dt.timezone.utc)


def test_read_committed_stops_at_the_last_stable_offset_and_skips_aborted_data(data_dir: str) -> None:
    store = make_topic(data_dir, 1)
    with store.producer() as plain:
        plain.send("t", b"plain", b"0", partition=0)
    producer = store.producer(transactional_id="tx")
    producer.begin_transaction()
    producer.send("t", b"a", b"committed", partition=0)
    producer.commit_transaction()
    producer.begin_transaction()
    producer.send("t", b"b", b"aborted", partition=0)
    producer.flush()
    producer.abort_transaction()
    producer.begin_transaction()
    producer.send("t", b"c", b"open", partition=0)
    producer.flush()

    def values(reader: object, isolation_level: str) -> list[bytes]:
        batches = list(reader(data_dir, "t", 0, 0, None, isolation_level))  # type: ignore[operator]
        return pa.Table.from_batches(batches, tasks.OUTPUT_SCHEMA).column("value").to_pylist()

    assert values(tasks.read_range, "read_uncommitted") == [b"0", b"committed", b"aborted", b"open"]
    assert values(tasks.read_range, "read_committed") == [b"0", b"committed"]
    assert sorted(values(tasks.read_latest, "read_committed")) == [b"0", b"committed"]
    producer.abort_transaction()
    producer.close()
