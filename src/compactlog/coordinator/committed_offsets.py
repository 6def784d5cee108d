"""What ``__consumer_offsets`` says: every group's metadata and committed offsets, replayed from its records.

:class:`CommittedOffsets` is a pure state machine fed with the topic's records in offset order, partition by
partition (:func:`replay_partition` reads them), or with the records the manager has just appended: the
cache the broker answers from and the state a restart rebuilds are the same function of the same records.

Rules (Kafka's ``GroupMetadataManager`` loading, with one deviation noted):

* a record's key says what it is (:mod:`.offset_records`); the latest record of a key wins; a null value
  (tombstone) deletes the offset or the group's metadata;
* a record whose key or value cannot be decoded (an unknown record type or version, bytes that do not fit
  the schema) is skipped and kept in ``skipped`` (the broker's load logs each, the metrics count them; the
  read views for the command line and erasure proofs refuse it, :func:`compactlog.consumer_groups.replayed`). Kafka's
  loader skips an unknown record type ("It could be a left over from an aborted upgrade") and fails the
  partition's load on a malformed record; here both are skipped, so that no record, however it got there,
  stops a broker from starting. What is lost is that record's own change: a group whose commit cannot be
  read resumes from its commit before, reading records again, never skipping any;
* a transactional record (TxnOffsetCommit) is pending, per producer and partition, until that producer's
  next COMMIT marker in that partition (then it is committed) or its next ABORT marker (then it is dropped);
  a partition's load ends with the transactions still open pending, for their markers to come;
* a committed transactional offset replaces the key's current offset only if its record is newer (a higher
  log offset) than the current one's, as Kafka's ``olderThan``: a plain commit appended while the
  transaction was open wins;
* deviation: a tombstone also drops the key's pending transactional offsets (all older than it). Kafka's
  in-memory coordinator would let a later COMMIT bring the offset back, but its cleaner keeps only the
  tombstone, so the offset would vanish again at the next load; here the result does not depend on whether
  the cleaner has run.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import CorruptOffsetsRecordError
from ..record import CONTROL_ABORT, CONTROL_COMMIT, CONTROL_NONE, NO_PRODUCER_ID
from .offset_records import (
    GroupKey,
    GroupSnapshot,
    OffsetAndMetadata,
    OffsetKey,
    decode_group_value,
    decode_key,
    decode_offset_value,
)

__all__ = ["CommittedOffsets", "LoadedGroup", "SkippedRecord", "TopicPartition"]

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class SkippedRecord:
    """A record of ``__consumer_offsets`` that cannot be decoded: where it is, and why."""

    partition: int
    offset: int
    reason: str


@dataclass
class LoadedGroup:
    """A group as ``__consumer_offsets`` holds it."""

    snapshot: GroupSnapshot | None  # the last GroupMetadataValue, None if none or tombstoned
    offsets: dict[TopicPartition, OffsetAndMetadata]


@dataclass(frozen=True)
class _Pending:
    record_offset: int
    partition: int  # of __consumer_offsets: a marker completes the pending records of its own partition only
    group: str
    topic_partition: TopicPartition
    value: OffsetAndMetadata | None


@dataclass
class CommittedOffsets:
    """Groups, committed offsets (with the log offset of their record) and pending transactional offsets."""

    snapshots: dict[str, GroupSnapshot] = field(default_factory=dict)
    offsets: dict[str, dict[TopicPartition, tuple[int, OffsetAndMetadata]]] = field(default_factory=dict)
    pending: dict[int, list[_Pending]] = field(default_factory=dict)  # producer id -> records in log order
    skipped: list[SkippedRecord] = field(default_factory=list)  # undecodable records, in replay order

    # -- feeding records ---------------------------------------------------------------------------------------

    def apply(self, partition: int, record_offset: int, key: bytes | None, value: bytes | None,
              producer_id: int = NO_PRODUCER_ID, transactional: bool = False,
              control_type: int = CONTROL_NONE) -> None:
        """One record of ``__consumer_offsets`` partition ``partition``, at ``record_offset``."""
        if control_type in (CONTROL_COMMIT, CONTROL_ABORT):
            self.complete(producer_id, control_type == CONTROL_COMMIT, partition, record_offset)
            return
        if control_type != CONTROL_NONE or key is None:
            return  # a cleaner-emptied batch (no key or value) or a keyless record: nothing to apply
        try:
            decoded = decode_key(key)
            if isinstance(decoded, GroupKey):
                snapshot = None if value is None else decode_group_value(decoded.group, value)
            else:
                offset = None if value is None else decode_offset_value(value)
        except CorruptOffsetsRecordError as e:
            self.skipped.append(SkippedRecord(partition, record_offset, str(e)))
            return
        if isinstance(decoded, GroupKey):
            if transactional:  # Kafka never writes group metadata in a transaction; neither do we
                return
            if snapshot is None:
                self.snapshots.pop(decoded.group, None)
            else:
                self.snapshots[decoded.group] = snapshot
            return
        self._apply_offset(decoded, offset, partition, record_offset, producer_id, transactional)

    def _apply_offset(self, decoded: OffsetKey, offset: OffsetAndMetadata | None, partition: int,
                      record_offset: int, producer_id: int, transactional: bool) -> None:
        tp = (decoded.topic, decoded.partition)
        if transactional:
            self.pending.setdefault(producer_id, []).append(
                _Pending(record_offset, partition, decoded.group, tp, offset))
        elif offset is None:
            self._delete(decoded.group, tp)
        else:
            self.offsets.setdefault(decoded.group, {})[tp] = (record_offset, offset)

    def _delete(self, group: str, tp: TopicPartition) -> None:
        offsets = self.offsets.get(group)
        if offsets is not None:
            offsets.pop(tp, None)
            if not offsets:
                del self.offsets[group]
        for producer_id, records in list(self.pending.items()):  # the deviation of the module docstring
            kept = [p for p in records if (p.group, p.topic_partition) != (group, tp)]
            if len(kept) != len(records):
                if kept:
                    self.pending[producer_id] = kept
                else:
                    del self.pending[producer_id]

    def complete(self, producer_id: int, commit: bool, partition: int, marker_offset: int) -> None:
        """The producer's COMMIT (``commit``) or ABORT marker at ``marker_offset`` of ``partition``: it ends the
        producer's pending records before it there. On a commit they become committed where their record is
        newer than the key's current one."""
        records = self.pending.pop(producer_id, [])
        ended = [p for p in records if p.partition == partition and p.record_offset < marker_offset]
        still_open = [p for p in records if not (p.partition == partition and p.record_offset < marker_offset)]
        if still_open:
            self.pending[producer_id] = still_open
        if not commit:
            return
        for p in ended:
            if p.value is None:
                self._delete(p.group, p.topic_partition)
                continue
            current = self.offsets.get(p.group, {}).get(p.topic_partition)
            if current is None or current[0] < p.record_offset:
                self.offsets.setdefault(p.group, {})[p.topic_partition] = (p.record_offset, p.value)

    def pending_since(self, producer_id: int) -> dict[int, int]:
        """Partition -> the offset of the producer's first pending record there."""
        first: dict[int, int] = {}
        for p in self.pending.get(producer_id, []):
            first[p.partition] = min(first.get(p.partition, p.record_offset), p.record_offset)
        return first

    # -- reading -----------------------------------------------------------------------------------------------

    def committed(self, group: str) -> dict[TopicPartition, OffsetAndMetadata]:
        return {tp: value for tp, (_, value) in self.offsets.get(group, {}).items()}

    def pending_partitions(self, group: str) -> set[TopicPartition]:
        """The group's partitions with a transactional offset not yet committed or aborted."""
        return {p.topic_partition for records in self.pending.values() for p in records if p.group == group}

    def group_ids(self) -> set[str]:
        return set(self.snapshots) | set(self.offsets)

    def loaded(self) -> dict[str, LoadedGroup]:
        return {group: LoadedGroup(self.snapshots.get(group), self.committed(group))
                for group in sorted(self.group_ids())}
