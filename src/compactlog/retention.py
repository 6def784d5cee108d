"""Delete-policy retention of one partition's log (Kafka's ``UnifiedLog.deleteOldSegments``).

The rule is the planner's (:func:`compactlog.cleaner.plan.retention_deletable`: segments wholly below the
log start offset, past ``retention.ms`` or beyond ``retention.bytes``); this module applies it to a log. The
store calls it for ``delete`` topics (:meth:`compactlog.Store.enforce_retention`, Kafka's LogManager) and the
cleaner after each pass for ``compact`` ones.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .cleaner.plan import retention_deletable
from .partition_view import planner_state
from .segment import SegmentStats

if TYPE_CHECKING:
    from .config import TopicConfig
    from .log import Log


def retention_roll_due(active: SegmentStats, now_ms: int, *, delete: bool, retention_ms: int) -> bool:
    """Kafka rolls the active segment before retention when every segment, the active one included, has
    expired by ``retention.ms`` (so that retention can delete it)."""
    return (delete and retention_ms >= 0 and active.record_count > 0 and active.max_timestamp >= 0
            and now_ms - active.max_timestamp > retention_ms)


def apply_retention(log: Log, config: TopicConfig, now_ms: int) -> int:
    """Delete whole segments by the retention rule; returns the bytes removed."""
    active = SegmentStats.from_meta(log.active.meta())
    if retention_roll_due(active, now_ms, delete=config.delete, retention_ms=config.retention_ms):
        log.roll()
    plan = retention_deletable(planner_state(log, config, None), now_ms)
    if not plan.segments:
        return 0
    return log.delete_segments([s.base_offset for s in plan.segments], config.file_delete_delay_ms)
