"""Tests for compactlog.log (through the store's public API): bulk append, reads, offsets, offset gaps,
offset_for_time, rolling by size and time, and crash recovery of the partition directory."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import compactlog
from compactlog import (
    CorruptSegmentError,
    InvalidRecordError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    RecordTooLargeError,
    active_segment,
)
from compactlog.record import HEADER_TYPE
from compactlog.sealed_segment import SealedSegment
from compactlog.segment import SEALING_SUFFIX, segment_name
from support import FakeClock

HOUR_MS = 3_600_000


@pytest.fixture
def store(tmp_path: Path, clock: FakeClock) -> compactlog.Store:
    with compactlog.open(tmp_path / "data", clock=clock) as store:
        yield store


def rows(n: int, start: int = 0, **extra: object) -> pa.Table:
    return pa.table(
        {
            "key": [b"k%d" % i for i in range(start, start + n)],
            "value": [b"v%d" % i for i in range(start, start + n)],
            **extra,
        }
    )


def contents(store: compactlog.Store, topic: str = "t", partition: int = 0) -> list[tuple]:
    start = store.log_start_offset(topic, partition)
    return [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in store.read(topic, partition, start)]


def segment_files(store: compactlog.Store, topic: str = "t", partition: int = 0) -> list[str]:
    directory = store.log(topic, partition).directory  # producer-state snapshots are not segments
    return sorted(name for name in os.listdir(directory) if not name.startswith(".") and ".snapshot" not in name)


# ---------------------------------------------------------------------------------------- bulk append


def test_append_assigns_consecutive_offsets_and_returns_them(
    store: compactlog.Store, clock: FakeClock
) -> None:
    store.create_topic("t")
    first = store.append("t", 0, rows(3))
    second = store.append("t", 0, rows(2, start=3))
    assert (first.topic, first.partition, first.base_offset, first.last_offset, first.record_count) == (
        "t",
        0,
        0,
        2,
        3,
    )
    assert (second.base_offset, second.last_offset, second.record_count) == (3, 4, 2)
    assert contents(store) == [(i, clock.now, b"k%d" % i, b"v%d" % i, []) for i in range(5)]
    assert store.log_end_offset("t", 0) == 5


def test_append_keeps_given_timestamps_and_fills_missing_ones_with_now(
    store: compactlog.Store, clock: FakeClock
) -> None:
    store.create_topic("t")
    store.append("t", 0, rows(3, timestamp=pa.array([5, None, 7], pa.int64())))
    store.append("t", 0, rows(1, start=3, timestamp=pa.array([8], pa.int32())))
    assert [r.timestamp for r in store.read("t", 0)] == [5, clock.now, 7, 8]


def test_append_accepts_arrow_timestamps_as_milliseconds(store: compactlog.Store) -> None:
    store.create_topic("t")
    stamps = pa.array([1_700_000_000_123_000], pa.timestamp("us"))
    store.append("t", 0, rows(1, timestamp=stamps))
    assert [r.timestamp for r in store.read("t", 0)] == [1_700_000_000_123]


def test_append_round_trips_headers(store: compactlog.Store) -> None:
    store.create_topic("t")
    headers = pa.array([[{"key": "a", "value": b"1"}, {"key": "b", "value": None}], None, []], HEADER_TYPE)
    store.append("t", 0, rows(3, headers=headers))
    assert [r.headers for r in store.read("t", 0)] == [[("a", b"1"), ("b", None)], [], []]


def test_append_accepts_string_keys_and_values_as_utf8(store: compactlog.Store) -> None:
    store.create_topic("t")
    store.append("t", 0, pa.table({"key": ["é", "b"], "value": pa.array(["x", None], pa.large_string())}))
    assert [(r.key, r.value) for r in store.read("t", 0)] == [("é".encode(), b"x"), (b"b", None)]


def test_append_accepts_a_record_batch(store: compactlog.Store) -> None:
    store.create_topic("t")
    store.append("t", 0, pa.record_batch({"key": [b"a"], "value": [b"1"]}))
    assert [(r.key, r.value) for r in store.read("t", 0)] == [(b"a", b"1")]


def test_append_of_an_empty_table_appends_nothing(store: compactlog.Store) -> None:
    store.create_topic("t")
    store.append("t", 0, rows(2))
    result = store.append("t", 0, rows(0))
    assert (result.base_offset, result.last_offset, result.record_count) == (2, 1, 0)
    assert store.log_end_offset("t", 0) == 2


def test_append_tombstones_are_read_as_none_values(store: compactlog.Store) -> None:
    store.create_topic("t", config={"cleanup.policy": "compact"})
    store.append("t", 0, pa.table({"key": [b"a", b"a"], "value": [b"1", None]}))
    records = list(store.read("t", 0))
    assert [r.value for r in records] == [b"1", None]
    assert [r.is_tombstone for r in records] == [False, True]


BAD_TABLES = {
    "missing value": pa.table({"key": [b"a"]}),
    "missing key": pa.table({"value": [b"a"]}),
    "unknown column": pa.table({"key": [b"a"], "value": [b"1"], "partition": [0]}),
    "integer key": pa.table({"key": [1], "value": [b"1"]}),
    "list value": pa.table({"key": [b"a"], "value": [[1]]}),
    "float timestamp": pa.table({"key": [b"a"], "value": [b"1"], "timestamp": [1.5]}),
    "string timestamp": pa.table({"key": [b"a"], "value": [b"1"], "timestamp": ["now"]}),
    "bad headers": pa.table({"key": [b"a"], "value": [b"1"], "headers": [5]}),
}


@pytest.mark.parametrize("bad", BAD_TABLES.values(), ids=BAD_TABLES.keys())
def test_append_of_a_malformed_table_raises_and_leaves_the_log_untouched(
    store: compactlog.Store, bad: pa.Table
) -> None:
    store.create_topic("t")
    store.append("t", 0, rows(3))
    before = contents(store)
    with pytest.raises(InvalidRecordError):
        store.append("t", 0, bad)
    assert store.log_end_offset("t", 0) == 3
    assert contents(store) == before


@pytest.mark.parametrize("bad", [None, [(b"a", b"1")], {"key": [b"a"], "value": [b"1"]}, b"raw"])
def test_append_of_something_not_arrow_raises_invalid_record(store: compactlog.Store, bad: object) -> None:
    store.create_topic("t")
    with pytest.raises(InvalidRecordError):
        store.append("t", 0, bad)
    assert store.log_end_offset("t", 0) == 0


def test_append_of_keyless_records_to_a_compacted_topic_is_refused_whole(store: compactlog.Store) -> None:
    store.create_topic("t", config={"cleanup.policy": "compact"})
    store.append("t", 0, rows(2))
    with pytest.raises(InvalidRecordError, match="key"):
        store.append("t", 0, pa.table({"key": [b"a", None], "value": [b"1", b"2"]}))
    assert store.log_end_offset("t", 0) == 2


def test_append_of_keyless_records_to_a_delete_topic_is_accepted(store: compactlog.Store) -> None:
    store.create_topic("t")
    store.append("t", 0, pa.table({"key": pa.array([None, None], pa.binary()), "value": [b"1", b"2"]}))
    assert [(r.key, r.value) for r in store.read("t", 0)] == [(None, b"1"), (None, b"2")]


def test_append_of_a_record_over_max_message_bytes_is_refused_whole(store: compactlog.Store) -> None:
    store.create_topic("t", config={"max.message.bytes": 200})
    store.append("t", 0, pa.table({"key": [b"k"], "value": [b"x" * 100]}))
    with pytest.raises(RecordTooLargeError, match=r"max\.message\.bytes"):
        store.append("t", 0, pa.table({"key": [b"a", b"b"], "value": [b"x", b"x" * 200]}))
    assert store.log_end_offset("t", 0) == 1


def test_append_counts_headers_against_max_message_bytes(store: compactlog.Store) -> None:
    store.create_topic("t", config={"max.message.bytes": 200})
    headers = pa.array([[{"key": "h", "value": b"x" * 200}]], HEADER_TYPE)
    with pytest.raises(RecordTooLargeError):
        store.append("t", 0, rows(1, headers=headers))
    assert store.log_end_offset("t", 0) == 0


def test_append_counts_key_and_value_bytes_exactly_against_max_message_bytes(store: compactlog.Store) -> None:
    # 70 bytes of record overhead: a record of exactly max.message.bytes is accepted, one byte more is not;
    # a null key or value counts 0 bytes.
    store.create_topic("t", config={"cleanup.policy": "delete", "max.message.bytes": 200})
    store.append("t", 0, pa.table({"key": pa.array([b"k" * 30, None], pa.binary()),
                                   "value": pa.array([b"x" * 100, b"x" * 130], pa.binary())}))
    with pytest.raises(RecordTooLargeError, match=r"a record of 201 bytes"):
        store.append("t", 0, pa.table({"key": pa.array([None, b"k" * 31], pa.binary()),
                                       "value": pa.array([b"x", b"x" * 100], pa.binary())}))
    assert store.log_end_offset("t", 0) == 2


def test_append_refuses_a_negative_int64_timestamp_anywhere_in_the_column(store: compactlog.Store) -> None:
    store.create_topic("t")
    with pytest.raises(InvalidRecordError, match=r"column 'timestamp': timestamp must be in"):
        store.append("t", 0, rows(3, timestamp=pa.array([5, -1, 7], pa.int64())))
    assert store.log_end_offset("t", 0) == 0


def test_append_keeps_int64_timestamps_up_to_long_max(store: compactlog.Store) -> None:
    store.create_topic("t")
    store.append("t", 0, rows(3, timestamp=pa.array([5, 2**63 - 1, 7], pa.int64())))
    assert [r.timestamp for r in store.read("t", 0)] == [5, 2**63 - 1, 7]


def test_log_append_time_topic_stamps_records_with_the_append_time(
    store: compactlog.Store, clock: FakeClock
) -> None:
    store.create_topic("t", config={"message.timestamp.type": "LogAppendTime"})
    store.append("t", 0, rows(2, timestamp=pa.array([1, 2], pa.int64())))
    clock.advance(10)
    store.append("t", 0, rows(1, start=2))
    assert [r.timestamp for r in store.read("t", 0)] == [clock.now - 10, clock.now - 10, clock.now]


def test_append_larger_than_a_frame_is_stored_whole(store: compactlog.Store) -> None:
    store.create_topic("t")
    n = 70_000  # more rows than one active-segment frame holds
    store.append(
        "t",
        0,
        pa.table(
            {
                "key": pa.array(np.arange(n).astype(str)).cast(pa.binary()),
                "value": pa.array(["v"] * n).cast(pa.binary()),
            }
        ),
    )
    table = store.read_arrow("t", 0)
    assert table.column("offset").to_pylist() == list(range(n))
    assert table.column("key")[n - 1].as_py() == str(n - 1).encode()


# -------------------------------------------------------------------------------------------- reads


def test_read_returns_records_in_offset_order_from_the_start_offset(store: compactlog.Store) -> None:
    store.create_topic("t", config={"segment.bytes": 1500})
    for start in range(0, 30, 5):
        store.append("t", 0, rows(5, start=start))
    assert len(store.describe("t")[0].segments) > 2
    assert [r.offset for r in store.read("t", 0, 7)] == list(range(7, 30))
    assert [r.key for r in store.read("t", 0, 0)] == [b"k%d" % i for i in range(30)]


def test_read_end_offset_is_exclusive(store: compactlog.Store) -> None:
    store.create_topic("t", config={"segment.bytes": 1500})
    for start in range(0, 30, 5):
        store.append("t", 0, rows(5, start=start))
    assert [r.offset for r in store.read("t", 0, 3, end_offset=17)] == list(range(3, 17))
    assert [r.offset for r in store.read("t", 0, 3, end_offset=3)] == []
    assert [r.offset for r in store.read("t", 0, 28, end_offset=1000)] == [28, 29]


def test_read_at_the_log_end_is_empty(store: compactlog.Store) -> None:
    store.create_topic("t")
    assert list(store.read("t", 0, 0)) == []
    store.append("t", 0, rows(3))
    assert list(store.read("t", 0, 3)) == []
    assert store.read_arrow("t", 0, 3).num_rows == 0


@pytest.mark.parametrize("offset", [-1, 4, 100])
def test_read_outside_the_log_raises_offset_out_of_range_at_once(
    store: compactlog.Store, offset: int
) -> None:
    store.create_topic("t")
    store.append("t", 0, rows(3))
    with pytest.raises(OffsetOutOfRangeError, match="log end 3"):
        store.read("t", 0, offset)  # raised by the call, not by the first next()
    with pytest.raises(OffsetOutOfRangeError):
        store.read_arrow("t", 0, offset)


def test_read_arrow_returns_the_same_rows_as_read(store: compactlog.Store) -> None:
    store.create_topic("t", config={"segment.bytes": 1500})
    headers = pa.array([[{"key": "h", "value": b"%d" % i}] if i % 2 else None for i in range(5)], HEADER_TYPE)
    for start in range(0, 25, 5):
        store.append("t", 0, rows(5, start=start, headers=headers))
    table = store.read_arrow("t", 0, 4, end_offset=21)
    assert table.column_names == ["offset", "timestamp", "key", "value", "headers"]
    records = list(store.read("t", 0, 4, end_offset=21))
    assert table.column("offset").to_pylist() == [r.offset for r in records]
    assert table.column("timestamp").to_pylist() == [r.timestamp for r in records]
    assert table.column("key").to_pylist() == [r.key for r in records]
    assert table.column("value").to_pylist() == [r.value for r in records]
    assert [[(h["key"], h["value"]) for h in row or []] for row in table.column("headers").to_pylist()] == [
        r.headers for r in records
    ]


def test_read_arrow_selects_columns(store: compactlog.Store) -> None:
    store.create_topic("t")
    store.append("t", 0, rows(3))
    store.roll("t", 0)
    store.append("t", 0, rows(3, start=3))
    table = store.read_arrow("t", 0, columns=["key", "offset"])
    assert table.column_names == ["key", "offset"]
    assert table.column("offset").to_pylist() == list(range(6))


def test_read_arrow_of_an_empty_log_has_the_read_schema(store: compactlog.Store) -> None:
    store.create_topic("t")
    table = store.read_arrow("t", 0)
    assert table.num_rows == 0
    assert table.column_names == ["offset", "timestamp", "key", "value", "headers"]


@pytest.fixture(scope="module")
def gappy(tmp_path_factory: pytest.TempPathFactory) -> compactlog.Store:
    """Offsets 0..9, keys a/b alternating, one record per segment, then cleaned: only 7, 8, 9 survive
    (7 = last a before the active segment, 8 = last b, 9 = the active segment's). Read-only."""
    with compactlog.open(tmp_path_factory.mktemp("gappy"), clock=FakeClock()) as store:
        store.create_topic("t", config={"cleanup.policy": "compact", "segment.bytes": 14})
        for i in range(10):
            store.append("t", 0, pa.table({"key": [b"a" if i % 2 else b"b"], "value": [b"%d" % i]}))
        store.clean(force=True)
        yield store


def test_read_skips_offset_gaps_left_by_compaction(gappy: compactlog.Store) -> None:
    assert [(r.offset, r.value) for r in gappy.read("t", 0, 0)] == [(7, b"7"), (8, b"8"), (9, b"9")]
    assert gappy.log_start_offset("t", 0) == 0
    assert gappy.log_end_offset("t", 0) == 10


@pytest.mark.parametrize("start", [0, 1, 3, 6, 7])
def test_read_from_inside_a_gap_starts_at_the_next_record(gappy: compactlog.Store, start: int) -> None:
    assert next(r.offset for r in gappy.read("t", 0, start)) == 7
    assert gappy.read_arrow("t", 0, start).column("offset").to_pylist() == [7, 8, 9]


def test_read_to_an_end_inside_a_gap(gappy: compactlog.Store) -> None:
    assert [r.offset for r in gappy.read("t", 0, 0, end_offset=7)] == []
    assert [r.offset for r in gappy.read("t", 0, 0, end_offset=8)] == [7]


def test_log_start_offset_moves_only_with_retention(store: compactlog.Store, clock: FakeClock) -> None:
    store.create_topic("t", config={"retention.ms": 1000})
    assert (store.log_start_offset("t", 0), store.log_end_offset("t", 0)) == (0, 0)
    store.append("t", 0, rows(3))
    store.roll("t", 0)
    store.append("t", 0, rows(3, start=3))
    assert (store.log_start_offset("t", 0), store.log_end_offset("t", 0)) == (0, 6)
    clock.advance(1001)
    store.roll("t", 0)
    store.append("t", 0, rows(1, start=6))
    store.enforce_retention()
    assert (store.log_start_offset("t", 0), store.log_end_offset("t", 0)) == (6, 7)


# ---------------------------------------------------------------------------------- offset_for_time


@pytest.fixture(scope="module")
def timed(tmp_path_factory: pytest.TempPathFactory) -> compactlog.Store:
    """Three sealed segments and an active one; timestamps not monotonic inside a segment. Read-only."""
    with compactlog.open(tmp_path_factory.mktemp("timed"), clock=FakeClock()) as store:
        store.create_topic("t")
        stamps = [[100, 300, 200], [400, 400, 500], [900, 600, 700], [1000, 1100, 1050]]
        for i, segment in enumerate(stamps):
            for j, ts in enumerate(segment):  # one append per record: several frames in the active segment
                store.append("t", 0, rows(1, start=3 * i + j, timestamp=pa.array([ts], pa.int64())))
            if i < 3:
                store.roll("t", 0)
        assert [s.base_offset for s in store.describe("t")[0].segments] == [0, 3, 6, 9]
        yield store


@pytest.mark.parametrize(
    ("ts", "expected"),
    [
        (0, 0),
        (100, 0),
        (101, 1),
        (250, 1),
        (300, 1),
        (301, 3),
        (400, 3),
        (401, 5),
        (500, 5),
        (501, 6),
        (600, 6),
        (650, 6),
        (900, 6),
        (901, 9),
        (1000, 9),
        (1001, 10),
        (1060, 10),
        (1100, 10),
        (1101, None),
    ],
)
def test_offset_for_time_is_the_first_offset_at_or_after_the_timestamp(
    timed: compactlog.Store, ts: int, expected: int | None
) -> None:
    assert timed.offset_for_time("t", 0, ts) == expected


def test_offset_for_time_of_an_empty_log_is_none(store: compactlog.Store) -> None:
    store.create_topic("t")
    assert store.offset_for_time("t", 0, 0) is None


def test_offset_for_time_reads_only_the_segment_holding_the_offset(
    timed: compactlog.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    read_bases: list[int] = []
    for name in ("read", "read_from_time"):
        original = getattr(SealedSegment, name)

        def spy(self: SealedSegment, *args: object, _original=original, **kwargs: object):  # type: ignore[no-untyped-def]
            read_bases.append(self.base_offset)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(SealedSegment, name, spy)
    assert timed.offset_for_time("t", 0, 450) == 5
    assert read_bases == [3]
    read_bases.clear()
    assert timed.offset_for_time("t", 0, 1001) == 10  # in the active segment: no sealed segment is read
    assert read_bases == []


# ------------------------------------------------------------------------------------------ rolling


def test_roll_seals_the_active_segment(store: compactlog.Store) -> None:
    store.create_topic("t")
    store.append("t", 0, rows(3))
    assert store.roll("t", 0) is True
    assert segment_files(store) == [segment_name(0, ".parquet"), segment_name(3, ".log")]
    segments = store.describe("t")[0].segments
    assert [(s.base_offset, s.record_count, s.active) for s in segments] == [(0, 3, False), (3, 0, True)]
    assert [r.offset for r in store.read("t", 0)] == [0, 1, 2]


def test_roll_of_an_empty_active_segment_is_a_no_op(store: compactlog.Store) -> None:
    store.create_topic("t")
    assert store.roll("t", 0) is False
    store.append("t", 0, rows(3))
    store.roll("t", 0)
    assert store.roll("t", 0) is False
    assert segment_files(store) == [segment_name(0, ".parquet"), segment_name(3, ".log")]


def test_segment_bytes_rolls_before_the_active_segment_would_exceed_it(store: compactlog.Store) -> None:
    limit = 4096
    store.create_topic("t", config={"segment.bytes": limit})
    headers = pa.array([[{"key": "header", "value": b"h" * 40}]] * 10, HEADER_TYPE)
    for start in range(0, 300, 10):
        store.append("t", 0, rows(10, start=start, headers=headers))
        active = store.log("t", 0).active
        assert active.size <= limit or active.record_count == 1
    segments = store.describe("t")[0].segments
    assert len(segments) > 5
    assert sum(s.record_count for s in segments) == 300
    assert [r.offset for r in store.read("t", 0)] == list(range(300))


def test_a_record_larger_than_segment_bytes_gets_a_segment_of_its_own(store: compactlog.Store) -> None:
    store.create_topic("t", config={"segment.bytes": 14})
    store.append("t", 0, rows(3))
    counts = [s.record_count for s in store.describe("t")[0].segments]
    assert counts == [1, 1, 1]
    assert [r.offset for r in store.read("t", 0)] == [0, 1, 2]


def test_segment_ms_rolls_when_the_first_record_is_older_than_it(
    store: compactlog.Store, clock: FakeClock
) -> None:
    store.create_topic("t", config={"segment.ms": HOUR_MS})
    store.append("t", 0, rows(1))
    clock.advance(HOUR_MS)
    store.append("t", 0, rows(1, start=1))  # exactly segment.ms old: no roll yet
    assert len(store.describe("t")[0].segments) == 1
    clock.advance(1)
    store.append("t", 0, rows(1, start=2))
    segments = store.describe("t")[0].segments
    assert [(s.base_offset, s.record_count, s.active) for s in segments] == [(0, 2, False), (2, 1, True)]


def test_segment_ms_is_measured_from_the_first_record_timestamp(
    store: compactlog.Store, clock: FakeClock
) -> None:
    store.create_topic("t", config={"segment.ms": HOUR_MS})
    old = clock.now - 2 * HOUR_MS
    store.append("t", 0, rows(1, timestamp=pa.array([old], pa.int64())))
    store.append("t", 0, rows(1, start=1))  # its timestamp is 2 hours after the first record's
    assert [s.record_count for s in store.describe("t")[0].segments] == [1, 1]


def test_old_timestamps_alone_do_not_roll_every_append(store: compactlog.Store) -> None:
    store.create_topic("t", config={"segment.ms": HOUR_MS})
    for i in range(5):  # historical data, all of the same hour, loaded now
        store.append("t", 0, rows(1, start=i, timestamp=pa.array([1000 + i], pa.int64())))
    assert [s.record_count for s in store.describe("t")[0].segments] == [5]


def test_compacted_topic_rolls_by_max_compaction_lag_when_it_is_shorter(
    store: compactlog.Store, clock: FakeClock
) -> None:
    store.create_topic(
        "c",
        config={"cleanup.policy": "compact", "segment.ms": 10 * HOUR_MS, "max.compaction.lag.ms": HOUR_MS},
    )
    store.create_topic(
        "d", config={"cleanup.policy": "delete", "segment.ms": 10 * HOUR_MS, "max.compaction.lag.ms": HOUR_MS}
    )
    for topic in ("c", "d"):
        store.append(topic, 0, rows(1))
    clock.advance(HOUR_MS + 1)
    for topic in ("c", "d"):
        store.append(topic, 0, rows(1, start=1))
    assert [s.record_count for s in store.describe("c")[0].segments] == [1, 1]
    assert [s.record_count for s in store.describe("d")[0].segments] == [2]  # delete topics: segment.ms only


def test_compacted_topic_rolls_by_segment_ms_when_it_is_shorter(
    store: compactlog.Store, clock: FakeClock
) -> None:
    store.create_topic(
        "c",
        config={"cleanup.policy": "compact", "segment.ms": HOUR_MS, "max.compaction.lag.ms": 10 * HOUR_MS},
    )
    store.append("c", 0, rows(1))
    clock.advance(HOUR_MS + 1)
    store.append("c", 0, rows(1, start=1))
    assert [s.record_count for s in store.describe("c")[0].segments] == [1, 1]


# ----------------------------------------------------------------------------------------- recovery


def _fill(store: compactlog.Store, sealed: int = 2, active: int = 3) -> list[tuple]:
    """``sealed`` sealed segments of 3 records and ``active`` appends of one record each."""
    store.create_topic("t")
    for s in range(sealed):
        store.append("t", 0, rows(3, start=3 * s))
        store.roll("t", 0)
    for i in range(active):
        store.append("t", 0, rows(1, start=3 * sealed + i))
    return contents(store)


def _reopen(tmp_path: Path, clock: FakeClock) -> compactlog.Store:
    return compactlog.open(tmp_path / "data", clock=clock)


@pytest.mark.parametrize("garbage", [b"\x00", b"junk" * 100, b"CLB1" + b"\xff" * 60])
def test_garbage_after_the_last_frame_is_truncated_on_reopen(
    tmp_path: Path, clock: FakeClock, store: compactlog.Store, garbage: bytes
) -> None:
    expected = _fill(store)
    path = store.log("t", 0).active.path
    size = os.path.getsize(path)
    store.close()
    with open(path, "ab") as f:
        f.write(garbage)
    with _reopen(tmp_path, clock) as reopened:
        assert contents(reopened) == expected
        assert os.path.getsize(path) == size
        reopened.append("t", 0, rows(1, start=99))
        assert reopened.log_end_offset("t", 0) == len(expected) + 1
        assert [r.offset for r in reopened.read("t", 0)] == list(range(len(expected) + 1))


def test_every_cut_inside_the_last_frame_loses_only_that_frame(
    tmp_path: Path, clock: FakeClock, store: compactlog.Store
) -> None:
    expected = _fill(store, sealed=1, active=3)
    log = store.log("t", 0)
    path, frames = log.active.path, list(log.active.frames)
    store.close()
    original = Path(path).read_bytes()
    last = frames[-1]
    for cut in range(last.position + 1, last.position + last.size, max(1, last.size // 23)):
        Path(path).write_bytes(original[:cut])
        with _reopen(tmp_path, clock) as reopened:
            assert contents(reopened) == expected[:-1], cut
            assert os.path.getsize(path) == last.position
        Path(path).write_bytes(original)


def test_a_flipped_byte_in_the_last_frame_truncates_that_frame(
    tmp_path: Path, clock: FakeClock, store: compactlog.Store
) -> None:
    expected = _fill(store, sealed=1, active=3)
    log = store.log("t", 0)
    path, last = log.active.path, log.active.frames[-1]
    store.close()
    data = bytearray(Path(path).read_bytes())
    data[last.position + last.size - 10] ^= 0xFF
    Path(path).write_bytes(bytes(data))
    with _reopen(tmp_path, clock) as reopened:
        assert contents(reopened) == expected[:-1]
        assert reopened.log_end_offset("t", 0) == expected[-1][0]


def test_a_corrupt_sealed_segment_footer_raises_corrupt_segment(
    tmp_path: Path, clock: FakeClock, store: compactlog.Store
) -> None:
    _fill(store)
    path = os.path.join(store.log("t", 0).directory, segment_name(3, ".parquet"))
    store.close()
    data = bytearray(Path(path).read_bytes())
    data[-12:-4] = b"\x00" * 8  # inside the footer
    Path(path).write_bytes(bytes(data))
    with _reopen(tmp_path, clock) as reopened, pytest.raises(CorruptSegmentError, match=segment_name(3, "")):
        reopened.read_arrow("t", 0)


def test_a_truncated_sealed_segment_raises_corrupt_segment(
    tmp_path: Path, clock: FakeClock, store: compactlog.Store
) -> None:
    _fill(store)
    path = os.path.join(store.log("t", 0).directory, segment_name(0, ".parquet"))
    store.close()
    Path(path).write_bytes(Path(path).read_bytes()[:100])
    with _reopen(tmp_path, clock) as reopened, pytest.raises(CorruptSegmentError, match="Parquet"):
        reopened.log_end_offset("t", 0)


def test_a_sealed_segment_under_the_wrong_name_raises_corrupt_segment(
    tmp_path: Path, clock: FakeClock, store: compactlog.Store
) -> None:
    _fill(store)
    directory = store.log("t", 0).directory
    store.close()
    os.rename(
        os.path.join(directory, segment_name(3, ".parquet")),
        os.path.join(directory, segment_name(4, ".parquet")),
    )
    with _reopen(tmp_path, clock) as reopened, pytest.raises(CorruptSegmentError, match="base offset 3"):
        reopened.log_end_offset("t", 0)


def test_a_leftover_sealing_file_is_removed_and_the_log_kept(
    tmp_path: Path, clock: FakeClock, store: compactlog.Store
) -> None:
    expected = _fill(store)
    log = store.log("t", 0)
    active_name = os.path.basename(log.active.path)
    store.close()
    sealing = os.path.join(log.directory, segment_name(6, ".parquet") + SEALING_SUFFIX)
    Path(sealing).write_bytes(b"PAR1 half written")  # a roll that crashed while writing Parquet
    with _reopen(tmp_path, clock) as reopened:
        assert contents(reopened) == expected
        assert segment_files(reopened) == [
            segment_name(0, ".parquet"),
            segment_name(3, ".parquet"),
            active_name,
        ]
        reopened.roll("t", 0)
        assert contents(reopened) == expected


def test_a_log_beside_its_parquet_is_removed_as_a_finished_roll(
    tmp_path: Path, clock: FakeClock, store: compactlog.Store
) -> None:
    expected = _fill(store)
    log = store.log("t", 0)
    active = log.active.path
    shutil.copy(active, str(tmp_path / "saved.log"))
    store.roll("t", 0)  # completes: 6.parquet and 9.log
    store.close()
    shutil.copy(str(tmp_path / "saved.log"), active)  # as if the crash came before the old .log was removed
    with _reopen(tmp_path, clock) as reopened:
        assert contents(reopened) == expected
        assert segment_files(reopened) == [segment_name(b, ".parquet") for b in (0, 3, 6)] + [
            segment_name(9, ".log")
        ]
        reopened.append("t", 0, rows(1, start=9))
        assert [r.offset for r in reopened.read("t", 0)] == list(range(10))


def test_a_roll_that_crashed_before_the_next_log_was_created_recovers(
    tmp_path: Path, clock: FakeClock, store: compactlog.Store
) -> None:
    expected = _fill(store)
    log = store.log("t", 0)
    active = log.active.path
    shutil.copy(active, str(tmp_path / "saved.log"))
    store.roll("t", 0)
    store.close()
    os.unlink(os.path.join(log.directory, segment_name(9, ".log")))
    shutil.copy(str(tmp_path / "saved.log"), active)
    with _reopen(tmp_path, clock) as reopened:
        assert contents(reopened) == expected
        assert reopened.log_end_offset("t", 0) == 9
        reopened.append("t", 0, rows(1, start=9))
        assert segment_files(reopened)[-1] == segment_name(9, ".log")


def test_an_older_log_without_its_parquet_is_sealed_again(
    tmp_path: Path, clock: FakeClock, store: compactlog.Store
) -> None:
    expected = _fill(store)
    log = store.log("t", 0)
    active = log.active.path
    shutil.copy(active, str(tmp_path / "saved.log"))
    store.roll("t", 0)
    store.append("t", 0, rows(2, start=9))
    expected = contents(store)
    store.close()
    os.unlink(os.path.join(log.directory, segment_name(6, ".parquet")))
    shutil.copy(str(tmp_path / "saved.log"), active)
    with _reopen(tmp_path, clock) as reopened:
        assert contents(reopened) == expected
        assert segment_files(reopened) == [segment_name(b, ".parquet") for b in (0, 3, 6)] + [
            segment_name(9, ".log")
        ]


def test_reads_during_appends_and_rolls_see_a_whole_prefix(store: compactlog.Store) -> None:
    import threading

    store.create_topic("t", config={"segment.bytes": 1200})
    done = threading.Event()
    seen: list[int] = []
    errors: list[BaseException] = []

    def reader() -> None:
        try:
            while not done.is_set():
                table = store.read_arrow("t", 0)
                n = table.num_rows
                assert table.column("offset").to_pylist() == list(range(n))
                assert table.column("key").to_pylist() == [b"k%d" % i for i in range(n)]
                seen.append(n)
        except BaseException as e:
            errors.append(e)

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for start in range(0, 300, 3):
            store.append("t", 0, rows(3, start=start))
    finally:
        done.set()
        thread.join()
    assert not errors, errors[0]
    assert len(store.describe("t")[0].segments) > 10
    assert seen == sorted(seen)


def test_appends_go_on_while_a_flush_fsyncs_and_the_flush_covers_what_came_before(
        store: compactlog.Store, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    store.create_topic("t")
    store.append("t", 0, rows(2), flush=False)
    log = store.log("t", 0)
    in_fsync, release = threading.Event(), threading.Event()
    synced_sizes: list[int] = []
    real_sync = active_segment.sync_data

    def held_sync(fd: int) -> None:  # the flush's fsync stays in progress until released
        if threading.current_thread() is flusher:
            synced_sizes.append(os.fstat(fd).st_size)
            in_fsync.set()
            release.wait(10)
        real_sync(fd)

    monkeypatch.setattr(active_segment, "sync_data", held_sync)
    flusher = threading.Thread(target=log.flush)
    appender = threading.Thread(target=store.append, args=("t", 0, rows(2, start=2)), kwargs={"flush": False})
    flusher.start()
    try:
        assert in_fsync.wait(10)
        appender.start()
        appender.join(10)
        assert not appender.is_alive(), "the append waited for the fsync"
    finally:
        release.set()
        flusher.join()
        if appender.ident is not None:
            appender.join()
    assert synced_sizes[0] == store.log("t", 0).active.frames[0].size  # the first append's frame, whole
    assert [r[2] for r in contents(store)] == [b"k0", b"k1", b"k2", b"k3"]


def test_a_producer_batch_sequence_wraps_past_int_max_to_zero(store: compactlog.Store) -> None:
    store.create_topic("t")
    int_max = 2**31 - 1
    store.append("t", 0, rows(3), producer_id=7, producer_epoch=2, base_sequence=int_max - 1, transactional=True)
    store.append("t", 0, rows(1, start=3), producer_id=7, producer_epoch=2, base_sequence=1, transactional=True)
    read = store.read_arrow("t", 0, columns=["sequence", "producer_id", "producer_epoch", "is_transactional"])
    assert read.column("sequence").to_pylist() == [int_max - 1, int_max, 0, 1]
    assert set(read.column("producer_id").to_pylist()) == {7}
    assert set(read.column("producer_epoch").to_pylist()) == {2}
    assert all(read.column("is_transactional").to_pylist())


def test_a_batch_wrapping_past_int_max_is_no_duplicate_of_a_kept_batch_its_ends_fall_in(
        store: compactlog.Store) -> None:
    store.create_topic("t")
    int_max = 2**31 - 1
    store.append("t", 0, rows(250), producer_id=7, producer_epoch=0, base_sequence=0)
    with pytest.raises(OutOfOrderSequenceError):  # 2**31 - 100 .. 149 is not within 0 .. 249
        store.append("t", 0, rows(250, start=250), producer_id=7, producer_epoch=0, base_sequence=int_max - 99)
    assert store.log_end_offset("t", 0) == 250
    store.append("t", 0, rows(3, start=250), producer_id=8, producer_epoch=0, base_sequence=int_max - 1)
    again = store.append("t", 0, rows(3, start=250), producer_id=8, producer_epoch=0, base_sequence=int_max - 1)
    assert (again.base_offset, again.last_offset) == (250, 252)  # the same wrapped batch is its own duplicate
    assert store.log_end_offset("t", 0) == 253
