"""The cleaning kernel: one partition's round as vectorised Arrow/numpy work on segment files.

Given a :class:`CleanTask` (plain values: segment files, the cleanable range, the configs that matter, the
round's clock reading), the kernel

1. builds the offset map over the dirty section ``[first_dirty_offset, first_uncleanable_offset)`` (only
   keyed data records; records of aborted transactions never enter it), stopping where the map fills;
   the round's end offset (the next checkpoint) is ``map.latest_offset + 1``;
2. rewrites every segment whose base offset is below the end offset (the clean section too, since new
   keys may supersede old ones), keeping a record iff Kafka's rule keeps it (vectorised here; the per-record
   :func:`.retain.clean_record` is the specification, and a property test checks every column agrees),
   stamping a delete horizon on tombstones it keeps for the first time, and writing each group of
   segments (:func:`.plan.group_segments_by_size`) to one ``<first base>.parquet.cleaned`` file.

It never touches the live segment set: :mod:`.swap` installs its output under the partition lock. Every
step works on one row group (or a bounded batch of key columns) at a time, so memory stays within the
dedupe buffer plus a few row groups. The same functions run in process and inside Spark tasks.

This is Kafka's two-pass round. When the dirty section's keys fit the map, :mod:`.single_pass` gets the
same result in one read; the two passes run when they do not (the map fills oldest first and the round
cleans as far as it reached) and in Spark's split rounds (map and rewrite on different executors). The
record rule, the tombstone stamp and the group writer here serve both.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..columns import from_numpy, is_null, to_numpy
from ..producer_state import AbortedTxn, aborted_mask
from ..record import CONTROL_ABORT, CONTROL_COMMIT, CONTROL_EMPTY_BATCH, CONTROL_NONE, NO_DELETE_HORIZON
from ..sealed_segment import SegmentWriter, read_parquet
from ..segment import CLEANED_SUFFIX, SEALED_SUFFIX, segment_name
from .offset_map import OffsetMap
from .plan import SegmentStats, group_segments_by_size

# Segments of at most this many bytes have their keys looked up in the offset map in one hash pass of it.
LOOKUP_BATCH_SEGMENT_BYTES = 256 * 1024 * 1024
# Records enter the offset map in batches of about log.cleaner.dedupe.buffer.size / MAP_BATCH_FRACTION bytes
# of keys and offsets (the grouping's working memory is a small multiple of a batch).
MAP_BATCH_FRACTION = 4
MAP_READ_AHEAD = 8  # row groups of keys and offsets read ahead while a batch is being put into the map


@dataclass(frozen=True)
class SegmentFile:
    """A sealed segment as the kernel sees it: a file and the offset range it covers."""

    path: str
    base_offset: int
    next_offset: int
    size_bytes: int
    record_count: int
    max_timestamp: int = -1
    first_timestamp: int = -1
    aborted: tuple[AbortedTxn, ...] = ()  # the segment's transaction index
    control_count: int = -1  # markers and emptied batches in the segment; -1 = unknown

    def stats(self) -> SegmentStats:
        # An emptied segment counts as size 0, so it always joins a neighbour's group (Kafka's rule for
        # empty segments); a Parquet file with no rows still has a footer of a few hundred bytes.
        size = self.size_bytes if self.record_count else 0
        return SegmentStats(self.base_offset, self.next_offset, size, self.record_count,
                            self.max_timestamp, self.first_timestamp, False)


@dataclass(frozen=True)
class CleanTask:
    """Everything one partition's round needs, as values (it crosses to Spark executors as is)."""

    topic: str
    partition: int
    directory: str
    segments: tuple[SegmentFile, ...]  # every sealed segment below first_uncleanable_offset, ascending
    first_dirty_offset: int
    first_uncleanable_offset: int
    now_ms: int
    delete_retention_ms: int
    segment_bytes: int
    compression: str
    map_capacity_bytes: int
    dedupe_buffer_bytes: int
    aborted: tuple[AbortedTxn, ...] = ()
    # Offsets of transaction markers whose transaction still has records (data or emptied batches) in
    # the segments of this round: such a marker is kept without a horizon (see transaction_facts).
    markers_with_data: frozenset[int] = frozenset()
    # Offset of the last record of every producer that has not expired: kept, emptied if need be.
    producer_last_offsets: frozenset[int] = frozenset()

    def dirty_segments(self) -> list[SegmentFile]:
        return [s for s in self.segments
                if s.next_offset > self.first_dirty_offset and s.base_offset < self.first_uncleanable_offset]


@dataclass
class MapResult:
    """The offset map of a round and where the round ends."""

    offset_map: OffsetMap
    end_offset: int  # the new checkpoint: one past the last offset the map covers
    records_read: int = 0
    bytes_read: int = 0
    entries: dict[int, np.ndarray] = field(default_factory=dict)  # base offset -> entry per row (-1 = none)


@dataclass
class GroupResult:
    """One cleaned group: its ``.cleaned`` file and what was read and written."""

    base_offset: int
    next_offset: int
    cleaned_path: str
    source_bases: tuple[int, ...]
    records_read: int
    records_written: int
    bytes_read: int
    bytes_written: int
    invalid_records: int
    tombstones_stamped: int


def map_columns(task: CleanTask, segment: SegmentFile) -> list[str]:
    """The columns the map phase reads of a segment: control and producer columns only when needed."""
    columns = ["offset", "key"]
    if segment.control_count != 0:
        columns.append("control_type")
    if task.aborted:
        columns += ["is_transactional", "producer_id"]
    return columns


def _map_rows(table: pa.Table, task: CleanTask) -> tuple[np.ndarray, pa.Array, np.ndarray]:
    """The rows of a segment that enter the map: keyed data rows of the dirty range, not aborted."""
    offsets = to_numpy(table.column("offset"))
    keys = table.column("key").combine_chunks() if table.num_rows else pa.nulls(0, pa.binary())
    if "control_type" in table.column_names:
        control = to_numpy(table.column("control_type")) != CONTROL_NONE
    else:  # the segment has no control rows
        control = np.zeros(len(offsets), dtype=bool)
    eligible = ~is_null(keys) & ~control
    eligible &= (offsets >= task.first_dirty_offset) & (offsets < task.first_uncleanable_offset)
    if task.aborted:
        eligible &= ~aborted_mask(offsets, to_numpy(table.column("producer_id")),
                                  to_numpy(table.column("is_transactional")), control,
                                  task.aborted)
    return offsets, keys, eligible


def build_offset_map(task: CleanTask, keep_entries: bool = True, one_core: bool = False) -> MapResult:
    """Phase 1: the offset map over the dirty section, until it fills.

    The dirty segments' keys are read row group by row group (the next one read in the background) and put
    into the map in batches of about a quarter of the dedupe buffer: a batch is grouped together with the
    map's own keys, so fewer, larger batches cost fewer passes over the map, and smaller ones less memory.
    """
    offset_map = OffsetMap(task.map_capacity_bytes, task.dedupe_buffer_bytes)
    result = MapResult(offset_map, task.first_dirty_offset)
    dirty = task.dirty_segments()
    batch_limit = max(task.dedupe_buffer_bytes // MAP_BATCH_FRACTION, 1)
    # (segment, index of the row group's first row, eligible rows, their keys, their offsets)
    pending: list[tuple[SegmentFile, int, np.ndarray, pa.Array, np.ndarray]] = []
    pending_bytes = 0
    read_to: set[int] = set()  # bases of the segments read to their end since the last batch went in

    def flush() -> int | None:
        """Put the pending records into the map; the offset where it filled, if it did."""
        nonlocal pending_bytes
        if not pending:
            return None
        offsets = np.concatenate([p[4] for p in pending]) if len(pending) > 1 else pending[0][4]
        entries, full_at = offset_map.put_records([p[3] for p in pending], offsets)
        start = 0
        for segment, first_row, positions, chunk_keys, _ in pending:
            count = len(chunk_keys)
            segment_entries = result.entries.get(segment.base_offset)
            if segment_entries is not None:
                segment_entries[first_row + positions] = entries[start:start + count]
            start += count
        pending.clear()
        pending_bytes = 0
        return full_at

    full_at: int | None = None
    current: SegmentFile | None = None
    for segment, first_row, table in prefetched(dirty, lambda s: map_columns(task, s), MAP_READ_AHEAD,
                                                one_core=one_core):
        if segment is not current:
            if current is not None and full_at is None:
                # A segment read to its end is mapped to its end: offset gaps at its tail are skipped.
                read_to.add(current.base_offset)
            current = segment
            result.bytes_read += segment.size_bytes
            if keep_entries and segment.base_offset >= task.first_dirty_offset:
                # A segment that starts below the dirty section has clean rows the map has not seen: the
                # rewrite looks its keys up instead.
                result.entries[segment.base_offset] = np.full(segment.record_count, -1, dtype=np.int32)
        result.records_read += table.num_rows
        offsets, keys, eligible = _map_rows(table, task)
        positions = np.flatnonzero(eligible)
        every_row = len(positions) == len(offsets)
        chunk_keys = keys if every_row else keys.take(from_numpy(positions))
        chunk_bytes = chunk_keys.nbytes + 8 * len(positions)
        if pending and pending_bytes + chunk_bytes > batch_limit:
            full_at = flush()
            if full_at is not None:
                break
            _mapped_to_end(offset_map, task, dirty, read_to)
        pending.append((segment, first_row, positions, chunk_keys, offsets if every_row else offsets[positions]))
        pending_bytes += chunk_bytes
    if full_at is None:
        if current is not None:
            read_to.add(current.base_offset)
        full_at = flush()
    if full_at is not None:
        offset_map.update_latest_offset(full_at - 1)
        result.end_offset = full_at
        return result
    _mapped_to_end(offset_map, task, dirty, read_to)
    result.end_offset = offset_map.latest_offset + 1 if dirty else task.first_dirty_offset
    return result


def _mapped_to_end(offset_map: OffsetMap, task: CleanTask, dirty: Sequence[SegmentFile],
                   read_to: set[int]) -> None:
    """Advance the map's latest offset over the tails of segments whose records are all in the map."""
    for segment in dirty:
        if segment.base_offset in read_to:
            offset_map.update_latest_offset(
                max(offset_map.latest_offset, min(segment.next_offset, task.first_uncleanable_offset) - 1))
    read_to.clear()


@dataclass
class PartialMap:
    """One dirty segment's distinct keys (order of first appearance) and their newest offsets: what a
    Spark task sends back to the driver (keys and offsets only, never whole records)."""

    base_offset: int
    keys: pa.Array
    latest: np.ndarray
    records_read: int
    bytes_read: int


def partial_map(task: CleanTask, segment: SegmentFile) -> PartialMap:
    """The newest offset of each key of one dirty segment (unbounded: the driver's merge applies the bound)."""
    table = read_parquet(segment.path, columns=map_columns(task, segment))
    offsets, keys, eligible = _map_rows(table, task)
    positions = np.flatnonzero(eligible)
    unbounded = OffsetMap(2**62)
    unbounded.put_records(keys.take(from_numpy(positions)), offsets[positions])
    return PartialMap(segment.base_offset, unbounded.keys, unbounded.offsets, table.num_rows, segment.size_bytes)


def merge_partial_maps(task: CleanTask, partials: Sequence[PartialMap]) -> MapResult:
    """The driver's half of a parallel map build: merge per-segment maps in offset order under the dedupe
    bound; the segment where the bound is reached is re-read here record by record to find the cut."""
    offset_map = OffsetMap(task.map_capacity_bytes, task.dedupe_buffer_bytes)
    result = MapResult(offset_map, task.first_dirty_offset)
    by_base = {p.base_offset: p for p in partials}
    dirty = task.dirty_segments()
    for segment in dirty:
        part = by_base[segment.base_offset]
        result.records_read += part.records_read
        result.bytes_read += part.bytes_read
        if not offset_map.put_partial(part.keys, part.latest):
            table = read_parquet(segment.path, columns=map_columns(task, segment))
            offsets, keys, eligible = _map_rows(table, task)
            positions = np.flatnonzero(eligible)
            _, full_at = offset_map.put_records(keys.take(from_numpy(positions)), offsets[positions])
            if full_at is not None:
                offset_map.update_latest_offset(full_at - 1)
                result.end_offset = full_at
                return result
        offset_map.update_latest_offset(min(segment.next_offset, task.first_uncleanable_offset) - 1)
    result.end_offset = offset_map.latest_offset + 1 if dirty else task.first_dirty_offset
    return result


def groups_to_clean(task: CleanTask, end_offset: int) -> list[list[SegmentFile]]:
    """Phase 2's work list: the segments below the round's end offset, grouped by ``segment.bytes``."""
    below = [s for s in task.segments if s.base_offset < end_offset]
    by_base = {s.base_offset: s for s in below}
    groups = group_segments_by_size([s.stats() for s in below], task.segment_bytes, task.first_uncleanable_offset)
    return [[by_base[s.base_offset] for s in group] for group in groups]


def retain_mask(table: pa.Table, task: CleanTask, offset_map: OffsetMap,
                entries: np.ndarray | None, found: np.ndarray | None = None) -> tuple[np.ndarray, int]:
    """Which rows of a segment survive (the vectorised :func:`.retain.should_retain_record`), and how many
    keyless data records were dropped as invalid.

    Beyond the record rule: a transaction marker stays while its transaction has records in the round,
    then (stamped with a delete horizon) until a round at or after the horizon; an emptied batch row
    stays only while it is its producer's last record. The caller empties the dropped rows that are a
    live producer's last record (:func:`producer_last_rows`). ``found``, when given, is each row's mapped
    offset (-1: none) looked up already; the map itself is then not read (another thread may be adding to
    it)."""
    offsets = to_numpy(table.column("offset"))
    keys = table.column("key")
    control_type = to_numpy(table.column("control_type"))
    control = control_type != CONTROL_NONE
    has_control = bool(control.any())
    keyless = _nulls(keys)
    if found is None:
        found = offset_map.offsets_of(entries) if entries is not None else offset_map.lookup(keys)
    keep = offsets >= found  # the newest record of its key in the map, or a key the map does not hold
    values = table.column("value")
    horizon = to_numpy(table.column("delete_horizon_ms"))
    stamped = horizon != NO_DELETE_HORIZON
    retain_deletes = ~stamped | (task.now_ms < horizon) if stamped.any() else None
    if values.null_count and retain_deletes is not None:
        tombstone = is_null(values)
        if has_control:
            tombstone &= ~control
        keep &= ~tombstone | retain_deletes
    if keyless is not None:
        keep &= ~keyless
    beyond_map = offsets > offset_map.latest_offset
    keep |= beyond_map
    if has_control:
        keep &= ~control  # data rows decided above; control rows by their own rules below
        marker = (control_type == CONTROL_ABORT) | (control_type == CONTROL_COMMIT)
        unstamped_or_live = retain_deletes if retain_deletes is not None else np.ones(len(offsets), dtype=bool)
        keep |= marker & (unstamped_or_live | _isin(offsets, task.markers_with_data))
        keep |= (control_type == CONTROL_EMPTY_BATCH) & _isin(offsets, task.producer_last_offsets)
        keep |= control & ~marker & (control_type != CONTROL_EMPTY_BATCH)
        keep |= control & beyond_map
    # Keyless data records (not control rows) that the round removes.
    invalid = 0 if keyless is None else int(np.count_nonzero(keyless & ~control & ~beyond_map))
    if task.aborted:
        aborted = aborted_mask(offsets, to_numpy(table.column("producer_id")),
                               to_numpy(table.column("is_transactional")), control,
                               task.aborted)
        keep &= ~aborted
    return keep, invalid


def _nulls(column: pa.ChunkedArray) -> np.ndarray | None:
    """Which rows are null; None when none are."""
    return is_null(column) if column.null_count else None


def _isin(offsets: np.ndarray, wanted: frozenset[int]) -> np.ndarray:
    if not wanted:
        return np.zeros(len(offsets), dtype=bool)
    return np.isin(offsets, np.fromiter(wanted, dtype=np.int64, count=len(wanted)))


def transaction_facts(segments: Sequence[SegmentFile]) -> frozenset[int]:
    """The markers whose transaction still has records in ``segments``: for each producer, a marker is
    preceded (since that producer's previous marker) by transactional data or emptied batch rows.
    Kafka keeps a marker while any batch of its transaction is read in the round (even one the round
    then removes), so a marker outlives its data by at least one round."""
    columns = ["offset", "producer_id", "is_transactional", "control_type"]
    parts = [read_parquet(s.path, columns=columns) for s in segments]
    if not parts:
        return frozenset()
    table = pa.concat_tables(parts)
    transactional = to_numpy(table.column("is_transactional"))
    control_type = to_numpy(table.column("control_type"))
    relevant = transactional | (control_type == CONTROL_EMPTY_BATCH)
    if not relevant.any():
        return frozenset()
    offsets = to_numpy(table.column("offset"))[relevant]
    pids = to_numpy(table.column("producer_id"))[relevant]
    control_type = control_type[relevant]
    with_data: set[int] = set()
    order = np.lexsort((offsets, pids))
    pids, offsets, control_type = pids[order], offsets[order], control_type[order]
    is_marker = (control_type == CONTROL_ABORT) | (control_type == CONTROL_COMMIT)
    seen = False
    for i in range(len(offsets)):
        if i and pids[i] != pids[i - 1]:
            seen = False
        if is_marker[i]:
            if seen:
                with_data.add(int(offsets[i]))
            seen = False
        else:
            seen = True
    return frozenset(with_data)


def producer_last_rows(table: pa.Table, keep: np.ndarray, task: CleanTask) -> pa.Table | None:
    """Rows to be dropped that are a live producer's last record, emptied (Kafka's empty batch header):
    no key, value or headers, ``control_type`` EMPTY_BATCH. None when there are none."""
    if not task.producer_last_offsets:
        return None
    offsets = to_numpy(table.column("offset"))
    emptied = ~keep & _isin(offsets, task.producer_last_offsets)
    if not emptied.any():
        return None
    rows = table.filter(from_numpy(emptied))
    n = rows.num_rows
    for name in ("key", "value", "headers"):
        index = rows.schema.get_field_index(name)
        rows = rows.set_column(index, rows.schema.field(index), pa.nulls(n, rows.schema.field(index).type))
    index = rows.schema.get_field_index("control_type")
    return rows.set_column(index, rows.schema.field(index), from_numpy(np.full(n, CONTROL_EMPTY_BATCH, np.int8)))


def lookup_batches(groups: Sequence[Sequence[SegmentFile]]) -> Iterator[list[Sequence[SegmentFile]]]:
    """Consecutive groups of at most LOOKUP_BATCH_SEGMENT_BYTES of segments (or one bigger group)."""
    batch: list[Sequence[SegmentFile]] = []
    size = 0
    for group in groups:
        group_size = sum(s.size_bytes for s in group)
        if batch and size + group_size > LOOKUP_BATCH_SEGMENT_BYTES:
            yield batch
            batch, size = [], 0
        batch.append(group)
        size += group_size
    if batch:
        yield batch


def map_entries(offset_map: OffsetMap, segments: Sequence[SegmentFile]) -> dict[int, np.ndarray]:
    """For each segment, each row's entry in ``offset_map`` (-1: not there), with one hash of the map for
    all the segments (what :meth:`OffsetMap.lookup` does per call)."""
    columns = [read_parquet(s.path, columns=["key"]).column("key") for s in segments]
    chunks = [chunk for column in columns for chunk in column.chunks]
    if not chunks or len(offset_map.keys) == 0:
        return {s.base_offset: np.full(len(c), -1, dtype=np.int32)
                for s, c in zip(segments, columns, strict=True)}
    positions = offset_map.entries_of(chunks)
    entries: dict[int, np.ndarray] = {}
    start = 0
    for segment, column in zip(segments, columns, strict=True):
        entries[segment.base_offset] = positions[start:start + len(column)]
        start += len(column)
    return entries


def fresh_cleaned_path(task: CleanTask, base: int) -> str:
    """``<base>.parquet.cleaned`` in the partition, a leftover of an abandoned round removed first."""
    cleaned = os.path.join(task.directory, segment_name(base, SEALED_SUFFIX) + CLEANED_SUFFIX)
    if os.path.exists(cleaned):
        os.unlink(cleaned)
    return cleaned


def clean_group(task: CleanTask, group: Sequence[SegmentFile], offset_map: OffsetMap,
                entries: dict[int, np.ndarray] | None = None, one_core: bool = False) -> GroupResult:
    """Rewrite one group of segments into ``<first base>.parquet.cleaned`` (fsynced, not yet swapped in).
    ``one_core``: read, decide and encode one step at a time (no step ahead on another thread)."""
    cleaning = GroupWriter.open(task, group, background=not one_core)
    try:
        for segment, first_row, table in prefetched(group, one_core=one_core):
            segment_entries = (entries or {}).get(segment.base_offset)
            if segment_entries is not None:
                segment_entries = segment_entries[first_row:first_row + table.num_rows]
            cleaning.write(table.num_rows, rewrite_rows(task, table, offset_map, segment_entries))
    except BaseException:
        cleaning.writer.abort()
        raise
    return cleaning.close()


@dataclass
class GroupWriter:
    """A group's ``.cleaned`` file being written (by the two-pass kernel, or newest first by the single
    pass), and what was counted on the way."""

    task: CleanTask
    group: Sequence[SegmentFile]
    writer: SegmentWriter
    read: int = 0
    written: int = 0
    invalid: int = 0
    stamped: int = 0
    abort_markers: set[int] = field(default_factory=set)

    @classmethod
    def open(cls, task: CleanTask, group: Sequence[SegmentFile], background: bool,
             newest_first: bool = False) -> GroupWriter:
        base = group[0].base_offset
        return cls(task, group, SegmentWriter(fresh_cleaned_path(task, base), base, task.compression,
                                              background=background, newest_first=newest_first))

    def write(self, read: int, kept: KeptRows) -> None:
        """The survivors of ``read`` rows of the group."""
        self.read += read
        self.invalid += kept.invalid
        self.stamped += kept.stamped
        self.written += kept.rows.num_rows
        self.abort_markers.update(kept.abort_markers)
        self.writer.write(kept.rows)

    def close(self) -> GroupResult:
        """Footer, fsync, and what the group became; the file is removed when that fails."""
        group, task = self.group, self.task
        try:
            sealed = self.writer.close(group[-1].next_offset, aborted_index(task, group, self.abort_markers))
        except BaseException:
            self.writer.abort()
            raise
        return GroupResult(group[0].base_offset, group[-1].next_offset, self.writer.path,
                           tuple(s.base_offset for s in group), self.read, self.written,
                           sum(s.size_bytes for s in group), sealed.meta.size_bytes, self.invalid, self.stamped)


@dataclass(frozen=True)
class KeptRows:
    """What survives of some rows of a round: the rows (tombstones stamped), and what was counted."""

    rows: pa.Table
    invalid: int
    stamped: int
    abort_markers: list[int]


def rewrite_rows(task: CleanTask, table: pa.Table, offset_map: OffsetMap, entries: np.ndarray | None,
                 found: np.ndarray | None = None) -> KeptRows:
    """The rows of ``table`` (consecutive rows of a segment) that survive the round, as they are written."""
    keep, invalid = retain_mask(table, task, offset_map, entries, found)
    emptied = producer_last_rows(table, keep, task)
    kept = table.filter(from_numpy(keep)) if not keep.all() else table
    if emptied is not None:
        kept = pa.concat_tables([kept, emptied]).sort_by("offset")
    kept, stamped = stamp_tombstones(kept, task.now_ms, task.delete_retention_ms, task.markers_with_data)
    return KeptRows(kept, invalid, stamped, _kept_abort_markers(kept))


def aborted_index(task: CleanTask, group: Sequence[SegmentFile], kept_markers: set[int]) -> list[AbortedTxn]:
    """The transaction index of a cleaned group: the aborted transactions whose ABORT marker stays beside
    records of its transaction read in this round (Kafka re-indexes only those)."""
    return [a for segment in group for a in segment.aborted
            if a.last_offset in kept_markers and a.last_offset in task.markers_with_data]


def _kept_abort_markers(table: pa.Table) -> list[int]:
    if table.num_rows == 0:
        return []
    abort = to_numpy(table.column("control_type")) == CONTROL_ABORT
    return to_numpy(table.column("offset"))[abort].tolist() if abort.any() else []


def _row_groups(segments: Sequence[SegmentFile], newest_first: bool = False
                ) -> Iterator[tuple[SegmentFile, int, pq.ParquetFile, int]]:
    for segment in reversed(segments) if newest_first else segments:
        file = pq.ParquetFile(segment.path)
        starts = np.cumsum([0] + [file.metadata.row_group(i).num_rows for i in range(file.metadata.num_row_groups)])
        indexes = range(file.metadata.num_row_groups)
        for index in reversed(indexes) if newest_first else indexes:
            yield segment, int(starts[index]), file, index
        if file.metadata.num_row_groups == 0:
            yield segment, 0, file, -1  # an emptied segment still passes by, as no rows


def prefetched(segments: Sequence[SegmentFile], columns: Callable[[SegmentFile], list[str]] | None = None,
               ahead: int = 1, newest_first: bool = False, one_core: bool = False
               ) -> Iterator[tuple[SegmentFile, int, pa.Table]]:
    """Every row group of the segments (all columns, or ``columns(segment)``; oldest first, or newest
    first) as ``(segment, index of its first row, rows)``, up to ``ahead`` following ones read on a
    background thread while the caller works on the current one (decoding runs on Arrow's threads, the
    caller's work on its own). Memory stays at ``ahead + 1`` row groups, whatever the segment size.
    ``one_core``: nothing ahead, and each row group decoded on one thread (a round that shares the machine
    with as many other rounds as there are cores)."""

    def read(item: tuple[SegmentFile, int, pq.ParquetFile, int]) -> pa.Table:
        segment, _, file, index = item
        names = columns(segment) if columns is not None else None
        if index < 0:
            empty = file.schema_arrow.empty_table()
            return empty.select(names) if names is not None else empty
        return file.read_row_group(index, columns=names, use_threads=not one_core)

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="compactlog-prefetch") as pool:
        queued: deque[tuple[tuple[SegmentFile, int, pq.ParquetFile, int], Future[pa.Table]]] = deque()
        for item in _row_groups(segments, newest_first):
            queued.append((item, pool.submit(read, item)))
            if len(queued) > (0 if one_core else ahead):
                done, table = queued.popleft()
                yield done[0], done[1], table.result()
        while queued:
            done, table = queued.popleft()
            yield done[0], done[1], table.result()


def stamp_tombstones(table: pa.Table, now_ms: int, delete_retention_ms: int,
                     markers_with_data: frozenset[int] = frozenset()) -> tuple[pa.Table, int]:
    """First phase of two-phase removal: a kept tombstone, or a kept marker whose transaction has no records
    left, without a horizon gets ``now + delete.retention.ms``."""
    if table.num_rows == 0:
        return table, 0
    horizon = to_numpy(table.column("delete_horizon_ms"))
    control_type = to_numpy(table.column("control_type"))
    tombstone = is_null(table.column("value")) & (control_type == CONTROL_NONE)
    marker = (control_type == CONTROL_ABORT) | (control_type == CONTROL_COMMIT)
    if markers_with_data:
        marker &= ~_isin(to_numpy(table.column("offset")), markers_with_data)
    unstamped = (tombstone | marker) & (horizon == NO_DELETE_HORIZON)
    count = int(np.count_nonzero(unstamped))
    if not count:
        return table, 0
    stamp = min(now_ms + delete_retention_ms, 2**63 - 1)
    index = table.schema.get_field_index("delete_horizon_ms")
    return table.set_column(index, table.schema.field(index), from_numpy(np.where(unstamped, stamp, horizon))), count
