"""Tests for compactlog.store: the data directory, topics and their configs, the store's lifecycle,
retention, describe(), and the package's error hierarchy."""

from __future__ import annotations

import inspect
import os
from pathlib import Path

import pyarrow as pa
import pytest

import compactlog
from compactlog import (
    CompactLogError,
    ConfigError,
    InvalidTopicError,
    StoreClosedError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)
from compactlog.segment import DELETED_SUFFIX
from support import FakeClock

DAY_MS = 86_400_000


@pytest.fixture
def store(tmp_path: Path, clock: FakeClock) -> compactlog.Store:
    with compactlog.open(tmp_path / "data", clock=clock) as store:
        yield store


def rows(n: int, start: int = 0, value_size: int = 10, **extra: list) -> pa.Table:
    return pa.table(
        {
            "key": [b"k%d" % i for i in range(start, start + n)],
            "value": [b"%0*d" % (value_size, i) for i in range(start, start + n)],
            **extra,
        }
    )


def offsets(store: compactlog.Store, topic: str, partition: int = 0, start: int | None = None) -> list[int]:
    begin = store.log_start_offset(topic, partition) if start is None else start
    return [record.offset for record in store.read(topic, partition, begin)]


# ------------------------------------------------------------------------------------------ topics


def test_create_topic_lists_it_and_makes_one_directory_per_partition(store: compactlog.Store) -> None:
    store.create_topic("prices", partitions=3)
    store.create_topic("orders")
    assert store.topics() == ["orders", "prices"]
    assert store.partitions("prices") == 3
    assert store.partitions("orders") == 1
    for partition in range(3):
        assert os.path.isdir(os.path.join(store.data_dir, f"prices-{partition}"))
    assert not os.path.exists(os.path.join(store.data_dir, "prices-3"))


def test_new_store_has_no_topics(store: compactlog.Store) -> None:
    assert store.topics() == []


def test_create_existing_topic_raises_topic_exists(store: compactlog.Store) -> None:
    store.create_topic("prices")
    store.append("prices", 0, rows(3))
    with pytest.raises(TopicExistsError, match="prices"):
        store.create_topic("prices", partitions=2)
    assert store.partitions("prices") == 1
    assert store.log_end_offset("prices", 0) == 3


@pytest.mark.parametrize("partitions", [0, -1, True, 1.0, "2"])
def test_create_topic_refuses_bad_partition_counts(store: compactlog.Store, partitions: object) -> None:
    with pytest.raises(CompactLogError):
        store.create_topic("prices", partitions=partitions)
    assert store.topics() == []


def test_create_topic_stores_validated_config_overrides(store: compactlog.Store) -> None:
    store.create_topic(
        "prices",
        config={"cleanup.policy": "compact", "segment.bytes": "1048576", "min.cleanable.dirty.ratio": 0.25},
    )
    config = store.topic_config("prices")
    assert config.cleanup_policy == ("compact",)
    assert config.segment_bytes == 1048576
    assert config.min_cleanable_dirty_ratio == 0.25
    assert config.retention_ms == 604_800_000  # untouched keys keep Kafka's defaults
    assert config.compact and not config.delete


@pytest.mark.parametrize(
    ("config", "key"),
    [
        ({"segment.bytes": 13}, "segment.bytes"),
        ({"segment.bytes": "big"}, "segment.bytes"),
        ({"cleanup.policy": "archive"}, "cleanup.policy"),
        ({"min.cleanable.dirty.ratio": 1.5}, "min.cleanable.dirty.ratio"),
        ({"message.timestamp.type": "WallTime"}, "message.timestamp.type"),
        ({"retention.msec": 1}, "retention.msec"),
        ({"min.compaction.lag.ms": 10, "max.compaction.lag.ms": 5}, "max.compaction.lag.ms"),
    ],
)
def test_create_topic_with_bad_config_raises_config_error_naming_the_key_and_creates_nothing(
    store: compactlog.Store, config: dict[str, object], key: str
) -> None:
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        store.create_topic("prices", config=config)
    assert store.topics() == []
    assert not os.path.exists(os.path.join(store.data_dir, "prices-0"))


def test_config_error_states_the_allowed_values(store: compactlog.Store) -> None:
    with pytest.raises(ConfigError, match="allowed"):
        store.create_topic("prices", config={"segment.bytes": 1})


def test_alter_topic_config_changes_one_key_and_keeps_the_others(store: compactlog.Store) -> None:
    store.create_topic("prices", config={"cleanup.policy": "compact", "segment.bytes": 4096})
    altered = store.alter_topic_config("prices", {"min.compaction.lag.ms": 60000})
    assert altered.min_compaction_lag_ms == 60000
    config = store.topic_config("prices")
    assert config.min_compaction_lag_ms == 60000
    assert config.segment_bytes == 4096
    assert config.cleanup_policy == ("compact",)


def test_alter_topic_config_with_none_resets_the_key_to_the_default(store: compactlog.Store) -> None:
    store.create_topic("prices", config={"segment.bytes": 4096})
    store.alter_topic_config("prices", {"segment.bytes": None})
    assert store.topic_config("prices").segment_bytes == 1_073_741_824


def test_alter_topic_config_with_bad_value_raises_and_keeps_the_config(store: compactlog.Store) -> None:
    store.create_topic("prices", config={"segment.bytes": 4096})
    with pytest.raises(ConfigError, match=r"segment\.bytes"):
        store.alter_topic_config("prices", {"segment.bytes": 0})
    with pytest.raises(ConfigError, match=r"no\.such\.key"):
        store.alter_topic_config("prices", {"no.such.key": 1})
    assert store.topic_config("prices").segment_bytes == 4096


def test_alter_topic_config_is_seen_by_another_store_on_the_same_directory(
    tmp_path: Path, store: compactlog.Store
) -> None:
    store.create_topic("prices")
    with compactlog.open(store.data_dir) as other:
        assert other.topic_config("prices").retention_ms == 604_800_000
        store.alter_topic_config("prices", {"retention.ms": 1000})
        assert other.topic_config("prices").retention_ms == 1000


def test_alter_unknown_topic_raises(store: compactlog.Store) -> None:
    with pytest.raises(UnknownTopicOrPartitionError, match="nope"):
        store.alter_topic_config("nope", {"retention.ms": 1})


def test_delete_topic_removes_it_and_its_data(store: compactlog.Store) -> None:
    store.create_topic("prices", partitions=2)
    store.append("prices", 1, rows(5))
    store.delete_topic("prices")
    assert store.topics() == []
    assert not any(name.startswith("prices") for name in os.listdir(store.data_dir))
    with pytest.raises(UnknownTopicOrPartitionError):
        store.log_end_offset("prices", 1)


def test_deleted_topic_can_be_created_again_empty(store: compactlog.Store) -> None:
    store.create_topic("prices")
    store.append("prices", 0, rows(5))
    store.delete_topic("prices")
    store.create_topic("prices", partitions=2)
    assert store.log_end_offset("prices", 0) == 0
    assert list(store.read("prices", 0)) == []


def test_create_topic_drops_checkpoints_left_by_an_earlier_topic_of_its_name(store: compactlog.Store) -> None:
    # As a deletion killed after its metadata went, or a cleaner of the old topic finishing late, leaves
    # them: kept, they would count the new topic's first offsets as cleaned.
    store.create_topic("prices-1")
    store.checkpoint.update(add={("prices", 0): 10002, ("prices", 3): 7, ("prices-1", 0): 5})
    store.create_topic("prices")
    assert store.checkpoint.read() == {("prices-1", 0): 5}


def test_delete_unknown_topic_raises(store: compactlog.Store) -> None:
    with pytest.raises(UnknownTopicOrPartitionError):
        store.delete_topic("prices")


def test_other_topics_survive_a_topic_delete(store: compactlog.Store) -> None:
    store.create_topic("prices")
    store.create_topic("prices-1")  # its directory prices-1-0 must not be mistaken for prices' partition 1
    store.append("prices-1", 0, rows(3))
    store.delete_topic("prices")
    assert store.topics() == ["prices-1"]
    assert offsets(store, "prices-1") == [0, 1, 2]


# ----------------------------------------------------------------------------------- topic names


@pytest.mark.parametrize("name", ["a", "prices", "Prices.v2", "a_b-c.d", "x" * 249, "-", "_", "..."])
def test_valid_topic_names_are_accepted(store: compactlog.Store, name: str) -> None:
    store.create_topic(name)
    assert name in store.topics()
    store.append(name, 0, rows(1))
    assert store.log_end_offset(name, 0) == 1


@pytest.mark.parametrize(
    "name",
    [
        "",
        ".",
        "..",
        "x" * 250,
        "a/b",
        "../escape",
        "/abs",
        "a\\b",
        "a b",
        "a:b",
        "ü",
        "a\x00b",
        "a*",
        "a\n",
    ],
)
def test_invalid_topic_names_raise_invalid_topic_and_write_nothing(
    store: compactlog.Store, tmp_path: Path, name: str
) -> None:
    before = sorted(os.listdir(store.data_dir))
    with pytest.raises(InvalidTopicError):
        store.create_topic(name)
    assert sorted(os.listdir(store.data_dir)) == before
    assert sorted(os.listdir(tmp_path)) == ["data"]  # nothing escaped the data directory


@pytest.mark.parametrize("name", [None, 3, b"prices"])
def test_non_string_topic_names_raise_invalid_topic(store: compactlog.Store, name: object) -> None:
    with pytest.raises(InvalidTopicError):
        store.create_topic(name)


@pytest.mark.parametrize(
    "call",
    [
        lambda s: s.topic_config("../x"),
        lambda s: s.log_end_offset("..", 0),
        lambda s: s.read_arrow("a/b", 0),
        lambda s: s.append("a/b", 0, rows(1)),
        lambda s: s.delete_topic(".."),
    ],
)
def test_every_topic_argument_is_validated(store: compactlog.Store, call) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidTopicError):
        call(store)


# ----------------------------------------------------------------------- unknown topics / partitions


@pytest.mark.parametrize(
    "call",
    [
        lambda s: s.topic_config("nope"),
        lambda s: s.log_end_offset("nope", 0),
        lambda s: s.log_start_offset("nope", 0),
        lambda s: s.read("nope", 0),
        lambda s: s.read_arrow("nope", 0),
        lambda s: s.append("nope", 0, rows(1)),
        lambda s: s.offset_for_time("nope", 0, 0),
        lambda s: s.roll("nope", 0),
        lambda s: s.describe("nope"),
    ],
)
def test_unknown_topic_raises_unknown_topic_or_partition(store: compactlog.Store, call) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(UnknownTopicOrPartitionError, match="nope"):
        call(store)


@pytest.mark.parametrize("partition", [2, -1, 100, True, "0"])
def test_unknown_partition_raises_unknown_topic_or_partition(
    store: compactlog.Store, partition: object
) -> None:
    store.create_topic("prices", partitions=2)
    with pytest.raises(UnknownTopicOrPartitionError):
        store.append("prices", partition, rows(1))
    with pytest.raises(UnknownTopicOrPartitionError):
        store.read_arrow("prices", partition)
    assert store.log_end_offset("prices", 0) == store.log_end_offset("prices", 1) == 0


def test_unknown_topic_error_is_a_key_error_with_a_readable_message(store: compactlog.Store) -> None:
    with pytest.raises(KeyError) as info:
        store.topic_config("nope")
    assert str(info.value).startswith("unknown topic 'nope'")


# ------------------------------------------------------------------------------- server.properties


def test_server_properties_supply_topic_defaults(tmp_path: Path, clock: FakeClock) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "server.properties").write_text(
        "# broker defaults\nlog.segment.bytes=2048\nlog.cleanup.policy=compact\n"
        "log.retention.hours=1\nlog.cleaner.min.cleanable.ratio = 0.1\n"
    )
    with compactlog.open(data, clock=clock) as store:
        store.create_topic("prices", config={"segment.bytes": 4096})
        store.create_topic("plain")
        plain = store.topic_config("plain")
        assert plain.segment_bytes == 2048
        assert plain.cleanup_policy == ("compact",)
        assert plain.retention_ms == 3_600_000
        assert plain.min_cleanable_dirty_ratio == 0.1
        assert store.topic_config("prices").segment_bytes == 4096  # an override beats the broker default
        store.append("plain", 0, rows(100, value_size=100))
        segments = store.describe("plain")[0].segments
        assert len(segments) > 3  # rolled at the broker's 2048 bytes


def test_bad_server_properties_raise_config_error_naming_file_and_key(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "server.properties").write_text("log.segment.bytes=tiny\n")
    with pytest.raises(ConfigError, match=r"server\.properties.*log\.segment\.bytes"):
        compactlog.open(data)


# ------------------------------------------------------------------------------------- lifecycle


def test_store_is_a_context_manager_that_closes(tmp_path: Path) -> None:
    with compactlog.open(tmp_path) as store:
        store.create_topic("prices")
    with pytest.raises(StoreClosedError):
        store.topics()


@pytest.mark.parametrize(
    "call",
    [
        lambda s: s.topics(),
        lambda s: s.create_topic("other"),
        lambda s: s.topic_config("prices"),
        lambda s: s.alter_topic_config("prices", {"retention.ms": 1}),
        lambda s: s.delete_topic("prices"),
        lambda s: s.append("prices", 0, rows(1)),
        lambda s: s.read("prices", 0),
        lambda s: s.read_arrow("prices", 0),
        lambda s: s.log_end_offset("prices", 0),
        lambda s: s.log_start_offset("prices", 0),
        lambda s: s.offset_for_time("prices", 0, 0),
        lambda s: s.roll("prices", 0),
        lambda s: s.describe("prices"),
        lambda s: s.enforce_retention(),
        lambda s: s.producer().send("prices", key=b"k", value=b"v"),
    ],
)
def test_closed_store_raises_store_closed(tmp_path: Path, call) -> None:  # type: ignore[no-untyped-def]
    store = compactlog.open(tmp_path)
    store.create_topic("prices")
    store.append("prices", 0, rows(2))
    store.close()
    store.close()  # closing twice is harmless
    with pytest.raises(StoreClosedError):
        call(store)


def test_reopened_store_sees_topics_configs_and_records(tmp_path: Path, clock: FakeClock) -> None:
    with compactlog.open(tmp_path, clock=clock) as store:
        store.create_topic(
            "prices", partitions=2, config={"segment.bytes": 1024, "cleanup.policy": "compact"}
        )
        store.append("prices", 1, rows(50))
        with store.producer() as producer:
            producer.send("prices", key=b"x", value=b"1", partition=1, headers=[("h", b"v")])
        expected = list(store.read("prices", 1))
    with compactlog.open(tmp_path, clock=clock) as store:
        assert store.topics() == ["prices"]
        assert store.partitions("prices") == 2
        assert store.topic_config("prices").segment_bytes == 1024
        assert list(store.read("prices", 1)) == expected
        assert store.log_end_offset("prices", 1) == 51
        assert expected[-1].headers == [("h", b"v")]
        store.append("prices", 1, rows(1, start=99))
        assert store.log_end_offset("prices", 1) == 52


def test_two_stores_on_one_directory_see_each_others_appends(tmp_path: Path) -> None:
    with compactlog.open(tmp_path) as first, compactlog.open(tmp_path) as second:
        first.create_topic("prices", config={"segment.bytes": 600})
        first.append("prices", 0, rows(10))
        second.append("prices", 0, rows(10, start=10))
        first.append("prices", 0, rows(10, start=20))
        expected = [b"k%d" % i for i in range(30)]
        assert [r.key for r in first.read("prices", 0)] == expected
        assert [r.key for r in second.read("prices", 0)] == expected
        assert offsets(first, "prices") == list(range(30))


# ----------------------------------------------------------------------------------------- describe


def test_describe_reports_every_partition_and_segment(store: compactlog.Store, clock: FakeClock) -> None:
    store.create_topic("prices", partitions=2)
    store.append("prices", 0, rows(3))
    store.roll("prices", 0)
    clock.advance(1000)
    store.append("prices", 0, rows(2, start=3))
    info = store.describe("prices")
    assert [p.partition for p in info] == [0, 1]
    p0, p1 = info
    assert (p0.log_start_offset, p0.log_end_offset) == (0, 5)
    assert [(s.base_offset, s.record_count, s.active) for s in p0.segments] == [(0, 3, False), (3, 2, True)]
    assert p0.segments[0].max_timestamp == clock.now - 1000
    assert p0.segments[1].max_timestamp == clock.now
    assert all(s.size_bytes > 0 for s in p0.segments)
    assert p0.size_bytes == sum(s.size_bytes for s in p0.segments)
    assert p0.segments[1].size_bytes == os.path.getsize(store.log("prices", 0).active.path)
    assert (p1.log_start_offset, p1.log_end_offset, p1.size_bytes) == (0, 0, 0)
    assert [(s.base_offset, s.record_count, s.max_timestamp, s.active) for s in p1.segments] == [
        (0, 0, -1, True)
    ]


# ----------------------------------------------------------------------------------------- retention


def test_retention_ms_deletes_old_sealed_segments_only(store: compactlog.Store, clock: FakeClock) -> None:
    store.create_topic("events", config={"retention.ms": DAY_MS})
    store.append("events", 0, rows(3))
    store.roll("events", 0)
    clock.advance(DAY_MS)
    store.append("events", 0, rows(3, start=3))
    store.roll("events", 0)
    store.append("events", 0, rows(3, start=6))
    clock.advance(1)  # the first segment is now older than retention.ms, the second exactly as old
    removed = store.enforce_retention()
    assert set(removed) == {("events", 0)} and removed[("events", 0)] > 0
    assert store.log_start_offset("events", 0) == 3
    assert offsets(store, "events") == list(range(3, 9))
    with pytest.raises(compactlog.OffsetOutOfRangeError):
        store.read_arrow("events", 0, start_offset=2)


def test_retention_ms_rolls_and_deletes_an_expired_active_segment(
    store: compactlog.Store, clock: FakeClock
) -> None:
    store.create_topic("events", config={"retention.ms": DAY_MS})
    store.append("events", 0, rows(3))
    store.roll("events", 0)
    store.append("events", 0, rows(3, start=3))
    clock.advance(DAY_MS + 1)  # everything, the active segment too, has expired
    store.enforce_retention()
    assert store.log_start_offset("events", 0) == store.log_end_offset("events", 0) == 6
    assert list(store.read("events", 0, 6)) == []
    store.append("events", 0, rows(1, start=6))
    assert offsets(store, "events") == [6]


def test_retention_leaves_an_unexpired_active_segment_alone(
    store: compactlog.Store, clock: FakeClock
) -> None:
    store.create_topic("events", config={"retention.ms": DAY_MS})
    store.append("events", 0, rows(3))
    clock.advance(DAY_MS)
    assert store.enforce_retention() == {}
    assert offsets(store, "events") == [0, 1, 2]
    assert len(store.describe("events")[0].segments) == 1


def test_retention_bytes_deletes_oldest_segments_beyond_the_limit(
    store: compactlog.Store, clock: FakeClock
) -> None:
    store.create_topic("events", config={"retention.bytes": 0})
    for start in range(0, 12, 3):
        store.append("events", 0, rows(3, start=start))
        store.roll("events", 0)
    store.append("events", 0, rows(3, start=12))
    sizes = [s.size_bytes for s in store.describe("events")[0].segments]
    limit = sum(sizes) - sizes[0] - sizes[1]  # room for all but the two oldest segments
    store.alter_topic_config("events", {"retention.bytes": limit})
    store.enforce_retention()
    assert store.log_start_offset("events", 0) == 6
    assert offsets(store, "events") == list(range(6, 15))
    assert sum(s.size_bytes for s in store.describe("events")[0].segments) <= limit


def test_retention_never_deletes_the_active_segment_by_size(store: compactlog.Store) -> None:
    store.create_topic("events", config={"retention.bytes": 0})
    store.append("events", 0, rows(3))
    store.enforce_retention()
    assert offsets(store, "events") == [0, 1, 2]


def test_retention_ignores_compact_only_topics(store: compactlog.Store, clock: FakeClock) -> None:
    store.create_topic("table", config={"cleanup.policy": "compact", "retention.ms": 1, "retention.bytes": 0})
    store.append("table", 0, rows(3))
    store.roll("table", 0)
    store.append("table", 0, rows(3, start=3))
    clock.advance(DAY_MS)
    assert store.enforce_retention() == {}
    assert offsets(store, "table") == list(range(6))


def test_retention_applies_to_compact_delete_topics(store: compactlog.Store, clock: FakeClock) -> None:
    store.create_topic("table", config={"cleanup.policy": "compact,delete", "retention.ms": 1000})
    store.append("table", 0, rows(3))
    store.roll("table", 0)
    clock.advance(500)
    store.append("table", 0, rows(3, start=3))
    clock.advance(501)
    store.enforce_retention()
    assert offsets(store, "table") == [3, 4, 5]


def test_retention_with_negative_limits_keeps_everything(store: compactlog.Store, clock: FakeClock) -> None:
    store.create_topic("events", config={"retention.ms": -1, "retention.bytes": -1})
    store.append("events", 0, rows(3))
    store.roll("events", 0)
    clock.advance(100 * 365 * DAY_MS)
    assert store.enforce_retention() == {}
    assert offsets(store, "events") == [0, 1, 2]


def _deleted_files(store: compactlog.Store, topic: str) -> list[str]:
    directory = store.log(topic, 0).directory
    return sorted(name for name in os.listdir(directory) if name.endswith(DELETED_SUFFIX))


def test_retention_deleted_files_wait_for_file_delete_delay(
    store: compactlog.Store, clock: FakeClock
) -> None:
    store.create_topic("events", config={"retention.ms": 1000, "file.delete.delay.ms": 60_000})
    store.append("events", 0, rows(3))
    store.roll("events", 0)
    clock.advance(1001)
    store.enforce_retention()
    assert _deleted_files(store, "events") == ["00000000000000000000.parquet.deleted"]
    clock.advance(59_999)
    store.enforce_retention()
    assert _deleted_files(store, "events") == ["00000000000000000000.parquet.deleted"]
    clock.advance(1)
    store.enforce_retention()
    assert _deleted_files(store, "events") == []


def test_retention_with_zero_delete_delay_removes_files_at_once(
    store: compactlog.Store, clock: FakeClock
) -> None:
    store.create_topic("events", config={"retention.ms": 1000, "file.delete.delay.ms": 0})
    store.append("events", 0, rows(3))
    store.roll("events", 0)
    clock.advance(1001)
    store.enforce_retention()
    assert _deleted_files(store, "events") == []


def test_reopen_removes_leftover_deleted_files(tmp_path: Path, clock: FakeClock) -> None:
    with compactlog.open(tmp_path, clock=clock) as store:
        store.create_topic("events", config={"retention.ms": 1000})
        store.append("events", 0, rows(3))
        store.roll("events", 0)
        store.append("events", 0, rows(3, start=3))
        clock.advance(1001)
        store.roll("events", 0)
        store.enforce_retention()
        assert _deleted_files(store, "events")
    with compactlog.open(tmp_path, clock=clock) as store:
        assert _deleted_files(store, "events") == []
        assert store.log_start_offset("events", 0) == store.log_end_offset("events", 0) == 6


# ----------------------------------------------------------------------------------------- the package


ERROR_NAMES = [
    name
    for name, obj in vars(compactlog.errors).items()
    if inspect.isclass(obj) and issubclass(obj, Exception) and obj.__module__ == "compactlog.errors"
]


def test_errors_module_defines_the_documented_errors() -> None:
    for name in (
        "CompactLogError",
        "ConfigError",
        "OffsetOutOfRangeError",
        "InvalidTopicError",
        "UnknownTopicOrPartitionError",
        "InvalidRecordError",
        "RecordTooLargeError",
        "CorruptSegmentError",
        "StoreClosedError",
        "TopicExistsError",
    ):
        assert name in ERROR_NAMES


@pytest.mark.parametrize("name", ERROR_NAMES)
def test_every_error_is_exported_and_derives_from_compact_log_error(name: str) -> None:
    error = getattr(compactlog, name)
    assert error is getattr(compactlog.errors, name)
    assert name in compactlog.__all__
    assert issubclass(error, CompactLogError)


def test_open_returns_a_store_and_creates_the_directory(tmp_path: Path) -> None:
    with compactlog.open(tmp_path / "new" / "dir") as store:
        assert isinstance(store, compactlog.Store)
        assert os.path.isdir(tmp_path / "new" / "dir")


def test_a_topic_recreated_by_another_store_is_seen_as_a_new_log(tmp_path: Path) -> None:
    with compactlog.open(tmp_path) as first, compactlog.open(tmp_path) as second:
        first.create_topic("prices")
        first.append("prices", 0, rows(5))
        second.delete_topic("prices")
        second.create_topic("prices")
        second.append("prices", 0, rows(2, start=100))
        first.append("prices", 0, rows(1, start=200))  # into the new log, under its lock
        assert [r.key for r in first.read("prices", 0)] == [b"k100", b"k101", b"k200"]
        assert [r.key for r in second.read("prices", 0)] == [b"k100", b"k101", b"k200"]


@pytest.mark.parametrize(("unit", "expected"), [("s", 1704067200000), ("ms", 1704067200123),
                                                ("us", 1704067200123), ("ns", 1704067200123)])
def test_bulk_append_floors_timestamp_columns_to_milliseconds(tmp_path: Path, unit: str, expected: int) -> None:
    import datetime

    store = compactlog.open(str(tmp_path))
    store.create_topic("t")
    stamp = pa.array([datetime.datetime(2024, 1, 1, 0, 0, 0, 123456)], pa.timestamp(unit))
    store.append("t", 0, pa.table({"key": [b"k"], "value": [b"v"], "timestamp": stamp}))
    assert next(iter(store.read("t", 0))).timestamp == expected
