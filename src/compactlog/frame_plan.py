"""How an append is cut into frames of the active segment, and before which frame the segment rolls.

A frame is as many rows as the active segment still has room for (by an upper bound of their stored
size, at most ``MAX_FRAME_ROWS``, at least one row); whether the segment rolls before a frame is
:func:`.segment_roll.should_roll` of the segment as it will be by then, the frame's size and its newest
timestamp. Pure functions of the rows and the segment's stats: :class:`compactlog.log.Log` writes the frames.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .active_segment import FRAME_HEADER_SIZE, batch_omitted, frame_row_bytes, omitted_columns, stored_columns
from .columns import Column, binary_lengths, binary_span, from_numpy, to_numpy
from .record import SCHEMA, RecordColumns, batch_arrays, header_bytes
from .segment import SegmentStats
from .segment_roll import should_roll

# Rows per active-segment frame: bounds the memory of one append and of one read step.
MAX_FRAME_ROWS = 65536
# Bytes a frame costs beyond its rows (frame header plus the Arrow IPC message header).
FRAME_OVERHEAD_BYTES = FRAME_HEADER_SIZE + 1024
# Bytes of one header beyond its name and value: two value offsets and validity bits.
HEADER_FIXED_BYTES = 9


class PlannedFrames(NamedTuple):
    """An append cut into frames: ``frames`` as :func:`plan_frames` gives them, ``batches`` each frame's
    stored columns (offsets assigned), ``omitted`` the mask of the columns left out, ``timestamps`` the rows'."""

    frames: list[tuple[int, int, bool]]
    batches: list[pa.RecordBatch]
    omitted: int
    timestamps: np.ndarray
    max_timestamp: int  # -1 for no rows


def table_frames(active: SegmentStats, table: pa.Table, first_offset: int, segment_bytes: int,
                 roll_ms: int) -> PlannedFrames:
    """The frames of rows in SCHEMA appended at ``first_offset`` to a segment of stats ``active``."""
    n = table.num_rows
    omitted = omitted_columns(table)
    timestamps = _int64s(table.column(1))
    max_timestamp = int(timestamps.max()) if n else -1
    if n and fits_one_frame(active, table, omitted, max_timestamp, segment_bytes, roll_ms):
        frames = [(0, n, False)]
    else:
        frames = plan_frames(active, row_sizes(table, omitted), timestamps, segment_bytes, roll_ms)
    stored = table.select(stored_columns(omitted)[1])
    batches = []
    for start, end, _ in frames:
        offsets = np.arange(first_offset + start, first_offset + end, dtype=np.int64)
        chunk = stored.slice(start, end - start).set_column(0, SCHEMA.field(0), from_numpy(offsets))
        batches.append(chunk.combine_chunks().to_batches()[0])
    return PlannedFrames(frames, batches, omitted, timestamps, max_timestamp)


def batch_frames(active: SegmentStats, columns: RecordColumns, producer: tuple[int, int, int, bool] | None,
                 first_offset: int, segment_bytes: int, roll_ms: int) -> PlannedFrames:
    """:func:`table_frames` of one batch's records, of a producer ``(id, epoch, base sequence,
    transactional)`` or of none, from its columns: the mask from the batch's shape
    (:func:`~compactlog.active_segment.batch_omitted`), each frame's columns built directly
    (:func:`~compactlog.record.batch_arrays`): the frames its rows in SCHEMA would give."""
    n = len(columns.key)
    omitted = batch_omitted(columns.headers is not None, producer)
    timestamps = to_numpy(columns.timestamp)
    max_timestamp = columns.max_timestamp
    if columns.headers is None and fits_one_frame_records(active, n, columns.key_value_bytes, omitted, max_timestamp,
                                                          segment_bytes, roll_ms):
        frames = [(0, n, False)]
    else:
        frames = plan_frames(active, record_sizes(columns.key, columns.value, columns.headers, omitted),
                             timestamps, segment_bytes, roll_ms)
    schema = stored_columns(omitted)[0]
    batches = [pa.RecordBatch.from_arrays(batch_arrays(columns, producer, first_offset, start, end), schema=schema)
               for start, end, _ in frames]
    return PlannedFrames(frames, batches, omitted, timestamps, max_timestamp)


def row_sizes(batch: pa.RecordBatch | pa.Table, omitted: int = 0) -> np.ndarray:
    """Upper bounds of the bytes each row adds to a frame that leaves out the ``omitted`` columns, for
    roll-by-size decisions: a segment that rolls by size stays within ``segment.bytes``."""
    return record_sizes(batch.column("key"), batch.column("value"), batch.column("headers"), omitted)


def record_sizes(key: Column, value: Column, headers: Column | None, omitted: int) -> np.ndarray:
    """:func:`row_sizes` of rows given by their key, value and headers columns (None: no headers)."""
    sizes = np.full(len(key), frame_row_bytes(omitted), dtype=np.int64)
    for column in (key, value):  # read from the offsets buffers: no Arrow compute call per small append
        sizes += binary_lengths(column)
    if headers is not None and headers.null_count < len(headers):
        sizes += _int64s(pc.fill_null(header_bytes(headers, HEADER_FIXED_BYTES), 0))
    return sizes


def fits_one_frame(active: SegmentStats, batch: pa.RecordBatch | pa.Table, omitted: int, max_timestamp: int,
                   segment_bytes: int, roll_ms: int) -> bool:
    """Whether :func:`plan_frames` would give ``batch`` one frame and no roll: a shortcut for small appends
    that reads two offsets per binary column instead of every row's size. It answers True only when the
    rows' bound (the span of the key and value offsets buffers, at least the sum of the rows' lengths) fits
    the room left and the frame does not roll by time, and then :func:`plan_frames` gives ``[(0, n, False)]``
    too (its sizes are at most this bound); False means "plan the frames", never a different plan. Rows with
    headers are planned."""
    headers = batch.column("headers")
    if headers.null_count != len(headers):
        return False
    return fits_one_frame_records(active, batch.num_rows,
                                  binary_span(batch.column("key")) + binary_span(batch.column("value")), omitted,
                                  max_timestamp, segment_bytes, roll_ms)


def fits_one_frame_records(active: SegmentStats, n: int, key_value_bytes: int, omitted: int, max_timestamp: int,
                           segment_bytes: int, roll_ms: int) -> bool:
    """:func:`fits_one_frame` of ``n`` rows without headers whose key and value columns span
    ``key_value_bytes`` (:func:`~compactlog.columns.binary_span`)."""
    if not 0 < n <= MAX_FRAME_ROWS:
        return False
    bound = frame_row_bytes(omitted) * n + key_value_bytes
    room = segment_bytes - active.size_bytes - FRAME_OVERHEAD_BYTES
    return bound <= room and not should_roll(active, bound + FRAME_OVERHEAD_BYTES, max_timestamp,
                                             segment_bytes=segment_bytes, roll_ms=roll_ms)


def plan_frames(active: SegmentStats, row_bytes: np.ndarray, timestamps: np.ndarray, segment_bytes: int,
                roll_ms: int) -> list[tuple[int, int, bool]]:
    """Cut rows of sizes ``row_bytes`` (see :func:`row_sizes`) and ``timestamps`` into frames ``(start,
    end, roll_first)``, ``roll_first`` when the active segment rolls before the frame."""
    n = len(row_bytes)
    sizes = np.cumsum(row_bytes)
    frames: list[tuple[int, int, bool]] = []
    roll_first = False
    start = 0
    while start < n:
        base_bytes = sizes[start - 1] if start else 0
        room = segment_bytes - active.size_bytes - FRAME_OVERHEAD_BYTES
        end = min(int(np.searchsorted(sizes, base_bytes + room, side="right")), start + MAX_FRAME_ROWS, n)
        end = max(end, start + 1)  # an empty segment takes at least one record, however large
        frame_bytes = int(sizes[end - 1] - base_bytes) + FRAME_OVERHEAD_BYTES
        if should_roll(active, frame_bytes, int(timestamps[start:end].max()), segment_bytes=segment_bytes,
                       roll_ms=roll_ms):
            roll_first = True
            active = dataclasses.replace(active, size_bytes=0, record_count=0, first_timestamp=-1)
            continue
        first_timestamp = int(timestamps[start]) if active.is_empty else active.first_timestamp
        active = dataclasses.replace(active, size_bytes=active.size_bytes + frame_bytes,
                                     record_count=active.record_count + end - start,
                                     first_timestamp=first_timestamp)
        frames.append((start, end, roll_first))
        roll_first = False
        start = end
    return frames


def _int64s(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """An integer column without nulls as a numpy int64 array."""
    return to_numpy(column).astype(np.int64, copy=False)
