"""Tests for compactlog.log.reads: a read is a consistent snapshot however the cleaner swaps under it
(strictly increasing offsets, every record one the log held, no error because the cleaner ran)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pytest

import compactlog
from compactlog.record import SCHEMA
from compactlog.sealed_segment import write_sealed
from compactlog.segment import CLEANED_SUFFIX, SEALED_SUFFIX, segment_name
from support import FakeClock

SEGMENT_RECORDS = 50


@dataclass(frozen=True)
class Cleaned:
    cleaned_path: str
    base_offset: int
    source_bases: tuple[int, ...]


@pytest.fixture
def store(tmp_path: Path, clock: FakeClock) -> compactlog.Store:
    with compactlog.open(tmp_path / "data", clock=clock) as store:
        store.create_topic("t", config={"cleanup.policy": "compact"})
        for segment in range(4):  # four sealed segments of 50 records, keys repeating across them
            store.append("t", 0, pa.table({
                "key": [b"k%d" % (i % 20) for i in range(SEGMENT_RECORDS)],
                "value": [b"v%d-%d" % (segment, i) for i in range(SEGMENT_RECORDS)]}))
            store.log("t", 0).roll()
        yield store


def produced(store: compactlog.Store) -> set[tuple[int, bytes, bytes]]:
    return {(r.offset, r.key, r.value) for r in store.read("t", 0, 0)}


def swap_in_latest(store: compactlog.Store, bases: tuple[int, ...]) -> None:
    """Replace the segments at ``bases`` by one holding the latest record of each key among them, named
    after the first (as the cleaner names its groups), and delete the old files at once."""
    log = store.log("t", 0)
    segments = [s for s in log.sealed_segments() if s.base_offset in bases]
    table = pa.concat_tables([s.read() for s in segments])
    latest: dict[bytes, int] = {}
    for row, key in enumerate(table.column("key").to_pylist()):
        latest[key] = row
    kept = table.take(sorted(latest.values())).cast(SCHEMA)
    path = os.path.join(log.directory, segment_name(bases[0], SEALED_SUFFIX) + CLEANED_SUFFIX)
    write_sealed(path, kept, bases[0], segments[-1].next_offset)
    log.swap_cleaned([Cleaned(path, bases[0], bases)], {s.base_offset: s.inode for s in segments}, delay_ms=0)


def test_a_read_part_way_through_a_swap_neither_repeats_nor_goes_back(store: compactlog.Store) -> None:
    before = produced(store)
    tables = store.read_tables("t", 0, 0, columns=["offset", "key", "value"])
    first = next(tables)  # the snapshot is taken and the first segment read
    assert first.column("offset").to_pylist() == list(range(SEGMENT_RECORDS))
    # The cleaner replaces segments 2 and 3 by one file under the name of segment 2: the read, still
    # holding the old segment list, must not read the new file as if it were the old one.
    swap_in_latest(store, (SEGMENT_RECORDS, 2 * SEGMENT_RECORDS))
    swap_in_latest(store, (0,))
    rows = [first, *tables]
    offsets = [o for t in rows for o in t.column("offset").to_pylist()]
    assert offsets == list(range(4 * SEGMENT_RECORDS))  # the log as it was when the read began
    returned = {row for t in rows for row in zip(*(t.column(c).to_pylist() for c in t.column_names), strict=True)}
    assert returned <= before


def test_a_read_taken_before_a_swap_reads_the_files_it_snapshotted(store: compactlog.Store) -> None:
    before = produced(store)
    records = store.read("t", 0, 0)
    first = next(records)
    swap_in_latest(store, (0, SEGMENT_RECORDS))  # the segment being read is replaced and deleted
    swap_in_latest(store, (2 * SEGMENT_RECORDS, 3 * SEGMENT_RECORDS))
    offsets = [first.offset] + [r.offset for r in records]
    assert offsets == sorted(set(offsets))
    assert offsets == list(range(4 * SEGMENT_RECORDS))
    # A read started after the swaps sees the cleaned log, every record of it once held.
    after = [(r.offset, r.key, r.value) for r in store.read("t", 0, 0)]
    assert [o for o, _, _ in after] == sorted({o for o, _, _ in after}) and set(after) <= before
    assert len(after) < len(before)


def test_offset_for_time_reads_the_pinned_segments(store: compactlog.Store, clock: FakeClock) -> None:
    swap_in_latest(store, (0, SEGMENT_RECORDS))
    assert store.offset_for_time("t", 0, clock.now) == next(iter(store.read("t", 0, 0))).offset == 80


def test_a_read_ends_at_the_log_end_it_began_with(store: compactlog.Store) -> None:
    more = pa.table({"key": [b"x"] * 10, "value": [b"y"] * 10})
    store.append("t", 0, more)  # the active segment holds records when the read begins
    end = store.log_end_offset("t", 0)
    tables = store.read_tables("t", 0, 0, columns=["offset"])
    first = next(tables)
    for _ in range(3):  # appends and rolls under the read: the active segment it held is gone
        store.append("t", 0, more)
        store.log("t", 0).roll()
    offsets = first.column("offset").to_pylist() + [o for t in tables for o in t.column("offset").to_pylist()]
    assert offsets == list(range(end))
