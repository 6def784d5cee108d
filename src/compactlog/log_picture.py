"""A picture of a topic's log, as data: per partition a row of segment boxes, what the plot and the report draw.

Each segment of a partition becomes a :class:`SegmentBox`: its offsets, bytes, record count, duplicate count
(records whose key appears again later in the partition, which a clean would remove) and tombstone count,
and its section, one of :data:`SECTIONS`, decided by :func:`segment_sections` from the planner's
:class:`~compactlog.cleaner.plan.PartitionState`:

- ``active``: the active segment (never cleaned).
- ``clean``: wholly below the first dirty offset (the cleaner checkpoint, when it lies in the log).
- ``cleanable dirty``: dirty and below the first uncleanable offset: the next clean may rewrite it (when the
  partition's dirty ratio passes ``min.cleanable.dirty.ratio``, or ``--force``).
- ``held back by min.compaction.lag.ms``: dirty, at or after the first segment holding a record younger than
  the lag (Kafka's rule: that segment and every later one wait).
- ``held back by an open transaction``: dirty, at or after the segment holding the last stable offset.
- ``uncleanable``: a non-active segment of a partition the cleaner marked uncleanable, or the files of a
  partition whose log cannot be opened.
- ``not compacted``: a non-active segment of a topic whose ``cleanup.policy`` has no ``compact``.

:func:`partition_status` says in one line whether the next pass cleans the partition and, if not, why
(the planner's own reason, from :func:`~compactlog.cleaner.plan.select_logs`). :func:`segment_counts`
counts records, duplicates and tombstones per segment from the partition's key, value and offset columns,
vectorised (the keys grouped by an Arrow hash encoding, each group's newest offset taken with numpy).
:func:`box_extents` lays a row out: a segment's width is its share of the partition's bytes, with a floor so
that empty and small segments stay visible.

:func:`topic_picture` is the one function here that reads (the store's logs and checkpoint); the rest are
pure. Rendering lives in :mod:`compactlog.log_picture_png` and :mod:`compactlog.log_picture_html`.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .cleaner.plan import (
    LIMIT_LSO,
    LIMIT_MIN_LAG,
    PartitionState,
    cleanable_offsets,
    log_to_clean,
    select_logs,
)
from .columns import is_null, to_numpy
from .errors import CompactLogError
from .partition_view import planner_state

if TYPE_CHECKING:
    from .log import Log
    from .store import Store

CLEAN = "clean"
CLEANABLE = "cleanable dirty"
MIN_LAG = "held back by min.compaction.lag.ms"
OPEN_TRANSACTION = "held back by an open transaction"
UNCLEANABLE = "uncleanable"
ACTIVE = "active"
NOT_COMPACTED = "not compacted"
SECTIONS = (CLEAN, CLEANABLE, MIN_LAG, OPEN_TRANSACTION, UNCLEANABLE, ACTIVE, NOT_COMPACTED)

# The columns read to count duplicates and tombstones: nothing else of a record is needed.
COUNT_COLUMNS = ["offset", "key", "value"]


@dataclass(frozen=True)
class SegmentBox:
    """One segment as drawn. ``record_count`` counts data records (transaction markers are not records)."""

    base_offset: int
    next_offset: int
    size_bytes: int
    record_count: int
    duplicate_count: int
    tombstone_count: int
    section: str
    error: str | None = None  # why the segment could not be read (its counts are then 0)


@dataclass(frozen=True)
class PartitionPicture:
    """One partition's row: its segments oldest first, where the checkpoint lies and why it is (not) cleaned.

    ``checkpoint`` is the cleaner checkpoint as stored (None: never cleaned); ``first_dirty_offset`` is where
    cleaning resumes (the checkpoint when it lies in the log, else the log start). Offsets are -1 for a
    partition whose log cannot be opened."""

    partition: int
    log_start_offset: int
    log_end_offset: int
    size_bytes: int
    segments: tuple[SegmentBox, ...]
    checkpoint: int | None
    first_dirty_offset: int | None
    dirty_ratio: float
    status: str
    due: bool


@dataclass(frozen=True)
class TopicPicture:
    topic: str
    cleanup_policy: str
    taken_at_ms: int
    partitions: tuple[PartitionPicture, ...]


# --- Pure decisions -----------------------------------------------------------------------------------------


def segment_sections(state: PartitionState, now_ms: int) -> tuple[str, ...]:
    """The section of each of ``state``'s segments (see the module docstring), in segment order."""
    if not state.policy.compact:
        return tuple(ACTIVE if s.active else NOT_COMPACTED for s in state.segments)
    if state.uncleanable_reason is not None:
        return tuple(ACTIVE if s.active else UNCLEANABLE for s in state.segments)
    offsets = cleanable_offsets(state, now_ms)
    # The planner's bound, rounded down to a segment base: segments from there on are not cleaned this pass.
    first_uncleanable = log_to_clean(state, now_ms).first_uncleanable_offset
    held = {LIMIT_MIN_LAG: MIN_LAG, LIMIT_LSO: OPEN_TRANSACTION}.get(offsets.limited_by, ACTIVE)
    sections = []
    for segment in state.segments:
        if segment.active:
            sections.append(ACTIVE)
        elif segment.next_offset <= offsets.first_dirty_offset:
            sections.append(CLEAN)
        elif segment.base_offset < first_uncleanable:
            sections.append(CLEANABLE)
        else:
            sections.append(held)
    return tuple(sections)


def min_lag_until_ms(state: PartitionState, now_ms: int) -> int | None:
    """When min.compaction.lag.ms stops holding back the first held segment (its newest record's timestamp
    plus the lag), or None when the lag holds nothing back."""
    offsets = cleanable_offsets(state, now_ms)
    if offsets.limited_by != LIMIT_MIN_LAG:
        return None
    held = next(s for s in state.segments if s.base_offset == offsets.first_uncleanable_offset)
    return held.max_timestamp + state.policy.min_compaction_lag_ms


def partition_status(state: PartitionState, now_ms: int) -> tuple[bool, str]:
    """``(due, why)``: whether the cleaner's next pass cleans the partition, and why or why not."""
    selection = select_logs([state], now_ms)
    if selection.to_clean:
        ltc = selection.to_clean[0]
        if ltc.need_compaction_now:
            why = f"max.compaction.lag.ms overdue by {ltc.max_compaction_delay_ms} ms"
        else:
            why = (f"dirty ratio {ltc.cleanable_ratio:.2f} > min.cleanable.dirty.ratio "
                   f"{state.policy.min_cleanable_dirty_ratio:.2f}")
        return True, (f"due: the next pass cleans offsets [{ltc.first_dirty_offset}, "
                      f"{ltc.first_uncleanable_offset}) ({why})")
    why = selection.skipped[state.key]
    until = min_lag_until_ms(state, now_ms)
    if until is not None and "min.compaction.lag.ms" in why:
        why += f" until {iso_time(until)}"
    return False, f"not cleaned: {why}"


def segment_counts(tables: Iterable[pa.Table], segment_bases: Sequence[int]) -> np.ndarray:
    """Records, duplicates and tombstones per segment: an array of shape ``(len(segment_bases), 3)``.

    ``tables`` hold the partition's ``offset``, ``key`` and ``value`` columns (any number of tables, in any
    order; every record of the partition once). A record counts in the segment whose base offset is the
    greatest at or below its offset. A duplicate is a record whose key appears again at a later offset in
    the partition (grouping the keys gives each key's newest offset); a record without a key is never
    a duplicate. A tombstone is a record whose value is null."""
    bases = np.asarray(segment_bases, dtype=np.int64)
    counts = np.zeros((len(bases), 3), dtype=np.int64)
    keyed: list[pa.Table] = []
    for table in tables:
        offsets = to_numpy(table.column("offset"))
        where = np.searchsorted(bases, offsets, side="right") - 1
        counts[:, 0] += np.bincount(where, minlength=len(bases))
        counts[:, 2] += np.bincount(where[is_null(table.column("value"))], minlength=len(bases))
        keyed.append(table.select(["key", "offset"]))  # the values are not kept past their tombstone count
    if not keyed:
        return counts
    records = pa.concat_tables(keyed)
    records = records.filter(pc.is_valid(records.column("key")))  # a record without a key is never a duplicate
    if records.num_rows == 0:
        return counts
    # The group-by: a hash dictionary-encode of the keys gives each record its key's group id (one dictionary
    # shared by every chunk), and numpy takes each group's newest offset. Table.group_by would do the same
    # but imports pyarrow.acero, which imports pandas (see compactlog.columns).
    groups = pc.dictionary_encode(records.column("key"))
    ids = np.concatenate([to_numpy(chunk.indices) for chunk in groups.chunks])
    offsets = np.concatenate([to_numpy(chunk) for chunk in records.column("offset").chunks])
    newest = np.full(len(groups.chunks[0].dictionary), -1, dtype=np.int64)
    np.maximum.at(newest, ids, offsets)
    superseded = offsets[offsets < newest[ids]]
    where = np.searchsorted(bases, superseded, side="right") - 1
    counts[:, 1] += np.bincount(where, minlength=len(bases))
    return counts


def box_extents(sizes: Sequence[int], min_share: float = 0.03) -> list[tuple[float, float]]:
    """``(left, width)`` of each box in a row of width 1: each box gets ``min_share`` (so an empty segment
    shows), the rest of the row is shared by bytes (evenly when every size is 0). With too many boxes for the
    floor, the floor shrinks to share the row evenly."""
    n = len(sizes)
    if n == 0:
        return []
    floor = min(min_share, 1.0 / n)
    total = sum(sizes)
    spare = 1.0 - floor * n
    widths = [floor + spare * (size / total if total else 1.0 / n) for size in sizes]
    lefts = np.concatenate([[0.0], np.cumsum(widths)[:-1]])
    return [(float(left), width) for left, width in zip(lefts, widths, strict=True)]


def offset_position(boxes: Sequence[SegmentBox], extents: Sequence[tuple[float, float]], offset: int) -> float:
    """Where ``offset`` lies along the row: inside its segment's box in proportion to the segment's offsets;
    0 below the first segment, 1 at or past the last one's next offset."""
    for box, (left, width) in zip(boxes, extents, strict=True):
        if box.base_offset <= offset < box.next_offset:
            return left + width * (offset - box.base_offset) / (box.next_offset - box.base_offset)
    return 0.0 if not boxes or offset < boxes[0].base_offset else 1.0


def iso_time(ms: int) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


# --- Reading a topic ----------------------------------------------------------------------------------------


def topic_picture(store: Store, topic: str) -> TopicPicture:
    """The picture of every partition of ``topic`` as the store sees it now (one read of each partition's
    offset, key and value columns)."""
    config = store.topic_config(topic)
    now_ms = store.clock()
    checkpoints = store.checkpoint.read()
    rows = []
    for info in store.describe(topic):
        checkpoint = checkpoints.get((topic, info.partition))
        if not info.segments:  # a log that cannot be opened: its files, uncleanable, as describe says
            box = SegmentBox(-1, -1, info.size_bytes, 0, 0, 0, UNCLEANABLE, info.uncleanable_reason)
            rows.append(PartitionPicture(info.partition, -1, -1, info.size_bytes, (box,), checkpoint, None, 0.0,
                                         f"not cleaned: uncleanable: {info.uncleanable_reason}", False))
            continue
        log = store.log(topic, info.partition)
        state = dataclasses.replace(planner_state(log, config, checkpoint),
                                    uncleanable_reason=info.uncleanable_reason)
        errors: dict[int, str] = {}
        counts = segment_counts(_readable_tables(log, state, errors), [s.base_offset for s in state.segments])
        boxes = tuple(SegmentBox(s.base_offset, s.next_offset, s.size_bytes, int(c[0]), int(c[1]), int(c[2]), section,
                                 errors.get(s.base_offset))
                      for s, c, section in zip(state.segments, counts, segment_sections(state, now_ms), strict=True))
        due, status = partition_status(state, now_ms)
        rows.append(PartitionPicture(
            info.partition, state.log_start_offset, state.log_end_offset, info.size_bytes, boxes, checkpoint,
            info.first_dirty_offset, info.dirty_ratio, status, due))
    return TopicPicture(topic, ",".join(config.cleanup_policy), now_ms, tuple(rows))


def _readable_tables(log: Log, state: PartitionState, errors: dict[int, str]) -> Iterator[pa.Table]:
    """The count columns of each segment in turn; a segment that cannot be read (a damaged file) is left out
    and its error put in ``errors`` by base offset, so one bad segment does not hide the rest of the picture
    (its keys are then missing from the duplicate count of the others)."""
    for segment in state.segments:
        if segment.next_offset <= segment.base_offset:
            continue
        try:
            tables = list(log.read_tables(segment.base_offset, segment.next_offset, columns=COUNT_COLUMNS))
        except CompactLogError as e:
            errors[segment.base_offset] = str(e)
            continue
        yield from tables
