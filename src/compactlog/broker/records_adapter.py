"""Record batches v2 (Kafka's on-the-wire record format) <-> Arrow columns: the broker's only codec seam.

Two functions, so that a faster codec can replace their bodies without touching the handlers:

* :func:`produced_batches`: the ``records`` bytes of a Produce request's partition, as one
  (:class:`BatchHeader`, table) pair per batch; the table has ``offset_delta`` (int32), ``timestamp``,
  ``key``, ``value``, ``headers`` (in :data:`compactlog.record.HEADER_TYPE`), in the batch's order;
* :func:`fetch_records`: rows in :data:`compactlog.record.SCHEMA` (control rows included) as the bytes of
  v2 batches for a Fetch response.

Today both use kafka-python's ``kafka.record`` (``MemoryRecords``, ``DefaultRecordBatch``,
``DefaultRecordBatchBuilder``), which decompresses gzip, snappy, lz4 and zstd batches; it loops over the
records in Python.

A v2 batch (Kafka's ``DefaultRecordBatch``): base offset int64, length int32, partition leader epoch int32,
magic int8 (2), CRC-32C uint32 of everything after it, attributes int16 (bits 0-2 codec, 3 timestamp type,
4 transactional, 5 control), last offset delta int32, first and max timestamp int64, producer id int64,
producer epoch int16, base sequence int32, record count int32, then the records. Offsets inside a batch
are deltas from the base offset and may have gaps (a compacted log keeps them). A control record's key is
version int16 (0) and type int16 (0 ABORT, 1 COMMIT); its value version int16 (0) and coordinator epoch int32.
"""

from __future__ import annotations

import itertools
import struct
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from kafka.errors import KafkaError
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords
from kafka.record.util import calc_crc32c

from ..columns import to_numpy
from ..errors import CorruptRecordBatchError
from ..record import HEADER_TYPE

__all__ = ["PRODUCED_SCHEMA", "BatchHeader", "fetch_records", "produced_batches"]

PRODUCED_SCHEMA = pa.schema([
    pa.field("offset_delta", pa.int32(), nullable=False),
    pa.field("timestamp", pa.int64(), nullable=False),
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("headers", HEADER_TYPE),
])
# A fetched batch holds at most this many records: clients buffer whole batches.
MAX_FETCH_BATCH_RECORDS = 4096
_CONTROL_KEY = struct.Struct(">hh")
_CONTROL_VALUE = struct.Struct(">hi")


@dataclass(frozen=True)
class BatchHeader:
    """The fields of a produced batch's header that the broker acts on."""

    producer_id: int
    producer_epoch: int
    base_sequence: int
    is_transactional: bool
    is_control: bool
    record_count: int
    last_offset_delta: int
    size_in_bytes: int


def produced_batches(data: bytes) -> list[tuple[BatchHeader, pa.Table]]:
    """Decode the record batches of one partition of a Produce request; a batch that is not v2, fails its
    CRC, is cut short or cannot be decompressed raises CorruptRecordBatchError (Kafka's CORRUPT_MESSAGE)."""
    records = MemoryRecords(bytes(data))
    if records.valid_bytes() != len(data):
        raise CorruptRecordBatchError(f"a record batch is cut short: {len(data) - records.valid_bytes()} "
                                      "trailing bytes")
    out = []
    try:
        while (batch := records.next_batch()) is not None:
            if not isinstance(batch, DefaultRecordBatch):
                raise CorruptRecordBatchError("record batches older than v2 (magic 0, 1) are not accepted")
            if not batch.validate_crc():
                raise CorruptRecordBatchError(f"record batch CRC mismatch (stored {batch.crc})")
            out.append(_decode(batch))
    except (KafkaError, struct.error, ValueError, OSError, EOFError, IndexError) as e:  # bad varints, codecs
        raise CorruptRecordBatchError(f"a record batch cannot be decoded: {e}") from e
    return out


def _decode(batch: DefaultRecordBatch) -> tuple[BatchHeader, pa.Table]:
    deltas, timestamps, keys, values, headers = [], [], [], [], []
    base = batch.base_offset
    for record in batch:
        deltas.append(record.offset - base)
        timestamps.append(record.timestamp)
        keys.append(record.key)
        values.append(record.value)
        headers.append([{"key": k, "value": v} for k, v in record.headers] or None)
    if len(deltas) != batch.records_count:
        raise CorruptRecordBatchError(f"a record batch says {batch.records_count} records and holds {len(deltas)}")
    header = BatchHeader(batch.producer_id, batch.producer_epoch, batch.base_sequence, batch.is_transactional,
                         batch.is_control_batch, batch.records_count, batch.last_offset_delta,
                         batch.size_in_bytes)
    table = pa.Table.from_arrays([
        pa.array(deltas, pa.int32()), pa.array(timestamps, pa.int64()), pa.array(keys, pa.binary()),
        pa.array(values, pa.binary()), pa.array(headers, HEADER_TYPE)], schema=PRODUCED_SCHEMA)
    return header, table


def fetch_records(table: pa.Table) -> bytes:
    """Rows in offset order (columns offset, timestamp, key, value, headers, producer_id, producer_epoch,
    sequence, is_transactional, control_type) as v2 batches: consecutive rows of one producer, epoch and
    transactionality share a batch; each transaction marker is a control batch of its own."""
    n = table.num_rows
    if n == 0:
        return b""
    offsets = to_numpy(table.column("offset"))
    producer_ids = to_numpy(table.column("producer_id"))
    epochs = to_numpy(table.column("producer_epoch"))
    transactional = to_numpy(table.column("is_transactional"))
    control = to_numpy(table.column("control_type"))
    boundary = np.zeros(n, bool)
    boundary[0] = True
    boundary[1:] = ((producer_ids[1:] != producer_ids[:-1]) | (epochs[1:] != epochs[:-1])
                    | (transactional[1:] != transactional[:-1]) | (control[1:] >= 0) | (control[:-1] >= 0))
    starts = [*np.flatnonzero(boundary).tolist(), n]
    timestamps = table.column("timestamp").to_pylist()
    keys = table.column("key").to_pylist()
    values = table.column("value").to_pylist()
    headers = table.column("headers").to_pylist()
    sequences = table.column("sequence").to_pylist()
    out = bytearray()
    for start, end in itertools.pairwise(starts):
        for chunk in range(start, end, MAX_FETCH_BATCH_RECORDS):
            stop = min(chunk + MAX_FETCH_BATCH_RECORDS, end)
            base = int(offsets[chunk])
            builder = DefaultRecordBatchBuilder(2, 0, bool(transactional[chunk]), int(producer_ids[chunk]),
                                                int(epochs[chunk]), sequences[chunk], batch_size=1 << 62)
            is_control = control[chunk] >= 0
            for i in range(chunk, stop):
                if is_control:
                    key, value, record_headers = (_CONTROL_KEY.pack(0, int(control[i])),
                                                  _CONTROL_VALUE.pack(0, 0), [])
                else:
                    key, value = keys[i], values[i]
                    record_headers = [(h["key"], h["value"]) for h in headers[i]] if headers[i] else []
                builder.append(int(offsets[i]) - base, timestamps[i], key, value, record_headers)
            buffer = builder.build()
            struct.pack_into(">q", buffer, 0, base)  # the base offset lies outside the CRC
            if is_control:
                _mark_control(buffer)
            out += buffer
    return bytes(out)


def _mark_control(buffer: bytearray) -> None:
    """Set a built batch's control bit and recompute its CRC (the builder makes only data batches)."""
    attributes_at = DefaultRecordBatch.ATTRIBUTES_OFFSET
    (attributes,) = struct.unpack_from(">h", buffer, attributes_at)
    struct.pack_into(">h", buffer, attributes_at, attributes | DefaultRecordBatch.CONTROL_MASK)
    crc = calc_crc32c(memoryview(buffer)[attributes_at:])
    struct.pack_into(">I", buffer, DefaultRecordBatch.CRC_OFFSET, crc)

