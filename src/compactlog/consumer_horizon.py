"""The consumer-aware tombstone horizon (beyond Kafka): for a tombstone still stored, which consumer groups have
not yet read past it. Pure decisions over committed offsets and subscriptions; no I/O.

Kafka removes a tombstone ``delete.retention.ms`` after the cleaner first keeps it, whoever has read it: a
consumer further behind than that never sees the deletion. This module names the groups that have not seen it
yet, from what ``__consumer_offsets`` holds (:class:`ConsumerPositions`): the offsets each group committed and
the topics its stored members subscribe to.

Rules:

* a group has read past offset ``o`` of a topic-partition when its committed offset for that partition is
  greater than ``o`` (a committed offset is the next offset the group will read, as Kafka's);
* the groups asked about a topic are those with a committed offset for at least one of its partitions or
  whose stored members subscribe to it (a group that joined and has not committed yet): a group that
  consumes only other topics has never seen the key, so it holds nothing to delete;
* such a group without a committed offset for the tombstone's partition has not read past it (it has not
  consumed that partition yet, or its offset was deleted or expired: it restarts from ``auto.offset.reset``);
* the groups behind a partition's oldest stored tombstone are those that have seen none of its deletions.

``verify-erasure``'s exit code (:func:`erasure_exit_code`) puts the disk first: a value of the key still in a
file is a failure (1) whatever the consumers did; with no value left on disk, a group that has not read past
the key's tombstone makes it 3 (erased from the log, not yet from that consumer's view: it may still hold
the value it read before, and it learns of the deletion only when it reads the tombstone), and so does a
``__consumer_offsets`` that cannot be read (no group can be shown to have read past it); 0 only when both
hold. When no record of the key is left at all, the tombstone's offset is unknown and no group can be named:
the disk proof alone decides. A key is searched in every partition of its topic (a producer may put it in
any): each partition searched gets its own code, and the worst decides (:func:`worst_exit_code`: 1, then 3,
then 0).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

TopicPartition = tuple[str, int]

EXIT_ERASED = 0
EXIT_SURVIVES_ON_DISK = 1
EXIT_GROUPS_BEHIND = 3


@dataclass(frozen=True)
class ConsumerPositions:
    """What the horizon is decided from."""

    committed: Mapping[str, Mapping[TopicPartition, int]]  # group -> (topic, partition) -> committed offset
    subscribed: Mapping[str, frozenset[str]] = field(default_factory=dict)  # group -> its members' topics


@dataclass(frozen=True)
class PartitionTombstones:
    """A partition's stored tombstones and the groups that have read past none of them."""

    partition: int
    tombstone_count: int
    oldest_tombstone_offset: int | None  # None: no tombstone stored
    groups_behind_oldest: tuple[str, ...]


def topic_groups(positions: ConsumerPositions, topic: str) -> list[str]:
    """The groups with a committed offset for any partition of ``topic`` or subscribing to it, sorted."""
    committing = {group for group, offsets in positions.committed.items() if any(t == topic for t, _ in offsets)}
    subscribing = {group for group, topics in positions.subscribed.items() if topic in topics}
    return sorted(committing | subscribing)


def has_read_past(positions: ConsumerPositions, group: str, topic: str, partition: int, offset: int) -> bool:
    """Whether ``group``'s committed offset for ``topic``-``partition`` is past ``offset`` (none: it is not)."""
    position = positions.committed.get(group, {}).get((topic, partition))
    return position is not None and position > offset


def groups_behind(positions: ConsumerPositions, topic: str, partition: int, offset: int) -> list[str]:
    """The groups of ``topic`` that have not read past ``offset`` of ``topic``-``partition``, sorted."""
    return [group for group in topic_groups(positions, topic)
            if not has_read_past(positions, group, topic, partition, offset)]


def partition_tombstones(positions: ConsumerPositions, topic: str, partition: int, tombstone_count: int,
                         oldest_tombstone_offset: int | None) -> PartitionTombstones:
    """A partition's tombstone count and the groups behind its oldest tombstone (none when none is stored)."""
    behind = () if oldest_tombstone_offset is None else tuple(
        groups_behind(positions, topic, partition, oldest_tombstone_offset))
    return PartitionTombstones(partition, tombstone_count, oldest_tombstone_offset, behind)


def erasure_exit_code(erased_on_disk: bool, behind: Sequence[str] | None) -> int:
    """``verify-erasure``'s exit code (module docstring): the disk first, then the consumers; ``behind`` the
    groups that have not read past the key's tombstone, None when they cannot be known."""
    if not erased_on_disk:
        return EXIT_SURVIVES_ON_DISK
    return EXIT_GROUPS_BEHIND if behind is None or behind else EXIT_ERASED


_SEVERITY = (EXIT_ERASED, EXIT_GROUPS_BEHIND, EXIT_SURVIVES_ON_DISK)  # best first


def worst_exit_code(codes: Iterable[int]) -> int:
    """The worst of the partitions' :func:`erasure_exit_code` (module docstring); 0 for no partition."""
    return max(codes, key=_SEVERITY.index, default=EXIT_ERASED)
