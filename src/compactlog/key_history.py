"""One key's history in a partition and why each stored record of it is still there (``compactlog explain``,
``verify-erasure``): pure decisions over the planner's values, no I/O.

The rules are the cleaner's (:mod:`compactlog.cleaner.plan`, :mod:`compactlog.cleaner.retain`):

* a round reads every segment below the first uncleanable offset (rounded down to a segment base) and maps
  the keys of the dirty section ``[first dirty, first uncleanable)``; it removes a record when the map
  holds a newer offset of its key, so a superseded record goes in the first round whose dirty section
  holds a newer record of its key;
* a tombstone is kept by the round that first finds it newest and stamped with a delete horizon (that
  round's time plus ``delete.retention.ms``); the first round at or after the horizon removes it;
* a round covers an offset only when the partition is selected (dirty ratio above
  ``min.cleanable.dirty.ratio``, overdue by ``max.compaction.lag.ms``, or forced) and the offset lies below
  the first uncleanable offset: the active segment (until it rolls by ``segment.ms``, the effective roll
  time), segments holding a record younger than ``min.compaction.lag.ms`` and offsets at or past the last
  stable offset stay dirty;
* a topic without ``compact`` loses records only by retention (``retention.ms``).

:func:`explain_key` gives, for every stored record of the key in offset order, its section, what it is,
why it is still stored and the earliest time the rules let it go (None when no time is known: it waits for
an event, such as a newer record or the end of a transaction).
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from dataclasses import dataclass

from .cleaner.plan import (
    LIMIT_MIN_LAG,
    LogToClean,
    PartitionState,
    SegmentStats,
    log_to_clean,
    select_logs,
)
from .limits import LONG_MAX
from .record import NO_DELETE_HORIZON


@dataclass(frozen=True, slots=True)
class KeyRecord:
    """One stored record of the key."""

    offset: int
    timestamp: int
    segment: str  # the file holding it
    tombstone: bool
    delete_horizon_ms: int = NO_DELETE_HORIZON


@dataclass(frozen=True, slots=True)
class RecordFate:
    """Why one record of the key is still stored and when it may go."""

    record: KeyRecord
    section: str  # "clean", "dirty" or "active" (the active segment, also dirty)
    status: str  # "newest value", "newest tombstone", "superseded value", "superseded tombstone"
    reason: str
    removable_at_ms: int | None  # the earliest time the rules let it go; None: not by time alone


def format_ms(ms: int) -> str:
    """Epoch milliseconds as ISO 8601 UTC, e.g. ``2026-11-25T17:04:06.000Z``."""
    when = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.timezone.utc)
    return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def _segment_of(segments: Sequence[SegmentStats], offset: int) -> SegmentStats:
    return next((s for s in reversed(segments) if s.base_offset <= offset), segments[0])


def _round_coverage(offset: int, state: PartitionState, ltc: LogToClean, selection_reason: str | None,
                    now_ms: int, roll_ms: int) -> tuple[str, int | None]:
    """Why no round has covered ``offset`` yet (a round that does removes what waits on it) and the earliest
    time one can."""
    active = state.active
    if offset >= ltc.first_uncleanable_offset:
        if offset >= active.base_offset:
            if active.first_timestamp < 0 or roll_ms >= LONG_MAX - active.first_timestamp:
                return "active segment: not cleaned until it rolls (segment.bytes)", None
            rolls_at = active.first_timestamp + roll_ms + 1
            held_until = rolls_at
            if state.policy.min_compaction_lag_ms > 0:
                held_until = max(rolls_at, active.max_timestamp + state.policy.min_compaction_lag_ms + 1)
            return (f"active segment: rolls at {format_ms(rolls_at)} (segment.ms, the effective roll time "
                    f"{roll_ms} ms)", held_until)
        if ltc.limited_by == LIMIT_MIN_LAG:
            lag = state.policy.min_compaction_lag_ms
            held = [s for s in state.segments if ltc.first_uncleanable_offset <= s.base_offset <= offset]
            until = max((s.max_timestamp for s in held), default=-1) + lag + 1
            return f"min lag until {format_ms(until)} (min.compaction.lag.ms {lag})", until
        return (f"open transaction: nothing from the segment holding the last stable offset "
                f"{state.last_stable_offset} on is cleaned until it ends", None)
    if selection_reason is None:
        return "not cleaned since: the next cleaner pass covers it", now_ms
    if selection_reason.startswith("dirty ratio"):
        due = _compaction_due_ms(state, ltc)
        when = f"; overdue by max.compaction.lag.ms at {format_ms(due)}" if due is not None else ""
        return f"ratio below threshold: {selection_reason}{when}", due
    if selection_reason.startswith("uncleanable"):
        return f"partition {selection_reason}", None
    return selection_reason, None


def _compaction_due_ms(state: PartitionState, ltc: LogToClean) -> int | None:
    """When ``max.compaction.lag.ms`` makes the partition due whatever its ratio (None: never)."""
    lag = state.policy.max_compaction_lag_ms
    firsts = [s.first_timestamp for s in state.segments
              if not s.active and s.base_offset >= ltc.first_dirty_offset and s.first_timestamp > 0]
    if not firsts or lag >= LONG_MAX - min(firsts):
        return None
    return min(firsts) + lag + 1


def explain_key(records: Sequence[KeyRecord], state: PartitionState, now_ms: int, roll_ms: int,
                delete_retention_ms: int) -> list[RecordFate]:
    """The fate of every record of one key (module docstring), ``records`` in offset order; ``roll_ms`` is
    the topic's effective roll time (``TopicConfig.roll_ms``)."""
    ltc = log_to_clean(state, now_ms)
    selection = select_logs([state], now_ms)
    selection_reason = selection.skipped.get(state.key)
    fates = []
    for i, record in enumerate(records):
        segment = _segment_of(state.segments, record.offset)
        section = "active" if segment.active else "clean" if record.offset < ltc.first_dirty_offset else "dirty"
        newest = i == len(records) - 1
        kind = "tombstone" if record.tombstone else "value"
        status = f"{'newest' if newest else 'superseded'} {kind}"
        reason: str
        at: int | None
        if state.uncleanable_reason is not None:
            reason, at = f"partition uncleanable: {state.uncleanable_reason}", None
        elif not state.policy.compact:
            reason, at = _retention_fate(segment, state)
        elif newest and not record.tombstone:
            reason, at = "newest record of a live key: kept until a newer record or a tombstone supersedes it", None
        elif newest:
            reason, at = _tombstone_fate(record, state, ltc, selection_reason, now_ms, roll_ms,
                                         delete_retention_ms)
        else:
            reason, at = _superseded_fate(record, records[i + 1:], state, ltc, selection_reason, now_ms, roll_ms)
        fates.append(RecordFate(record, section, status, reason, at))
    return fates


def _retention_fate(segment: SegmentStats, state: PartitionState) -> tuple[str, int | None]:
    policy = state.policy
    if not policy.delete or policy.retention_ms < 0 or segment.max_timestamp < 0:
        return f"cleanup.policy={policy.cleanup_policy or '<empty>'}: not compacted, no time retention", None
    at = segment.max_timestamp + policy.retention_ms + 1
    return f"not compacted: its segment expires by retention.ms at {format_ms(at)}", at


def _tombstone_fate(record: KeyRecord, state: PartitionState, ltc: LogToClean, selection_reason: str | None,
                    now_ms: int, roll_ms: int, delete_retention_ms: int) -> tuple[str, int | None]:
    horizon = record.delete_horizon_ms
    if horizon != NO_DELETE_HORIZON and now_ms < horizon:
        return (f"delete horizon at {format_ms(horizon)}: consumers may still need to see it; the first cleaning "
                "after it removes it", horizon)
    why, at = _round_coverage(record.offset, state, ltc, selection_reason, now_ms, roll_ms)
    if horizon != NO_DELETE_HORIZON:
        return f"delete horizon passed at {format_ms(horizon)}; {why}", at
    stamped = f"not yet stamped: the round that covers it stamps delete horizon = that time + {delete_retention_ms} ms"
    return f"{stamped}; {why}", None if at is None else at + delete_retention_ms


def _superseded_fate(record: KeyRecord, newer: Sequence[KeyRecord], state: PartitionState, ltc: LogToClean,
                     selection_reason: str | None, now_ms: int, roll_ms: int) -> tuple[str, int | None]:
    mapped = [r for r in newer if ltc.first_dirty_offset <= r.offset < ltc.first_uncleanable_offset]
    if mapped:
        why, at = _round_coverage(mapped[0].offset, state, ltc, selection_reason, now_ms, roll_ms)
        return f"superseded by offset {mapped[0].offset}; {why}", at
    dirty = [r for r in newer if r.offset >= ltc.first_dirty_offset]
    if not dirty:
        return ("superseded within the clean section: goes when a newer record of the key is cleaned", None)
    why, at = _round_coverage(dirty[0].offset, state, ltc, selection_reason, now_ms, roll_ms)
    return f"superseded by offset {dirty[0].offset}, which is not cleanable yet: {why}", at
