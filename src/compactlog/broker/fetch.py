"""Fetch and ListOffsets: the partitions' records read out as v2 record batches.

Fetch rules (Kafka's ``ReplicaManager.fetchMessages`` and ``DelayedFetch`` on one replica):

* the high watermark is the log end offset (one replica); the last stable offset the store's (the first
  offset of the oldest open transaction); a fetch offset below the log start or above the high watermark
  is OFFSET_OUT_OF_RANGE, one at the high watermark returns no records;
* a fetch offset that compaction cleaned away returns the records from the next offset still there; the
  batches keep the offsets' gaps;
* ``isolation_level`` 0 reads up to the high watermark, 1 (read_committed) up to the last stable offset,
  with the aborted transactions that may hold data in the range (producer id, first offset), from which the
  client drops aborted records; transaction markers go out as control batches either way;
* byte limits: records are counted at their key, value and header bytes plus :data:`RECORD_OVERHEAD`; a
  partition returns at most ``partition_max_bytes`` and the whole response at most ``max_bytes`` capped by
  the broker's ``fetch.max.bytes`` (and ``min_bytes`` at most that), except that the first partition with
  records returns at least one record (so a record larger than the limits is never stuck);
* the response waits up to ``max_wait_ms`` until ``min_bytes`` are there, woken by appends through
  :class:`~compactlog.broker.fetch_purgatory.FetchPurgatory`; a partition error answers at once; a fetch
  whose connection closes while it waits is dropped (no response, its wait released).

ListOffsets (Kafka's ``Partition.fetchOffsetForTimestamp``): timestamp -2 is the log start offset and -1
the last fetchable offset (the high watermark; the last stable offset for read_committed), both with
timestamp -1; -3 (MAX_TIMESTAMP, KIP-734) the offset and timestamp of the record with the largest
timestamp (the first of equal ones); any other timestamp the offset and the own timestamp of the first
record whose timestamp is at least it. A record found at or past the last fetchable offset, or none, is
answered as offset -1 and timestamp -1. Transaction markers are never the record found.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..active_segment import ActiveSegment
from ..columns import binary_lengths, from_numpy, to_numpy
from ..errors import CompactLogError, OffsetOutOfRangeError
from ..log import reads
from ..network.request_channel import CONNECTION_CLOSED
from ..protocol.record_batch import CREATE_TIME, LOG_APPEND_TIME, encode_batches
from ..record import CONTROL_EMPTY_BATCH, header_bytes
from ..store import Store
from .context import BrokerContext, open_log
from .error_codes import NONE, error_code
from .fetch_read_ahead import ReadAhead, ReadAheadKey, is_usable, worth_reading_ahead

__all__ = ["handle_fetch", "handle_list_offsets", "records_bytes"]

READ_COMMITTED = 1
RECORD_OVERHEAD = 20  # about a v2 record's own framing (length, attributes, deltas, lengths)
FETCH_COLUMNS = ["offset", "timestamp", "key", "value", "headers", "producer_id", "producer_epoch", "sequence",
                 "is_transactional", "control_type", "delete_horizon_ms"]
EARLIEST, LATEST, MAX_TIMESTAMP = -2, -1, -3


@dataclass
class PartitionFetch:
    """One partition's part of a Fetch: what was asked and what was read."""

    topic: str
    partition: int
    fetch_offset: int
    max_bytes: int
    error: int = NONE
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    aborted: list[dict[str, int]] | None = None
    records: bytes = b""
    next_offset: int = -1  # the offset after the last record answered
    read_ahead: bool = False  # answered with records read ahead (:mod:`.fetch_read_ahead`)


async def handle_fetch(context: BrokerContext, request: Any, version: int, listener: str) -> dict[str, Any] | None:
    committed = request.isolation_level == READ_COMMITTED
    max_bytes = min(request.max_bytes, context.config.fetch_max_bytes)  # Kafka's KafkaApis.handleFetchRequest
    min_bytes = min(request.min_bytes, max_bytes)
    deadline = time.monotonic() + max(0, request.max_wait_ms) / 1000
    partitions = [PartitionFetch(t.topic, p.partition, p.fetch_offset, p.partition_max_bytes)
                  for t in request.topics for p in t.partitions]
    # One partition: a consumer's fetch, which may find its records read ahead (either isolation level:
    # librdkafka's consumers read_committed by default).
    key = (_read_ahead_key(partitions[0], max_bytes, committed) if len(partitions) == 1
           and worth_reading_ahead(partitions[0].max_bytes, max_bytes) else None)
    ahead = await context.read_aheads.take(key) if key is not None else None
    while True:
        read = await context.run(_read_all, context.store, partitions, committed, max_bytes, ahead)
        ahead = None  # a read after waiting reads afresh
        size = sum(len(p.records) for p in read)
        remaining = deadline - time.monotonic()
        if size >= min_bytes or remaining <= 0 or any(p.error != NONE for p in read):
            break
        closed = CONNECTION_CLOSED.get()
        await context.purgatory.wait([(p.topic, p.partition) for p in partitions], remaining, closed)
        if closed is not None and closed.done():
            return None  # the client has gone: nobody would read the response
    if key is not None and read[0].error == NONE and read[0].records:
        context.read_aheads.used += read[0].read_ahead
        following = dataclasses.replace(partitions[0], fetch_offset=read[0].next_offset)
        context.read_aheads.put(_read_ahead_key(following, max_bytes, committed), asyncio.get_running_loop(
            ).run_in_executor(context.executor, _read_ahead, context.store, following, max_bytes, committed))
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for p in read:
        by_topic.setdefault(p.topic, []).append({
            "partition_index": p.partition, "error_code": p.error, "high_watermark": p.high_watermark,
            "last_stable_offset": p.last_stable_offset, "log_start_offset": p.log_start_offset,
            "aborted_transactions": p.aborted, "preferred_read_replica": -1, "records": p.records})
    return {"throttle_time_ms": 0, "error_code": NONE, "session_id": 0,
            "responses": [{"topic": name, "partitions": parts} for name, parts in by_topic.items()]}


def records_bytes(fields: dict[str, Any]) -> int:
    """The bytes of the records a Fetch response's fields carry."""
    return sum(len(p["records"]) for topic in fields["responses"] for p in topic["partitions"])


def _read_ahead_key(ask: PartitionFetch, max_bytes: int, committed: bool) -> ReadAheadKey:
    return ask.topic, ask.partition, ask.fetch_offset, ask.max_bytes, max_bytes, committed


def _read_ahead(store: Store, ask: PartitionFetch, max_bytes: int, committed: bool) -> ReadAhead | None:
    """The records a fetch of ``ask`` (one partition; read_committed: up to the last stable offset of now)
    would answer, if all lie in the active segment; None otherwise (:mod:`.fetch_read_ahead`)."""
    read = PartitionFetch(ask.topic, ask.partition, ask.fetch_offset, ask.max_bytes)
    try:
        active = _read_partition(store, read, committed, min(read.max_bytes, max(0, max_bytes)),
                                 at_least_one=True, active_only=True)
    except CompactLogError:  # no read-ahead: the fetch that follows reads, and answers the error itself
        return None
    return ReadAhead(active, read.records, read.next_offset) if read.records else None


def _read_all(store: Store, asked: list[PartitionFetch], committed: bool, max_bytes: int,
              ahead: ReadAhead | None = None) -> list[PartitionFetch]:
    budget = max(0, max_bytes)
    out: list[PartitionFetch] = []
    for ask in asked:
        read = PartitionFetch(ask.topic, ask.partition, ask.fetch_offset, ask.max_bytes)
        try:
            first = not any(p.records for p in out)
            _read_partition(store, read, committed, min(read.max_bytes, budget), at_least_one=first,
                            ahead=ahead if first else None)
        except CompactLogError as e:
            read.error, read.records = error_code(e), b""
        budget -= len(read.records)
        out.append(read)
    return out


def _read_partition(store: Store, read: PartitionFetch, committed: bool, limit: int, at_least_one: bool, *,
                    ahead: ReadAhead | None = None, active_only: bool = False) -> ActiveSegment:
    """Fill ``read``; returns the partition's active segment as of its offsets. ``ahead``: records read
    ahead for this fetch, used if still valid; ``active_only``: read nothing unless the fetch offset lies in
    the active segment (a read-ahead)."""
    log = open_log(store, read.topic, read.partition)
    with log.locked():  # one consistent view of the offsets
        read.high_watermark = log.log_end_offset
        read.last_stable_offset = log.last_stable_offset
        read.log_start_offset = log.log_start_offset
        active = log.active
    if not read.log_start_offset <= read.fetch_offset <= read.high_watermark:
        raise OffsetOutOfRangeError(f"{read.topic}-{read.partition}: fetch offset {read.fetch_offset} is outside "
                                    f"[{read.log_start_offset}, {read.high_watermark}]")
    if active_only and read.fetch_offset < active.base_offset:
        return active
    end = read.last_stable_offset if committed else read.high_watermark
    if committed and not active_only:
        # Also for records read ahead: they lie below the last stable offset of their read, so every
        # transaction with records among them had ended then; the list of now holds those it aborted.
        read.aborted = [{"producer_id": a.producer_id, "first_offset": a.first_offset}
                        for a in log.aborted_transactions(read.fetch_offset, end)]
    if ahead is not None and is_usable(ahead, active):
        read.records, read.next_offset, read.read_ahead = ahead.records, ahead.next_offset, True
        return active
    if read.fetch_offset >= end or (limit <= 0 and not at_least_one):
        return active
    taken: list[pa.Table] = []
    used = 0
    for table in log.read_tables(read.fetch_offset, end, columns=FETCH_COLUMNS, include_control=True):
        keep = to_numpy(table.column("control_type")) != CONTROL_EMPTY_BATCH
        # Filtering copies every column: done only when some row goes.
        kept = table if keep.all() else table.filter(from_numpy(keep))
        if kept.num_rows == 0:
            continue
        cumulative = np.cumsum(_record_sizes(kept)) + used
        fits = int((cumulative <= limit).sum())
        if fits == 0 and at_least_one and not taken:
            fits = 1
        taken.append(kept.slice(0, fits))
        used = int(cumulative[fits - 1]) if fits else used
        if fits < kept.num_rows:
            break
    taken = [table for table in taken if table.num_rows]
    if taken:
        append_time = store.topic_config(read.topic).message_timestamp_type == "LogAppendTime"
        read.records = encode_batches(pa.concat_tables(taken),
                                      timestamp_type=LOG_APPEND_TIME if append_time else CREATE_TIME)
        read.next_offset = int(to_numpy(taken[-1].column("offset"))[-1]) + 1
    return active


def _record_sizes(table: pa.Table) -> np.ndarray:
    """Per row: key, value and header bytes plus RECORD_OVERHEAD (int64)."""
    sizes = binary_lengths(table.column("key")) + binary_lengths(table.column("value")) + RECORD_OVERHEAD
    headers = table.column("headers")
    if headers.null_count < len(headers):
        sizes += np.asarray(pc.fill_null(header_bytes(headers), 0).to_numpy(zero_copy_only=False), np.int64)
    return sizes


async def handle_list_offsets(context: BrokerContext, request: Any, version: int,
                              listener: str) -> dict[str, Any]:
    committed = version >= 2 and request.isolation_level == READ_COMMITTED
    asked = [(t.name, p.partition_index, p.timestamp) for t in request.topics for p in t.partitions]
    answers = await context.run(_list_offsets, context.store, asked, committed)
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition, _), (code, timestamp, offset) in zip(asked, answers, strict=True):
        by_topic.setdefault(topic, []).append({"partition_index": partition, "error_code": code,
                                               "timestamp": timestamp, "offset": offset, "leader_epoch": 0})
    return {"throttle_time_ms": 0, "topics": [{"name": name, "partitions": parts} for name, parts in by_topic.items()]}


def _list_offsets(store: Store, asked: list[tuple[str, int, int]], committed: bool) -> list[tuple[int, int, int]]:
    answers = []
    for topic, partition, timestamp in asked:
        try:
            log = open_log(store, topic, partition)
            with log.locked():  # one consistent view of the offsets
                log_start, last_fetchable = log.log_start_offset, (log.last_stable_offset if committed
                                                                   else log.log_end_offset)
            found = None
            if timestamp == MAX_TIMESTAMP:
                found = reads.max_timestamp_and_offset(log.snapshot, log.directory)
            elif timestamp not in (EARLIEST, LATEST):
                found = reads.timestamp_and_offset_for_time(log.snapshot, log.directory, timestamp)
            answers.append((NONE, *list_offsets_answer(timestamp, log_start, last_fetchable, found)))
        except CompactLogError as e:
            answers.append((error_code(e), -1, -1))
    return answers


def list_offsets_answer(timestamp: int, log_start_offset: int, last_fetchable_offset: int,
                        found: tuple[int, int] | None) -> tuple[int, int]:
    """The ``(timestamp, offset)`` ListOffsets answers for the ``timestamp`` asked, given the log's offsets
    and the record a search ``found`` (``(timestamp, offset)``; for -2 and -1 no search is made)."""
    if timestamp == EARLIEST:
        return -1, log_start_offset
    if timestamp == LATEST:
        return -1, last_fetchable_offset
    if found is None or found[1] >= last_fetchable_offset:  # Kafka: only offsets a consumer may fetch
        return -1, -1
    return found
