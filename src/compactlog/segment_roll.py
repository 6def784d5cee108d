"""When the active segment rolls: Kafka's ``LogSegment.shouldRoll`` (size and time, on append) and the
cleaner service's roll of an idle partition, as pure functions of a segment's :class:`SegmentStats`.

The time rule's bound is the topic's :attr:`~compactlog.config.TopicConfig.roll_ms` (Kafka's
``LogConfig.maxSegmentMs``). Nothing here does I/O or reads a clock: ``now_ms`` is passed in.
"""

from __future__ import annotations

from .segment import SegmentStats


def should_roll(
    active: SegmentStats, incoming_bytes: int, now_ms: int, *, segment_bytes: int, roll_ms: int
) -> str | None:
    """Whether appending ``incoming_bytes`` must first roll the active segment (``LogSegment.shouldRoll``,
    size and time rules; an empty segment never rolls). Returns the reason, or None.

    Kafka measures the age from the segment's first-batch timestamp to the incoming batch's max timestamp;
    pass that as ``now_ms`` to match exactly. A non-empty segment's first timestamp is that of its first
    record, whatever its value (records appended as tables may carry any timestamp).
    """
    if active.is_empty:
        return None
    if active.size_bytes + incoming_bytes > segment_bytes:
        return f"segment.bytes: {active.size_bytes} + {incoming_bytes} bytes > {segment_bytes}"
    if now_ms - active.first_timestamp > roll_ms:
        return f"segment.ms: first record is {now_ms - active.first_timestamp} ms old > {roll_ms} ms"
    return None


def idle_roll_due(active: SegmentStats, now_ms: int, max_compaction_lag_ms: int) -> bool:
    """The cleaner's rule for an idle partition: roll a non-empty active segment whose first record is older
    than max.compaction.lag.ms, so it becomes cleanable (Kafka only rolls on append, §7.4)."""
    return (
        not active.is_empty
        and active.first_timestamp >= 0
        and now_ms - active.first_timestamp > max_compaction_lag_ms
    )
