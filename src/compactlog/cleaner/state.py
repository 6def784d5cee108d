"""The cleaner's memory between passes: uncleanable partitions, the last round's statistics, the last run.

Kafka keeps the uncleanable set in memory until a restart; compactlog keeps it per store and retries those
partitions on every pass (a success clears the mark), so a transient I/O error never quarantines a
partition for good.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from .metrics import CleanerStats

TopicPartition = tuple[str, int]


@dataclass
class CleanerState:
    uncleanable: dict[TopicPartition, str] = field(default_factory=dict)
    uncleanable_bytes: dict[TopicPartition, int] = field(default_factory=dict)
    last_stats: list[CleanerStats] = field(default_factory=list)
    last_run_ms: int | None = None
    max_dirty_ratio: float = 0.0
    max_compaction_delay_ms: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def mark_uncleanable(self, tp: TopicPartition, reason: str, stuck_bytes: int) -> None:
        self.uncleanable[tp] = reason
        self.uncleanable_bytes[tp] = stuck_bytes

    def clear_uncleanable(self, tp: TopicPartition) -> None:
        self.uncleanable.pop(tp, None)
        self.uncleanable_bytes.pop(tp, None)
