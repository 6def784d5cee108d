"""How an append is cut into frames of the active segment, and before which frame the segment rolls.

A frame is as many rows as the active segment still has room for (by an upper bound of their stored
size, at most ``MAX_FRAME_ROWS``, at least one row); whether the segment rolls before a frame is
:func:`.cleaner.plan.should_roll` of the segment as it will be by then, the frame's size and its newest
timestamp. Pure functions of the rows and the segment's stats: :class:`compactlog.log.Log` writes the frames.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .active_segment import FRAME_HEADER_SIZE, frame_row_bytes
from .cleaner.plan import SegmentStats, should_roll
from .columns import binary_lengths, binary_span, to_numpy
from .record import header_bytes

# Rows per active-segment frame: bounds the memory of one append and of one read step.
MAX_FRAME_ROWS = 65536
# Bytes a frame costs beyond its rows (frame header plus the Arrow IPC message header).
FRAME_OVERHEAD_BYTES = FRAME_HEADER_SIZE + 1024
# Bytes of one header beyond its name and value: two value offsets and validity bits.
HEADER_FIXED_BYTES = 9


def row_sizes(batch: pa.RecordBatch | pa.Table, omitted: int = 0) -> np.ndarray:
    """Upper bounds of the bytes each row adds to a frame that leaves out the ``omitted`` columns, for
    roll-by-size decisions: a segment that rolls by size stays within ``segment.bytes``."""
    sizes = np.full(batch.num_rows, frame_row_bytes(omitted), dtype=np.int64)
    for name in ("key", "value"):  # read from the offsets buffers: no Arrow compute call per small append
        sizes += binary_lengths(batch.column(name))
    headers = batch.column("headers")
    if headers.null_count < len(headers):
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
    n = batch.num_rows
    if not 0 < n <= MAX_FRAME_ROWS or batch.column("headers").null_count != n:
        return False
    bound = frame_row_bytes(omitted) * n
    for name in ("key", "value"):
        bound += binary_span(batch.column(name))
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
