"""Consumer groups as ``__consumer_offsets`` records them, read from a store (``serve`` need not run).

The read view of the group metadata manager's topic, for the command line and the metrics: the same
replay (:func:`compactlog.coordinator.group_metadata_manager.replay_partition`, the rules of
:mod:`compactlog.coordinator.committed_offsets`), so it sees what a restarted broker would load: committed
offsets only (a transaction's offsets once its COMMIT marker is written). A store without the topic has no
groups. Nothing is written, so a read-only store will do.

A group's state is what its last stored metadata says: members, ``Stable``; no members or no metadata (a
group that only commits offsets), ``Empty``. A partition is described when the group has a committed offset
for it or a member is assigned it (the member's assignment, Kafka's ConsumerProtocolAssignment, decoded by
kafka-python); its lag is the log end offset minus the committed offset. Partitions of a topic that no longer
exists are left out (they have no log end offset).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment

from .coordinator.committed_offsets import CommittedOffsets, TopicPartition
from .coordinator.group_metadata_manager import OFFSETS_TOPIC, partition_for, replay_partition
from .coordinator.offset_records import MemberSnapshot
from .errors import CorruptOffsetsRecordError, InvalidTopicError, UnknownGroupError, UnknownTopicOrPartitionError

if TYPE_CHECKING:
    from .store import Store

__all__ = [
    "GroupDescription",
    "PartitionLag",
    "assigned_partitions",
    "committed_offsets",
    "describe_group",
    "list_groups",
    "offsets_by_group",
    "replayed",
]


@dataclass(frozen=True)
class PartitionLag:
    """One partition of a group: its committed offset (None: none), log end offset, lag and member."""

    topic: str
    partition: int
    current_offset: int | None
    log_end_offset: int
    lag: int | None
    member_id: str | None
    client_id: str | None
    host: str | None


@dataclass(frozen=True)
class GroupDescription:
    """A group, as ``kafka-consumer-groups --describe`` shows it."""

    group_id: str
    state: str  # "Stable" (the last stored metadata has members) or "Empty"
    protocol_type: str
    protocol: str | None
    generation: int
    members: tuple[MemberSnapshot, ...]
    partitions: tuple[PartitionLag, ...]


def replayed(store: Store, partitions: list[int] | None = None, skip_undecodable: bool = False) -> CommittedOffsets:
    """``__consumer_offsets`` replayed (only ``partitions`` of it, if given); empty without the topic. A record
    that cannot be decoded is a CorruptOffsetsRecordError naming it, unless ``skip_undecodable`` (then it is
    in the state's ``skipped``, as the broker's load skips it): a read view must not answer as if the record
    were not there (an erasure proof could then pass a group it cannot see)."""
    state = CommittedOffsets()
    if OFFSETS_TOPIC not in store.topics():
        return state
    for partition in range(store.partitions(OFFSETS_TOPIC)) if partitions is None else partitions:
        replay_partition(store, partition, state)
    if state.skipped and not skip_undecodable:
        first, more = state.skipped[0], len(state.skipped) - 1
        raise CorruptOffsetsRecordError(f"{OFFSETS_TOPIC}-{first.partition} offset {first.offset}: {first.reason}"
                                        + (f" (and {more} more records that cannot be decoded)" if more else ""))
    return state


def list_groups(store: Store) -> list[str]:
    """Every group with stored metadata or committed offsets, sorted."""
    return sorted(replayed(store).group_ids())


def committed_offsets(store: Store) -> dict[str, dict[TopicPartition, int]]:
    """Every group's committed offsets."""
    return offsets_by_group(replayed(store))


def offsets_by_group(state: CommittedOffsets) -> dict[str, dict[TopicPartition, int]]:
    """Every group's committed offsets in a replayed ``__consumer_offsets``, groups and partitions sorted."""
    return {group: {tp: value.offset for tp, value in sorted(state.committed(group).items())}
            for group in sorted(state.group_ids())}


def assigned_partitions(member: MemberSnapshot) -> list[TopicPartition]:
    """The partitions a member's assignment (ConsumerProtocolAssignment) gives it; none if it cannot be read
    (a group of another protocol type)."""
    if not member.assignment:
        return []
    try:
        assignment = ConsumerProtocolAssignment.decode(member.assignment)
    except (struct.error, ValueError, EOFError, IndexError, TypeError):
        return []
    return [(tp.topic, tp.partition) for tp in assignment.partitions()]


def describe_group(store: Store, group_id: str) -> GroupDescription:
    """The group's metadata and, per partition, committed offset, log end offset, lag and member; raises
    UnknownGroupError if nothing is stored for it."""
    if OFFSETS_TOPIC not in store.topics():
        raise UnknownGroupError(f"consumer group {group_id!r} does not exist (no {OFFSETS_TOPIC} in {store.data_dir})")
    state = replayed(store, [partition_for(group_id, store.partitions(OFFSETS_TOPIC))])
    snapshot = state.snapshots.get(group_id)
    offsets = state.committed(group_id)
    if snapshot is None and not offsets:
        raise UnknownGroupError(f"consumer group {group_id!r} does not exist")
    members = snapshot.members if snapshot is not None else ()
    owner = {tp: member for member in members for tp in assigned_partitions(member)}
    lags = []
    for topic, partition in sorted(set(offsets) | set(owner)):
        try:
            log_end = store.log_end_offset(topic, partition)
        except (UnknownTopicOrPartitionError, InvalidTopicError):
            continue  # the topic was deleted (or shrank), or never could exist: no log end offset to show
        committed = offsets.get((topic, partition))
        current = None if committed is None else committed.offset
        member = owner.get((topic, partition))
        lags.append(PartitionLag(topic, partition, current, log_end, None if current is None else log_end - current,
                                 None if member is None else member.member_id,
                                 None if member is None else member.client_id,
                                 None if member is None else member.client_host))
    return GroupDescription(group_id, "Stable" if members else "Empty",
                            snapshot.protocol_type if snapshot is not None else "",
                            snapshot.protocol if snapshot is not None else None,
                            snapshot.generation if snapshot is not None else 0, members, tuple(lags))
