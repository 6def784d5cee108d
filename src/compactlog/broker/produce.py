"""Produce: record batches from the wire appended to the partitions' logs.

Rules (Kafka's ``ReplicaManager.appendRecords`` on one replica):

* ``acks`` is 0, 1 or -1 (all); anything else is INVALID_REQUIRED_ACKS. With one replica 1 and -1 mean the
  same: the response goes out once the records are durable, their fsync shared with the other requests of
  the moment (:mod:`.group_commit`). ``acks=0`` gets no response at all;
* a partition's records are decoded and checked (CRC, v2 format; Kafka's LogValidator in
  :mod:`.log_validator`) before any is appended: a bad batch is CORRUPT_MESSAGE, a batch larger than
  ``max.message.bytes`` (or whose records decompress past 32 times that) MESSAGE_TOO_LARGE, and the
  partition's batches are all refused;
* transactional batches come in a request with a transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED
  for every partition) and only to a partition of the ongoing transaction of their producer id and epoch
  (:meth:`compactlog.transactions.TransactionCoordinator.check_in_transaction`: INVALID_TXN_STATE,
  INVALID_PRODUCER_ID_MAPPING, or INVALID_PRODUCER_EPOCH for a fenced one); they are appended as the
  transaction's rows, which read_committed readers see once its COMMIT marker is written;
* each batch is one append; an idempotent batch (producer id >= 0) carries its producer id, epoch and
  base sequence to the store, which answers a retried batch with its original offsets (Kafka answers a
  duplicate with NONE and the first offset it stored), a sequence gap with OUT_OF_ORDER_SEQUENCE_NUMBER and
  an older epoch with INVALID_PRODUCER_EPOCH;
* a keyless record on a compacted topic is INVALID_RECORD (the store checks it); a control batch from a
  client is INVALID_RECORD (only the broker writes markers); a partition of an internal topic
  (``__consumer_offsets``: only the group coordinator writes it) is INVALID_TOPIC_EXCEPTION, as Kafka's
  "Cannot append to internal topic";
* the base offset answered is the first batch's first offset, ``log_append_time_ms`` the append time for
  LogAppendTime topics and -1 otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from ..errors import CompactLogError, InvalidTopicError
from ..log import Log
from ..producer_state import check_batch_fields
from ..protocol.record_batch import ProducedBatch, decode_batches
from ..record import check_record_sizes, check_timestamp_extremes
from ..store import Store
from ..topic_metadata import is_internal
from .context import BrokerContext, open_log
from .error_codes import INVALID_REQUIRED_ACKS, NONE, TRANSACTIONAL_ID_AUTHORIZATION_FAILED, error_code
from .log_validator import check_batches, check_records, has_transactional_records

__all__ = ["handle_produce"]

NO_TIMESTAMP = -1


async def handle_produce(context: BrokerContext, request: Any, version: int,
                         listener: str) -> dict[str, Any] | asyncio.Future[dict[str, Any]] | None:
    """Append now; the response waits for the fsync (a future: the connection handles its next requests
    meanwhile, so pipelined Produce requests append while the earlier ones' fsync runs)."""
    acks = request.acks
    work = [(topic.name, p.index, p.records) for topic in request.topic_data for p in topic.partition_data]
    if request.transactional_id is None and has_transactional_records([records for _, _, records in work]):
        results = [_partition_result(partition, TRANSACTIONAL_ID_AUTHORIZATION_FAILED, -1, NO_TIMESTAMP, -1, None)
                   for _, partition, _ in work]
        return None if acks == 0 else _response(work, results)
    if acks not in (0, 1, -1):
        results = [_partition_result(partition, INVALID_REQUIRED_ACKS, -1, NO_TIMESTAMP, -1, None)
                   for _, partition, _ in work]
        return _response(work, results)
    results, logs = await context.run(_append_all, context.store, work, request.transactional_id)
    durable = context.group_commit.durable(logs)
    if acks == 0:
        with contextlib.suppress(CompactLogError):  # a failed fsync: no one to tell
            await asyncio.shield(durable)  # the round's future is shared: cancelling this wait must not cancel it
        _answer(context, work, results, durable)
        return None
    answered: asyncio.Future[dict[str, Any]] = durable.get_loop().create_future()
    # A callback of the round, not a Task: it runs once the fsync has returned (or failed).
    durable.add_done_callback(lambda round_: _settle(answered, context, work, results, round_))
    return answered


def _settle(answered: asyncio.Future[dict[str, Any]], context: BrokerContext,
            work: list[tuple[str, int, bytes | None]], results: list[dict[str, Any]],
            durable: asyncio.Future[None]) -> None:
    if durable.cancelled():  # the server shuts down: the request stays unanswered
        answered.cancel()
        return
    try:
        answered.set_result(_answer(context, work, results, durable))
    except Exception as e:  # not a storage error: a bug, which closes the connection (socket_server)
        answered.set_exception(e)


def _answer(context: BrokerContext, work: list[tuple[str, int, bytes | None]], results: list[dict[str, Any]],
            durable: asyncio.Future[None]) -> dict[str, Any]:
    """The response once the group-commit round is done. A failed fsync fails every partition that was
    appended, as none can know its records survived; an error that is not a CompactLogError is raised."""
    error = durable.exception()
    if error is not None:
        if not isinstance(error, CompactLogError):
            raise error
        for result in results:
            if result["error_code"] == NONE:
                result.update(error_code=error_code(error), base_offset=-1, error_message=str(error))
    context.purgatory.notify((topic, partition) for topic, partition, _ in work)
    return _response(work, results)


def _response(work: list[tuple[str, int, bytes | None]], results: list[dict[str, Any]]) -> dict[str, Any]:
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, _, _), result in zip(work, results, strict=True):
        by_topic.setdefault(topic, []).append(result)
    return {"responses": [{"name": name, "partition_responses": partitions} for name, partitions in by_topic.items()],
            "throttle_time_ms": 0}


def _partition_result(partition: int, code: int, base_offset: int, append_time: int, log_start: int,
                      message: str | None) -> dict[str, Any]:
    return {"index": partition, "error_code": code, "base_offset": base_offset, "log_append_time_ms": append_time,
            "log_start_offset": log_start, "record_errors": [], "error_message": message}


def _append_all(store: Store, work: list[tuple[str, int, bytes | None]],
                transactional_id: str | None) -> tuple[list[dict[str, Any]], list[Log]]:
    """Append every partition's batches, unflushed; returns the partitions' results and the logs appended to."""
    logs: list[Log] = []
    return [_append_partition(store, topic, partition, records, logs, transactional_id)
            for topic, partition, records in work], logs


def _append_partition(store: Store, topic: str, partition: int, records: bytes | None,
                      logs: list[Log], transactional_id: str | None) -> dict[str, Any]:
    try:
        if is_internal(topic):  # Kafka's ReplicaManager, for a client's request (internalTopicsAllowed false)
            raise InvalidTopicError(f"Cannot append to internal topic {topic}")
        log = open_log(store, topic, partition)
        logs.append(log)
        config = store.topic_config(topic)
        where = f"{topic}-{partition}"
        check_records(records, where)
        batches = decode_batches(records or b"", config.max_message_bytes)
        check_batches(batches, compacted=config.compact, max_message_bytes=config.max_message_bytes, where=where)
        base_offset = -1
        with log.locked():  # one catching up with the partition's directory for the request's batches
            for batch in batches:
                if batch.is_transactional and transactional_id is not None:
                    store.transactions.check_in_transaction(transactional_id, batch.producer_id,
                                                            batch.producer_epoch, (topic, partition))
                store.check_writable(f"append to {where}")
                first = _append_batch(log, batch, config.max_message_bytes, topic)
                if base_offset < 0:
                    base_offset = first
            log_start_offset = log.log_start_offset
        log_append = config.message_timestamp_type == "LogAppendTime"
        return _partition_result(partition, NONE, base_offset, store.clock() if log_append else NO_TIMESTAMP,
                                 log_start_offset, None)
    except CompactLogError as e:
        return _partition_result(partition, error_code(e), -1, NO_TIMESTAMP, -1, str(e))


def _append_batch(log: Log, batch: ProducedBatch, max_message_bytes: int, topic: str) -> int:
    """Append one checked batch (unflushed) as :meth:`compactlog.store.Store.append` appends a table of its
    records, with the same checks (timestamps, ``max.message.bytes`` per record, the producer fields), from
    the decoded columns directly: no table of SCHEMA is built. Returns its first offset (a duplicate's
    original one)."""
    columns = batch.columns
    check_timestamp_extremes(columns.min_timestamp, columns.max_timestamp)
    check_record_sizes(columns.key, columns.value, columns.headers, columns.key_value_bytes,
                       max_message_bytes=max_message_bytes, topic=topic)
    if batch.producer_id < 0:
        return log.append(columns, flush=False)[0]
    check_batch_fields(batch.producer_id, batch.producer_epoch, batch.base_sequence)
    return log.append_producer_batch(columns, batch.producer_id, batch.producer_epoch, batch.base_sequence,
                                     batch.is_transactional, flush=False)[0]
