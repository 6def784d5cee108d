"""Tests for compactlog.producer: send / future / flush / close, partitioning, and send-time validation."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

import compactlog
from compactlog import (
    InvalidRecordError,
    RecordMetadata,
    RecordTooLargeError,
    StoreClosedError,
    UnknownTopicOrPartitionError,
)
from compactlog.partitioner import partition_for_key
from support import FakeClock


@pytest.fixture
def store(tmp_path: Path, clock: FakeClock) -> compactlog.Store:
    with compactlog.open(tmp_path / "data", clock=clock) as store:
        store.create_topic("events", partitions=3)
        store.create_topic("table", partitions=3, config={"cleanup.policy": "compact"})
        yield store


def records(store: compactlog.Store, topic: str, partition: int) -> list[tuple]:
    return [(r.offset, r.key, r.value, r.headers) for r in store.read(topic, partition)]


def test_send_returns_a_future_of_the_record_metadata(store: compactlog.Store, clock: FakeClock) -> None:
    with store.producer(linger_ms=0) as producer:
        first = producer.send("events", key=b"a", value=b"1", partition=1)
        second = producer.send("events", key=b"b", value=b"2", partition=1, timestamp=123)
        assert first.result() == RecordMetadata("events", 1, 0, clock.now)
        meta = second.result()
        assert (meta.topic, meta.partition, meta.offset, meta.timestamp) == ("events", 1, 1, 123)
        assert first.done() and second.done()
        assert first.exception() is None


def test_future_result_makes_the_record_readable_before_flush(store: compactlog.Store) -> None:
    producer = store.producer(linger_ms=0)
    future = producer.send("events", key=b"a", value=b"1", partition=0)
    assert store.log_end_offset("events", 0) == 0  # still buffered
    assert not future.done()
    future.result()
    assert records(store, "events", 0) == [(0, b"a", b"1", [])]
    producer.close()


def test_flush_makes_every_sent_record_readable_by_another_store(
    store: compactlog.Store, tmp_path: Path
) -> None:
    producer = store.producer(linger_ms=0)
    for i in range(50):
        producer.send("events", key=b"k%d" % i, value=b"v%d" % i)
    producer.flush()
    with compactlog.open(tmp_path / "data") as other:
        total = sum(other.log_end_offset("events", p) for p in range(3))
        keys = sorted(r.key for p in range(3) for r in other.read("events", p))
    assert total == 50
    assert keys == sorted(b"k%d" % i for i in range(50))
    producer.close()


def test_closing_the_producer_flushes_it(store: compactlog.Store) -> None:
    with store.producer(linger_ms=0) as producer:
        producer.send("events", key=b"a", value=b"1", partition=2)
    assert records(store, "events", 2) == [(0, b"a", b"1", [])]


def test_send_on_a_closed_producer_raises_store_closed(store: compactlog.Store) -> None:
    producer = store.producer(linger_ms=0)
    producer.close()
    producer.close()
    with pytest.raises(StoreClosedError):
        producer.send("events", key=b"a", value=b"1")


def test_offsets_follow_send_order_within_a_partition(store: compactlog.Store) -> None:
    with store.producer(linger_ms=0, batch_size=100) as producer:  # several batches
        futures = [producer.send("events", key=b"k", value=b"%d" % i, partition=0) for i in range(40)]
    assert [f.result().offset for f in futures] == list(range(40))
    assert [r[2] for r in records(store, "events", 0)] == [b"%d" % i for i in range(40)]


def test_keyed_records_go_to_kafkas_default_partition(store: compactlog.Store) -> None:
    keys = [b"key-%d" % i for i in range(60)]
    with store.producer(linger_ms=0) as producer:
        futures = {key: producer.send("table", key=key, value=b"v") for key in keys}
    for key, future in futures.items():
        assert future.result().partition == partition_for_key(key, 3)
    for partition in range(3):
        assert {r[1] for r in records(store, "table", partition)} == {
            key for key in keys if partition_for_key(key, 3) == partition
        }


def test_an_explicit_partition_beats_the_key(store: compactlog.Store) -> None:
    key = b"key-1"
    other = (partition_for_key(key, 3) + 1) % 3
    with store.producer(linger_ms=0) as producer:
        future = producer.send("table", key=key, value=b"v", partition=other)
    assert future.result().partition == other
    assert records(store, "table", other) == [(0, key, b"v", [])]


def test_keyless_records_of_one_batch_stick_to_one_partition(store: compactlog.Store) -> None:
    with store.producer(linger_ms=0, batch_size=1_000_000) as producer:
        futures = [producer.send("events", value=b"%d" % i) for i in range(20)]
    assert len({f.result().partition for f in futures}) == 1
    assert [f.result().offset for f in futures] == list(range(20))


def test_keyless_records_move_to_another_partition_after_each_batch(store: compactlog.Store) -> None:
    with store.producer(linger_ms=0, batch_size=0) as producer:  # every record is a batch of its own
        futures = [producer.send("events", value=b"%d" % i) for i in range(30)]
    partitions = [f.result().partition for f in futures]
    assert all(a != b for a, b in itertools.pairwise(partitions))
    assert set(partitions) == {0, 1, 2}
    assert sum(store.log_end_offset("events", p) for p in range(3)) == 30


def test_keyless_record_on_a_compacted_topic_is_refused_and_nothing_else_is_touched(
    store: compactlog.Store,
) -> None:
    with store.producer(linger_ms=0) as producer:
        producer.send("table", key=b"a", value=b"1", partition=0).result()
        with pytest.raises(InvalidRecordError, match="without a key"):
            producer.send("table", key=None, value=b"2", partition=0)
        producer.send("table", key=b"b", value=b"3", partition=0)
    assert records(store, "table", 0) == [(0, b"a", b"1", []), (1, b"b", b"3", [])]


def test_tombstones_are_sent_as_none_values(store: compactlog.Store) -> None:
    with store.producer(linger_ms=0) as producer:
        producer.send("table", key=b"a", value=b"1", partition=0)
        producer.send("table", key=b"a", value=None, partition=0)
    assert [r.value for r in store.read("table", 0)] == [b"1", None]


@pytest.mark.parametrize(("key", "value"), [("a", b"v"), (b"k", "v"), (1, b"v"), (b"k", 1), (b"k", [b"v"])])
def test_key_and_value_must_be_bytes(store: compactlog.Store, key: object, value: object) -> None:
    with store.producer(linger_ms=0) as producer, pytest.raises(InvalidRecordError, match="must be bytes"):
        producer.send("events", key=key, value=value, partition=0)
    assert store.log_end_offset("events", 0) == 0


def test_bytes_like_keys_and_values_are_accepted(store: compactlog.Store) -> None:
    with store.producer(linger_ms=0) as producer:
        producer.send("events", key=bytearray(b"k"), value=memoryview(b"v"), partition=0)
    assert records(store, "events", 0) == [(0, b"k", b"v", [])]


def test_headers_round_trip(store: compactlog.Store) -> None:
    with store.producer(linger_ms=0) as producer:
        producer.send("events", key=b"a", value=b"1", partition=0, headers=[("trace", b"t1"), ("none", None)])
        producer.send("events", key=b"b", value=b"2", partition=0, headers=[["list", b"ok"]])
        producer.send("events", key=b"c", value=b"3", partition=0)
    assert [r[3] for r in records(store, "events", 0)] == [
        [("trace", b"t1"), ("none", None)],
        [("list", b"ok")],
        [],
    ]


@pytest.mark.parametrize("headers", [[("k",)], [(b"k", b"v")], [("k", "v")], ["kv"], [("k", 1)]])
def test_malformed_headers_are_refused(store: compactlog.Store, headers: object) -> None:
    with store.producer(linger_ms=0) as producer, pytest.raises(InvalidRecordError, match="header"):
        producer.send("events", key=b"a", value=b"1", headers=headers)


def test_record_over_max_message_bytes_is_refused(store: compactlog.Store) -> None:
    store.alter_topic_config("events", {"max.message.bytes": 200})
    with store.producer(linger_ms=0) as producer:
        producer.send("events", key=b"k", value=b"x" * 100, partition=0)
        with pytest.raises(RecordTooLargeError, match=r"max\.message\.bytes=200"):
            producer.send("events", key=b"k", value=b"x" * 200, partition=0)
        with pytest.raises(RecordTooLargeError):
            producer.send("events", key=b"k", value=b"x", partition=0, headers=[("h", b"x" * 200)])
    assert store.log_end_offset("events", 0) == 1


def test_unknown_topic_is_refused_at_send(store: compactlog.Store) -> None:
    with store.producer(linger_ms=0) as producer, pytest.raises(UnknownTopicOrPartitionError, match="nope"):
        producer.send("nope", key=b"a", value=b"1")


@pytest.mark.parametrize("partition", [3, -1, True, "0"])
def test_unknown_partition_is_refused_at_send(store: compactlog.Store, partition: object) -> None:
    with store.producer(linger_ms=0) as producer, pytest.raises(UnknownTopicOrPartitionError):
        producer.send("events", key=b"a", value=b"1", partition=partition)


def test_log_append_time_topic_reports_the_append_time(store: compactlog.Store, clock: FakeClock) -> None:
    store.create_topic("stamped", config={"message.timestamp.type": "LogAppendTime"})
    producer = store.producer(linger_ms=0)
    future = producer.send("stamped", key=b"a", value=b"1", timestamp=5)
    clock.advance(1000)
    producer.flush()
    assert future.result().timestamp == clock.now
    assert [r.timestamp for r in store.read("stamped", 0)] == [clock.now]
    producer.close()


def test_one_producer_sends_to_several_topics(store: compactlog.Store) -> None:
    with store.producer(linger_ms=0) as producer:
        a = producer.send("events", key=b"a", value=b"1", partition=0)
        b = producer.send("table", key=b"b", value=b"2", partition=0)
    assert (a.result().topic, b.result().topic) == ("events", "table")
    assert records(store, "events", 0) == [(0, b"a", b"1", [])]
    assert records(store, "table", 0) == [(0, b"b", b"2", [])]


def test_a_failed_append_fails_the_futures_of_its_batch(store: compactlog.Store) -> None:
    producer = store.producer(linger_ms=0)
    future = producer.send("events", key=b"a", value=b"1", partition=0)
    store.delete_topic("events")
    with pytest.raises(UnknownTopicOrPartitionError):
        future.result()
    assert isinstance(future.exception(), UnknownTopicOrPartitionError)
    producer.close()


@pytest.mark.parametrize("config", [{"batch_size": -1}, {"linger_ms": "soon"}, {"no_such_config": 1}])
def test_bad_producer_config_raises_config_error(store: compactlog.Store, config: dict[str, object]) -> None:
    with pytest.raises(compactlog.ConfigError):
        store.producer(**config)


def test_a_producer_keeps_sending_after_its_topic_config_changes(store: compactlog.Store) -> None:
    with store.producer(linger_ms=0) as producer:
        producer.send("events", key=b"a", value=b"x" * 100, partition=0).result()
        store.alter_topic_config("events", {"max.message.bytes": 100})
        producer.flush()
        with pytest.raises(RecordTooLargeError):
            producer.send("events", key=b"a", value=b"x" * 100, partition=0)
    assert store.log_end_offset("events", 0) == 1


@pytest.mark.parametrize("timestamp", [-1, 1.5, "now", True, 2**63, 2**70])
def test_a_bad_timestamp_is_refused_at_send_and_the_batch_goes_on(
    store: compactlog.Store, timestamp: object
) -> None:
    with store.producer(linger_ms=0) as producer:
        good = producer.send("events", key=b"a", value=b"1", partition=0)
        with pytest.raises(InvalidRecordError, match="timestamp"):
            producer.send("events", key=b"b", value=b"2", partition=0, timestamp=timestamp)
    assert good.result().offset == 0
    assert records(store, "events", 0) == [(0, b"a", b"1", [])]
