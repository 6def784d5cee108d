"""Kafka's checks of what a client produces to a partition (``ProduceRequest.validateRecords``,
``LogValidator.validateBatch``, ``KafkaApis.handleProduceRequest``), as pure functions of the bytes and
decoded batches, each answered with Kafka's error code.

Rules (Kafka 3.x for Produce v3+, the versions this broker speaks):

* before decoding (:func:`check_records`): a partition's records hold at least one batch and the first is
  magic 2 (v0/v1 message sets are INVALID_RECORD, as ``ProduceRequest.validateRecords`` answers);
* per request (:func:`has_transactional_records`): transactional batches in a request without a
  transactional id are TRANSACTIONAL_ID_AUTHORIZATION_FAILED for every partition (``KafkaApis``: no id, not
  authorised); with one, each partition's batch is checked against its producer's ongoing transaction by the
  transaction coordinator, in :mod:`.produce`;
* per batch, once decoded (:func:`check_batches`): exactly one batch (v2 batches are sent one per
  partition); no larger than ``max.message.bytes`` (MESSAGE_TOO_LARGE); ``recordsCount`` > 0 and equal to
  ``lastOffsetDelta + 1``; an idempotent batch (producer id >= 0) has a sequence >= 0; no control batch; no
  keyless record on a compacted topic (all INVALID_RECORD).

Offset deltas inside a batch that do not run 0..n-1 are not refused: Kafka rewrites such a batch with
consecutive offsets ("older clients do not implement the inner offsets correctly"), and the log here
assigns every record its offset anyway, in the batch's order.
"""

from __future__ import annotations

from ..errors import InvalidRecordError, RecordTooLargeError
from ..protocol.record_batch import MAGIC, TRANSACTIONAL_BIT, ProducedBatch
from ..record import check_keyed

__all__ = ["check_batches", "check_records", "has_transactional_records"]

MAGIC_POSITION = 16  # the same byte in v0/v1 messages and v2 batches
ATTRIBUTES_LOW_BYTE = 22  # attributes is an int16 at byte 21: its low byte holds the transactional bit


def check_records(records: bytes | None, where: str) -> None:
    """Refuse a partition's records without a batch, or whose first batch is not magic 2."""
    if not records:
        raise InvalidRecordError(f"{where}: a produce request must carry one record batch per partition")
    if len(records) > MAGIC_POSITION and records[MAGIC_POSITION] != MAGIC:
        raise InvalidRecordError(f"{where}: a batch of magic {records[MAGIC_POSITION]}; produce requests "
                                 f"v3 and later carry only magic {MAGIC} batches")


def has_transactional_records(partitions_records: list[bytes | None]) -> bool:
    """Whether any partition's first batch is transactional (Kafka's ``RequestUtils.hasTransactionalRecords``
    looks at the first batch of each partition; v0/v1 messages are never transactional)."""
    return any(records is not None and len(records) > ATTRIBUTES_LOW_BYTE and records[MAGIC_POSITION] == MAGIC
               and records[ATTRIBUTES_LOW_BYTE] & TRANSACTIONAL_BIT for records in partitions_records)


def check_batches(batches: list[ProducedBatch], *, compacted: bool, max_message_bytes: int, where: str) -> None:
    """Kafka's checks of a partition's decoded batches, before any is appended."""
    if len(batches) != 1:
        raise InvalidRecordError(f"{where}: {len(batches)} record batches; a produce request carries exactly one "
                                 "per partition")
    for batch in batches:
        if batch.is_control:
            raise InvalidRecordError(f"{where}: a client may not produce control batches")
        if batch.size_in_bytes > max_message_bytes:
            raise RecordTooLargeError(f"{where}: a record batch of {batch.size_in_bytes} bytes is larger than "
                                      f"max.message.bytes={max_message_bytes}")
        if batch.record_count <= 0 or batch.last_offset_delta + 1 != batch.record_count:
            raise InvalidRecordError(f"{where}: a batch of {batch.record_count} records whose lastOffsetDelta is "
                                     f"{batch.last_offset_delta}; they must agree (count = lastOffsetDelta + 1)")
        if batch.producer_id >= 0 and batch.base_sequence < 0:
            raise InvalidRecordError(f"{where}: sequence {batch.base_sequence} in a batch of producer id "
                                     f"{batch.producer_id}")
        check_keyed(compacted, batch.columns.key.null_count, where)
