"""The cleaner's gauges: a round's statistics (Kafka's ``CleanerStats``) and the gauges Kafka's ``LogCleaner``
reports from the last rounds and the last selection, as pure functions of values."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class CleanerStats:
    """Statistics of one completed cleaning round (Kafka's ``CleanerStats``, the fields the gauges need)."""

    records_read: int = 0
    records_written: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    invalid_records: int = 0  # keyless records dropped
    map_utilization: float = 0.0  # offset-map entries / slots, 0..1
    start_ms: int = 0
    end_ms: int = 0

    @property
    def elapsed_ms(self) -> int:
        return self.end_ms - self.start_ms


def cleaner_metrics(
    last_stats: Sequence[CleanerStats],
    selection_max_dirty_ratio: float,
    selection_max_delay_ms: int,
    uncleanable: Mapping[TopicPartition, int],
    now_ms: int,
    last_run_ms: int | None,
) -> dict[str, int | float | None]:
    """Kafka's cleaner gauges (§5) from each worker's last completed round and the last selection.

    ``uncleanable`` maps each uncleanable partition to its stuck cleanable bytes. ``time-since-last-run-ms`` is
    None when no pass has run (``last_run_ms`` None): Kafka's gauge then reads the time since the cleaner
    started, which a data directory without a running cleaner does not have, and 0 would claim a run just now.
    ``max-buffer-utilization-percent`` is the real percentage (Kafka before KAFKA-18597 truncated the ratio to
    an int first and read 0); like the Scala ``maxOverCleanerThreads``, maxima fold from 0.
    """
    read = sum(s.bytes_read for s in last_stats)
    written = sum(s.bytes_written for s in last_stats)
    return {
        "max-dirty-percent": int(100 * selection_max_dirty_ratio),
        "max-compaction-delay-secs": max(selection_max_delay_ms, 0) // 1000,
        "cleaner-recopy-percent": int(100 * (written / max(read, 1))),
        "max-buffer-utilization-percent": int(max([0.0, *(s.map_utilization for s in last_stats)]) * 100),
        "max-clean-time-secs": max([0, *(s.elapsed_ms // 1000 for s in last_stats)]),
        "time-since-last-run-ms": now_ms - last_run_ms if last_run_ms is not None else None,
        "uncleanable-partitions-count": len(uncleanable),
        "uncleanable-bytes": sum(uncleanable.values()),
    }
