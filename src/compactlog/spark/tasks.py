"""What one Spark task does on an executor, in plain pyarrow: append a stream of Arrow batches to a topic's
partitions, read one offset range of one partition, and reduce a range to the latest record per key.

This module is the executor side of :mod:`compactlog.spark.io` and :mod:`compactlog.spark.datasource`. It
imports no pyspark, so every rule here is tested without a JVM.

Rules the tasks keep:

* The data directory must be at the same path on every executor as on the driver (local disk in local
  mode, a shared filesystem on a cluster). A task that cannot see it raises :class:`ExecutorError` instead
  of creating an empty directory there (:func:`open_topic`).
* Appends partition rows exactly as Kafka's default partitioner: ``toPositive(murmur2(key)) % partitions``
  for keyed rows; keyless rows are refused by compacted topics and otherwise take Kafka's sticky
  partitioner, one sticky choice per Arrow batch (the "batch" of KIP-480).
* Within one task, each partition's rows are appended in the order the task received them. Each
  :meth:`Store.append` call is atomic and durable; a task is not (see :func:`append_batches`).
* Reads never return transaction markers, skip offset gaps left by compaction, and start at the log start
  when asked for an offset below it (retention deleted those records; nothing is there to return).
  ``read_committed`` reads stop at the last stable offset and skip aborted transactions' data.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import ExecutorError, InvalidRecordError, OffsetOutOfRangeError, UnknownTopicOrPartitionError
from ..partitioner import StickyPartitioner, partitions_for_keys
from ..record import READ_COLUMNS, AppendResult, check_keyed
from ..store import TOPICS_DIR, Store, open_store

__all__ = [
    "OUTPUT_SCHEMA",
    "append_batches",
    "latest_per_key",
    "open_topic",
    "read_latest",
    "read_range",
    "to_output",
]

# The Arrow form of the data source's Spark schema (what ``to_arrow_schema(SPARK_SCHEMA, timezone="UTC")``
# gives; a test keeps the two equal). Every column is nullable, as in Spark's Kafka source. Timestamps are
# Spark timestamps (microseconds, UTC); the log stores milliseconds.
HEADER_OUTPUT_TYPE = pa.list_(pa.field("element", pa.struct([pa.field("key", pa.string()),
                                                            pa.field("value", pa.binary())])))
OUTPUT_SCHEMA = pa.schema([
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("timestamp", pa.timestamp("us", tz="UTC")),
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("headers", HEADER_OUTPUT_TYPE),
])

# Rows per Arrow batch handed back to Spark: bounds the memory of one batch on both sides of the pipe.
OUTPUT_BATCH_ROWS = 32_768
# Rows buffered by an append task before it appends them (each Store.append fsyncs, so appends should be
# large), counted in Arrow bytes. Bounds the task's memory.
APPEND_FLUSH_BYTES = 32 * 1024 * 1024
# The latest-per-key reduction runs when the unreduced tables reach this many bytes, or the size of the
# reduced state if larger: each row is then reduced a bounded number of times (amortised linear work), and
# memory stays within about twice the live data plus one segment.
LATEST_REDUCE_BYTES = 64 * 1024 * 1024

# How often a read looks up the log start again when retention moves it during the call.
READ_ATTEMPTS = 3

_TEXT_TYPES = (pa.string(), pa.large_string(), pa.binary(), pa.large_binary())


def open_topic(data_dir: str, topic: str) -> Store:
    """Open ``data_dir`` inside a task and check that ``topic`` is there, or explain why it is not.

    :func:`compactlog.open` creates a missing directory; on an executor that would hide the real problem
    (the directory is not shared), so the directory and the topic are checked first.
    """
    host = socket.gethostname()
    if not os.path.isdir(os.path.join(data_dir, TOPICS_DIR)):
        raise ExecutorError(
            f"the executor on host {host!r} cannot see the data directory {data_dir!r}: executors need the "
            "data directory at the same path as the driver (local disk in local mode, a shared filesystem "
            "such as NFS on a cluster)")
    store = open_store(data_dir)
    try:
        store.partitions(topic)
    except UnknownTopicOrPartitionError as e:
        store.close()
        raise ExecutorError(
            f"the executor on host {host!r} sees a data directory at {data_dir!r} but no topic {topic!r} in "
            "it: executors need the driver's data directory at the same path (a shared filesystem on a "
            "cluster), not a local copy; or the topic was deleted while the job ran") from e
    return store


# -- append ----------------------------------------------------------------------------------------------


def _binary_column(column: pa.Array | pa.ChunkedArray, name: str) -> pa.Array | pa.ChunkedArray:
    """Keys and values as ``binary``: strings become their UTF-8 bytes, as Kafka's StringSerializer."""
    if column.type == pa.binary():
        return column
    if column.type in _TEXT_TYPES or pa.types.is_null(column.type):
        return column.cast(pa.binary())
    raise InvalidRecordError(f"column {name!r} must be binary or string, not {column.type}")


def _timestamp_ms(column: pa.Array | pa.ChunkedArray, name: str) -> pa.Array | pa.ChunkedArray:
    """Epoch milliseconds (int64) from a timestamp column (floored, as Spark's Kafka sink) or an integer one.
    Nulls stay null: the log stamps them with the append time."""
    if pa.types.is_timestamp(column.type):
        floored = pc.floor_temporal(column, unit="millisecond")
        return floored.cast(pa.timestamp("ms", tz=column.type.tz)).cast(pa.int64())
    if pa.types.is_integer(column.type) or pa.types.is_null(column.type):
        return column.cast(pa.int64())
    raise InvalidRecordError(
        f"column {name!r} must be a timestamp or integer milliseconds, not {column.type}")


def _normalise(batch: pa.RecordBatch | pa.Table, key_column: str, value_column: str,
               timestamp_column: str | None, headers_column: str | None) -> pa.Table:
    """The rows of ``batch`` as a bulk-append table: ``key``, ``value`` and, when given, ``timestamp`` and
    ``headers``. Other columns are not appended."""
    table = batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])
    wanted = {"key": key_column, "value": value_column}
    if timestamp_column is not None:
        wanted["timestamp"] = timestamp_column
    if headers_column is not None:
        wanted["headers"] = headers_column
    missing = sorted(source for source in wanted.values() if source not in table.column_names)
    if missing:
        raise InvalidRecordError(
            f"the rows to append have no column(s) {missing}; they have {table.column_names}")
    columns = {
        "key": _binary_column(table.column(key_column), key_column),
        "value": _binary_column(table.column(value_column), value_column),
    }
    if timestamp_column is not None:
        columns["timestamp"] = _timestamp_ms(table.column(timestamp_column), timestamp_column)
    if headers_column is not None:
        columns["headers"] = table.column(headers_column)
    return pa.table(columns)


def _assign_partitions(rows: pa.Table, topic: str, num_partitions: int, compacted: bool,
                       sticky: StickyPartitioner) -> np.ndarray:
    """The Kafka partition of every row (int32), as the Java producer's default partitioner picks it."""
    keys = rows.column("key")
    if not keys.null_count:
        return partitions_for_keys(keys, num_partitions)
    check_keyed(compacted, keys.null_count, repr(topic))
    keyed = pc.is_valid(keys).to_numpy(zero_copy_only=False)
    partitions = np.empty(rows.num_rows, dtype=np.int32)
    if keyed.any():
        partitions[keyed] = partitions_for_keys(keys.filter(pa.array(keyed)), num_partitions)
    # Keyless rows of one batch stick to one partition; the next batch moves on (KIP-480).
    chosen = sticky.partition(topic, num_partitions)
    partitions[~keyed] = chosen
    sticky.on_new_batch(topic, num_partitions, chosen)
    return partitions


def _split_by_partition(rows: pa.Table, partitions: np.ndarray) -> Iterator[tuple[int, pa.Table]]:
    """``(partition, rows of that partition)`` pairs; a stable sort keeps each partition's rows in order."""
    order = np.argsort(partitions, kind="stable")
    ordered = partitions[order]
    cuts = np.flatnonzero(np.diff(ordered)) + 1
    if not cuts.size:  # every row goes to one partition: no reordering needed
        yield int(ordered[0]), rows
        return
    taken = rows.take(pa.array(order))
    starts = np.concatenate([[0], cuts])
    ends = np.concatenate([cuts, [len(ordered)]])
    for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
        yield int(ordered[start]), taken.slice(start, end - start)


def append_batches(data_dir: str, topic: str, batches: Iterable[pa.RecordBatch | pa.Table], *,
                   key_column: str = "key", value_column: str = "value", timestamp_column: str | None = None,
                   headers_column: str | None = None, flush_bytes: int = APPEND_FLUSH_BYTES,
                   ) -> list[AppendResult]:
    """Append every row of ``batches`` to the partitions of ``topic`` that Kafka's partitioner picks.

    Rows are buffered (up to ``flush_bytes``) and appended per partition in the order they arrived. Each
    append is atomic and durable when it returns; the task as a whole is not: if it fails halfway, the
    appends it already made stay (as with Kafka's non-transactional producer), and a retried task appends
    its rows again. Errors are raised, never skipped. Returns every append made, in order.
    """
    store = open_topic(data_dir, topic)
    try:
        num_partitions = store.partitions(topic)
        compacted = store.topic_config(topic).compact
        sticky = StickyPartitioner()
        pending: dict[int, list[pa.Table]] = {}
        pending_bytes = 0
        results: list[AppendResult] = []

        def flush() -> None:
            nonlocal pending_bytes
            for partition in sorted(pending):
                pieces = pending[partition]
                table = pieces[0] if len(pieces) == 1 else pa.concat_tables(pieces)
                results.append(store.append(topic, partition, table))
            pending.clear()
            pending_bytes = 0

        for batch in batches:
            if not batch.num_rows:
                continue
            rows = _normalise(batch, key_column, value_column, timestamp_column, headers_column)
            partitions = _assign_partitions(rows, topic, num_partitions, compacted, sticky)
            for partition, piece in _split_by_partition(rows, partitions):
                pending.setdefault(partition, []).append(piece)
            pending_bytes += rows.nbytes
            if pending_bytes >= flush_bytes:
                flush()
        flush()
        return results
    finally:
        store.close()


# -- read ------------------------------------------------------------------------------------------------


def to_output(table: pa.Table, topic: str, partition: int) -> pa.Table:
    """Records (``READ_COLUMNS``) as rows of :data:`OUTPUT_SCHEMA`."""
    n = table.num_rows
    timestamp = pc.multiply_checked(table.column("timestamp"), 1000).cast(pa.timestamp("us", tz="UTC"))
    return pa.Table.from_arrays(
        [
            pa.repeat(pa.scalar(topic, pa.string()), n),
            pa.repeat(pa.scalar(partition, pa.int32()), n),
            table.column("offset"),
            timestamp,
            table.column("key"),
            table.column("value"),
            table.column("headers").cast(HEADER_OUTPUT_TYPE),
        ],
        schema=OUTPUT_SCHEMA,
    )


def _tables(store: Store, topic: str, partition: int, start_offset: int, end_offset: int | None,
            isolation_level: str) -> Iterator[pa.Table]:
    """The records of a range, table by table. ``read_committed`` stops at the last stable offset and
    drops the data of aborted transactions (:meth:`Store.read_tables` owns that rule)."""
    for _ in range(READ_ATTEMPTS):
        # Below the log start there is nothing left to read (retention removed it): start at the log start.
        start = max(start_offset, store.log_start_offset(topic, partition))
        if end_offset is not None and start >= end_offset:
            return
        try:
            tables = store.read_tables(topic, partition, start, end_offset, list(READ_COLUMNS), isolation_level)
        except OffsetOutOfRangeError:
            continue  # retention moved the log start between the two calls: look again
        yield from tables
        return
    raise OffsetOutOfRangeError(f"the log start of {topic}-{partition} kept moving past offset {start_offset}")


def read_range(data_dir: str, topic: str, partition: int, start_offset: int, end_offset: int | None,
               isolation_level: str = "read_uncommitted") -> Iterator[pa.RecordBatch]:
    """Every record of ``[start_offset, end_offset)`` of one partition, in offset order, as
    :data:`OUTPUT_SCHEMA` batches. Offset gaps are skipped; transaction markers never appear."""
    store = open_topic(data_dir, topic)
    try:
        for table in _tables(store, topic, partition, start_offset, end_offset, isolation_level):
            yield from to_output(table, topic, partition).to_batches(max_chunksize=OUTPUT_BATCH_ROWS)
    finally:
        store.close()


def latest_per_key(table: pa.Table) -> pa.Table:
    """The last row of every key of ``table`` (rows in offset order), without tombstoned keys and without
    keyless rows (they are no key's value), in offset order."""
    keyed = table.filter(pc.is_valid(table.column("key"))) if table.column("key").null_count else table
    if not keyed.num_rows:
        return keyed
    numbered = keyed.append_column("__row", pa.array(np.arange(keyed.num_rows, dtype=np.int64)))
    last = numbered.group_by("key", use_threads=False).aggregate([("__row", "max")]).column("__row_max")
    latest = keyed.take(np.sort(last.to_numpy()))  # row numbers in ascending order = offset order
    return latest.filter(pc.is_valid(latest.column("value")))


def read_latest(data_dir: str, topic: str, partition: int, start_offset: int, end_offset: int | None,
                isolation_level: str = "read_uncommitted", *, reduce_bytes: int = LATEST_REDUCE_BYTES,
                ) -> Iterator[pa.RecordBatch]:
    """The newest record of every live key among the records of ``[start_offset, end_offset)`` of one
    partition, in offset order, as :data:`OUTPUT_SCHEMA` batches. Tombstoned keys are absent.

    The reduction folds segments into a running state: the newest record of each key is either in the
    state or in the newer rows, so a tombstone can be dropped as soon as it is applied.
    """
    store = open_topic(data_dir, topic)
    try:
        state: pa.Table | None = None
        pending: list[pa.Table] = []
        pending_bytes = 0
        for table in _tables(store, topic, partition, start_offset, end_offset, isolation_level):
            pending.append(table)
            pending_bytes += table.nbytes
            if pending_bytes >= max(reduce_bytes, state.nbytes if state is not None else 0):
                state = latest_per_key(pa.concat_tables([state, *pending] if state is not None else pending))
                pending, pending_bytes = [], 0
        if pending:
            state = latest_per_key(pa.concat_tables([state, *pending] if state is not None else pending))
        if state is not None and state.num_rows:
            yield from to_output(state, topic, partition).to_batches(max_chunksize=OUTPUT_BATCH_ROWS)
    finally:
        store.close()
