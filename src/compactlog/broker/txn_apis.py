"""The transactional APIs: InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit, EndTxn
(Kafka's ``KafkaApis`` handlers in front of its ``TransactionCoordinator``), answered by the store's
transaction coordinator (:mod:`compactlog.transactions`, rules in :mod:`compactlog.transaction_transitions`).
Their state is that coordinator's ``.transactions/`` files, not a compacted ``__transaction_state`` topic as
in Kafka: the store's Python producers, in other processes, share the same transactional ids through those
files under their ``flock``, and one record of the state is what keeps both kinds of producer fenced alike.

Rules, as Kafka's on one broker:

* InitProducerId without a transactional id hands out a new producer id (epoch 0); one that names its
  current producer id and epoch (v3+, after an error) gets the same id with the epoch bumped. With a
  transactional id (an empty one is INVALID_REQUEST): the id's next epoch, which fences every older instance
  of the producer; a commit the older one left half written is completed; a transaction it left
  ``Ongoing`` is fenced and aborted and answered CONCURRENT_TRANSACTIONS, as Kafka does: the client retries
  and gets the next epoch; ``transaction.timeout.ms`` outside ``[1, transaction.max.timeout.ms]`` is
  INVALID_TRANSACTION_TIMEOUT.
* every request of a fenced producer is PRODUCER_FENCED from the versions that know that code
  (InitProducerId v4, AddPartitionsToTxn, AddOffsetsToTxn and EndTxn v2), INVALID_PRODUCER_EPOCH before;
  TxnOffsetCommit answers INVALID_PRODUCER_EPOCH, as the log append behind it does in Kafka;
* AddPartitionsToTxn v0-v3 (v4+ is broker to broker): a partition that does not exist is
  UNKNOWN_TOPIC_OR_PARTITION and the others of the request OPERATION_NOT_ATTEMPTED; else all or none are added;
* AddOffsetsToTxn adds the group's ``__consumer_offsets`` partition to the transaction; TxnOffsetCommit
  appends the offsets there as records of the transaction (:meth:`GroupMetadataManager.store_txn_offsets`),
  committed or dropped with it: the transaction coordinator calls the manager's ``complete_txn`` once it has
  written the markers (:func:`attach`); offsets of a transaction ended by another process's coordinator (a
  cleaner pass's expiry) are settled by the manager from the markers it finds in the log;
* TxnOffsetCommit checks the group as Kafka's ``validateOffsetCommit`` (transactional;
  :meth:`GroupMetadata.validate_offset_commit`): a consumer that
  assigns its partitions itself sends no member id, instance id or generation, and is accepted, as is any
  generation < 0 while the group is Empty; else a ``group.instance.id`` must be registered
  (UNKNOWN_MEMBER_ID) to this member id (FENCED_INSTANCE_ID), a member id without one must be a member
  (UNKNOWN_MEMBER_ID), and the generation the group's (ILLEGAL_GENERATION). A group not known yet is
  created empty, as Kafka does; metadata longer than ``offset.metadata.max.bytes`` is
  OFFSET_METADATA_TOO_LARGE, as in OffsetCommit;
* EndTxn writes the COMMIT or ABORT markers of the ongoing transaction into each of its partitions and
  answers once they are durable. Kafka answers once PrepareCommit/PrepareAbort is durable and writes the
  markers after, answering the id's next AddPartitionsToTxn CONCURRENT_TRANSACTIONS until they are done;
  librdkafka retries that after 20 ms (``rdkafka_txnmgr.c``), several times what the markers take here
  (one append each, fsynced together), so writing them before the answer is the faster of the two for a
  producer that begins its next transaction at once, and the state never has a Prepare* to wait on.
"""

from __future__ import annotations

from typing import Any

from ..coordinator.group_metadata import UNKNOWN_MEMBER
from ..coordinator.group_metadata_manager import OFFSETS_TOPIC, OffsetAndMetadata
from ..errors import CompactLogError, ProducerFencedError
from ..limits import INT_MAX
from .context import BrokerContext
from .error_codes import (
    INVALID_GROUP_ID,
    INVALID_PRODUCER_EPOCH,
    INVALID_REQUEST,
    NONE,
    OPERATION_NOT_ATTEMPTED,
    PRODUCER_FENCED,
    UNKNOWN_TOPIC_OR_PARTITION,
    error_code,
)
from .group_apis import offset_metadata_too_large, partition_commit_error

__all__ = ["attach", "handle_add_offsets_to_txn", "handle_add_partitions_to_txn", "handle_end_txn",
           "handle_init_producer_id", "handle_txn_offset_commit"]

MAX_EPOCH = 32767


def attach(context: BrokerContext) -> None:
    """Have the store's transaction coordinator complete the group metadata manager's transactional offsets
    whenever it writes a transaction's markers (EndTxn, InitProducerId's abort, the expiry's)."""
    context.store.transactions.completion_listeners.append(context.groups.manager.complete_txn)


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
    # One trip to the storage threads for the check and the add (each trip is a thread handoff).
    unknown, code = await context.run(_add_known_partitions, context, request.v3_and_below_transactional_id,
                                      request.v3_and_below_producer_id, request.v3_and_below_producer_epoch,
                                      topics, version)
    if unknown:
        codes = {tp: UNKNOWN_TOPIC_OR_PARTITION if tp in unknown else OPERATION_NOT_ATTEMPTED
                 for name, partitions in topics for tp in ((name, p) for p in partitions)}
    else:
        codes = {(name, p): code for name, partitions in topics for p in partitions}
    return {"throttle_time_ms": 0, "results_by_topic_v3_and_below": [
        {"name": name, "results_by_partition": [{"partition_index": p, "partition_error_code": codes[name, p]}
                                                for p in partitions]} for name, partitions in topics]}


def _add_known_partitions(context: BrokerContext, transactional_id: str, producer_id: int, epoch: int,
                          topics: list[tuple[str, list[int]]], version: int) -> tuple[set[tuple[str, int]], int]:
    """AddPartitionsToTxn in the storage thread: the partitions that do not exist (then none is added), or
    none and the code of adding them all."""
    unknown = _unknown_partitions(context, topics)
    if unknown:
        return unknown, NONE
    try:
        context.store.transactions.add_to_transaction(transactional_id, producer_id, epoch,
                                                      [(name, p) for name, partitions in topics for p in partitions])
    except CompactLogError as e:
        return unknown, txn_error_code(e, version, 2)
    return unknown, NONE


async def _add_to_transaction(context: BrokerContext, transactional_id: str, producer_id: int, epoch: int,
                              partitions: list[tuple[str, int]], version: int) -> int:
    try:
        await context.run(context.store.transactions.add_to_transaction, transactional_id, producer_id, epoch,
                          partitions)
    except CompactLogError as e:
        return txn_error_code(e, version, 2)
    return NONE


async def handle_add_offsets_to_txn(context: BrokerContext, request: Any, version: int,
                                    listener: str) -> dict[str, Any]:
    partition = context.groups.manager.partition_for(request.group_id)
    code = await _add_to_transaction(context, request.transactional_id, request.producer_id, request.producer_epoch,
                                     [(OFFSETS_TOPIC, partition)], version)
    return {"throttle_time_ms": 0, "error_code": code}


async def handle_txn_offset_commit(context: BrokerContext, request: Any, version: int,
                                   listener: str) -> dict[str, Any]:
    asked = [(topic.name, p.partition_index, OffsetAndMetadata(
        p.committed_offset, p.committed_leader_epoch if version >= 2 else -1, p.committed_metadata or ""))
        for topic in request.topics for p in topic.partitions]
    missing = await context.run(_unknown_partitions, context,
                                [(t, [p]) for t, p, _ in asked])
    too_large = {(t, p) for t, p, o in asked
                 if offset_metadata_too_large(o.metadata, context.config.offset_metadata_max_bytes)}
    code = await _txn_offset_commit(context, request, version, {(t, p): o for t, p, o in asked
                                                                 if (t, p) not in missing | too_large})
    by_topic: dict[str, list[dict[str, int]]] = {}
    for topic, partition, _ in asked:
        by_topic.setdefault(topic, []).append({"partition_index": partition, "error_code": partition_commit_error(
            (topic, partition) in missing, (topic, partition) in too_large, code)})
    return {"throttle_time_ms": 0,
            "topics": [{"name": name, "partitions": partitions} for name, partitions in by_topic.items()]}


async def _txn_offset_commit(context: BrokerContext, request: Any, version: int,
                             offsets: dict[tuple[str, int], OffsetAndMetadata]) -> int:
    group_id = request.group_id
    if not group_id:
        return INVALID_GROUP_ID
    member_id, instance_id, generation = ((request.member_id, request.group_instance_id, request.generation_id)
                                          if version >= 3 else (UNKNOWN_MEMBER, None, -1))
    group = context.groups.group_for_commit(group_id)
    code = group.validate_offset_commit(member_id, instance_id, generation, transactional=True)
    if code != NONE:
        return code
    try:
        await context.run(_store_txn_offsets, context, group_id, request.transactional_id, request.producer_id,
                          request.producer_epoch, offsets)
    except CompactLogError as e:
        return txn_error_code(e, version, None)
    return NONE


def _store_txn_offsets(context: BrokerContext, group_id: str, transactional_id: str, producer_id: int, epoch: int,
                       offsets: dict[tuple[str, int], OffsetAndMetadata]) -> None:
    partition = (OFFSETS_TOPIC, context.groups.manager.partition_for(group_id))
    context.store.transactions.check_in_transaction(transactional_id, producer_id, epoch, partition)
    if offsets:
        context.groups.manager.store_txn_offsets(group_id, producer_id, epoch, offsets)


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
