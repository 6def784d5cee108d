"""The record rule of a cleaning round as scalar pure functions: the specification the vectorised kernel
(:func:`.rewrite.rewrite_rows`) implements, checked against it column by column by a property test
(``tests/property/test_retain_kernel.py``).

This module owns Kafka's record-level decision (``Cleaner.shouldRetainRecord`` after the batch-level
``checkBatchRetention``, reference §1.8), the fate of the rows it drops (emptied when a live producer needs
them) and the delete-horizon stamp (§1.11), one record at a time.

Record rule (:func:`should_retain_record`), first match wins:

1. data of an aborted transaction -> dropped, whatever its key (``DROP_ABORTED``);
2. offset beyond the offset map of this round (``offset > map.latestOffset``) -> kept, even without a key,
   control rows too;
3. control rows: a transaction marker (COMMIT or ABORT) is kept while its transaction still has records in
   the round's segments, or while its delete horizon is unset or in the future (``DROP_MARKER_EXPIRED``
   otherwise); an emptied batch row is kept only while it is its producer's last record
   (``DROP_EMPTY_BATCH``); any other control row is kept;
4. no key -> dropped and counted as invalid (``DROP_KEYLESS``; a compacted topic refuses such records on
   append, but some may have been written while the policy was ``delete``);
5. keyed: kept iff ``offset >= map[key]`` (the newest offset of that key in the mapped range, -1 if absent)
   and, for a tombstone, its delete horizon has not been reached (``horizon == -1 or now < horizon``).

A dropped row that is the last record of a producer that has not expired is written emptied instead
(Kafka keeps the empty batch for the producer's sequence): no key, value or headers, control type
EMPTY_BATCH (:func:`clean_record`).

Two-phase tombstone deletion (KIP-534, KAFKA-8522): a tombstone is never dropped by the round that first finds
it to be the newest record of its key. That round keeps it and stamps a delete horizon of ``now +
delete.retention.ms`` (:func:`stamp_delete_horizon`; the cleaning time, not the record timestamp, KAFKA-4529).
A later round that runs at or after the horizon drops it (rule 5). Consumers thus get at least
delete.retention.ms to see the tombstone, and a log that is never cleaned again keeps it. A kept marker whose
transaction has no records left is stamped the same way (rule 3). Kafka stores the horizon per batch;
compactlog stores it per record (the ``delete_horizon_ms`` column, -1 = not stamped).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from ..limits import LONG_MAX
from ..record import CONTROL_ABORT, CONTROL_COMMIT, CONTROL_EMPTY_BATCH, CONTROL_NONE, NO_DELETE_HORIZON


class RetainDecision(enum.Enum):
    """Why a record is kept or dropped by a cleaning round."""

    RETAIN = "retain"
    DROP_ABORTED = "drop: data of an aborted transaction"
    DROP_KEYLESS = "drop: no key (invalid in a compacted topic)"
    DROP_SUPERSEDED = "drop: a newer record has the same key"
    DROP_TOMBSTONE_EXPIRED = "drop: tombstone past its delete horizon"
    DROP_MARKER_EXPIRED = "drop: transaction marker past its delete horizon, its transaction gone"
    DROP_EMPTY_BATCH = "drop: emptied batch no longer its producer's last record"

    @property
    def retained(self) -> bool:
        return self is RetainDecision.RETAIN


def should_retain_record(
    *,
    offset: int,
    key: bytes | None,
    is_tombstone: bool,
    control_type: int,
    map_latest_offset_for_key: int,
    map_latest_offset: int,
    delete_horizon_ms: int,
    now_ms: int,
    batch_aborted: bool,
    marker_has_data: bool = False,
    is_producer_last: bool = False,
) -> RetainDecision:
    """Decide one record (rules in the module docstring).

    ``control_type`` is the row's (``CONTROL_NONE`` for data). ``map_latest_offset_for_key`` is the offset
    map's entry for ``key`` (-1 if absent); ``map_latest_offset`` is the map's latest offset (the new
    checkpoint - 1). ``delete_horizon_ms`` is the record's stamped horizon (-1 = none). ``batch_aborted`` is
    Kafka's ``discardBatchRecords``: true for data of an aborted transaction (never for a control row).
    ``marker_has_data``: a marker's transaction still has records in the round's segments.
    ``is_producer_last``: the row is the last record of a producer that has not expired.
    """
    # Kafka checks the batch-level discard before anything else: aborted data goes regardless of keys.
    if batch_aborted:
        return RetainDecision.DROP_ABORTED
    # Records beyond this round's map (the map filled up) are left for a later round.
    if offset > map_latest_offset:
        return RetainDecision.RETAIN
    # Control rows are never looked up in the map (a data key equal to a marker key cannot affect them).
    if control_type in (CONTROL_ABORT, CONTROL_COMMIT):
        if marker_has_data or not _horizon_passed(delete_horizon_ms, now_ms):
            return RetainDecision.RETAIN
        return RetainDecision.DROP_MARKER_EXPIRED
    if control_type == CONTROL_EMPTY_BATCH:
        return RetainDecision.RETAIN if is_producer_last else RetainDecision.DROP_EMPTY_BATCH
    if control_type != CONTROL_NONE:
        return RetainDecision.RETAIN
    if key is None:
        return RetainDecision.DROP_KEYLESS
    if offset < map_latest_offset_for_key:
        return RetainDecision.DROP_SUPERSEDED
    # Phase two of tombstone deletion: keep while the horizon is unset or still in the future.
    if is_tombstone and _horizon_passed(delete_horizon_ms, now_ms):
        return RetainDecision.DROP_TOMBSTONE_EXPIRED
    return RetainDecision.RETAIN


def _horizon_passed(delete_horizon_ms: int, now_ms: int) -> bool:
    return delete_horizon_ms != NO_DELETE_HORIZON and now_ms >= delete_horizon_ms


@dataclass(frozen=True, slots=True)
class CleanedRecord:
    """What a round writes for one row: nothing, the row, or the row emptied; and the horizon it carries."""

    decision: RetainDecision
    emptied: bool  # dropped, but written as an EMPTY_BATCH row without key, value or headers
    delete_horizon_ms: int

    @property
    def written(self) -> bool:
        return self.decision.retained or self.emptied


def clean_record(
    *,
    offset: int,
    key: bytes | None,
    value_is_null: bool,
    control_type: int,
    map_latest_offset_for_key: int,
    map_latest_offset: int,
    delete_horizon_ms: int,
    now_ms: int,
    delete_retention_ms: int,
    batch_aborted: bool,
    marker_has_data: bool,
    is_producer_last: bool,
) -> CleanedRecord:
    """One row through a round: the record rule, then emptying, then the delete-horizon stamp of a kept
    tombstone (a data row with a null value) or of a kept marker whose transaction has no records left."""
    is_data = control_type == CONTROL_NONE
    decision = should_retain_record(
        offset=offset, key=key, is_tombstone=is_data and value_is_null, control_type=control_type,
        map_latest_offset_for_key=map_latest_offset_for_key, map_latest_offset=map_latest_offset,
        delete_horizon_ms=delete_horizon_ms, now_ms=now_ms, batch_aborted=batch_aborted,
        marker_has_data=marker_has_data, is_producer_last=is_producer_last)
    if not decision.retained:
        return CleanedRecord(decision, is_producer_last, delete_horizon_ms)
    marker_without_data = control_type in (CONTROL_ABORT, CONTROL_COMMIT) and not marker_has_data
    if (is_data and value_is_null) or marker_without_data:
        delete_horizon_ms = stamp_delete_horizon(delete_horizon_ms, now_ms, delete_retention_ms)
    return CleanedRecord(decision, False, delete_horizon_ms)


def stamp_delete_horizon(current_horizon: int, now_ms: int, delete_retention_ms: int) -> int:
    """The horizon a kept tombstone (or emptied-transaction marker) carries after this round.

    An existing horizon is kept; otherwise it becomes ``now + delete.retention.ms`` (phase one). The sum
    saturates at Long.MAX_VALUE, so a huge delete.retention.ms means "keep for ever" (Java's sum would wrap
    negative).
    """
    if current_horizon != NO_DELETE_HORIZON:
        return current_horizon
    return min(now_ms + delete_retention_ms, LONG_MAX)  # the horizon column is int64
