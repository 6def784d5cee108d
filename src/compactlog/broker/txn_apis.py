"""The transactional APIs: InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit, EndTxn
(Kafka's ``KafkaApis`` handlers in front of its ``TransactionCoordinator``), answered by the store's
transaction coordinator (:mod:`compactlog.transactions`, rules in :mod:`compactlog.transaction_transitions`).

Rules, as Kafka's on one broker:

* InitProducerId without a transactional id hands out a new producer id (epoch 0); one that names its
  current producer id and epoch (v3+, after an error) gets the same id with the epoch bumped. With a
  transactional id (an empty one is INVALID_REQUEST): the id's next epoch, which fences every older instance
  of the producer; a transaction the older one left open is aborted first, a commit it left half written is
  completed; ``transaction.timeout.ms`` outside ``[1, transaction.max.timeout.ms]`` is
  INVALID_TRANSACTION_TIMEOUT. (Kafka answers CONCURRENT_TRANSACTIONS while it aborts an open transaction
  and the client retries; the abort here is done before the answer, so the answer is the new epoch.)
* every request of a fenced producer is PRODUCER_FENCED from the versions that know that code
  (InitProducerId v4, AddPartitionsToTxn, AddOffsetsToTxn and EndTxn v2), INVALID_PRODUCER_EPOCH before;
  TxnOffsetCommit answers INVALID_PRODUCER_EPOCH, as the log append behind it does in Kafka;
* AddPartitionsToTxn v0-v3 (v4+ is broker to broker): a partition that does not exist is
  UNKNOWN_TOPIC_OR_PARTITION and the others of the request OPERATION_NOT_ATTEMPTED; else all or none are added;
* AddOffsetsToTxn adds the group's ``__consumer_offsets`` partition to the transaction; TxnOffsetCommit
  appends the offsets there as records of the transaction (:meth:`GroupMetadataManager.store_txn_offsets`),
  committed or dropped with it (the coordinator's completion listeners call ``complete_txn``);
* EndTxn writes the COMMIT or ABORT markers of the ongoing transaction into each of its partitions.
"""

from __future__ import annotations

from typing import Any

from ..errors import CompactLogError, ProducerFencedError
from ..limits import INT_MAX
from .context import BrokerContext
from .error_codes import (
    INVALID_PRODUCER_EPOCH,
    INVALID_REQUEST,
    NONE,
    OPERATION_NOT_ATTEMPTED,
    PRODUCER_FENCED,
    UNKNOWN_TOPIC_OR_PARTITION,
    error_code,
)

__all__ = ["handle_add_partitions_to_txn", "handle_end_txn", "handle_init_producer_id"]

MAX_EPOCH = 32767


def txn_error_code(error: CompactLogError, version: int, fenced_since: int | None) -> int:
    """Kafka's code for ``error`` in a transactional response of ``version``: a fenced producer is
    PRODUCER_FENCED from ``fenced_since`` on (KIP-588), INVALID_PRODUCER_EPOCH before and where it is None."""
    if isinstance(error, ProducerFencedError):
        return PRODUCER_FENCED if fenced_since is not None and version >= fenced_since else INVALID_PRODUCER_EPOCH
    return error_code(error)


async def handle_init_producer_id(context: BrokerContext, request: Any, version: int,
                                  listener: str) -> dict[str, Any]:
    transactional_id = request.transactional_id
    producer_id, epoch = (request.producer_id, request.producer_epoch) if version >= 3 else (-1, -1)
    if transactional_id == "":
        return _init_answer(INVALID_REQUEST, -1, -1)
    if transactional_id is None and producer_id >= 0 and 0 <= epoch < MAX_EPOCH:
        return _init_answer(NONE, producer_id, epoch + 1)
    expected = (producer_id, epoch) if producer_id >= 0 else None
    try:
        producer_id, epoch = await context.run(context.store.transactions.init_producer, transactional_id,
                                               min(request.transaction_timeout_ms, INT_MAX), expected)
    except CompactLogError as e:
        return _init_answer(txn_error_code(e, version, 4), -1, -1)
    return _init_answer(NONE, producer_id, epoch)


def _init_answer(code: int, producer_id: int, epoch: int) -> dict[str, Any]:
    return {"throttle_time_ms": 0, "error_code": code, "producer_id": producer_id, "producer_epoch": epoch}


async def handle_add_partitions_to_txn(context: BrokerContext, request: Any, version: int,
                                       listener: str) -> dict[str, Any]:
    topics = [(topic.name, list(topic.partitions)) for topic in request.v3_and_below_topics]
    unknown = await context.run(_unknown_partitions, context, topics)
    if unknown:
        codes = {tp: UNKNOWN_TOPIC_OR_PARTITION if tp in unknown else OPERATION_NOT_ATTEMPTED
                 for name, partitions in topics for tp in ((name, p) for p in partitions)}
    else:
        try:
            await context.run(context.store.transactions.add_to_transaction, request.v3_and_below_transactional_id,
                              request.v3_and_below_producer_id, request.v3_and_below_producer_epoch,
                              [(name, p) for name, partitions in topics for p in partitions])
            code = NONE
        except CompactLogError as e:
            code = txn_error_code(e, version, 2)
        codes = {(name, p): code for name, partitions in topics for p in partitions}
    return {"throttle_time_ms": 0, "results_by_topic_v3_and_below": [
        {"name": name, "results_by_partition": [{"partition_index": p, "partition_error_code": codes[name, p]}
                                                for p in partitions]} for name, partitions in topics]}


def _unknown_partitions(context: BrokerContext, topics: list[tuple[str, list[int]]]) -> set[tuple[str, int]]:
    unknown: set[tuple[str, int]] = set()
    for name, partitions in topics:
        try:
            count = context.store.partitions(name)
        except CompactLogError:
            count = 0
        unknown.update((name, p) for p in partitions if not 0 <= p < count)
    return unknown


async def handle_end_txn(context: BrokerContext, request: Any, version: int, listener: str) -> dict[str, Any]:
    try:
        await context.run(context.store.transactions.end_ongoing_transaction, request.transactional_id,
                          request.producer_id, request.producer_epoch, request.committed)
    except CompactLogError as e:
        return {"throttle_time_ms": 0, "error_code": txn_error_code(e, version, 2)}
    return {"throttle_time_ms": 0, "error_code": NONE}
