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
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from .config import ProducerConfig
from .errors import InvalidRecordError, RecordTooLargeError, StoreClosedError, UnknownTopicOrPartitionError
from .partitioner import StickyPartitioner, partitions_for_keys
from .record import (
    CONTROL_NONE,
    HEADER_TYPE,
    NO_DELETE_HORIZON,
    NO_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    SCHEMA,
    Headers,
    RecordMetadata,
    record_size,
)

if TYPE_CHECKING:
    from .log import Log
    from .store import Store


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
            raise drained.error
        assert drained.partitions is not None and drained.offsets is not None and drained.timestamps is not None
        i = self._index
        return RecordMetadata(self._topic, int(drained.partitions[i]), int(drained.offsets[i]),
                              drained.timestamps[i])

    def exception(self, timeout: float | None = None) -> BaseException | None:
        return self._accumulator.drain_now().error


class _Accumulator:
    """The records buffered for one topic since its last drain."""

    def __init__(self, producer: Producer, topic: str, num_partitions: int) -> None:
        self.producer = producer
        self.topic = topic
        self.num_partitions = num_partitions
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.timestamps: list[int] = []
        self.headers: list[Headers | None] = []
        self.partitions: list[int] = []
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

    def __init__(self, store: Store, config: ProducerConfig) -> None:
        self.store = store
        self.config = config
        self._lock = threading.RLock()
        self._buffers: dict[str, _Accumulator] = {}
        self._touched: set[tuple[str, int]] = set()
        self._sticky = StickyPartitioner()
        self._closed = False
        self._wakeup = threading.Condition(self._lock)
        self._sender: threading.Thread | None = None
        if config.linger_ms > 0:
            self._sender = threading.Thread(target=self._linger_loop, name="compactlog-producer", daemon=True)
            self._sender.start()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, topic: str, key: bytes | None = None, value: bytes | None = None, timestamp: int | None = None,
             headers: Sequence[tuple[str, bytes | None]] | None = None, partition: int | None = None) -> RecordFuture:
        """Buffer one record; ``value=None`` sends a tombstone. Returns a future of its RecordMetadata."""
        if self._closed:
            raise StoreClosedError("producer is closed")
        if key is not None and not isinstance(key, bytes | bytearray | memoryview):
            raise InvalidRecordError(f"key must be bytes or None, not {type(key).__name__}")
        if value is not None and not isinstance(value, bytes | bytearray | memoryview):
            raise InvalidRecordError(f"value must be bytes or None, not {type(value).__name__}")
        header_list = _check_headers(headers)
        with self._lock:
            buffer = self._buffers.get(topic)
            if buffer is None:
                config = self.store.topic_config(topic)
                buffer = _Accumulator(self, topic, self.store.partitions(topic))
                self._buffers[topic] = buffer
            config = self.store.topic_config(topic)
            if key is None and config.compact:
                raise InvalidRecordError(f"compacted topic {topic!r} cannot accept a record without a key")
            size = record_size(key, value, header_list)
            if size > config.max_message_bytes:
                raise RecordTooLargeError(
                    f"a record of {size} bytes is larger than max.message.bytes={config.max_message_bytes} "
                    f"of {topic!r}")
            if partition is not None and (isinstance(partition, bool) or not isinstance(partition, int)
                                          or not 0 <= partition < buffer.num_partitions):
                raise UnknownTopicOrPartitionError(
                    f"topic {topic!r} has partitions 0..{buffer.num_partitions - 1}; no partition {partition!r}")
            index = len(buffer.keys)
            buffer.keys.append(bytes(key) if key is not None else None)
            buffer.values.append(bytes(value) if value is not None else None)
            buffer.timestamps.append(timestamp if timestamp is not None else self.store.clock())
            buffer.headers.append(header_list or None)
            buffer.partitions.append(-1 if partition is None else partition)
            buffer.size += size
            future = RecordFuture(topic, buffer, index)
            if buffer.size >= max(self.config.batch_size, 1) * buffer.num_partitions:
                self._drain(buffer)
            return future

    def flush(self) -> None:
        """Append everything buffered and fsync it: after this returns every sent record is durable."""
        with self._lock:
            for buffer in list(self._buffers.values()):
                self._drain(buffer)
            touched, self._touched = self._touched, set()
        for topic, partition in sorted(touched):
            self.store.log(topic, partition).flush()

    def close(self) -> None:
        if self._closed:
            return
        self.flush()
        with self._lock:
            self._closed = True
            self._wakeup.notify_all()
        if self._sender is not None:
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
            except BaseException as e:  # every future of the batch reports the failure
                drained.error = e

    def _append_buffer(self, buffer: _Accumulator, drained: _Drained) -> None:
        n = len(buffer.keys)
        keys = pa.array(buffer.keys, pa.binary())
        partitions = np.asarray(buffer.partitions, dtype=np.int32)
        unassigned = partitions < 0
        if unassigned.any():
            keyed = unassigned & ~np.asarray(keys.is_null(), dtype=bool)
            if keyed.any():
                partitions[keyed] = partitions_for_keys(keys.filter(pa.array(keyed)), buffer.num_partitions)
            keyless = unassigned & ~keyed
            if keyless.any():
                sticky = self._sticky.partition(buffer.topic, buffer.num_partitions)
                partitions[keyless] = sticky
                self._sticky.on_new_batch(buffer.topic, buffer.num_partitions, sticky)
        rows = pa.table([
            pa.array(np.zeros(n, np.int64)),
            pa.array(buffer.timestamps, pa.int64()),
            keys,
            pa.array(buffer.values, pa.binary()),
            pa.array([[{"key": k, "value": v} for k, v in h] if h else None for h in buffer.headers], HEADER_TYPE),
            pa.repeat(pa.scalar(NO_PRODUCER_ID, pa.int64()), n),
            pa.repeat(pa.scalar(NO_EPOCH, pa.int16()), n),
            pa.repeat(pa.scalar(NO_SEQUENCE, pa.int32()), n),
            pa.repeat(pa.scalar(False, pa.bool_()), n),
            pa.repeat(pa.scalar(CONTROL_NONE, pa.int8()), n),
            pa.repeat(pa.scalar(NO_DELETE_HORIZON, pa.int64()), n),
        ], schema=SCHEMA)
        offsets = np.empty(n, dtype=np.int64)
        timestamps = list(buffer.timestamps)
        for partition in np.unique(partitions):
            positions = np.flatnonzero(partitions == partition)
            log: Log = self.store.log(buffer.topic, int(partition))
            part_rows = rows if len(positions) == n else rows.take(pa.array(positions))
            first, append_time = log.append(part_rows, flush=False)
            offsets[positions] = np.arange(first, first + len(positions))
            if self.store.topic_config(buffer.topic).message_timestamp_type == "LogAppendTime":
                for p in positions:
                    timestamps[p] = append_time
            self._touched.add((buffer.topic, int(partition)))
        drained.partitions = partitions
        drained.offsets = offsets
        drained.timestamps = timestamps


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
            raise InvalidRecordError(f"header {name!r} value must be bytes or None, not {type(value).__name__}")
        result.append((name, bytes(value) if value is not None else None))
    return result
