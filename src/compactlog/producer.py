"""The batching producer: Kafka's send / flush / close over a store.

Records accumulate per topic until ``batch.size`` bytes per partition are buffered or ``linger.ms``
passes; then the batch is drained: keyed records are partitioned with Kafka's murmur2 partitioner
(vectorised over the batch), keyless records all go to the topic's sticky partition, which moves on after
every drain (Kafka's sticky partitioner), and each partition's records are appended as one unit.

``future.result()`` returns once the record is appended (readable); ``flush()`` drains everything and
fsyncs every partition it appended to, so after it returns every sent record is durable. Validation
(key and value types, keyless records on compacted topics, ``max.message.bytes``, unknown topics and
partitions) happens in ``send``, before anything is buffered.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

import numpy as np
import pyarrow as pa

from .config import ProducerConfig
from .errors import (
    InvalidRecordError,
    InvalidTxnStateError,
    ProducerFencedError,
    RecordTooLargeError,
    StoreClosedError,
    UnknownTopicOrPartitionError,
)
from .limits import INT_MAX
from .partitioner import StickyPartitioner, partitions_for_keys
from .record import (
    HEADER_TYPE,
    RECORD_OVERHEAD_BYTES,
    Headers,
    RecordMetadata,
    check_keyed,
    data_rows,
    timestamp_problem,
)

if TYPE_CHECKING:
    from .config import TopicConfig
    from .log import Log
    from .transactions import TransactionCoordinator


INT32_LIMIT = INT_MAX + 1  # sequences wrap around to 0 after Int.MaxValue, as in Kafka


class ProducerTarget(Protocol):
    """What a producer uses of the store it sends to (:class:`compactlog.store.Store` is one): the producer
    depends on this, never on the store, so that the store can own the producer."""

    clock: Callable[[], int]

    @property
    def transactions(self) -> TransactionCoordinator: ...

    def topic_config(self, topic: str) -> TopicConfig: ...

    def partitions(self, topic: str) -> int: ...

    def log(self, topic: str, partition: int) -> Log: ...


class _Drained:
    """Where a drained batch's records landed: per record, partition and offset."""

    __slots__ = ("error", "offsets", "partitions", "timestamps")

    def __init__(self) -> None:
        self.partitions: np.ndarray | None = None
        self.offsets: np.ndarray | None = None
        self.timestamps: list[int] | None = None
        self.error: BaseException | None = None


class RecordFuture:
    """The pending result of one ``send``; ``result()`` returns its :class:`RecordMetadata`."""

    __slots__ = ("_accumulator", "_index", "_topic")

    def __init__(self, topic: str, accumulator: _Accumulator, index: int) -> None:
        self._topic = topic
        self._accumulator = accumulator
        self._index = index

    def done(self) -> bool:
        return self._accumulator.drained is not None

    def result(self, timeout: float | None = None) -> RecordMetadata:
        drained = self._accumulator.drain_now()
        if drained.error is not None:
            self._accumulator.producer._delivered(drained.error)
            raise drained.error
        assert drained.partitions is not None and drained.offsets is not None
        assert drained.timestamps is not None
        i = self._index
        return RecordMetadata(self._topic, int(drained.partitions[i]), int(drained.offsets[i]),
                              drained.timestamps[i])

    def exception(self, timeout: float | None = None) -> BaseException | None:
        error = self._accumulator.drain_now().error
        if error is not None:
            self._accumulator.producer._delivered(error)
        return error


class _Accumulator:
    """The records buffered for one topic since its last drain.

    The topic's config is read once, when the accumulator is created, and holds for its life (one batch):
    a send then costs a few list appends, not a config lookup. A config change applies from the next batch.
    """

    __slots__ = ("compact", "created", "drained", "explicit", "headers", "keys", "limit", "log_append_time",
                 "max_message_bytes", "num_partitions", "producer", "size", "timestamps", "topic", "values")

    def __init__(self, producer: Producer, topic: str, num_partitions: int, config: TopicConfig,
                 batch_size: int) -> None:
        self.producer = producer
        self.topic = topic
        self.num_partitions = num_partitions
        self.compact = config.compact
        self.max_message_bytes = config.max_message_bytes
        self.log_append_time = config.message_timestamp_type == "LogAppendTime"
        self.limit = max(batch_size, 1) * num_partitions  # drain once this many bytes are buffered
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.timestamps: list[int] = []
        self.headers: dict[int, Headers] = {}  # by record index; most records have none
        self.explicit: dict[int, int] = {}  # record index -> the partition given to send()
        self.size = 0
        self.created = time.monotonic()
        self.drained: _Drained | None = None

    def drain_now(self) -> _Drained:
        if self.drained is None:
            self.producer._drain(self)
        assert self.drained is not None
        return self.drained


class Producer:
    """Send records to a store's topics. Use ``store.producer()``; a context manager (flush + close)."""

    def __init__(self, store: ProducerTarget, config: ProducerConfig) -> None:
        self.store = store
        self.config = config
        self._lock = threading.RLock()
        self._buffers: dict[str, _Accumulator] = {}
        self._touched: set[tuple[str, int]] = set()
        self._sticky = StickyPartitioner()
        self._clock = store.clock
        self._closed = False
        self._wakeup = threading.Condition(self._lock)
        # Idempotence: one producer id and epoch, a sequence per partition (Kafka's idempotent producer).
        self._transactional_id = config.transactional_id
        self._producer_id: int | None = None
        self._epoch = 0
        self._sequences: dict[tuple[str, int], int] = {}
        self._in_transaction = False
        self._txn_partitions: set[tuple[str, int]] = set()
        self._flush_errors: list[BaseException] = []
        # A batch of the open transaction failed: only abort_transaction() may follow (Kafka's abortable error).
        self._abortable_error: BaseException | None = None
        if self._transactional_id is not None:  # registering the id now fences every older instance
            self._producer_id, self._epoch = store.transactions.register_producer(
                self._transactional_id, config.transaction_timeout_ms)
        self._sender: threading.Thread | None = None
        if config.linger_ms > 0:
            self._sender = threading.Thread(target=self._linger_loop, name="compactlog-producer", daemon=True)
            self._sender.start()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, topic: str, key: bytes | None = None, value: bytes | None = None,
             timestamp: int | None = None, headers: Sequence[tuple[str, bytes | None]] | None = None,
             partition: int | None = None) -> RecordFuture:
        """Buffer one record; ``value=None`` sends a tombstone. Returns a future of its RecordMetadata.
        A transactional producer sends only inside a transaction."""
        if self._closed:
            raise StoreClosedError("producer is closed")
        if self._transactional_id is not None and not self._in_transaction:
            raise InvalidTxnStateError("send() outside a transaction: call begin_transaction() first")
        if self._abortable_error is not None:
            raise InvalidTxnStateError(
                "a batch of this transaction failed: call abort_transaction()") from self._abortable_error
        if key is not None and type(key) is not bytes:
            key = _as_bytes(key, "key")
        if value is not None and type(value) is not bytes:
            value = _as_bytes(value, "value")
        if timestamp is not None:  # checked here: a bad one found at the drain would fail its whole batch
            problem = timestamp_problem(timestamp)
            if problem is not None:
                raise InvalidRecordError(problem)
        size = RECORD_OVERHEAD_BYTES + (len(key) if key is not None else 0)
        if value is not None:
            size += len(value)
        header_list = None
        if headers:
            header_list = _check_headers(headers)
            size += sum(len(name.encode()) + (len(data) if data is not None else 0)
                        for name, data in header_list)
        with self._lock:
            buffer = self._buffers.get(topic)
            if buffer is None:
                buffer = self._new_accumulator(topic)
            check_keyed(buffer.compact, key is None, repr(topic))
            if size > buffer.max_message_bytes:
                raise RecordTooLargeError(
                    f"a record of {size} bytes is larger than max.message.bytes={buffer.max_message_bytes} "
                    f"of {topic!r}")
            index = len(buffer.keys)
            if not index:
                buffer.created = time.monotonic()  # linger.ms counts from the batch's first record
            if partition is not None:
                if type(partition) is not int or not 0 <= partition < buffer.num_partitions:
                    raise UnknownTopicOrPartitionError(
                        f"topic {topic!r} has partitions 0..{buffer.num_partitions - 1}; "
                        f"no partition {partition!r}")
                buffer.explicit[index] = partition
            if header_list:
                buffer.headers[index] = header_list
            buffer.keys.append(key)
            buffer.values.append(value)
            buffer.timestamps.append(timestamp if timestamp is not None else self._clock())
            buffer.size += size
            future = RecordFuture(topic, buffer, index)
            if buffer.size >= buffer.limit:
                self._drain(buffer)
            return future

    def _new_accumulator(self, topic: str) -> _Accumulator:
        config = self.store.topic_config(topic)  # raises for an unknown topic, before anything is buffered
        buffer = _Accumulator(self, topic, self.store.partitions(topic), config, self.config.batch_size)
        self._buffers[topic] = buffer
        return buffer

    def flush(self) -> None:
        """Append everything buffered and fsync it: after this returns every sent record is durable.
        Raises the first error of a batch that could not be appended since the last flush."""
        self._drain_all()
        with self._lock:
            touched, self._touched = self._touched, set()
        for topic, partition in sorted(touched):
            self.store.log(topic, partition).flush()

    def _drain_all(self) -> None:
        """Append everything buffered (not fsynced); raise the first error of a failed batch."""
        with self._lock:
            for buffer in list(self._buffers.values()):
                self._drain(buffer)
            errors, self._flush_errors = self._flush_errors, []
        if errors:
            raise errors[0]

    def _delivered(self, error: BaseException) -> None:
        """A batch's error reached the caller through a future: flush need not raise it again."""
        with self._lock:
            self._flush_errors = [e for e in self._flush_errors if e is not error]

    # -- transactions ------------------------------------------------------------------------------------

    def _require_transactional(self) -> str:
        if self._transactional_id is None:
            raise InvalidTxnStateError("this producer has no transactional_id")
        return self._transactional_id

    def begin_transaction(self) -> None:
        self._require_transactional()
        if self._in_transaction:
            raise InvalidTxnStateError("a transaction is already open")
        if self._abortable_error is not None:
            self._bump_epoch()
        self._in_transaction = True
        self._txn_partitions = set()

    def commit_transaction(self) -> None:
        """Append what is buffered, then write COMMIT markers into every partition of the transaction:
        read_committed readers see all of it from then on, or (on an error) none of it. A transaction that
        sent nothing writes no marker and no coordinator state (Kafka's producer sends no EndTxn for it); a
        fenced producer still gets ProducerFencedError."""
        transactional_id = self._require_transactional()
        if not self._in_transaction:
            raise InvalidTxnStateError("commit_transaction() without an open transaction")
        assert self._producer_id is not None
        if self._abortable_error is not None:
            raise InvalidTxnStateError(
                "a batch of this transaction failed: call abort_transaction()") from self._abortable_error
        try:
            self._drain_all()  # appended, not yet fsynced: each COMMIT marker's fsync covers its partition
            self.store.transactions.end_transaction(transactional_id, self._producer_id, self._epoch, True,
                                                    sorted(self._txn_partitions))
            with self._lock:
                self._touched -= self._txn_partitions
        finally:
            if self._abortable_error is None:  # else the transaction stays open for abort_transaction()
                self._finish_transaction()

    def abort_transaction(self) -> None:
        """Drop what is still buffered and write ABORT markers into every partition of the transaction."""
        transactional_id = self._require_transactional()
        if not self._in_transaction:
            raise InvalidTxnStateError("abort_transaction() without an open transaction")
        assert self._producer_id is not None
        with self._lock:
            for buffer in list(self._buffers.values()):
                buffer.drained = _Drained()
                buffer.drained.error = InvalidTxnStateError("the transaction was aborted before this record was sent")
            self._buffers.clear()
            self._flush_errors = []
        try:
            self.store.transactions.end_transaction(transactional_id, self._producer_id, self._epoch, False,
                                                    sorted(self._txn_partitions))
        finally:
            self._finish_transaction()

    def _finish_transaction(self) -> None:
        self._in_transaction = False
        self._txn_partitions = set()

    def _batch_failed(self, error: BaseException) -> None:
        """A partition's append failed part-way (an I/O error may have left part of the batch in the log,
        and the log's producer state may hold it): the next batch must not reuse the failed batch's
        sequences, or the log would take it for a retry of the failed one and acknowledge it at the failed
        batch's offsets. As Kafka after an error of unknown outcome: an idempotent producer takes a new
        producer id (its sequences start again at 0); a transactional one must abort, and its next
        transaction bumps the epoch (KIP-360), whose sequences start at 0."""
        if self._transactional_id is None:
            self._producer_id = None
            self._sequences.clear()
        elif not isinstance(error, ProducerFencedError):  # fenced is final: re-registering would fence the newer one
            self._abortable_error = error

    def _bump_epoch(self) -> None:
        """Re-register the transactional id after an abortable error: a new epoch (any transaction still
        open is aborted first) and sequences from 0."""
        assert self._transactional_id is not None
        self._producer_id, self._epoch = self.store.transactions.register_producer(
            self._transactional_id, self.config.transaction_timeout_ms)
        self._sequences.clear()
        self._abortable_error = None

    def close(self) -> None:
        """Flush, then stop. The producer is closed even when the flush fails (the error is raised)."""
        if self._closed:
            return
        try:
            self.flush()
        finally:
            with self._lock:
                self._closed = True
                self._wakeup.notify_all()
            if self._sender is not None and self._sender is not threading.current_thread():
                self._sender.join(timeout=5)

    def _linger_loop(self) -> None:
        linger = self.config.linger_ms / 1000.0
        with self._lock:
            while not self._closed:
                now = time.monotonic()
                for buffer in list(self._buffers.values()):
                    if buffer.keys and now - buffer.created >= linger:
                        self._drain(buffer)
                self._wakeup.wait(timeout=linger)

    def _drain(self, buffer: _Accumulator) -> None:
        """Append a topic's buffered records, partition by partition (caller holds no partition lock)."""
        with self._lock:
            if buffer.drained is not None:
                return
            if self._buffers.get(buffer.topic) is buffer:
                del self._buffers[buffer.topic]
            buffer.drained = drained = _Drained()
            try:
                self._append_buffer(buffer, drained)
            except BaseException as e:  # every future of the batch, and the next flush, report the failure
                drained.error = e
                self._flush_errors.append(e)

    def _append_buffer(self, buffer: _Accumulator, drained: _Drained) -> None:
        n = len(buffer.keys)
        keys = pa.array(buffer.keys, pa.binary())
        partitions = np.full(n, -1, dtype=np.int32)
        for index, partition in buffer.explicit.items():
            partitions[index] = partition
        if buffer.num_partitions == 1:
            partitions[:] = 0
        elif len(buffer.explicit) < n:
            unassigned = partitions < 0
            keyed = unassigned & ~np.asarray(keys.is_null(), dtype=bool) if keys.null_count else unassigned
            if keyed.any():
                hashed = keys if keyed.all() else keys.filter(pa.array(keyed))
                partitions[keyed] = partitions_for_keys(hashed, buffer.num_partitions)
            keyless = unassigned & ~keyed
            if keyless.any():
                sticky = self._sticky.partition(buffer.topic, buffer.num_partitions)
                partitions[keyless] = sticky
                self._sticky.on_new_batch(buffer.topic, buffer.num_partitions, sticky)
        header_column = None
        if buffer.headers:
            header_column = pa.array(
                [[{"key": k, "value": v} for k, v in buffer.headers[i]] if i in buffer.headers else None
                 for i in range(n)], HEADER_TYPE)
        rows = data_rows(pa.array(buffer.timestamps, pa.int64()), keys, pa.array(buffer.values, pa.binary()),
                         header_column)
        offsets = np.empty(n, dtype=np.int64)
        timestamps = buffer.timestamps
        targets = [0] if buffer.num_partitions == 1 else np.unique(partitions).tolist()
        if self._producer_id is None and self.config.enable_idempotence:
            self._producer_id, self._epoch = self.store.transactions.init_producer(None, 0)
        transactional = self._transactional_id is not None
        if transactional:
            assert self._producer_id is not None and self._transactional_id is not None
            new = [(buffer.topic, p) for p in targets if (buffer.topic, p) not in self._txn_partitions]
            if new:  # recorded before any data reaches them, so an abort or a timeout finds them
                # The transaction's first records: the coordinator starts its timeout now, on its own clock.
                self.store.transactions.add_partitions(self._transactional_id, self._producer_id, self._epoch, new,
                                                       begins=not self._txn_partitions)
                self._txn_partitions.update(new)
        for partition in targets:
            log: Log = self.store.log(buffer.topic, partition)
            if len(targets) == 1:
                positions = None
                part_rows = rows
            else:
                positions = np.flatnonzero(partitions == partition)
                part_rows = rows.take(pa.array(positions))
            if self._producer_id is None:
                first, append_time = log.append(part_rows, flush=False)
            else:
                tp = (buffer.topic, partition)
                sequence = self._sequences.get(tp, 0)
                try:
                    first, append_time, _ = log.append_producer_batch(
                        part_rows, self._producer_id, self._epoch, sequence, transactional, flush=False)
                except BaseException as e:
                    self._batch_failed(e)
                    raise
                self._sequences[tp] = (sequence + part_rows.num_rows) % INT32_LIMIT
            if positions is None:
                offsets[:] = np.arange(first, first + n)
            else:
                offsets[positions] = np.arange(first, first + len(positions))
            if buffer.log_append_time:
                if positions is None:
                    timestamps = [append_time] * n
                else:
                    timestamps = list(timestamps) if timestamps is buffer.timestamps else timestamps
                    for p in positions.tolist():
                        timestamps[p] = append_time
            self._touched.add((buffer.topic, partition))
        drained.partitions = partitions
        drained.offsets = offsets
        drained.timestamps = timestamps


def _as_bytes(data: object, what: str) -> bytes:
    if isinstance(data, bytes | bytearray | memoryview):
        return bytes(data)
    raise InvalidRecordError(f"{what} must be bytes or None, not {type(data).__name__}")


def _check_headers(headers: Sequence[tuple[str, bytes | None]] | None) -> Headers:
    if not headers:
        return []
    result: Headers = []
    for item in headers:
        if not isinstance(item, tuple | list) or len(item) != 2:
            raise InvalidRecordError(f"a header must be a (str, bytes | None) pair, not {item!r}")
        name, value = item
        if not isinstance(name, str):
            raise InvalidRecordError(f"header key must be str, not {type(name).__name__}")
        if value is not None and not isinstance(value, bytes | bytearray):
            raise InvalidRecordError(
                f"header {name!r} value must be bytes or None, not {type(value).__name__}")
        result.append((name, bytes(value) if value is not None else None))
    return result
