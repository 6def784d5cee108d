"""What to clean and why: the cleaner's planning, as pure functions over frozen values.

It owns the decisions Kafka's ``LogCleanerManager`` and ``UnifiedLog`` make before any record is read: the
dirty range and ratio of a partition (:func:`cleanable_offsets`, :func:`log_to_clean`), which partitions are
due and why the others are not (:func:`select_logs`), how a round's segments are packed into cleaned segments
(:func:`group_segments_by_size`) and which old segments retention removes (:func:`retention_deletable`).
When the active segment rolls is the log's rule (:mod:`compactlog.segment_roll`); the gauges are
:mod:`.metrics`'.

Nothing here does I/O or reads a clock: ``now_ms`` is always passed in. Offsets and sizes are Python ints, so
Kafka's ``Long`` arithmetic is computed exactly (no overflow).
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ..limits import INT_MAX, LONG_MAX
from ..segment import SegmentStats

LIMIT_ACTIVE = "active segment"
LIMIT_LSO = "last stable offset"
LIMIT_MIN_LAG = "min.compaction.lag.ms"

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class CleaningPolicy:
    """The topic settings the planner reads (a subset of the topic config, decoupled from its class)."""

    compact: bool
    delete: bool
    min_cleanable_dirty_ratio: float
    min_compaction_lag_ms: int
    max_compaction_lag_ms: int
    delete_retention_ms: int
    retention_ms: int
    retention_bytes: int
    segment_bytes: int

    @classmethod
    def from_topic_config(cls, cfg: Any) -> CleaningPolicy:
        """Read the settings by attribute name from any topic-config object (duck typed)."""
        return cls(**{f.name: getattr(cfg, f.name) for f in dataclasses.fields(cls)})

    @property
    def cleanup_policy(self) -> str:
        """The ``cleanup.policy`` list as Kafka spells it, e.g. ``"compact,delete"``."""
        return ",".join(name for name, on in (("compact", self.compact), ("delete", self.delete)) if on)


@dataclass(frozen=True, slots=True)
class PartitionState:
    """A partition's segments (ascending, the last one active), offsets, cleaner checkpoint and policy."""

    topic: str
    partition: int
    segments: tuple[SegmentStats, ...]
    log_start_offset: int
    log_end_offset: int
    last_stable_offset: int
    checkpoint: int | None
    policy: CleaningPolicy
    uncleanable_reason: str | None = None

    def __post_init__(self) -> None:
        # Kafka always has an active segment; the planner relies on it being last and the only active one.
        if not self.segments or not self.segments[-1].active:
            raise ValueError(f"{self.topic}-{self.partition}: the last segment must be the active segment")
        if any(s.active for s in self.segments[:-1]):
            raise ValueError(f"{self.topic}-{self.partition}: only the last segment may be active")
        bases = [s.base_offset for s in self.segments]
        if any(a >= b for a, b in itertools.pairwise(bases)):
            raise ValueError(f"{self.topic}-{self.partition}: segment base offsets must ascend: {bases}")

    @property
    def key(self) -> TopicPartition:
        return (self.topic, self.partition)

    @property
    def active(self) -> SegmentStats:
        return self.segments[-1]


# --- Kafka's segment range queries (LogSegments.values / UnifiedLog.nonActiveLogSegmentsFrom) ---------------


def _log_segments(
    segments: Sequence[SegmentStats], from_offset: int, to_offset: int
) -> tuple[SegmentStats, ...]:
    """``log.logSegments(from, to)``: the segment containing ``from`` (its floor) through the last one with a
    base offset below ``to``; empty when ``from == to``; all below ``to`` when ``from`` has no floor."""
    if to_offset < from_offset:
        raise ValueError(f"invalid segment range: to {to_offset} < from {from_offset}")
    if from_offset == to_offset:
        return ()
    floor = max(bisect.bisect_right(segments, from_offset, key=lambda s: s.base_offset) - 1, 0)
    return tuple(s for s in segments[floor:] if s.base_offset < to_offset)


def _non_active_from(segments: Sequence[SegmentStats], from_offset: int) -> tuple[SegmentStats, ...]:
    """``nonActiveLogSegmentsFrom(from)``: empty when ``from`` lies beyond the active segment's base."""
    active_base = segments[-1].base_offset
    return () if from_offset > active_base else _log_segments(segments, from_offset, active_base)


# --- The dirty range of one partition -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CleanableOffsets:
    """``cleanableOffsets``: ``[first_dirty_offset, first_uncleanable_offset)`` before segment rounding."""

    first_dirty_offset: int
    first_uncleanable_offset: int
    force_update_checkpoint: bool
    limited_by: str  # LIMIT_ACTIVE, LIMIT_LSO or LIMIT_MIN_LAG: the bound that set first_uncleanable_offset


def cleanable_offsets(state: PartitionState, now_ms: int) -> CleanableOffsets:
    """The dirty range per Kafka's ``LogCleanerManager.cleanableOffsets`` (§1.3 step 2)."""
    # The checkpoint is trusted only inside [log start, log end]; otherwise cleaning restarts at the log start
    # and the corrected checkpoint must be persisted (forceUpdateCheckpoint).
    checkpoint = state.log_start_offset if state.checkpoint is None else state.checkpoint
    if checkpoint < state.log_start_offset or checkpoint > state.log_end_offset:
        first_dirty, force = state.log_start_offset, True
    else:
        first_dirty, force = checkpoint, False

    # First uncleanable = min(active base, first min-lag segment, LSO); on ties the first listed names it.
    bounds: list[tuple[int, str]] = [(state.active.base_offset, LIMIT_ACTIVE)]
    min_lag = state.policy.min_compaction_lag_ms
    if min_lag > 0:
        # The first non-active dirty segment holding a record newer than now - lag, and everything after it,
        # stay dirty. Kafka falls back to the file mtime for a segment without timestamps; an empty segment
        # (max_timestamp -1) counts as old enough here.
        held = next(
            (s for s in _non_active_from(state.segments, first_dirty) if s.max_timestamp > now_ms - min_lag),
            None,
        )
        if held is not None:
            bounds.append((held.base_offset, LIMIT_MIN_LAG))
    # Nothing at or after the last stable offset (open transaction or high watermark) is cleaned.
    bounds.append((state.last_stable_offset, LIMIT_LSO))
    bound, limited_by = min(bounds, key=lambda b: b[0])
    return CleanableOffsets(first_dirty, max(first_dirty, bound), force, limited_by)


@dataclass(frozen=True, slots=True)
class LogToClean:
    """Kafka's ``LogToClean``: one partition's dirty range (segment aligned) and its dirty ratio."""

    topic: str
    partition: int
    first_dirty_offset: int
    first_uncleanable_offset: int  # rounded down to a segment base; may be < first_dirty_offset (no work)
    clean_bytes: int
    cleanable_bytes: int
    total_bytes: int
    cleanable_ratio: float
    max_compaction_delay_ms: int
    need_compaction_now: bool
    force_update_checkpoint: bool
    limited_by: str

    @property
    def key(self) -> TopicPartition:
        return (self.topic, self.partition)


def earliest_dirty_timestamp(segments: Sequence[SegmentStats], first_dirty_offset: int) -> int | None:
    """The first timestamp of the oldest dirty non-active segment: max.compaction.lag.ms counts from it
    (Kafka skips segments without a positive timestamp). None when no such segment has one."""
    firsts = [s.first_timestamp for s in _non_active_from(segments, first_dirty_offset) if s.first_timestamp > 0]
    return min(firsts, default=None)


def max_compaction_delay(
    segments: Sequence[SegmentStats], first_dirty_offset: int, now_ms: int, max_compaction_lag_ms: int
) -> int:
    """``maxCompactionDelay`` (§1.3 step 4): how long the oldest dirty non-active segment is overdue, or 0."""
    earliest = earliest_dirty_timestamp(segments, first_dirty_offset)
    earliest = LONG_MAX if earliest is None else earliest
    # Exact arithmetic: with max lag = Long.MAX_VALUE, clean_until is hugely negative and nothing is ever due.
    clean_until = now_ms - max(max_compaction_lag_ms, 0)
    return clean_until - earliest if earliest < clean_until else 0


def log_to_clean(state: PartitionState, now_ms: int) -> LogToClean:
    """Build the ``LogToClean`` of one partition (§1.3 steps 2, 4 and 5)."""
    offsets = cleanable_offsets(state, now_ms)
    segments, first_dirty = state.segments, offsets.first_dirty_offset
    # cleanBytes: segments whose base is below first dirty, i.e. logSegments(-1, firstDirty).
    clean_bytes = sum(s.size_bytes for s in _log_segments(segments, -1, first_dirty))
    # calculateCleanableBytes: round the bound down to the base of the non-active segment containing it, or
    # to the active base; cleanableBytes = logSegments(min(firstDirty, bound), bound). A checkpoint in the
    # middle of a segment so counts that segment in both clean and cleanable bytes (Kafka quirk, §7.4).
    containing = _non_active_from(segments, offsets.first_uncleanable_offset)
    first_uncleanable = containing[0].base_offset if containing else state.active.base_offset
    cleanable_bytes = sum(
        s.size_bytes for s in _log_segments(segments, min(first_dirty, first_uncleanable), first_uncleanable)
    )
    total = clean_bytes + cleanable_bytes
    delay = max_compaction_delay(segments, first_dirty, now_ms, state.policy.max_compaction_lag_ms)
    return LogToClean(
        topic=state.topic,
        partition=state.partition,
        first_dirty_offset=first_dirty,
        first_uncleanable_offset=first_uncleanable,
        clean_bytes=clean_bytes,
        cleanable_bytes=cleanable_bytes,
        total_bytes=total,
        cleanable_ratio=cleanable_bytes / total if total > 0 else 0.0,
        max_compaction_delay_ms=delay,
        need_compaction_now=delay > 0,
        force_update_checkpoint=offsets.force_update_checkpoint,
        limited_by=offsets.limited_by,
    )


# --- Selection ----------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Selection:
    """The outcome of one selection pass over all partitions."""

    to_clean: tuple[LogToClean, ...]  # filthiest first; ties by (topic, partition)
    skipped: dict[TopicPartition, str]  # every partition not selected, with the reason
    max_dirty_ratio: float  # max ratio among non-empty candidates (the max-dirty-percent source), 0.0 if none
    max_compaction_delay_ms: int  # max delay among candidates (PreCleanStats.maxCompactionDelayMs)
    checkpoint_resets: dict[TopicPartition, int]  # checkpoints to persist now (forceUpdateCheckpoint)


def _nothing_cleanable_reason(state: PartitionState, ltc: LogToClean) -> str:
    first_dirty, bound, base = ltc.first_dirty_offset, ltc.first_uncleanable_offset, state.active.base_offset
    if bound > first_dirty:  # there are dirty segments, but they hold no bytes
        return f"nothing cleanable: dirty segments in [{first_dirty}, {bound}) are empty"
    if ltc.limited_by == LIMIT_MIN_LAG:
        return f"nothing cleanable: min.compaction.lag.ms holds segment {bound} back"
    if ltc.limited_by == LIMIT_LSO:
        lso = state.last_stable_offset
        if lso <= first_dirty:
            return (
                f"nothing cleanable: last stable offset {lso} is at or below first dirty offset {first_dirty}"
            )
        return f"nothing cleanable: last stable offset {lso} lies in the first dirty segment (base {bound})"
    where = "at" if first_dirty == base else "in"
    return f"nothing cleanable: first dirty offset {first_dirty} is {where} the active segment (base {base})"


def due_for_cleaning(ltc: LogToClean, policy: CleaningPolicy, force: bool = False) -> bool:
    """Whether a candidate with cleanable bytes is cleaned now: overdue by max.compaction.lag.ms, its dirty
    ratio strictly above min.cleanable.dirty.ratio, or ``force`` (which waives the ratio only)."""
    return ltc.cleanable_bytes > 0 and (
        force or ltc.need_compaction_now or ltc.cleanable_ratio > policy.min_cleanable_dirty_ratio)


def select_logs(states: Iterable[PartitionState], now_ms: int, force: bool = False) -> Selection:
    """``grabFilthiestCompactedLog`` for every partition at once (§1.3, Appendix A.1).

    Candidates: ``compact`` in the policy, not marked uncleanable, ``total_bytes > 0``. Eligible iff
    ``(need_compaction_now and cleanable_bytes > 0) or cleanable_ratio > min.cleanable.dirty.ratio`` (strictly
    greater: ratio 1.0 only triggers via max lag, ratio 0 with any cleanable byte). ``force=True`` makes every
    candidate with ``cleanable_bytes > 0`` eligible (the ratio is ignored; the active segment, min-lag
    segments and offsets at/after the LSO still are not cleanable).

    Unlike Kafka, which takes one log per grab, all eligible partitions are returned, filthiest first; as in
    Kafka, logs due by max.compaction.lag.ms get no priority. Checkpoint resets are reported for every
    candidate whose checkpoint was out of range, selected or not (Kafka rewrites them at once). The caller
    adopts ``max_compaction_delay_ms`` for its gauge only when something was selected, as Kafka does.
    """
    chosen: list[LogToClean] = []
    skipped: dict[TopicPartition, str] = {}
    resets: dict[TopicPartition, int] = {}
    max_ratio, max_delay = 0.0, 0
    for state in states:
        policy = state.policy
        if not policy.compact:
            skipped[state.key] = f"not compacted (cleanup.policy={policy.cleanup_policy or '<empty>'})"
            continue
        if state.uncleanable_reason is not None:
            skipped[state.key] = f"uncleanable: {state.uncleanable_reason}"
            continue
        ltc = log_to_clean(state, now_ms)
        if ltc.force_update_checkpoint:
            resets[state.key] = ltc.first_dirty_offset
        max_delay = max(max_delay, ltc.max_compaction_delay_ms)
        if ltc.total_bytes == 0:  # Kafka drops these from the candidates (and from max-dirty-percent)
            empty = all(s.size_bytes == 0 for s in state.segments)
            skipped[state.key] = "empty log" if empty else _nothing_cleanable_reason(state, ltc)
            continue
        max_ratio = max(max_ratio, ltc.cleanable_ratio)
        if ltc.cleanable_bytes == 0:
            skipped[state.key] = _nothing_cleanable_reason(state, ltc)
        elif due_for_cleaning(ltc, policy, force):
            chosen.append(ltc)
        else:
            skipped[state.key] = (
                f"dirty ratio {ltc.cleanable_ratio:.2f} <= min.cleanable.dirty.ratio "
                f"{policy.min_cleanable_dirty_ratio:.2f}"
            )
    chosen.sort(key=lambda c: (-c.cleanable_ratio, c.topic, c.partition))
    return Selection(tuple(chosen), skipped, max_ratio, max_delay, resets)


# --- Grouping segments into cleaned segments ----------------------------------------------------------------


def group_segments_by_size(
    segments: Sequence[SegmentStats], max_size: int, first_uncleanable_offset: int
) -> list[list[SegmentStats]]:
    """``groupSegmentsBySize`` (§1.6) without the index-size checks (we keep no index files).

    Greedy, in order: a segment joins the current group while the group's bytes plus its bytes stay
    ``<= max_size`` (segment.bytes) and either it is empty (Kafka: "avoid empty log left every 2^31
    message") or its estimated last offset minus the group's base offset is ``<= Int.MaxValue``. The estimate
    is the following segment's base - 1, or ``first_uncleanable_offset - 1`` for the last segment in the list.
    Kafka compares with ``group.last`` of a list built by prepending, i.e. the group's *first* segment, whose
    base becomes the cleaned segment's base offset.
    """
    groups: list[list[SegmentStats]] = []
    i, n = 0, len(segments)
    while i < n:
        group = [segments[i]]
        group_bytes = segments[i].size_bytes
        i += 1
        while i < n:
            nxt = segments[i]
            estimated_last = segments[i + 1].base_offset - 1 if i + 1 < n else first_uncleanable_offset - 1
            fits = group_bytes + nxt.size_bytes <= max_size
            # A cleaned segment's offsets must be representable relative to its base offset (a Java int).
            in_range = nxt.size_bytes == 0 or estimated_last - group[0].base_offset <= INT_MAX
            if not (fits and in_range):
                break
            group.append(nxt)
            group_bytes += nxt.size_bytes
            i += 1
        groups.append(group)
    return groups


# --- Retention ----------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RetentionPlan:
    """Segments retention deletes (oldest first), the resulting log start offset and why each goes."""

    segments: tuple[SegmentStats, ...]
    new_log_start_offset: int
    reason: dict[int, str]  # base offset -> rule


def retention_deletable(state: PartitionState, now_ms: int) -> RetentionPlan:
    """``UnifiedLog.deleteOldSegments`` (§1.2 step 2, §2.1 "Deletion eligibility for retention").

    Walk oldest first and stop at the first segment no rule matches. Rules, in Kafka's order: wholly below
    the log start offset (always); with ``delete`` in the policy also retention.bytes (``diff = size -
    limit``; delete while ``diff - segment.size >= 0``, reducing diff; off when the limit is negative) and
    retention.ms (``now - max_timestamp > retention.ms``, off when negative; an empty segment, max_timestamp
    -1, never expires). Kafka runs the rules as successive walks over the remaining log; one walk that reduces
    ``diff`` by every deleted segment is equivalent. Never the active segment, and only segments whose
    ``next_offset`` is at most the last stable offset (mirroring Kafka's high-watermark bound).
    """
    policy = state.policy
    total = sum(s.size_bytes for s in state.segments)
    diff = total - policy.retention_bytes if policy.delete and policy.retention_bytes >= 0 else None
    deleted: list[SegmentStats] = []
    reason: dict[int, str] = {}
    for seg in state.segments:
        if seg.active or seg.next_offset > state.last_stable_offset:
            break
        why: str | None = None
        if seg.next_offset <= state.log_start_offset:
            why = f"below log start offset {state.log_start_offset}"
        elif diff is not None and diff - seg.size_bytes >= 0:
            why = f"retention.bytes {policy.retention_bytes} exceeded by {diff} bytes"
        elif (
            policy.delete
            and policy.retention_ms >= 0
            and seg.max_timestamp >= 0
            and now_ms - seg.max_timestamp > policy.retention_ms
        ):
            age = now_ms - seg.max_timestamp
            why = f"retention.ms {policy.retention_ms} exceeded (newest record {age} ms old)"
        if why is None:
            break
        if diff is not None:
            diff -= seg.size_bytes
        deleted.append(seg)
        reason[seg.base_offset] = why
    new_start = max(state.log_start_offset, deleted[-1].next_offset) if deleted else state.log_start_offset
    return RetentionPlan(tuple(deleted), new_start, reason)
