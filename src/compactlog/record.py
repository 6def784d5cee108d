"""The record: its Arrow schema (the on-disk column layout) and the Python value types.

Column layout, shared by the active segment's Arrow batches and the sealed Parquet segments:

====================  =======================================  ==========================================
column                type                                     meaning
====================  =======================================  ==========================================
offset                int64, not null                          position in the partition, never renumbered
timestamp             int64, not null                          milliseconds since the epoch (CreateTime, or
                                                               the append time for LogAppendTime topics)
key                   binary                                   null only for keyless records
value                 binary                                   null = tombstone (or a control record)
headers               list<struct<key: string, value: binary>>  null when the record has no headers
producer_id           int64, not null                          -1 = no producer id
producer_epoch        int16, not null                          -1 = none
sequence              int32, not null                          -1 = none
is_transactional      bool, not null                           written inside a transaction
control_type          int8, not null                           -1 data record, 0 ABORT marker, 1 COMMIT marker
delete_horizon_ms     int64, not null                          -1 = not stamped; else the time after which the
                                                               cleaner may remove this tombstone or marker
====================  =======================================  ==========================================

Control records (transaction markers) are stored as rows with ``control_type >= 0``; readers never return
them as records. The delete horizon is per record (Kafka keeps it per batch).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .columns import binary_lengths, binary_span, from_numpy, repeat, single_array, to_numpy
from .errors import InvalidRecordError
from .limits import INT_MAX, LONG_MAX

NO_PRODUCER_ID = -1
NO_EPOCH = -1
NO_SEQUENCE = -1
NO_DELETE_HORIZON = -1

CONTROL_NONE = -1
CONTROL_ABORT = 0
CONTROL_COMMIT = 1
# A producer's last batch emptied by the cleaner: kept (without key, value or headers) only so the
# producer's sequence and epoch survive, as Kafka keeps an empty batch header. Never returned to readers.
CONTROL_EMPTY_BATCH = 2

HEADER_TYPE = pa.list_(
    pa.struct([pa.field("key", pa.string(), nullable=False), pa.field("value", pa.binary())]))

SCHEMA = pa.schema(
    [
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("timestamp", pa.int64(), nullable=False),
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("headers", HEADER_TYPE),
        pa.field("producer_id", pa.int64(), nullable=False),
        pa.field("producer_epoch", pa.int16(), nullable=False),
        pa.field("sequence", pa.int32(), nullable=False),
        pa.field("is_transactional", pa.bool_(), nullable=False),
        pa.field("control_type", pa.int8(), nullable=False),
        pa.field("delete_horizon_ms", pa.int64(), nullable=False),
    ]
)
COLUMNS = tuple(SCHEMA.names)

# The columns a reader sees: the record as a consumer knows it.
READ_COLUMNS = ("offset", "timestamp", "key", "value", "headers")

# Per-record overhead counted against max.message.bytes, as a v2 record batch of one record
# (61-byte batch header plus the record's own framing) would cost in Kafka.
RECORD_OVERHEAD_BYTES = 70

Headers = list[tuple[str, bytes | None]]


@dataclass(frozen=True, slots=True)
class Record:
    """One record as a consumer sees it. ``value is None`` means a tombstone."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: Headers

    @property
    def is_tombstone(self) -> bool:
        return self.value is None


@dataclass(frozen=True)
class AppendResult:
    """What a bulk append acknowledged: offsets ``[base_offset, last_offset]``."""

    topic: str
    partition: int
    base_offset: int
    last_offset: int
    record_count: int


class RecordMetadata(NamedTuple):
    """What the log acknowledged for a sent record, as Kafka's RecordMetadata."""

    topic: str
    partition: int
    offset: int
    timestamp: int


def record_size(key: bytes | None, value: bytes | None, headers: Headers | None) -> int:
    """The size of one record as counted against ``max.message.bytes``."""
    size = RECORD_OVERHEAD_BYTES + (len(key) if key is not None else 0)
    size += len(value) if value is not None else 0
    if headers:
        for header_key, header_value in headers:
            size += len(header_key.encode()) + (len(header_value) if header_value is not None else 0)
    return size


def header_bytes(headers: pa.ChunkedArray | pa.Array, per_header: int = 0) -> pa.Array:
    """Per row, the bytes of its headers' names and values plus ``per_header`` for each; null where the
    row has no headers (a column of :data:`HEADER_TYPE`)."""
    if isinstance(headers, pa.ChunkedArray):
        headers = headers.combine_chunks() if headers.num_chunks else pa.array([], HEADER_TYPE)
    entries = pc.list_flatten(headers)
    per_entry = pc.add(pc.add(pc.binary_length(entries.field("key")),
                              pc.fill_null(pc.binary_length(entries.field("value")), 0)), per_header)
    parents = pc.list_parent_indices(headers).to_numpy()
    totals = np.bincount(parents, weights=per_entry.to_numpy(zero_copy_only=False), minlength=len(headers))
    return pa.array(totals.astype(np.int64), mask=headers.is_null().to_numpy(zero_copy_only=False))


def empty_table() -> pa.Table:
    return SCHEMA.empty_table()


_BINARY_TYPES = (pa.binary(), pa.large_binary(), pa.string(), pa.large_string())


def _as_binary(column: pa.ChunkedArray | pa.Array, name: str) -> pa.ChunkedArray | pa.Array:
    if column.type == pa.binary():
        return column
    if (column.type in _BINARY_TYPES or pa.types.is_fixed_size_binary(column.type)
            or pa.types.is_null(column.type)):
        return column.cast(pa.binary())

    raise InvalidRecordError(f"column {name!r} must be binary (bytes) or string, not {column.type}")


def timestamp_problem(timestamp: object) -> str | None:
    """What is wrong with a record's timestamp, or None. Kafka's rule (``ProducerRecord``: "Timestamp should
    always be non-negative or null"): epoch milliseconds, an int in ``[0, Long.MAX_VALUE]``; None (a send
    without one) means now. ``send()`` and a bulk append (its smallest and largest) both ask this."""
    if type(timestamp) is not int:
        return f"timestamp must be an int (epoch ms) or None, not {timestamp!r}"
    if not 0 <= timestamp <= LONG_MAX:
        return f"timestamp must be in [0, {LONG_MAX}] (epoch ms), not {timestamp!r}"
    return None


def check_timestamp_extremes(smallest: int | None, largest: int | None) -> None:
    """Raise :class:`InvalidRecordError` unless the smallest and largest timestamps of an append (None: all
    null, a send without one) pass :func:`timestamp_problem`."""
    for extreme in (smallest, largest):
        problem = None if extreme is None else timestamp_problem(extreme)
        if problem is not None:

            raise InvalidRecordError(f"column 'timestamp': {problem}")


def to_rows(data: pa.Table | pa.RecordBatch, now_ms: int) -> pa.Table:
    """Turn a user's table (``key``, ``value``, optional ``timestamp`` and ``headers``) into rows in
    :data:`SCHEMA`. Offsets are placeholders (the log assigns them); producer fields say "none"."""

    if isinstance(data, pa.Table):
        table = data
    elif isinstance(data, pa.RecordBatch):
        table = pa.Table.from_batches([data])
    else:
        raise InvalidRecordError(
            f"bulk append takes a pyarrow Table or RecordBatch, not {type(data).__name__}")
    names = set(table.column_names)
    missing = {"key", "value"} - names
    if missing:
        raise InvalidRecordError(f"bulk append needs columns 'key' and 'value'; missing {sorted(missing)}")
    unknown = names - {"key", "value", "timestamp", "headers"}
    if unknown:
        raise InvalidRecordError(
            f"bulk append takes columns key, value, timestamp, headers; unknown {sorted(unknown)}")
    n = table.num_rows
    if "timestamp" in names:
        timestamp = table.column("timestamp")
        if pa.types.is_timestamp(timestamp.type):
            # Floored to milliseconds (Spark and pandas give micro- or nanoseconds), as Kafka's clients do.
            unit = timestamp.type.unit
            raw = timestamp.cast(pa.int64())
            if isinstance(raw, pa.ChunkedArray):
                raw = raw.combine_chunks()
            values = raw.fill_null(0).to_numpy()
            scaled = values * 1000 if unit == "s" else values // {"ms": 1, "us": 1000, "ns": 1_000_000}[unit]
            timestamp = pa.array(scaled, pa.int64(), mask=raw.is_null().to_numpy(zero_copy_only=False))
        elif not pa.types.is_integer(timestamp.type):
            raise InvalidRecordError(f"column 'timestamp' must be integer milliseconds, not {timestamp.type}")
        plain = timestamp.type == pa.int64() and not timestamp.null_count  # as a client sends them
        if n:  # the smallest and largest, before a cast to int64 could wrap or refuse them
            if plain:  # read with numpy: one small append would otherwise pay for Arrow compute calls
                values = to_numpy(timestamp)
                check_timestamp_extremes(int(values.min()), int(values.max()))
            else:
                check_timestamp_extremes(*(extreme.as_py() for extreme in pc.min_max(timestamp).values()))
        if not plain:
            timestamp = pa.compute.fill_null(timestamp.cast(pa.int64()), now_ms)
    else:
        timestamp = repeat(now_ms, pa.int64(), n)
    if "headers" in names:
        headers = table.column("headers")
        if headers.type != HEADER_TYPE:
            try:
                headers = headers.cast(HEADER_TYPE)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
                raise InvalidRecordError(f"column 'headers' must be {HEADER_TYPE}, not {headers.type}") from e
    else:
        headers = None
    key = _as_binary(table.column("key"), "key")
    return data_rows(timestamp, key, _as_binary(table.column("value"), "value"), headers)


# Constant columns of up to this many rows are slices of one cached array: no allocation per batch.
_CACHED_CONSTANT_ROWS = 65536
_constants: dict[tuple[object, pa.DataType], pa.Array] = {}


def constant_chunks(value: object, type_: pa.DataType, n: int) -> pa.Array | pa.ChunkedArray:
    """:func:`constant_column` for any ``n`` without allocating: chunks, each a slice of the cached array."""
    if n <= _CACHED_CONSTANT_ROWS:
        return constant_column(value, type_, n)
    full, rest = divmod(n, _CACHED_CONSTANT_ROWS)
    chunk = constant_column(value, type_, _CACHED_CONSTANT_ROWS)
    return pa.chunked_array([chunk] * full + ([chunk.slice(0, rest)] if rest else []), type_)


def constant_column(value: object, type_: pa.DataType, n: int) -> pa.Array:
    """``n`` copies of ``value`` (None: nulls) as an array of ``type_``."""
    if n > _CACHED_CONSTANT_ROWS:
        if value is None:
            return null_headers(n) if type_ == HEADER_TYPE else pa.nulls(n, type_)
        return repeat(value, type_, n)
    cached = _constants.get((value, type_))
    if cached is None:
        cached = constant_column(value, type_, _CACHED_CONSTANT_ROWS + 1)
        _constants[(value, type_)] = cached
    return cached.slice(0, n)


def null_headers(n: int) -> pa.Array:
    """``n`` null header lists. Not ``pa.nulls``: that gives the nested children buffers of ``n`` entries,
    which Arrow IPC then writes out whole for every slice, so each frame would carry them."""
    return pa.ListArray.from_arrays(from_numpy(np.zeros(n + 1, np.int32)), pa.nulls(0, HEADER_TYPE.value_type),
                                    type=HEADER_TYPE, mask=from_numpy(np.ones(n, bool)))


def data_rows(timestamp: pa.Array | pa.ChunkedArray, key: pa.Array | pa.ChunkedArray,
              value: pa.Array | pa.ChunkedArray,
              headers: pa.Array | pa.ChunkedArray | None = None) -> pa.Table:
    """Data records in :data:`SCHEMA` from their user columns: offsets are placeholders (the log assigns
    them), the producer fields say "none", no control records, no delete horizon."""
    n = len(key)
    return pa.Table.from_arrays([
        constant_chunks(0, pa.int64(), n),
        timestamp,
        key,
        value,
        constant_chunks(None, HEADER_TYPE, n) if headers is None else headers,
        constant_chunks(NO_PRODUCER_ID, pa.int64(), n),
        constant_chunks(NO_EPOCH, pa.int16(), n),
        constant_chunks(NO_SEQUENCE, pa.int32(), n),
        constant_chunks(False, pa.bool_(), n),
        constant_chunks(CONTROL_NONE, pa.int8(), n),
        constant_chunks(NO_DELETE_HORIZON, pa.int64(), n),
    ], schema=SCHEMA)


_PRODUCER_FIELDS = tuple(SCHEMA.get_field_index(name)
                         for name in ("producer_id", "producer_epoch", "sequence", "is_transactional"))


def producer_rows(rows: pa.Table, producer_id: int, epoch: int, base_sequence: int, transactional: bool) -> pa.Table:
    """``rows`` (in :data:`SCHEMA`) as one batch of an idempotent producer: its id and epoch in every row,
    sequences from ``base_sequence`` (wrapping past ``INT_MAX`` to 0, as Kafka's), and whether it is
    transactional. One table is built, not one per field."""
    n = rows.num_rows
    columns = rows.columns
    for index, values in zip(_PRODUCER_FIELDS, (repeat(producer_id, pa.int64(), n), repeat(epoch, pa.int16(), n),
                                                from_numpy(producer_sequences(base_sequence, n)),
                                                constant_chunks(bool(transactional), pa.bool_(), n)), strict=True):
        columns[index] = values
    return pa.Table.from_arrays(columns, schema=SCHEMA)


def producer_sequences(base_sequence: int, n: int) -> np.ndarray:
    """The sequences of ``n`` records from ``base_sequence`` (int32), wrapping past ``INT_MAX`` to 0 as
    Kafka's do."""
    if base_sequence + n - 1 <= INT_MAX:  # no wrap: the common case, without the modulo and the cast
        return np.arange(base_sequence, base_sequence + n, dtype=np.int32)
    return ((base_sequence + np.arange(n, dtype=np.int64)) % (INT_MAX + 1)).astype(np.int32)


class RecordColumns(NamedTuple):
    """One batch's records as the columns a producer sets, in :data:`SCHEMA`'s types, one array each:
    ``timestamp`` (int64, not null), ``key`` and ``value`` (binary), ``headers`` (:data:`HEADER_TYPE`; None
    when no record has headers). What a log appends as one producer batch without a table of SCHEMA."""

    timestamp: pa.Array
    key: pa.Array
    value: pa.Array
    headers: pa.Array | None
    key_value_bytes: int  # the bytes the key and value columns span (binary_span): at least their values' sum
    min_timestamp: int  # the smallest and largest timestamp (-1 for no records)
    max_timestamp: int


def record_columns(rows: pa.Table | pa.RecordBatch) -> RecordColumns:
    """The :class:`RecordColumns` of rows in :data:`SCHEMA` (chunks combined)."""
    return columns_of(*(single_array(rows.column(name)) for name in ("timestamp", "key", "value", "headers")))


def columns_of(timestamp: pa.Array, key: pa.Array, value: pa.Array, headers: pa.Array | None) -> RecordColumns:
    """The :class:`RecordColumns` of these columns: the headers None when no record has any, the bytes the
    keys and values span and the timestamps' extremes read from them."""
    return RecordColumns(timestamp, key, value, None if headers is None or headers.null_count == len(headers)
                         else headers, binary_span(key) + binary_span(value), *timestamp_extremes(timestamp))


def timestamp_extremes(timestamp: pa.Array) -> tuple[int, int]:
    """The smallest and largest of a not-null int64 column, (-1, -1) when it is empty."""
    values = to_numpy(timestamp)
    return (int(values.min()), int(values.max())) if len(values) else (-1, -1)


def batch_arrays(columns: RecordColumns, producer: tuple[int, int, int, bool] | None, first_offset: int,
                 start: int, end: int) -> list[pa.Array]:
    """The stored columns (SCHEMA's order) of rows ``start..end`` of one batch appended at ``first_offset``:
    offset, timestamp, key, value, the headers if any record has some, and for a producer ``(id, epoch,
    base sequence, transactional)`` its id, epoch and sequences, and the transactional flag when set. The
    columns left out hold their defaults (:func:`compactlog.active_segment.batch_omitted`)."""
    n = end - start
    whole = start == 0 and n == len(columns.key)
    arrays = [from_numpy(np.arange(first_offset + start, first_offset + end, dtype=np.int64))]
    stored = [columns.timestamp, columns.key, columns.value]
    if columns.headers is not None:
        stored.append(columns.headers)
    arrays += stored if whole else [column.slice(start, n) for column in stored]
    if producer is not None:
        producer_id, epoch, base_sequence, transactional = producer
        arrays += [repeat(producer_id, pa.int64(), n), repeat(epoch, pa.int16(), n),
                   from_numpy(producer_sequences((base_sequence + start) % (INT_MAX + 1), n))]
        if transactional:
            arrays.append(constant_column(True, pa.bool_(), n))
    return arrays


def read_columns(columns: Sequence[str] | None) -> list[str]:
    """The columns a read returns: ``columns`` (names of :data:`SCHEMA`), else :data:`READ_COLUMNS`."""
    from .errors import InvalidRequestError

    if columns is None:
        return list(READ_COLUMNS)
    if isinstance(columns, str | bytes) or not isinstance(columns, Sequence):
        raise InvalidRequestError(f"columns must be a list of column names, not {columns!r}")
    unknown = [c for c in columns if not isinstance(c, str) or c not in SCHEMA.names]
    if unknown:
        raise InvalidRequestError(f"unknown columns {unknown!r}; a read has {', '.join(SCHEMA.names)}")
    return list(columns)


def check_keyed(compacted: bool, keyless: int | bool, where: str) -> None:
    """Kafka's rule for a compacted topic (``LogValidator``): every data record has a key. ``keyless``: how
    many data records have none (or whether any does); ``where``: the topic or partition, as the message
    names it. The one place this rule is written: the producer, a bulk append, a produced batch and a Spark
    write all call it."""
    if compacted and keyless:
        raise InvalidRecordError(f"compacted topic {where} cannot accept a record without a key")


def check_rows(rows: pa.Table, *, compacted: bool, max_message_bytes: int, topic: str) -> None:
    """Kafka's append-time validation: keys on compacted topics, ``max.message.bytes``."""

    keys = rows.column("key")
    if compacted and keys.null_count:  # a null key is allowed on a control row only
        data = pa.compute.equal(rows.column("control_type"), CONTROL_NONE)
        check_keyed(compacted, pa.compute.any(pa.compute.and_(pa.compute.is_null(keys), data)).as_py(), repr(topic))
    if rows.num_rows == 0:
        return
    values = rows.column("value")
    check_record_sizes(keys, values, rows.column("headers"), binary_span(keys) + binary_span(values),
                       max_message_bytes=max_message_bytes, topic=topic)


def check_record_sizes(keys: pa.Array | pa.ChunkedArray, values: pa.Array | pa.ChunkedArray,
                       headers: pa.Array | pa.ChunkedArray | None, key_value_bytes: int, *, max_message_bytes: int,
                       topic: str) -> None:
    """Kafka's ``max.message.bytes`` for each record (:func:`record_size`) of not-empty columns (headers
    None: no record has any; ``key_value_bytes``: the bytes the keys and values span, :func:`binary_span`):
    else :class:`RecordTooLargeError`."""
    from .errors import RecordTooLargeError

    if headers is not None and headers.null_count == len(headers):
        headers = None
    if headers is None and key_value_bytes + RECORD_OVERHEAD_BYTES <= max_message_bytes:
        return  # all the rows' keys and values together fit: so does the largest record
    # Lengths read from the offsets buffers (numpy): one small append would otherwise pay for several
    # Arrow compute calls.
    sizes = binary_lengths(keys) + binary_lengths(values)
    if headers is not None:  # as record_size counts them for a send
        sizes += to_numpy(pa.compute.fill_null(header_bytes(headers), 0))
    largest = int(sizes.max()) + RECORD_OVERHEAD_BYTES
    if largest > max_message_bytes:
        raise RecordTooLargeError(
            f"a record of {largest} bytes is larger than max.message.bytes={max_message_bytes} of {topic!r}")


def records_of(tables: Iterator[pa.Table]) -> Iterator[Record]:
    """The rows of tables with the reader's columns (:data:`READ_COLUMNS`) as :class:`Record` values."""
    for table in tables:
        offsets = table.column("offset").to_pylist()
        timestamps = table.column("timestamp").to_pylist()
        keys = table.column("key").to_pylist()
        values = table.column("value").to_pylist()
        headers = table.column("headers").to_pylist()
        for i, offset in enumerate(offsets):
            header = headers[i]
            yield Record(offset, timestamps[i], keys[i], values[i],
                         [(h["key"], h["value"]) for h in header] if header else [])


# The columns every transaction marker row shares, built once (Arrow arrays are immutable): a marker is
# appended to each partition of every transaction.
# Built with columns.repeat: pa.array of a Python list imports pandas, which `import compactlog` must not.
_MARKER_NO_BYTES = pa.nulls(1, pa.binary())
_MARKER_NO_HEADERS = pa.nulls(1, HEADER_TYPE)
_MARKER_SEQUENCE = repeat(NO_SEQUENCE, pa.int32(), 1)
_MARKER_TRANSACTIONAL = repeat(True, pa.bool_(), 1)
_MARKER_DELETE_HORIZON = repeat(NO_DELETE_HORIZON, pa.int64(), 1)


def _one(type: pa.DataType, code: str, value: int) -> pa.Array:
    """A one-value not-null array of a fixed-width ``type`` whose little-endian ``struct`` code is ``code``."""
    return pa.Array.from_buffers(type, 1, [None, pa.py_buffer(struct.pack(code, value))])


def marker_arrays(producer_id: int, epoch: int, control_type: int, now_ms: int, offset: int = 0) -> list[pa.Array]:
    """One transaction marker's columns (SCHEMA's order, one row each): a control row of the producer, no
    key, value or headers. The varying values are packed into buffers directly: a marker is appended to
    each partition of every transaction."""
    return [_one(pa.int64(), "<q", offset), _one(pa.int64(), "<q", now_ms), _MARKER_NO_BYTES, _MARKER_NO_BYTES,
            _MARKER_NO_HEADERS, _one(pa.int64(), "<q", producer_id), _one(pa.int16(), "<h", epoch), _MARKER_SEQUENCE,
            _MARKER_TRANSACTIONAL, _one(pa.int8(), "<b", control_type), _MARKER_DELETE_HORIZON]


def marker_rows(producer_id: int, epoch: int, control_type: int, now_ms: int) -> pa.Table:
    """One transaction marker as a row (:func:`marker_arrays`)."""
    return pa.Table.from_arrays(marker_arrays(producer_id, epoch, control_type, now_ms), schema=SCHEMA)
