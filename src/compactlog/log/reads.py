"""Reads of a partition's log: the rows of an offset range, the first offset at or after a time, and the
offset range check.

A read takes a consistent snapshot of the segment list (the sealed segments and the active one) under
the partition lock, then reads the files without it, so appends, rolls and the cleaner's swap go on
meanwhile. The snapshot pins each sealed segment's bytes (:meth:`SealedSegment.pinned`), and a read without
an end offset ends at the log end of its first snapshot, so a read returns what the log held when it began
(and ends, however fast others append), however often the cleaner swaps: offsets strictly increase and
every record was in the log at that moment. An active segment rolled under a read (its file removed) makes
the read take a fresh snapshot and go on from the offset after the last one it returned; only
:data:`READ_RETRIES` such failures in a row without progress give up. Transaction markers (control
rows) are dropped unless asked for; ``control_type`` is read only to drop them, and not at all from a
segment that holds none.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Iterator

import numpy as np
import pyarrow as pa

from ..active_segment import ActiveSegment
from ..columns import from_numpy, to_numpy
from ..errors import ConfigError, CorruptSegmentError, InvalidRequestError, OffsetOutOfRangeError
from ..limits import LONG_MAX, LONG_MIN
from ..record import CONTROL_NONE
from ..sealed_segment import SealedSegment

READ_RETRIES = 5
ISOLATION_LEVELS = ("read_uncommitted", "read_committed")  # Kafka's: every record, or committed ones only
# The columns offset_for_time reads.
_TIME_COLUMNS = ("offset", "timestamp", "control_type")

# The segment list as of one moment for a read of [start, end), taken under the partition lock: the sealed
# segments holding offsets there, pinned (their bytes stay readable whatever a swap or retention does to their
# files, as Kafka's file.delete.delay.ms intends), and the active one.
Snapshot = Callable[[int, int | None], tuple[list[SealedSegment], ActiveSegment]]


def check_isolation_level(isolation_level: str) -> None:
    """``isolation_level`` is one of Kafka's two (:data:`ISOLATION_LEVELS`), or :class:`ConfigError`."""
    if isolation_level not in ISOLATION_LEVELS:
        raise ConfigError(f"isolation_level: {isolation_level!r} is not one of {', '.join(ISOLATION_LEVELS)}")


def check_offset_type(offset: object, what: str) -> int:
    """``offset`` as an int, or :class:`InvalidRequestError`: an offset is a Java ``long`` (any integer type
    but ``bool``; never a string, a float or None)."""
    if isinstance(offset, numbers.Integral) and not isinstance(offset, bool) and LONG_MIN <= int(offset) <= LONG_MAX:
        return int(offset)
    raise InvalidRequestError(f"{what} must be an int offset, not {offset!r}")


def check_offset(offset: int, log_start_offset: int, log_end_offset: int, name: str) -> None:
    """Raise :class:`OffsetOutOfRangeError` unless ``offset`` lies in ``[log start, log end]`` of log ``name``
    (:class:`InvalidRequestError` unless it is an int)."""
    offset = check_offset_type(offset, "start_offset")
    if offset < log_start_offset or offset > log_end_offset:
        raise OffsetOutOfRangeError(
            f"offset {offset} is out of range for {name}: log start {log_start_offset}, log end {log_end_offset}")


def read_tables(snapshot: Snapshot, directory: str, start_offset: int, end_offset: int | None = None,
                columns: list[str] | None = None, include_control: bool = False) -> Iterator[pa.Table]:
    """Tables of rows in ``[start_offset, end_offset)`` in offset order, one or more per segment."""
    position = start_offset
    failures = 0
    while failures < READ_RETRIES:
        before = position
        try:
            sealed, active = snapshot(position, end_offset)
            if end_offset is None:  # the log end when the read began: it returns the log as it was then
                end_offset = active.next_offset
            for segment in sealed:
                if segment.next_offset <= position:
                    continue
                if end_offset is not None and segment.base_offset >= end_offset:
                    return
                controls = segment.meta.control_count
                plain = controls == 0 or include_control
                read_columns = columns if plain else _with_filter_columns(columns)
                table = segment.read(position, end_offset, columns=read_columns)
                position = segment.next_offset
                if table.num_rows:
                    yield _finish(table, columns, include_control, controls)
            if end_offset is not None and end_offset <= position:
                return
            for batch in active.read_batches(position, end_offset):
                table = pa.Table.from_batches([batch])
                position = batch.column(0)[-1].as_py() + 1 if batch.num_rows else position
                if table.num_rows:
                    yield _finish(table, columns, include_control, active.control_count)
            return
        except FileNotFoundError:
            # A roll replaced the active segment under us: re-snapshot and go on from `position`.
            failures = 0 if position > before else failures + 1
    raise CorruptSegmentError(f"{directory}: segments kept changing during a read")


def offset_for_time(snapshot: Snapshot, directory: str, timestamp_ms: int) -> int | None:
    """Kafka's offsetsForTimes: the first offset whose timestamp is >= ``timestamp_ms``."""
    found = timestamp_and_offset_for_time(snapshot, directory, timestamp_ms)
    return None if found is None else found[1]


def timestamp_and_offset_for_time(snapshot: Snapshot, directory: str, timestamp_ms: int) -> tuple[int, int] | None:
    """Kafka's offsetsForTimes: ``(timestamp, offset)`` of the first record whose timestamp is >=
    ``timestamp_ms``, the record's own timestamp (not the one asked for); None when there is none.

    Only the first segment whose newest timestamp reaches ``timestamp_ms`` can hold it (every earlier
    record is older), and inside it only the row groups (or frames) whose newest timestamp does. A
    timestamp that is not a Java ``long`` is :class:`InvalidRequestError`. Transaction markers are not
    records here."""
    if not (isinstance(timestamp_ms, numbers.Integral) and not isinstance(timestamp_ms, bool)
            and LONG_MIN <= int(timestamp_ms) <= LONG_MAX):
        raise InvalidRequestError(f"timestamp_ms must be an int (epoch milliseconds), not {timestamp_ms!r}")
    for _ in range(READ_RETRIES):
        try:
            for table in _time_tables(snapshot, timestamp_ms):
                found = _first_at_or_after(table, timestamp_ms)
                if found is not None:
                    return found
            return None
        except FileNotFoundError:
            continue  # a roll replaced the active segment under us: look again
    raise CorruptSegmentError(f"{directory}: segments kept changing during a search")


def max_timestamp_and_offset(snapshot: Snapshot, directory: str) -> tuple[int, int] | None:
    """Kafka's ListOffsets MAX_TIMESTAMP (KIP-734): ``(timestamp, offset)`` of the record with the largest
    timestamp, the first such record (lowest offset) on a tie, as Kafka's segment keeps the first offset
    at its largest timestamp; None for a log without records. Transaction markers are not records here.

    A segment, row group or frame is read only if its newest timestamp is above the best found so far."""
    for _ in range(READ_RETRIES):
        try:
            return _max_in(snapshot)
        except FileNotFoundError:
            continue  # a roll replaced the active segment under us: look again
    raise CorruptSegmentError(f"{directory}: segments kept changing during a search")


def _max_in(snapshot: Snapshot) -> tuple[int, int] | None:
    best: list[tuple[int, int]] = []  # the largest so far; only a larger timestamp replaces it
    for table in _time_tables(snapshot, LONG_MIN, above=lambda: best[0][0] + 1 if best else LONG_MIN):
        found = _largest(table)
        if found is not None and (not best or found[0] > best[0][0]):
            best[:] = [found]
    return best[0] if best else None


def _time_tables(snapshot: Snapshot, timestamp_ms: int,
                 above: Callable[[], int] | None = None) -> Iterator[pa.Table]:
    """The ``offset``, ``timestamp`` and ``control_type`` columns, in offset order, of the row groups and
    frames whose newest timestamp is at least ``timestamp_ms`` (or ``above()``, asked afresh before each
    segment and frame)."""
    def floor() -> int:
        return timestamp_ms if above is None else above()

    sealed, active = snapshot(0, None)
    for segment in sealed:
        if segment.meta.max_timestamp < floor() or not segment.meta.record_count:
            continue
        yield from segment.read_from_time(floor(), list(_TIME_COLUMNS))
    for frame in active.frames_from_time(floor()):
        if frame.max_timestamp >= floor():
            yield pa.Table.from_batches([active.read_frame(frame)])


def rows_from(sealed: list[SealedSegment], active: ActiveSegment, start: int, columns: list[str]) -> Iterator[pa.Table]:
    """Rows from ``start`` on, markers included, read directly: the caller holds the partition lock, so no
    file can vanish."""
    for segment in sealed:
        if segment.next_offset > start:
            table = segment.read(start, None, columns=columns)
            if table.num_rows:
                yield table
    for batch in active.read_batches(max(start, active.base_offset)):
        if batch.num_rows:
            yield pa.Table.from_batches([batch]).select(columns)


def _with_filter_columns(columns: list[str] | None) -> list[str] | None:
    if columns is None:
        return None
    return columns if "control_type" in columns else [*columns, "control_type"]


def _finish(table: pa.Table, columns: list[str] | None, include_control: bool,
            control_count: int) -> pa.Table:
    if not include_control and control_count:
        table = table.filter(from_numpy(to_numpy(table.column("control_type")) == CONTROL_NONE))
    return table.select(columns) if columns is not None else table


def _first_at_or_after(table: pa.Table, timestamp_ms: int) -> tuple[int, int] | None:
    timestamps = to_numpy(table.column("timestamp"))
    hits = np.flatnonzero((timestamps >= timestamp_ms) & (to_numpy(table.column("control_type")) == CONTROL_NONE))
    if not len(hits):
        return None
    return int(timestamps[hits[0]]), int(to_numpy(table.column("offset"))[hits[0]])


def _largest(table: pa.Table) -> tuple[int, int] | None:
    """``(timestamp, offset)`` of the first record with the table's largest timestamp, markers left out."""
    records = np.flatnonzero(to_numpy(table.column("control_type")) == CONTROL_NONE)
    if not len(records):
        return None
    timestamps = to_numpy(table.column("timestamp"))[records]
    at = records[int(np.argmax(timestamps))]  # argmax: the first of equal maxima
    return int(to_numpy(table.column("timestamp"))[at]), int(to_numpy(table.column("offset"))[at])
