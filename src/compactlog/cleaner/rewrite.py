"""Phase 2 of a cleaning round: which rows of a segment survive, and the ``.cleaned`` file they go to.

* The record rule, vectorised (:func:`retain_mask`; the per-record :func:`.retain.clean_record` is its
  specification, and a property test checks every column agrees), with the transaction rules beside it:
  a marker is kept while its transaction has records in the round (:func:`transaction_facts`), a live
  producer's last record is emptied rather than removed (:func:`producer_last_rows`), and a cleaned
  group's transaction index keeps the aborted transactions whose marker stays (:func:`aborted_index`).
* The tombstone stamp, the first phase of two-phase removal (:func:`stamp_tombstones`).
* The group writer (:class:`GroupWriter`): each group of segments (:func:`.kernel.groups_to_clean`) is
  written to one ``<first base>.parquet.cleaned`` file, fsynced, which :mod:`.swap` installs. The two-pass
  kernel rewrites a group oldest first (:func:`clean_group`); :mod:`.single_pass` writes newest first
  through the same writer.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from ..columns import from_numpy, is_null, to_numpy
from ..limits import LONG_MAX
from ..producer_state import AbortedTxn, aborted_mask
from ..record import CONTROL_ABORT, CONTROL_COMMIT, CONTROL_EMPTY_BATCH, CONTROL_NONE, NO_DELETE_HORIZON
from ..sealed_segment import SegmentWriter
from ..segment import CLEANED_SUFFIX, SEALED_SUFFIX, segment_name
from ..segment_file import read_parquet
from .kernel import CleanTask, GroupResult, SegmentFile, prefetched
from .offset_map import OffsetMap


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
    stamp = min(now_ms + delete_retention_ms, LONG_MAX)
    index = table.schema.get_field_index("delete_horizon_ms")
    return table.set_column(index, table.schema.field(index), from_numpy(np.where(unstamped, stamp, horizon))), count
