"""The group metadata manager: groups' metadata and committed offsets, kept in ``__consumer_offsets``.

As Kafka's ``GroupMetadataManager``: ``__consumer_offsets`` is a compacted topic of
``offsets.topic.num.partitions`` partitions (segments of ``offsets.topic.segment.bytes``), created when the
manager starts if it is missing; a group lives in partition ``abs(groupId.hashCode()) % partitions`` (Java's
``String.hashCode``, so a group lands where Kafka would put it). Its records are Kafka's
(:mod:`.offset_records`); compaction (our cleaner) keeps the latest record per group and per group and
partition, and removes tombstones after ``delete.retention.ms``.

Durability: every write is one append of the group's records to its partition, fsynced before the method
returns (``store.append(..., flush=True)``); the in-memory cache changes only after that, so what a caller is
told is committed survives a kill -9 at any later point, and :meth:`GroupMetadataManager.load` rebuilds the
cache from the topic alone (:class:`.committed_offsets.CommittedOffsets`, which also states the rules).

Transactional offsets (TxnOffsetCommit) are appended as transactional records of the producer (its id and
epoch, sequences continuing the producer's in that partition) and stay pending until a COMMIT or ABORT
marker of that producer follows them in the log: :meth:`GroupMetadataManager.complete_txn` (called once the
markers are written) and offset expiry read the markers there, as a restart does, so a transaction that
ended by any path is settled as the log says. The blocking methods run on the broker's storage threads;
one lock serialises them.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import pyarrow as pa

from ..errors import InvalidTxnStateError, TopicExistsError
from ..limits import INT_MAX, INT_MIN
from ..record import CONTROL_ABORT, CONTROL_COMMIT, CONTROL_NONE, NO_PRODUCER_ID, AppendResult
from ..topic_metadata import GROUP_METADATA_TOPIC_NAME
from .committed_offsets import CommittedOffsets, LoadedGroup, TopicPartition
from .offset_expiry import expired_offsets
from .offset_records import (
    GroupSnapshot,
    MemberSnapshot,
    OffsetAndMetadata,
    encode_group_key,
    encode_group_value,
    encode_offset_key,
    encode_offset_value,
)

if TYPE_CHECKING:
    from ..log import Log
    from ..server_config import ServerConfig

__all__ = ["OFFSETS_TOPIC", "GroupMetadataManager", "GroupSnapshot", "LoadedGroup", "MemberSnapshot",
           "OffsetAndMetadata", "OffsetsStore", "TopicPartition", "java_string_hash", "partition_for",
           "replay_partition"]


class OffsetsStore(Protocol):
    """What the group metadata manager uses of its store (:class:`compactlog.store.Store` is one): the
    coordinator depends on this, never on the store, so that the store's layer stays above it."""

    clock: Callable[[], int]

    def log(self, topic: str, partition: int) -> Log: ...

    def partitions(self, topic: str) -> int: ...

    def create_topic(self, name: str, partitions: int = 1, config: Mapping[str, Any] | None = None,
                     validate_only: bool = False) -> None: ...

    def append(self, topic: str, partition: int, table: pa.Table | pa.RecordBatch, *,
               producer_id: int | None = None, producer_epoch: int = 0, base_sequence: int = 0,
               transactional: bool = False, flush: bool = True) -> AppendResult: ...

    def log_end_offset(self, topic: str, partition: int) -> int: ...


OFFSETS_TOPIC = GROUP_METADATA_TOPIC_NAME  # an internal topic: clients may neither produce to it nor delete it
_log = logging.getLogger("compactlog")
_MINUTE_MS = 60_000
# Columns a replay reads: the record, and what tells a transactional record and a marker from the rest.
_REPLAY_COLUMNS = ["offset", "key", "value", "producer_id", "producer_epoch", "sequence", "is_transactional",
                   "control_type"]


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode``: ``s[0]*31^(n-1) + ... + s[n-1]`` over UTF-16 code units, as a signed int32."""
    h = 0
    data = text.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h > INT_MAX else h


def partition_for(group_id: str, partitions: int) -> int:
    """Kafka's ``Utils.abs(groupId.hashCode) % partitions`` (``Utils.abs`` maps Integer.MIN_VALUE to 0)."""
    h = java_string_hash(group_id)
    return (0 if h == INT_MIN else abs(h)) % partitions


def replay_partition(store: OffsetsStore, partition: int, state: CommittedOffsets,
                     sequences: dict[tuple[int, int], tuple[int, int]] | None = None) -> None:
    """Feed ``state`` every record of one ``__consumer_offsets`` partition, markers included, in offset order;
    also note in ``sequences`` each producer's ``(epoch, next sequence)`` there, keyed by (producer id,
    partition)."""
    log = store.log(OFFSETS_TOPIC, partition)
    for table in log.read_tables(log.log_start_offset, None, columns=_REPLAY_COLUMNS, include_control=True):
        columns = {name: table.column(name).to_pylist() for name in _REPLAY_COLUMNS}
        for i, record_offset in enumerate(columns["offset"]):
            producer_id, control = columns["producer_id"][i], columns["control_type"][i]
            state.apply(partition, record_offset, columns["key"][i], columns["value"][i], producer_id,
                        columns["is_transactional"][i], control)
            if sequences is not None and producer_id != NO_PRODUCER_ID:
                _note_sequence(sequences, (producer_id, partition), columns["producer_epoch"][i],
                               columns["sequence"][i], control)


def _note_sequence(sequences: dict[tuple[int, int], tuple[int, int]], key: tuple[int, int], epoch: int,
                   sequence: int, control_type: int) -> None:
    """A data row (or a batch the cleaner emptied) sets the next sequence after its own, for its epoch (the log
    holds a producer's epochs in increasing order). Markers change nothing: a batch of a newer epoch than the
    one noted starts at 0 anyway (:meth:`GroupMetadataManager._append`), as the producer state requires."""
    if control_type not in (CONTROL_COMMIT, CONTROL_ABORT) and sequence >= 0:
        sequences[key] = (epoch, (sequence + 1) % (INT_MAX + 1))


class GroupMetadataManager:
    """Groups' metadata and committed offsets, durable in ``__consumer_offsets`` (see the module docstring)."""

    def __init__(self, store: OffsetsStore, config: ServerConfig) -> None:
        self.store = store
        self.config = config
        self._lock = threading.RLock()
        self._state = CommittedOffsets()
        self._sequences: dict[tuple[int, int], tuple[int, int]] = {}  # (producer id, partition) -> (epoch, next)
        self.skipped_records = 0  # records the last load could not decode (committed_offsets' rules)
        self._create_topic()
        self.partitions = store.partitions(OFFSETS_TOPIC)  # an existing topic's count wins, as in Kafka

    def _create_topic(self) -> None:
        with contextlib.suppress(TopicExistsError):  # made by an earlier start or another process: kept as is
            self.store.create_topic(OFFSETS_TOPIC, self.config.offsets_topic_num_partitions, {
                "cleanup.policy": "compact", "segment.bytes": self.config.offsets_topic_segment_bytes})

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.partitions)

    # -- loading -----------------------------------------------------------------------------------------------

    def load(self) -> dict[str, LoadedGroup]:
        """Rebuild the cache from every partition of the topic: committed offsets and transactional ones whose
        COMMIT marker is in the log; those of transactions still open stay pending. A record that cannot be
        decoded is skipped with a warning and counted in ``skipped_records``. Returns every group."""
        with self._lock:
            state, sequences = CommittedOffsets(), dict[tuple[int, int], tuple[int, int]]()
            for partition in range(self.partitions):
                replay_partition(self.store, partition, state, sequences)
            for skipped in state.skipped:
                _log.warning("%s-%d offset %d: record skipped while loading groups, it cannot be decoded: %s",
                             OFFSETS_TOPIC, skipped.partition, skipped.offset, skipped.reason)
            self._state, self._sequences, self.skipped_records = state, sequences, len(state.skipped)
            return state.loaded()

    # -- writing -----------------------------------------------------------------------------------------------

    def _append(self, group_id: str, records: list[tuple[bytes, bytes | None]], producer: tuple[int, int] | None,
                ) -> list[int]:
        """Append ``records`` to the group's partition (fsynced); their offsets. ``producer``: (id, epoch)
        of a transaction the records join. Called under the lock."""
        partition = self.partition_for(group_id)
        now = self.store.clock()
        table = pa.table({"key": pa.array([k for k, _ in records], pa.binary()),
                          "value": pa.array([v for _, v in records], pa.binary()),
                          "timestamp": pa.array([now] * len(records), pa.int64())})
        if producer is None:
            result = self.store.append(OFFSETS_TOPIC, partition, table, flush=True)
        else:
            producer_id, epoch = producer
            known_epoch, next_sequence = self._sequences.get((producer_id, partition), (-1, 0))
            base_sequence = next_sequence if known_epoch == epoch else 0
            end_before = self.store.log_end_offset(OFFSETS_TOPIC, partition)
            result = self.store.append(OFFSETS_TOPIC, partition, table, producer_id=producer_id,
                                       producer_epoch=epoch, base_sequence=base_sequence, transactional=True,
                                       flush=True)
            if result.base_offset < end_before:  # taken for a retry of an earlier batch: nothing was written
                raise InvalidTxnStateError(
                    f"{OFFSETS_TOPIC}-{partition}: producer {producer_id} epoch {epoch} sequence {base_sequence} "
                    "was taken for a duplicate; its transactional offsets were not written")
            self._sequences[(producer_id, partition)] = (epoch, (base_sequence + len(records)) % (INT_MAX + 1))
        return list(range(result.base_offset, result.base_offset + len(records)))

    def _apply(self, group_id: str, records: list[tuple[bytes, bytes | None]], offsets: list[int],
               producer_id: int = NO_PRODUCER_ID) -> None:
        partition = self.partition_for(group_id)
        for (key, value), record_offset in zip(records, offsets, strict=True):
            self._state.apply(partition, record_offset, key, value, producer_id,
                              producer_id != NO_PRODUCER_ID, CONTROL_NONE)

    def _write(self, group_id: str, records: list[tuple[bytes, bytes | None]],
               producer: tuple[int, int] | None = None) -> None:
        if not records:
            return
        with self._lock:
            offsets = self._append(group_id, records, producer)
            self._apply(group_id, records, offsets, NO_PRODUCER_ID if producer is None else producer[0])

    def _offset_records(self, group_id: str, offsets: Mapping[TopicPartition, OffsetAndMetadata],
                        ) -> list[tuple[bytes, bytes | None]]:
        now = self.store.clock()
        records: list[tuple[bytes, bytes | None]] = []
        for (topic, partition), value in offsets.items():
            if value.commit_timestamp == -1:
                value = OffsetAndMetadata(value.offset, value.leader_epoch, value.metadata, now,
                                          value.expire_timestamp)
            records.append((encode_offset_key(group_id, topic, partition), encode_offset_value(value)))
        return records

    def store_group(self, group: GroupSnapshot) -> None:
        """Write the group's metadata (GroupMetadataValue); durable when this returns."""
        self._write(group.group_id, [(encode_group_key(group.group_id), encode_group_value(group))])

    def store_offsets(self, group_id: str, offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> None:
        """Commit offsets (one OffsetCommitValue each; commit timestamp -1 means now); durable on return."""
        self._write(group_id, self._offset_records(group_id, offsets))

    def committed(self, group_id: str) -> dict[TopicPartition, OffsetAndMetadata]:
        """The group's committed offsets (pending transactional ones left out)."""
        with self._lock:
            return self._state.committed(group_id)

    def group(self, group_id: str) -> GroupSnapshot | None:
        """The group's last stored metadata, if any."""
        with self._lock:
            return self._state.snapshots.get(group_id)

    def delete_offsets(self, group_id: str, partitions: Iterable[TopicPartition]) -> None:
        """Tombstones for those of ``partitions`` the group has an offset for; durable on return."""
        with self._lock:
            committed = self._state.committed(group_id)
            self._write(group_id, [(encode_offset_key(group_id, *tp), None)
                                   for tp in dict.fromkeys(partitions) if tp in committed])

    def delete_group(self, group_id: str) -> None:
        """Tombstones for the group's metadata and every committed offset; durable on return."""
        with self._lock:
            records: list[tuple[bytes, bytes | None]] = [
                (encode_offset_key(group_id, *tp), None) for tp in sorted(self._state.committed(group_id))]
            if group_id in self._state.snapshots or records:
                records.append((encode_group_key(group_id), None))
            self._write(group_id, records)

    def expire_offsets(self, now_ms: int, is_empty: Callable[[str], bool]) -> int:
        """Tombstones for the offsets ``offsets.retention.minutes`` has expired (:mod:`.offset_expiry`);
        returns how many. ``is_empty(group_id)``: whether the group has no members now."""
        retention_ms = self.config.offsets_retention_minutes * _MINUTE_MS
        expired = 0
        with self._lock:
            for producer_id in list(self._state.pending):  # a transaction ended unseen no longer holds offsets
                self._settle(producer_id)
            for group_id in sorted(self._state.offsets):
                partitions = expired_offsets(self._state.committed(group_id), self._state.snapshots.get(group_id),
                                             is_empty(group_id), self._state.pending_partitions(group_id),
                                             now_ms, retention_ms)
                self.delete_offsets(group_id, partitions)
                expired += len(partitions)
        return expired

    # -- transactions ------------------------------------------------------------------------------------------

    def store_txn_offsets(self, group_id: str, producer_id: int, producer_epoch: int,
                          offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> None:
        """TxnOffsetCommit: the offsets as transactional records of the producer (whose transaction must
        already include the group's partition: AddOffsetsToTxn), pending until :meth:`complete_txn`."""
        self._write(group_id, self._offset_records(group_id, offsets), (producer_id, producer_epoch))

    def complete_txn(self, producer_id: int, commit: bool) -> None:
        """After the producer's markers were written (EndTxn, an abort by InitProducerId or a timeout): its
        pending offsets before a COMMIT marker become committed, those before an ABORT marker are dropped.
        The markers are read from the log, as a restart reads them, so a transaction ended by another path
        (or another process) is settled right too; ``commit`` (what the caller wrote) is not needed for that.
        Offsets with no marker after them stay pending."""
        with self._lock:
            self._settle(producer_id)

    def _settle(self, producer_id: int) -> None:
        """Apply the producer's markers that follow its pending records (in their partitions). Under the lock."""
        for partition, first in sorted(self._state.pending_since(producer_id).items()):
            log = self.store.log(OFFSETS_TOPIC, partition)
            for table in log.read_tables(first, None, columns=["offset", "producer_id", "control_type"],
                                         include_control=True):
                columns = {name: table.column(name).to_pylist() for name in table.column_names}
                for offset, pid, control in zip(columns["offset"], columns["producer_id"], columns["control_type"],
                                                strict=True):
                    if pid == producer_id and control in (CONTROL_COMMIT, CONTROL_ABORT):
                        self._state.complete(producer_id, control == CONTROL_COMMIT, partition, offset)

    def pending_txn_offsets(self, group_id: str) -> set[TopicPartition]:
        """The group's partitions with transactional offsets awaiting their transaction's end."""
        with self._lock:
            return self._state.pending_partitions(group_id)
