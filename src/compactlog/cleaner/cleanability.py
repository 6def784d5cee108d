"""Whether a partition can be compacted now and, when it cannot, why and until when: one pure answer.

:func:`cleanability` answers from the planner's frozen :class:`~.plan.PartitionState` and ``now_ms`` with
the same rules the cleaner's selection applies (:func:`~.plan.log_to_clean`, :func:`~.plan.due_for_cleaning`),
so what ``topics describe`` says is what the next pass does (a pass first rolls an active segment older than
``max.compaction.lag.ms``; the answer counts that roll). ``explain``, ``clean --dry-run`` and the log's
picture may call it too.

Reasons (``Cleanability.reason``), checked in this order; the first that applies is the answer:

* ``cleanup_policy``: the topic's ``cleanup.policy`` has no ``compact``;
* ``cleaner_disabled``: the data directory sets ``log.cleaner.enable=false``;
* ``uncleanable``: a cleaning round of the partition failed (``state.uncleanable_reason`` holds its error);
  the next pass retries it;
* ``empty_log``: no segment holds a byte;
* ``nothing_dirty``: every record below the log end is clean (or the dirty segments hold no bytes);
* ``active_segment``: the dirty records are all in the active segment, which is never cleaned; it is
  sealed at ``segment.bytes``, at the first append after ``segment.ms``, by ``compactlog roll``, or by a
  cleaner pass once its first record is older than ``max.compaction.lag.ms`` (``until_ms``);
* ``min_compaction_lag``: ``min.compaction.lag.ms`` holds the first dirty segment back until ``until_ms``
  (its newest record's timestamp plus the lag);
* ``open_transaction``: the last stable offset (the first offset of an open transaction) lies at or inside
  the first dirty segment;
* ``dirty_ratio_below``: the dirty ratio is not above ``min.cleanable.dirty.ratio``; with a finite
  ``max.compaction.lag.ms`` the partition is due anyway at ``until_ms``;
* cleanable: ``max_compaction_lag`` (overdue, whatever the ratio), ``dirty_ratio`` (above the threshold) or
  ``forced`` (``force`` waives the ratio, never the active segment, min lag or an open transaction).

Bytes: ``clean_bytes`` are the segments below the first dirty offset (the cleaned head), ``dirty_bytes`` the
segments of ``[first dirty, first uncleanable)`` that a pass would read (the dirty ratio's numerator), and
``uncleanable_bytes`` the rest of the log: the active segment and segments held back by min lag or an open
transaction, or, for a partition whose round failed, everything not clean. As in Kafka, a checkpoint in the
middle of a segment counts that segment as clean and dirty both, so the three may overlap there.
"""

from __future__ import annotations

import dataclasses
import datetime
from dataclasses import dataclass

from ..limits import LONG_MAX
from ..segment_roll import idle_roll_due
from .plan import (
    LIMIT_LSO,
    LIMIT_MIN_LAG,
    LogToClean,
    PartitionState,
    SegmentStats,
    due_for_cleaning,
    earliest_dirty_timestamp,
    log_to_clean,
)

REASON_NOT_COMPACTED = "cleanup_policy"
REASON_CLEANER_DISABLED = "cleaner_disabled"
REASON_UNCLEANABLE = "uncleanable"
REASON_EMPTY = "empty_log"
REASON_NOTHING_DIRTY = "nothing_dirty"
REASON_ACTIVE_SEGMENT = "active_segment"
REASON_MIN_LAG = "min_compaction_lag"
REASON_OPEN_TRANSACTION = "open_transaction"
REASON_RATIO_BELOW = "dirty_ratio_below"
REASON_MAX_LAG_DUE = "max_compaction_lag"
REASON_RATIO_ABOVE = "dirty_ratio"
REASON_FORCED = "forced"


@dataclass(frozen=True, slots=True)
class Cleanability:
    """Whether the next cleaner pass compacts a partition, why (``reason``, a ``REASON_*`` code, and
    ``detail``, one human line), when it can at the earliest if it cannot now (``until_ms``, epoch ms, or
    None when no time alone makes it cleanable), and the partition's sections in bytes (module docstring).
    ``first_dirty_offset``/``first_uncleanable_offset`` are None for a topic that is not compacted."""

    cleanable: bool
    reason: str
    detail: str
    until_ms: int | None
    clean_bytes: int
    dirty_bytes: int
    uncleanable_bytes: int
    dirty_ratio: float
    max_compaction_delay_ms: int
    first_dirty_offset: int | None
    first_uncleanable_offset: int | None


def format_time_ms(epoch_ms: int) -> str:
    """An epoch-millisecond time as ISO 8601 UTC, e.g. ``2026-11-25T17:04:35.000Z``."""
    moment = datetime.datetime.fromtimestamp(epoch_ms / 1000, tz=datetime.timezone.utc)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _after(start_ms: int | None, lag_ms: int) -> int | None:
    """The first millisecond strictly more than ``lag_ms`` after ``start_ms``; None when there is none (an
    unlimited lag, Long.MAX_VALUE)."""
    if start_ms is None or start_ms < 0 or start_ms + lag_ms + 1 > LONG_MAX:
        return None
    return start_ms + lag_ms + 1


def cleanability(state: PartitionState, now_ms: int, *, cleaner_enabled: bool = True,
                 force: bool = False) -> Cleanability:
    """Whether ``state`` is compacted by a pass at ``now_ms`` and, if not, why (see the module docstring).

    ``cleaner_enabled`` is the data directory's ``log.cleaner.enable``. ``force`` waives the dirty ratio (a
    forced pass that also rolls the active segment is asked with :func:`state_after_roll`'s state).
    ``state.uncleanable_reason`` (set by the caller from the cleaner's state) makes the partition
    uncleanable. The answer is for the state the pass selects from (:func:`state_after_idle_roll`). Pure: no
    I/O, no clock."""
    policy = state.policy
    if not policy.compact:
        return Cleanability(False, REASON_NOT_COMPACTED,
                            f"cleanup.policy={policy.cleanup_policy or '<empty>'} has no compact", None,
                            0, 0, 0, 0.0, 0, None, None)
    rolled = state_after_idle_roll(state, now_ms) if cleaner_enabled else state
    answer = _decide(rolled, now_ms, cleaner_enabled, force)
    if rolled is state:
        return answer
    return dataclasses.replace(answer, detail=f"{answer.detail} (the pass first seals the active segment: its "
                               "first record is older than max.compaction.lag.ms)")


def _decide(state: PartitionState, now_ms: int, cleaner_enabled: bool, force: bool) -> Cleanability:
    """:func:`cleanability` for a compacted topic, of the state the pass selects from."""
    policy = state.policy
    ltc = log_to_clean(state, now_ms)
    total = sum(s.size_bytes for s in state.segments)
    if not cleaner_enabled:
        return _answer(ltc, total, False, REASON_CLEANER_DISABLED, "log.cleaner.enable=false: the cleaner does not run")
    if state.uncleanable_reason is not None:
        return _answer(ltc, total, False, REASON_UNCLEANABLE, f"uncleanable: {state.uncleanable_reason}",
                       failed_round=True)
    if total == 0:
        return _answer(ltc, total, False, REASON_EMPTY, "empty log")
    if ltc.cleanable_bytes == 0:
        return _nothing_cleanable(state, ltc, total)
    ratio, threshold = ltc.cleanable_ratio, policy.min_cleanable_dirty_ratio
    if due_for_cleaning(ltc, policy, force):
        if ltc.need_compaction_now:
            return _answer(ltc, total, True, REASON_MAX_LAG_DUE, f"due: the oldest dirty record is "
                           f"{ltc.max_compaction_delay_ms} ms past max.compaction.lag.ms")
        if ratio > threshold:
            return _answer(ltc, total, True, REASON_RATIO_ABOVE,
                           f"dirty ratio {ratio:.2f} > min.cleanable.dirty.ratio {threshold:.2f}")
        return _answer(ltc, total, True, REASON_FORCED,
                       f"forced: dirty ratio {ratio:.2f} <= min.cleanable.dirty.ratio {threshold:.2f} is waived")
    due_at = _after(earliest_dirty_timestamp(state.segments, ltc.first_dirty_offset), policy.max_compaction_lag_ms)
    due = f"; due by max.compaction.lag.ms at {format_time_ms(due_at)}" if due_at is not None else ""
    return _answer(ltc, total, False, REASON_RATIO_BELOW,
                   f"dirty ratio {ratio:.2f} <= min.cleanable.dirty.ratio {threshold:.2f}{due}", due_at)


def state_after_roll(state: PartitionState) -> PartitionState:
    """``state`` with its active segment sealed and a new empty one at the log end, as a roll leaves it; the
    same state when the active segment is empty or holds no offset (a roll does nothing then)."""
    active, end = state.active, state.log_end_offset
    if active.is_empty or end <= active.base_offset:
        return state
    fresh = SegmentStats(end, end, 0, 0, -1, -1, True)
    return dataclasses.replace(state, segments=(*state.segments[:-1], dataclasses.replace(active, active=False), fresh))


def state_after_idle_roll(state: PartitionState, now_ms: int) -> PartitionState:
    """The state a cleaner pass at ``now_ms`` selects from: a compacted log's pass first rolls an active
    segment whose first record is older than max.compaction.lag.ms (:func:`compactlog.segment_roll.idle_roll_due`)."""
    due = state.policy.compact and idle_roll_due(state.active, now_ms, state.policy.max_compaction_lag_ms)
    return state_after_roll(state) if due else state


def _answer(ltc: LogToClean, total: int, cleanable: bool, reason: str, detail: str, until_ms: int | None = None,
            *, failed_round: bool = False) -> Cleanability:
    """The answer with the partition's sections: a failed round's dirty bytes count as uncleanable."""
    dirty_bytes = 0 if failed_round else ltc.cleanable_bytes
    stuck = max(total - ltc.clean_bytes - dirty_bytes, 0)
    return Cleanability(cleanable, reason, detail, until_ms, ltc.clean_bytes, dirty_bytes, stuck,
                        ltc.cleanable_ratio, ltc.max_compaction_delay_ms, ltc.first_dirty_offset,
                        max(ltc.first_uncleanable_offset, ltc.first_dirty_offset))


def _nothing_cleanable(state: PartitionState, ltc: LogToClean, total: int) -> Cleanability:
    """The answer for a non-empty partition with no cleanable byte: what bounds its dirty range."""
    active, policy = state.active, state.policy
    first_dirty, first_uncleanable = ltc.first_dirty_offset, ltc.first_uncleanable_offset
    if first_uncleanable > first_dirty:
        return _answer(ltc, total, False, REASON_NOTHING_DIRTY,
                       f"the dirty segments in [{first_dirty}, {first_uncleanable}) hold no bytes")
    if ltc.limited_by == LIMIT_MIN_LAG:
        held = next(s for s in state.segments if s.base_offset == first_uncleanable)
        until = held.max_timestamp + policy.min_compaction_lag_ms
        return _answer(ltc, total, False, REASON_MIN_LAG, f"min.compaction.lag.ms ({policy.min_compaction_lag_ms}"
                       f" ms) holds segment {held.base_offset} back until {format_time_ms(until)}", until)
    if ltc.limited_by == LIMIT_LSO:
        return _answer(ltc, total, False, REASON_OPEN_TRANSACTION, f"an open transaction holds the dirty records "
                       f"back (last stable offset {state.last_stable_offset})")
    if active.is_empty or first_dirty >= state.log_end_offset:
        return _answer(ltc, total, False, REASON_NOTHING_DIRTY,
                       f"no dirty records: the log is clean up to its end offset {state.log_end_offset}")
    roll_at = _after(active.first_timestamp, policy.max_compaction_lag_ms)
    by_cleaner = "" if roll_at is None else f", or by a cleaner pass after {format_time_ms(roll_at)} (max lag)"
    return _answer(ltc, total, False, REASON_ACTIVE_SEGMENT,
                   f"active segment only: the dirty records {first_dirty}..{state.log_end_offset - 1} are all in the "
                   f"active segment (base {active.base_offset}), never cleaned until sealed at segment.bytes, at the "
                   f"first append after segment.ms, or by compactlog roll{by_cleaner}", roll_at)
