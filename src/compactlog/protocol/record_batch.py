"""Kafka's v2 record batches (magic 2) to and from Arrow columns: the codec of produced and fetched records.

A batch, as Kafka's DefaultRecordBatch defines it (big-endian; the first 12 bytes are the log overhead)::

    offset  size  field
     0      8     baseOffset             int64   offset of the first record
     8      4     batchLength            int32   bytes after this field (the whole batch less 12)
    12      4     partitionLeaderEpoch   int32
    16      1     magic                  int8    2
    17      4     crc                    uint32  CRC-32C (Castagnoli) of bytes 21 .. end of the batch
    21      2     attributes             int16   bits 0-2 compression (0 none, 1 gzip, 2 snappy, 3 lz4,
                                                 4 zstd), 3 timestamp type (1: LogAppendTime),
                                                 4 transactional, 5 control, 6 hasDeleteHorizonMs
    23      4     lastOffsetDelta        int32   last record's offset - baseOffset
    27      8     baseTimestamp          int64   first record's timestamp; the delete horizon when bit 6 is set
    35      8     maxTimestamp           int64
    43      8     producerId             int64   -1: none
    51      2     producerEpoch          int16
    53      4     baseSequence           int32   first record's sequence (-1: none)
    57      4     recordsCount           int32
    61            records                        compressed whole with the batch's codec (compression.py)

The CRC leaves out baseOffset and partitionLeaderEpoch, which a broker rewrites, so damage to those 12 bytes
cannot be detected (in Kafka either). A record's varint layout is in ``_record_batch.c``; its timestamp is
``baseTimestamp + timestampDelta`` (when bit 6 is set, as Kafka's cleaner writes it, baseTimestamp holds
deleteHorizonMs and the deltas are taken from it), or the batch's maxTimestamp for LogAppendTime.

A control batch (bit 5) holds one control record: key int16 version 0, int16 type (0 abort, 1 commit);
value int16 version 0, int32 coordinator epoch (Kafka's EndTransactionMarker). An empty batch (0 records) is
what Kafka's cleaner keeps of a producer's last batch so that its epoch and sequence survive.

:func:`decode_batches` reads a produce request's batches into one :class:`ProducedBatch` each;
:func:`encode_batches` writes rows of :data:`compactlog.record.SCHEMA` as batches for a fetch. The
C extension ``_record_batch`` scans and writes the headers, checks and writes the CRCs and parses and writes
the records; here, the codecs (compression.py), the cuts between batches (batch_plan.py) and Arrow.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..columns import binary_lengths
from ..errors import CorruptRecordError, InvalidRecordError, RecordTooLargeError
from ..limits import INT_MAX
from ..record import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    CONTROL_EMPTY_BATCH,
    HEADER_TYPE,
    RecordColumns,
    columns_of,
    constant_column,
    header_bytes,
)
from . import _record_batch
from .batch_plan import batch_starts
from .compression import NONE, check_codec, compress, decompress

BATCH_OVERHEAD = 61
# scan_batches() (C) gives per batch: the 13 header fields in order, then the batch's position in the buffer
# (int64s, native order).
SCANNED_FIELDS = 14
_SCANNED = f"={SCANNED_FIELDS}q"
_INT32, _INT64, _BINARY = pa.int32(), pa.int64(), pa.binary()
_LAST_OFFSET = struct.Struct("=i")
LOG_OVERHEAD = 12  # baseOffset and batchLength: not counted in batchLength
CRC_START = 21  # the CRC covers attributes .. end of the batch
MAGIC = 2

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_BIT = 0x08
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20
DELETE_HORIZON_BIT = 0x40

CREATE_TIME = 0
LOG_APPEND_TIME = 1

# The control record of a transaction marker (EndTransactionMarker, version 0; coordinator epoch 0: this
# single-node log keeps no coordinator epoch).
CONTROL_KEYS = {CONTROL_ABORT: struct.pack(">hh", 0, 0), CONTROL_COMMIT: struct.pack(">hh", 0, 1)}
CONTROL_VALUE = struct.pack(">hi", 0, 0)

# A fetch's batches are closed once their records reach this many bytes (a soft target: a batch holds at
# least one record), so that a run of one producer's rows does not become one batch a client must take whole.
DEFAULT_BATCH_BYTES = 1 << 20

# A produced batch's records may decompress to at most this many times the largest batch accepted (Kafka's
# max.message.bytes applies to the batch as sent): generous for records (keyed JSON compresses 5-20x), and
# it bounds the memory one produced batch can take at about 32 max.message.bytes instead of whatever a
# decompression bomb claims. Never more than a binary column holds (2 GiB).
DECOMPRESSION_RATIO_LIMIT = 32
MAX_RECORDS_BYTES = INT_MAX

RECORDS_SCHEMA = pa.schema([
    pa.field("offset_delta", pa.int32(), nullable=False),
    pa.field("timestamp", pa.int64(), nullable=False),
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("headers", HEADER_TYPE),
])
_HEADER_FIELDS = [HEADER_TYPE.value_type.field(i) for i in range(HEADER_TYPE.value_type.num_fields)]
_ENCODE_COLUMNS = ("offset", "timestamp", "key", "value", "headers", "producer_id", "producer_epoch", "sequence",
                   "is_transactional", "control_type", "delete_horizon_ms")


class ProducedBatch(NamedTuple):
    """One v2 batch as a producer sent it: the header's fields and its records as columns: each record's
    offset delta, and its timestamp (absolute), key, value and headers as a log appends them. (A named
    tuple: immutable, and built in a fraction of a frozen dataclass's time, once per produced batch.)"""

    base_offset: int
    partition_leader_epoch: int
    magic: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    is_transactional: bool
    is_control: bool
    compression: int
    timestamp_type: int
    record_count: int
    delete_horizon_ms: int  # -1 unless the hasDeleteHorizonMs bit is set
    size_in_bytes: int  # the batch on the wire, log overhead included
    offset_delta: pa.Array
    columns: RecordColumns  # headers None when no record of the batch has any

    @property
    def records(self) -> pa.Table:
        """The records as one table of :data:`RECORDS_SCHEMA` (null headers where a record has none)."""
        columns = self.columns
        headers = columns.headers
        return pa.Table.from_arrays([self.offset_delta, columns.timestamp, columns.key, columns.value,
                                     constant_column(None, HEADER_TYPE, len(columns.key)) if headers is None
                                     else headers], schema=RECORDS_SCHEMA)


def records_limit(max_batch_bytes: int | None) -> int:
    """The most bytes a batch's records may decompress to when batches are at most ``max_batch_bytes``."""
    if max_batch_bytes is None:
        return MAX_RECORDS_BYTES
    return min(max(max_batch_bytes, 1) * DECOMPRESSION_RATIO_LIMIT, MAX_RECORDS_BYTES)


def decode_batches(data: bytes | bytearray | memoryview, max_batch_bytes: int | None = None) -> list[ProducedBatch]:
    """Every batch in ``data`` (a produce request's records), validated: magic 2, batch length, CRC-32C,
    record count, every record's varints and lengths, a compressed batch's records found the same a second
    way (:func:`~compactlog.protocol.compression.check_decompressed`). Any violation (also a batch cut short at the end)
    raises :class:`CorruptRecordError`; an unknown codec :class:`UnsupportedCompressionTypeError`. With
    ``max_batch_bytes``, a batch larger than that, or whose records decompress past
    :func:`records_limit` of it, is a :class:`RecordTooLargeError`, raised before any batch is decompressed
    (for the size) or as soon as the limit is passed (for the records)."""
    view = memoryview(data)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    try:
        scanned = list(struct.iter_unpack(_SCANNED, _record_batch.scan_batches(view)))
    except ValueError as e:
        raise CorruptRecordError(str(e)) from e
    for code in sorted({fields[5] & COMPRESSION_MASK for fields in scanned}):
        check_codec(code)
    if max_batch_bytes is not None and scanned:
        size = max(fields[1] for fields in scanned) + LOG_OVERHEAD
        if size > max_batch_bytes:
            raise RecordTooLargeError(f"a record batch of {size} bytes is larger than {max_batch_bytes} bytes")
    limit = records_limit(max_batch_bytes)
    # A batch of no records (the header Kafka's cleaner keeps) is read as Kafka reads it: whatever its
    # records section holds, no records.
    sections: list[memoryview | bytes] = []
    for fields in scanned:
        start, length, count, codec = fields[13], fields[1], fields[12], fields[5] & COMPRESSION_MASK
        records_view = view[start + BATCH_OVERHEAD:start + LOG_OVERHEAD + length]
        sections.append(b"" if not count else decompress(codec, records_view, limit) if codec else records_view)
    k = len(scanned)
    offset_delta, columns = _decode_records(
        sections, struct.pack(f"={k}i", *(fields[12] for fields in scanned)),
        struct.pack(f"={k}q", *(fields[7] for fields in scanned)),
        bytes((fields[5] & TIMESTAMP_TYPE_BIT) >> 3 for fields in scanned),
        struct.pack(f"={k}q", *(fields[8] for fields in scanned)), sum(fields[12] for fields in scanned))
    batches = []
    row = 0
    for (base_offset, length, leader_epoch, magic, _, attrs, last_offset_delta, base_timestamp, max_timestamp,
         producer_id, producer_epoch, base_sequence, count, _) in scanned:
        if k == 1:
            deltas, records = offset_delta, columns
        else:
            deltas, records = offset_delta.slice(row, count), _slice_columns(columns, row, count)
        batches.append(ProducedBatch(
            base_offset, leader_epoch, magic, attrs, last_offset_delta, base_timestamp, max_timestamp,
            producer_id, producer_epoch, base_sequence, bool(attrs & TRANSACTIONAL_BIT), bool(attrs & CONTROL_BIT),
            attrs & COMPRESSION_MASK, (attrs & TIMESTAMP_TYPE_BIT) >> 3, count,
            base_timestamp if attrs & DELETE_HORIZON_BIT else -1, length + LOG_OVERHEAD, deltas, records))
        row += count
    return batches


def _slice_columns(columns: RecordColumns, start: int, n: int) -> RecordColumns:
    """Rows ``start..start + n`` of one batch's columns (headers None when none of them has any)."""
    headers = None if columns.headers is None else columns.headers.slice(start, n)
    return columns_of(columns.timestamp.slice(start, n), columns.key.slice(start, n), columns.value.slice(start, n),
                      headers)


def _decode_records(sections: list[memoryview | bytes], counts: bytes, base_timestamps: bytes, log_append: bytes,
                    max_timestamps: bytes, n: int) -> tuple[pa.Array, RecordColumns]:
    """The records of the batches' ``sections`` (``n`` in all; per batch, packed: ``counts`` int32,
    ``base_timestamps`` int64, ``log_append`` uint8, ``max_timestamps`` int64): their offset deltas and
    their columns."""
    try:
        (offset_delta, timestamp, key_valid, key_offsets, key_data, key_nulls, value_valid, value_offsets, value_data,
         value_nulls, headers_valid, header_offsets, header_nulls, hkey_offsets, hkey_data, hvalue_valid,
         hvalue_offsets, hvalue_data, hvalue_nulls, header_count, min_timestamp,
         max_timestamp) = _record_batch.decode_records(
            sections, counts, base_timestamps, log_append, max_timestamps)
    except ValueError as e:
        raise CorruptRecordError(f"record batch: {e}") from e
    buffer = pa.py_buffer
    return pa.Array.from_buffers(_INT32, n, [None, buffer(offset_delta)]), RecordColumns(
        pa.Array.from_buffers(_INT64, n, [None, buffer(timestamp)]),
        pa.Array.from_buffers(_BINARY, n, [buffer(key_valid) if key_nulls else None, buffer(key_offsets),
                                           buffer(key_data)], null_count=key_nulls),
        pa.Array.from_buffers(_BINARY, n, [buffer(value_valid) if value_nulls else None,
                                           buffer(value_offsets), buffer(value_data)], null_count=value_nulls),
        None if not header_count else _headers(n, headers_valid, header_offsets, header_nulls, hkey_offsets,
                                               hkey_data, hvalue_valid, hvalue_offsets, hvalue_data, hvalue_nulls,
                                               header_count),
        # The offsets start at 0: the last is the bytes a column spans.
        _LAST_OFFSET.unpack_from(key_offsets, 4 * n)[0] + _LAST_OFFSET.unpack_from(value_offsets, 4 * n)[0],
        min_timestamp if n else -1, max_timestamp if n else -1)


def _headers(n: int, headers_valid: bytes, header_offsets: bytes, header_nulls: int, hkey_offsets: bytes,
             hkey_data: bytes, hvalue_valid: bytes, hvalue_offsets: bytes, hvalue_data: bytes, hvalue_nulls: int,
             header_count: int) -> pa.Array:
    """The headers column from the decoder's buffers, of ``header_count`` headers in all (a record without
    any has a null list)."""
    buffer = pa.py_buffer
    hkey = pa.Array.from_buffers(pa.string(), header_count, [None, buffer(hkey_offsets), buffer(hkey_data)])
    try:
        hkey.validate(full=True)
    except pa.ArrowInvalid as e:
        raise CorruptRecordError(f"record batch: a header key is not UTF-8: {e}") from e
    hvalue = pa.Array.from_buffers(pa.binary(), header_count, [
        buffer(hvalue_valid) if hvalue_nulls else None, buffer(hvalue_offsets), buffer(hvalue_data)],
        null_count=hvalue_nulls)
    entries = pa.StructArray.from_arrays([hkey, hvalue], fields=_HEADER_FIELDS)
    return pa.Array.from_buffers(HEADER_TYPE, n, [buffer(headers_valid) if header_nulls else None,
                                                  buffer(header_offsets)], null_count=header_nulls, children=[entries])


def encode_batches(table: pa.Table, compression: int = 0, max_bytes: int | None = None, *,
                   timestamp_type: int = CREATE_TIME, partition_leader_epoch: int = 0,
                   batch_bytes: int = DEFAULT_BATCH_BYTES) -> bytes:
    """Rows of :data:`compactlog.record.SCHEMA` (in offset order) as v2 batches, one per run of rows of the
    same producer id, epoch, transactional flag, delete horizon and control-ness, split where a batch's
    records pass ``batch_bytes``. Transaction markers become control batches, CONTROL_EMPTY_BATCH rows empty
    batches. ``max_bytes``: stop before the batch that would pass it, but return at least one whole batch
    (Kafka's fetch rule)."""
    check_codec(compression)
    names = set(table.column_names)
    missing = [name for name in _ENCODE_COLUMNS if name not in names]
    if missing:
        raise InvalidRecordError(f"encode_batches needs the columns of compactlog.record.SCHEMA; missing {missing}")
    n = table.num_rows
    if n == 0:
        return b""
    table = table.select(list(_ENCODE_COLUMNS)).combine_chunks()

    def column(name: str) -> pa.Array:
        chunked = table.column(name)
        return chunked.chunk(0) if chunked.num_chunks == 1 else pa.concat_arrays(chunked.chunks)

    def numbers(name: str, dtype: type) -> np.ndarray:
        return np.asarray(column(name).to_numpy(zero_copy_only=False), dtype)

    offsets = numbers("offset", np.int64)
    timestamps = numbers("timestamp", np.int64)
    producer_id = numbers("producer_id", np.int64)
    producer_epoch = numbers("producer_epoch", np.int16)
    sequence = numbers("sequence", np.int32)
    transactional = numbers("is_transactional", np.bool_)
    control_type = numbers("control_type", np.int8)
    delete_horizon = numbers("delete_horizon_ms", np.int64)
    key, value, headers = column("key"), column("value"), column("headers")
    marker = (control_type == CONTROL_ABORT) | (control_type == CONTROL_COMMIT)
    empty = control_type == CONTROL_EMPTY_BATCH
    if marker.any():
        abort = pa.array(control_type == CONTROL_ABORT)
        key = pc.if_else(pa.array(marker), pc.if_else(abort, pa.scalar(CONTROL_KEYS[CONTROL_ABORT], pa.binary()),
                                                      pa.scalar(CONTROL_KEYS[CONTROL_COMMIT], pa.binary())), key)
        value = pc.if_else(pa.array(marker), pa.scalar(CONTROL_VALUE, pa.binary()), value)
    if headers.null_count == n:
        header_args = None
        sizes = _lengths(key) + _lengths(value)
    else:
        header_args = _header_args(headers)
        sizes = _lengths(key) + _lengths(value) + np.nan_to_num(
            header_bytes(headers, per_header=2).to_numpy(zero_copy_only=False)).astype(np.int64)
    sizes += 7  # the smallest record framing: with the lengths, a lower bound of each record's bytes

    starts = batch_starts(offsets, producer_id, producer_epoch, transactional, control_type, delete_horizon,
                          sizes, batch_bytes)
    ends = np.append(starts[1:], n)
    lasts = np.where(empty[starts], starts, ends)  # an empty batch writes no record
    base_offsets = offsets[starts]
    has_horizon = delete_horizon[starts] >= 0
    # An empty batch's baseTimestamp is NO_TIMESTAMP (-1), its maxTimestamp the row's, as writeEmptyHeader.
    base_timestamps = np.where(has_horizon, delete_horizon[starts], np.where(empty[starts], -1, timestamps[starts]))
    max_timestamps = np.maximum.reduceat(timestamps, starts)
    last_offset_deltas = offsets[ends - 1] - base_offsets
    counts = lasts - starts
    # Control batches and empty batches are written uncompressed, as Kafka writes them (its
    # EndTransactionMarker and writeEmptyHeader use NONE): a reader then never decompresses nothing.
    compressed = ~marker[starts] & (counts > 0)
    attributes = ((compression * compressed) | (timestamp_type << 3) | (transactional[starts].astype(np.int64) << 4)
                  | (marker[starts].astype(np.int64) << 5) | (has_horizon.astype(np.int64) << 6))
    fields = np.column_stack([starts, lasts, base_offsets, base_timestamps, max_timestamps, last_offset_deltas,
                              producer_id[starts], producer_epoch[starts], sequence[starts], attributes])
    fields = np.ascontiguousarray(fields, np.int64)
    columns = (offsets, timestamps, _binary_args(key), _binary_args(value), header_args)
    if compression == NONE:
        if max_bytes is None:
            return _record_batch.encode_batches(fields, partition_leader_epoch, -1, *columns)
        # Batches past where the records' smallest sizes already pass max_bytes are not written at all.
        lower_bound = np.cumsum(np.add.reduceat(sizes, starts) * (counts > 0) + BATCH_OVERHEAD)
        chosen = max(1, int(np.searchsorted(lower_bound, max_bytes, side="right")))
        return _record_batch.encode_batches(fields[:chosen], partition_leader_epoch, max_bytes, *columns)
    parts: list[bytearray] = []
    used = 0
    step = len(fields) if max_bytes is None else 8  # compressed sizes are known only once compressed
    for first in range(0, len(fields), step):
        chunk = fields[first:first + step]
        firsts, lasts, bases, base_times = (np.ascontiguousarray(chunk[:, i]) for i in range(4))
        encoded = _record_batch.encode_records(firsts, lasts, bases, base_times, *columns)
        for batch_fields, records in zip(chunk, encoded, strict=True):
            batch = bytearray(BATCH_OVERHEAD)
            if batch_fields[9] & COMPRESSION_MASK:  # the attributes
                batch += compress(compression, records)
            else:
                batch += records
            _record_batch.write_header(batch, batch_fields, partition_leader_epoch)
            if max_bytes is not None and parts and used + len(batch) > max_bytes:
                return b"".join(parts)
            parts.append(batch)
            used += len(batch)
        if max_bytes is not None and used >= max_bytes:
            break
    return b"".join(parts)


def _lengths(column: pa.Array) -> np.ndarray:
    return binary_lengths(column if column.type == pa.binary() else column.cast(pa.binary()))


def _binary_args(column: pa.Array) -> tuple:
    """A binary column as encode_records takes it: (validity or None, bit offset, offsets from the first row,
    data)."""
    if column.type != pa.binary():
        column = column.cast(pa.binary())
    validity, offsets, data = column.buffers()
    positions = np.frombuffer(offsets, np.int32)[column.offset:column.offset + len(column) + 1]
    return (validity if column.null_count else None, column.offset, positions,
            data if data is not None else b"")


def _header_args(headers: pa.Array) -> tuple:
    entries = headers.values
    if entries.null_count or entries.field("key").null_count:
        raise InvalidRecordError("a record header without a key: Kafka's headers each have a key")
    validity = headers.buffers()[0]
    list_offsets = np.asarray(headers.offsets.to_numpy(zero_copy_only=False), np.int32)
    return (validity if headers.null_count else None, headers.offset, list_offsets,
            _binary_args(entries.field("key")), _binary_args(entries.field("value")))
