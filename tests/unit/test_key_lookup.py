"""Finding a key (:mod:`compactlog.key_lookup`): the partitions searched and the partitioners' hints, and the
skipping of sealed segments' row groups by their ``key`` statistics: sound (a row group that holds the key
is always read, whatever its place in the range or its statistics) and effective (a row group whose
statistics exclude the key is not read, counted at pyarrow's reader), in ``explain``'s and
``verify-erasure``'s reads of real segments."""

from __future__ import annotations

import io
import zlib
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import compactlog
from compactlog import sealed_segment
from compactlog.cli.explain import key_records
from compactlog.erasure import scan_partition
from compactlog.errors import UnknownTopicOrPartitionError
from compactlog.key_lookup import (
    consistent_partition,
    key_row_groups,
    partitioner_hints,
    partitions_text,
    partitions_to_search,
)
from compactlog.partitioner import partition_for_key
from support import FakeClock

LONG_KEY = b"k" * 5000  # longer than the writer's statistics limit: its row group has no key statistics


def test_every_partition_is_searched_unless_one_is_named() -> None:
    assert partitions_to_search(3, None, "t") == [0, 1, 2]
    assert partitions_to_search(3, 2, "t") == [2]
    with pytest.raises(UnknownTopicOrPartitionError, match="topic 't' has no partition 3"):
        partitions_to_search(3, 3, "t")


def test_the_hints_are_murmur2s_and_librdkafkas_crc32_partitions() -> None:
    assert partitioner_hints(b"key-5", 3) == {"murmur2": partition_for_key(b"key-5", 3), "consistent_random": 0}
    assert consistent_partition(b"key-5", 3) == zlib.crc32(b"key-5") % 3 == 0
    assert partitions_text("t", [1]) == "t-1" and partitions_text("t", [0, 2]) == "t-0, t-2"
    assert partitions_text("t", list(range(100))) == "t-0 .. t-99 (100 partitions)"


def footer(row_groups: list[list[bytes | None]]) -> pq.FileMetaData:
    """The footer of a file of one ``key`` column in these row groups, written with the sealed segments'
    statistics settings."""
    sink = io.BytesIO()
    with pq.ParquetWriter(sink, pa.schema([("key", pa.binary())]),
                          write_statistics=sealed_segment.STATISTICS_COLUMNS) as writer:
        for keys in row_groups:
            writer.write_table(pa.table({"key": pa.array(keys, pa.binary())}))
    return pq.read_metadata(pa.BufferReader(sink.getvalue()))


def test_a_row_group_is_read_when_its_statistics_admit_the_key_or_it_has_none() -> None:
    metadata = footer([[b"d", b"b", b"c"], [b"m", b"p", None], [LONG_KEY, b"a"], [None]])
    assert key_row_groups(metadata, b"b") == [0, 2, 3]  # the minimum (2 and 3 have no statistics)
    assert key_row_groups(metadata, b"d") == [0, 2, 3]  # the maximum
    assert key_row_groups(metadata, b"bb") == [0, 2, 3]  # inside the range: it could be there
    assert key_row_groups(metadata, b"e") == [2, 3]  # only where no statistics say otherwise
    assert key_row_groups(metadata, b"p") == [1, 2, 3]
    assert key_row_groups(metadata, b"p\x00") == [2, 3]
    assert key_row_groups(metadata, b"") == [2, 3]  # the empty key is below every other
    # A long key is never excluded by statistics cut short (a truncated maximum would lie below it).
    assert key_row_groups(metadata, LONG_KEY) == [2, 3]
    assert key_row_groups(footer([[b"a", LONG_KEY + b"z"]]), LONG_KEY + b"z") == [0]
    unsigned = footer([[b"\x01", b"\x80"]])  # unsigned bytes: \x01 < \x7f < \x80 < \x81
    assert key_row_groups(unsigned, b"\x7f") == [0]
    assert key_row_groups(unsigned, b"\x81") == [] and key_row_groups(unsigned, b"\x00") == []


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(st.binary(max_size=6), min_size=1, max_size=8), min_size=1, max_size=6),
       st.binary(max_size=6))
def test_every_row_group_holding_the_key_is_read_and_only_those_its_range_admits(
        row_groups: list[list[bytes]], probe: bytes) -> None:
    metadata = footer(row_groups)
    for key in {probe, *(k for keys in row_groups for k in keys)}:
        read = key_row_groups(metadata, key)
        assert [i for i, keys in enumerate(row_groups) if key in keys] == [i for i in read if key in row_groups[i]]
        assert read == [i for i, keys in enumerate(row_groups) if min(keys) <= key <= max(keys)]


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[int, int]]]:
    """Every read of row groups from a Parquet file, as (the segment's base offset, row groups read)."""
    done: list[tuple[int, int]] = []
    read_row_groups = pq.ParquetFile.read_row_groups

    def counted(self: pq.ParquetFile, row_groups: list[int], *args: object, **kwargs: object) -> pa.Table:
        done.append((int(self.metadata.metadata[b"compactlog.base_offset"]), len(row_groups)))
        return read_row_groups(self, row_groups, *args, **kwargs)

    def whole(self: pq.ParquetFile, *args: object, **kwargs: object) -> pa.Table:
        raise AssertionError("a key lookup read a whole Parquet file")

    monkeypatch.setattr(pq.ParquetFile, "read_row_groups", counted)
    monkeypatch.setattr(pq.ParquetFile, "read", whole)
    monkeypatch.setattr(pq.ParquetFile, "read_row_group", whole)
    yield done


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[compactlog.Store]:
    """``t``-0: sealed segments at 0 (keys a*), 3 (m*, in three row groups of one key) and 6 (x*), then m2's
    tombstone in the active segment."""
    monkeypatch.setattr(sealed_segment, "ROW_GROUP_ROWS", 1)
    with compactlog.open(tmp_path, clock=FakeClock()) as store:
        store.create_topic("t", 1, {"cleanup.policy": "compact"})
        for prefix in (b"a", b"m", b"x"):
            keys = [prefix + str(i).encode() for i in (1, 2, 3)]
            store.append("t", 0, pa.table({"key": pa.array(keys, pa.binary()), "value": [b"v"] * 3}))
            store.roll("t", 0)
        store.append("t", 0, pa.table({"key": [b"m2"], "value": pa.array([None], pa.binary())}))
        yield store


def test_explain_reads_only_the_row_groups_that_can_hold_the_key(store: compactlog.Store,
                                                                 reads: list[tuple[int, int]]) -> None:
    log = store.log("t", 0)
    found = key_records(log, b"m2")
    assert reads == [(3, 1)]  # m1, m2, m3 in three row groups: only m2's admits "m2"
    assert [(r.offset, r.segment, r.tombstone) for r in found] == [
        (4, "00000000000000000003.parquet", False), (9, "00000000000000000009.log", True)]
    reads.clear()
    assert key_records(log, b"q") == [] and reads == []  # between m3 and x1: no segment can hold it
    assert [r.offset for r in key_records(log, b"x3")] == [8] and reads == [(6, 1)]


def test_the_erasure_scan_skips_the_files_whose_key_statistics_exclude_the_key(
        store: compactlog.Store, tmp_path: Path, reads: list[tuple[int, int]]) -> None:
    scan = scan_partition(str(tmp_path / "t-0"), b"m2")
    assert scan.skipped == ["00000000000000000000.parquet", "00000000000000000006.parquet"]
    assert reads == [(3, 1)]
    assert [(r.offset, r.file, r.tombstone) for r in scan.records] == [
        (4, "00000000000000000003.parquet", False), (9, "00000000000000000009.log", True)]
    assert not scan.erased and [r.offset for r in scan.surviving_values] == [4]
