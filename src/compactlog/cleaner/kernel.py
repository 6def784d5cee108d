"""The cleaning kernel: one partition's round as vectorised Arrow/numpy work on segment files, and its
first phase, the offset map.

Given a :class:`CleanTask` (plain values: segment files, the cleanable range, the configs that matter, the
round's clock reading), a round

1. builds the offset map over the dirty section ``[first_dirty_offset, first_uncleanable_offset)`` (only
   keyed data records; records of aborted transactions never enter it), stopping where the map fills;
   the round's end offset (the next checkpoint) is ``map.latest_offset + 1`` (:func:`build_offset_map`);
2. rewrites every segment whose base offset is below the end offset (the clean section too, since new
   keys may supersede old ones), group by group (:func:`groups_to_clean`), with the record rule, the
   tombstone stamp and the group writer of :mod:`.rewrite`.

This module owns the round's values (:class:`CleanTask` in; :class:`MapResult` and :class:`GroupResult`
out), how a round reads its segments (:func:`prefetched`, a row group at a time), phase 1, and phase 2's
work list and key lookups (:func:`groups_to_clean`, :func:`lookup_batches`, :func:`map_entries`).

It never touches the live segment set: :mod:`.swap` installs a round's output under the partition lock.
Every step works on one row group (or a bounded batch of key columns) at a time, so memory stays within
the dedupe buffer plus a few row groups. The same functions run in process and inside Spark tasks.

This is Kafka's two-pass round (:func:`.executor.run_in_process` runs it). When the dirty section's keys
fit the map, :mod:`.single_pass` gets the same result in one read; the two passes run when they do not
(the map fills oldest first and the round cleans as far as it reached) and in Spark's split rounds (map
and rewrite on different executors).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from ..columns import from_numpy, is_null, single_array, to_numpy
from ..errors import CorruptSegmentError
from ..producer_state import AbortedTxn, aborted_mask
from ..record import CONTROL_NONE
from ..sealed_segment import SealedSegment, offsets_problem
from ..segment import SegmentStats
from ..segment_file import READ_ERRORS, VerifiedParquetFile, open_parquet, read_parquet
from .offset_map import OffsetMap
from .plan import group_segments_by_size

# Segments of at most this many bytes have their keys looked up in the offset map in one hash pass of it
# (hashing a map of a million keys costs about as much as rewriting a segment of a few hundred thousand
# records, so once per segment would double the work); the keys of a batch are held in memory meanwhile.
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


def map_rows(table: pa.Table, task: CleanTask) -> tuple[np.ndarray, pa.Array, np.ndarray]:
    """Rows of a segment as the map sees them: ``(offsets, keys, eligible)``, where ``eligible`` marks the
    rows that enter the map (keyed data rows of the dirty range, not aborted)."""
    offsets = to_numpy(table.column("offset"))
    keys = single_array(table.column("key")) if table.num_rows else pa.nulls(0, pa.binary())
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
        offsets, keys, eligible = map_rows(table, task)
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



def groups_to_clean(task: CleanTask, end_offset: int) -> list[list[SegmentFile]]:
    """Phase 2's work list: the segments below the round's end offset, grouped by ``segment.bytes``."""
    below = [s for s in task.segments if s.base_offset < end_offset]
    by_base = {s.base_offset: s for s in below}
    groups = group_segments_by_size([s.stats() for s in below], task.segment_bytes, task.first_uncleanable_offset)
    return [[by_base[s.base_offset] for s in group] for group in groups]



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



def _row_groups(segments: Sequence[SegmentFile], newest_first: bool = False
                ) -> Iterator[tuple[SegmentFile, int, VerifiedParquetFile, int]]:
    for segment in reversed(segments) if newest_first else segments:
        # The footer is checked again (its CRC, ranges and schema): a round never rewrites a segment it
        # cannot verify, even one damaged since the log opened it.
        SealedSegment.open(segment.path, segment.base_offset)
        try:
            file = open_parquet(segment.path)
        except READ_ERRORS as e:
            raise CorruptSegmentError(f"{segment.path}: offsets [{segment.base_offset}, {segment.next_offset}): "
                                      f"{e}") from e
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

    def read(item: tuple[SegmentFile, int, VerifiedParquetFile, int]) -> pa.Table:
        segment, _, file, index = item
        names = columns(segment) if columns is not None else None
        if index < 0:
            empty = file.schema_arrow.empty_table()
            return empty.select(names) if names is not None else empty
        try:
            table = file.read_row_group(index, columns=names, use_threads=not one_core)
        except READ_ERRORS as e:  # a page whose CRC does not match, or that does not decode
            raise CorruptSegmentError(f"{segment.path}: offsets [{segment.base_offset}, {segment.next_offset}): "
                                      f"{e}") from e
        if "offset" in table.column_names:
            problem = offsets_problem(to_numpy(table.column("offset")), segment.base_offset, segment.next_offset)
            if problem is not None:
                raise CorruptSegmentError(
                    f"{segment.path}: offsets [{segment.base_offset}, {segment.next_offset}): {problem}")
        return table

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="compactlog-prefetch") as pool:
        queued: deque[tuple[tuple[SegmentFile, int, VerifiedParquetFile, int], Future[pa.Table]]] = deque()
        for item in _row_groups(segments, newest_first):
            queued.append((item, pool.submit(read, item)))
            if len(queued) > (0 if one_core else ahead):
                done, table = queued.popleft()
                yield done[0], done[1], table.result()
        while queued:
            done, table = queued.popleft()
            yield done[0], done[1], table.result()

