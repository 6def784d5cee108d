"""The record rule of a cleaning round as a scalar pure function, the reference a vectorised kernel matches.

This module owns Kafka's record-level decision (``Cleaner.shouldRetainRecord`` after the batch-level
``checkBatchRetention``, reference §1.8) and the delete-horizon stamp (§1.11). It decides one record at a
time; batch-level outcomes (empty batches kept for a producer's last sequence or the round's last offset,
markers of emptied transactions) are decided elsewhere.

Record rule, first match wins:

1. data of an aborted transaction -> dropped, whatever its key (``DROP_ABORTED``);
2. control record (transaction marker) -> kept; marker removal is the transaction tracker's decision;
3. offset beyond the offset map of this round (``offset > map.latestOffset``) -> kept, even without a key;
4. no key -> dropped and counted as invalid (``DROP_KEYLESS``; a compacted topic refuses such records on
   append, but some may have been written while the policy was ``delete``);
5. keyed: kept iff ``offset >= map[key]`` (the newest offset of that key in the mapped range, -1 if absent)
   and, for a tombstone, its delete horizon has not been reached (``horizon == -1 or now < horizon``).

Two-phase tombstone deletion (KIP-534, KAFKA-8522): a tombstone is never dropped by the round that first finds
it to be the newest record of its key. That round keeps it and stamps a delete horizon of ``now +
delete.retention.ms`` (:func:`stamp_delete_horizon`; the cleaning time, not the record timestamp, KAFKA-4529).
A later round that runs at or after the horizon drops it (rule 5). Consumers thus get at least
delete.retention.ms to see the tombstone, and a log that is never cleaned again keeps it. Kafka stores the
horizon per batch; compactlog stores it per record (the ``delete_horizon_ms`` column, -1 = not stamped).
"""

from __future__ import annotations

import enum

NO_DELETE_HORIZON = -1
_LONG_MAX = 2**63 - 1  # the horizon column is int64


class RetainDecision(enum.Enum):
    """Why a record is kept or dropped by a cleaning round."""

    RETAIN = "retain"
    DROP_ABORTED = "drop: data of an aborted transaction"
    DROP_KEYLESS = "drop: no key (invalid in a compacted topic)"
    DROP_SUPERSEDED = "drop: a newer record has the same key"
    DROP_TOMBSTONE_EXPIRED = "drop: tombstone past its delete horizon"

    @property
    def retained(self) -> bool:
        return self is RetainDecision.RETAIN


def should_retain_record(
    *,
    offset: int,
    key: bytes | None,
    is_tombstone: bool,
    is_control: bool,
    map_latest_offset_for_key: int,
    map_latest_offset: int,
    delete_horizon_ms: int,
    now_ms: int,
    batch_aborted: bool,
) -> RetainDecision:
    """Decide one record (rules in the module docstring).

    ``map_latest_offset_for_key`` is the offset map's entry for ``key`` (-1 if absent); ``map_latest_offset``
    is the map's latest offset (the new checkpoint - 1). ``delete_horizon_ms`` is the record's stamped horizon
    (-1 = none). ``batch_aborted`` is Kafka's ``discardBatchRecords``: true for data of an aborted transaction
    (a control record is normally passed false: its removal is decided with its batch).
    """
    # Kafka checks the batch-level discard before anything else: aborted data goes regardless of keys.
    if batch_aborted:
        return RetainDecision.DROP_ABORTED
    # Control records are never looked up in the map (a data key equal to a marker key cannot affect markers).
    if is_control:
        return RetainDecision.RETAIN
    # Records beyond this round's map (the map filled up) are left for a later round.
    if offset > map_latest_offset:
        return RetainDecision.RETAIN
    if key is None:
        return RetainDecision.DROP_KEYLESS
    if offset < map_latest_offset_for_key:
        return RetainDecision.DROP_SUPERSEDED
    # Phase two of tombstone deletion: keep while the horizon is unset or still in the future.
    if is_tombstone and delete_horizon_ms != NO_DELETE_HORIZON and now_ms >= delete_horizon_ms:
        return RetainDecision.DROP_TOMBSTONE_EXPIRED
    return RetainDecision.RETAIN


def stamp_delete_horizon(current_horizon: int, now_ms: int, delete_retention_ms: int) -> int:
    """The horizon a kept tombstone (or emptied-transaction marker) carries after this round.

    An existing horizon is kept; otherwise it becomes ``now + delete.retention.ms`` (phase one). The sum
    saturates at Long.MAX_VALUE, so a huge delete.retention.ms means "keep for ever" (Java's sum would wrap
    negative).
    """
    if current_horizon != NO_DELETE_HORIZON:
        return current_horizon
    return min(now_ms + delete_retention_ms, _LONG_MAX)
