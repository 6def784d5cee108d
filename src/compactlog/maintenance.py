"""One maintenance pass over a data directory: what ``serve`` runs every ``log.cleaner.backoff.ms``.

A pass is retention for topics whose ``cleanup.policy`` has ``delete`` (:meth:`Store.enforce_retention`,
Kafka's LogManager), then one cleaner pass (:meth:`Store.clean`: transaction expiry, idle rolls, compaction,
and retention of ``compact,delete`` topics, honouring ``log.cleaner.enable``), which ends by writing the
cleaner's state to the data directory.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .cleaner.cleaner import CleanReport
    from .store import Store

TopicPartition = tuple[str, int]


@dataclass
class MaintenanceReport:
    clean: CleanReport
    retention_bytes_removed: dict[TopicPartition, int] = field(default_factory=dict)  # delete-policy topics


def run_maintenance_pass(store: Store, executor: Any = None) -> MaintenanceReport:
    """One pass (see the module docstring); ``executor`` as :meth:`Store.clean` takes it."""
    removed = store.enforce_retention()
    return MaintenanceReport(store.clean(executor=executor), removed)


def pass_summary(report: MaintenanceReport) -> str:
    """One log line: what the pass did."""
    clean = report.clean
    uncleanable = sorted(f"{t}-{p}" for (t, p), why in clean.skipped.items() if why.startswith("uncleanable:"))
    abandoned = sum(why.startswith("not cleaned:") for why in clean.skipped.values())  # a shutdown's
    removed = sum(report.retention_bytes_removed.values()) + sum(clean.retention_bytes_removed.values())
    cleaned = ", ".join(f"{p.topic}-{p.partition} ({p.records_read}->{p.records_written} records)"
                        for p in clean.partitions)
    return (f"cleaner pass: cleaned {len(clean.partitions)} partition(s){': ' + cleaned if cleaned else ''}; "
            f"rolled {len(clean.rolled)}; retention removed {removed} bytes; "
            f"{len(clean.skipped)} skipped" + (f"; uncleanable: {', '.join(uncleanable)}" if uncleanable else "")
            + (f"; {abandoned} left for the next pass (shutting down)" if abandoned else ""))


def backoff_after_pass_ms(report: MaintenanceReport, backoff_ms: int) -> int:
    """How long the cleaner waits before its next pass: as Kafka's cleaner thread, not at all after a pass
    that cleaned a partition (more may be dirty enough now), else ``log.cleaner.backoff.ms``."""
    return 0 if report.clean.partitions else backoff_ms
