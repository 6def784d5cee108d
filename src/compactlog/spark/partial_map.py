"""The exact offset map of a split round on Spark: a partial map per dirty segment, built by a task, and
their merge on the driver.

A split round's bin maps (:mod:`compactlog.spark.executor`) give the in-process map whenever their keys
fit the dedupe buffer together; when they do not, the map fills inside the dirty section and its cut must
fall at the very record where the in-process round's map fills. Then every dirty segment's distinct keys
and newest offsets are built on an executor (:func:`partial_map`, unbounded) and merged on the driver in
offset order under the dedupe bound (:func:`merge_partial_maps`), which re-reads the one segment where the
bound is reached to find that record.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from ..cleaner.kernel import CleanTask, MapResult, SegmentFile, map_columns, map_rows
from ..cleaner.offset_map import OffsetMap
from ..columns import from_numpy
from ..sealed_segment import read_parquet


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
    offsets, keys, eligible = map_rows(table, task)
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
            offsets, keys, eligible = map_rows(table, task)
            positions = np.flatnonzero(eligible)
            _, full_at = offset_map.put_records(keys.take(from_numpy(positions)), offsets[positions])
            if full_at is not None:
                offset_map.update_latest_offset(full_at - 1)
                result.end_offset = full_at
                return result
        offset_map.update_latest_offset(min(segment.next_offset, task.first_uncleanable_offset) - 1)
    result.end_offset = offset_map.latest_offset + 1 if dirty else task.first_dirty_offset
    return result
