"""One partition's log seen from outside it: as the planner's values and as ``describe`` reports it.

:func:`planner_state` reads a log's segment list into the frozen :class:`~compactlog.cleaner.plan.PartitionState`
the pure planning functions take (the cleaner's selection, retention, ``describe``). :class:`PartitionInfo`
and :class:`SegmentInfo` are what :meth:`compactlog.Store.describe` returns; :func:`describe_partition` fills
them in from the log, its topic config, the cleaner checkpoint and the planner's answer to whether it can be
compacted now (:func:`~compactlog.cleaner.cleanability.cleanability`), or :func:`unreadable_partition` for a
log that cannot be opened. :func:`stored_tombstones` counts a log's tombstones (records with a null value;
transaction markers are not records) and finds the oldest, for the consumer-aware tombstone horizon
(:mod:`compactlog.consumer_horizon`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .cleaner.cleanability import REASON_UNCLEANABLE, Cleanability, cleanability
from .cleaner.plan import CleaningPolicy, PartitionState
from .columns import is_null, to_numpy
from .errors import UnknownTopicOrPartitionError
from .segment import SegmentStats

if TYPE_CHECKING:
    from .config import TopicConfig
    from .log import Log


@dataclass(frozen=True)
class SegmentInfo:
    base_offset: int
    size_bytes: int
    record_count: int
    max_timestamp: int
    active: bool


@dataclass(frozen=True)
class PartitionInfo:
    """One partition as ``describe`` reports it, with the cleaner's view of it."""

    partition: int
    log_start_offset: int
    log_end_offset: int
    size_bytes: int
    segments: list[SegmentInfo]
    first_dirty_offset: int | None = None
    first_uncleanable_offset: int | None = None
    dirty_ratio: float = 0.0
    uncleanable_reason: str | None = None
    max_compaction_delay_ms: int = 0
    last_stable_offset: int | None = None
    # Whether the next cleaner pass compacts it, why not, until when, and its clean/dirty/uncleanable bytes.
    cleanability: Cleanability | None = None


def segment_stats(log: Log) -> tuple[SegmentStats, ...]:
    return tuple(SegmentStats(m.base_offset, m.next_offset, m.size_bytes, m.record_count, m.max_timestamp,
                              m.first_timestamp, m.active) for m in log.segments_meta())


def planner_state(log: Log, config: TopicConfig, checkpoint: int | None) -> PartitionState:
    """The planner's view of ``log``: its segments, offsets, cleaner checkpoint and cleaning policy."""
    segments = segment_stats(log)
    return PartitionState(
        topic=log.topic, partition=log.partition, segments=segments,
        log_start_offset=segments[0].base_offset, log_end_offset=segments[-1].next_offset,
        # The first offset of the oldest open transaction, else the log end: nothing at or past it is cleaned.
        last_stable_offset=min(log.last_stable_offset, segments[-1].next_offset),
        checkpoint=checkpoint,
        # No uncleanable_reason: compactlog retries uncleanable partitions on every pass (Kafka needs a
        # restart), so the planner never skips them for it.
        policy=CleaningPolicy.from_topic_config(config))


@contextlib.contextmanager
def read_only_log(store: Any, topic: str, partition: int) -> Iterator[Log]:
    """``topic``-``partition`` of ``store`` opened read-only whatever the store's mode: it writes nothing, not
    even recovery or a lock file (for dry runs and inspections); closed on exit."""
    from .log import Log

    directory = os.path.join(store.data_dir, f"{topic}-{partition}")
    if not 0 <= partition < store.partitions(topic):
        raise UnknownTopicOrPartitionError(f"topic {topic!r} has no partition {partition}")
    log = Log(directory, topic, partition, lambda: store.topic_config(topic), store.clock, read_only=True)
    try:
        yield log
    finally:
        log.close()


def describe_partition(log: Log, config: TopicConfig, checkpoint: int | None, now_ms: int,
                       uncleanable_reason: str | None, cleaner_enabled: bool = True) -> PartitionInfo:
    metas = log.segments_meta()
    segments = [SegmentInfo(m.base_offset, m.size_bytes, m.record_count, m.max_timestamp, m.active) for m in metas]
    state = dataclasses.replace(planner_state(log, config, checkpoint), uncleanable_reason=uncleanable_reason)
    answer = cleanability(state, now_ms, cleaner_enabled=cleaner_enabled)
    return PartitionInfo(
        partition=log.partition, log_start_offset=state.log_start_offset, log_end_offset=state.log_end_offset,
        size_bytes=sum(m.size_bytes for m in metas), segments=segments, first_dirty_offset=answer.first_dirty_offset,
        first_uncleanable_offset=answer.first_uncleanable_offset, dirty_ratio=answer.dirty_ratio,
        uncleanable_reason=uncleanable_reason, max_compaction_delay_ms=answer.max_compaction_delay_ms,
        last_stable_offset=state.last_stable_offset, cleanability=answer)


def unreadable_partition(partition: int, reason: str, directory: str) -> PartitionInfo:
    """A partition whose log cannot be opened: offsets -1 (unknown), the size of its files, no segments, and
    the error (which names the damaged file) as its uncleanable reason; all its bytes are uncleanable."""
    size = partition_bytes(directory)
    answer = Cleanability(False, REASON_UNCLEANABLE, f"uncleanable: {reason}", None, 0, 0, size, 0.0, 0, None, None)
    return PartitionInfo(partition=partition, log_start_offset=-1, log_end_offset=-1, size_bytes=size, segments=[],
                         uncleanable_reason=reason, cleanability=answer)


def partition_bytes(directory: str) -> int:
    """The bytes of a partition's files, as far as they can be listed (for a log that cannot be opened)."""
    with contextlib.suppress(OSError):
        return sum(e.stat().st_size for e in os.scandir(directory) if e.is_file())
    return 0


@dataclass(frozen=True)
class StoredTombstones:
    count: int
    oldest_offset: int | None  # None: no tombstone stored


# The columns read to find tombstones: a tombstone is a record whose value is null.
TOMBSTONE_COLUMNS = ["offset", "value"]


def stored_tombstones(log: Log) -> StoredTombstones:
    """How many tombstones ``log`` stores and the offset of the oldest, read one segment table at a time."""
    count, oldest = 0, None
    for table in log.read_tables(log.log_start_offset, columns=TOMBSTONE_COLUMNS):
        nulls = table.column("value").null_count
        if not nulls:
            continue
        if oldest is None:
            oldest = int(to_numpy(table.column("offset"))[is_null(table.column("value"))][0])
        count += nulls
    return StoredTombstones(count, oldest)
