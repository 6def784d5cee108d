"""Columns between Arrow and numpy, without pyarrow's pandas bridge.

pyarrow's ``Array.to_numpy``, ``pa.array(...)``, ``pa.scalar(...)`` and every call that takes a numpy
array or a Python scalar for an Arrow one (``take``, ``filter``, ``pc.equal(column, 1)``) first ask whether
the object is a pandas one, and that imports pandas (pyarrow 26): 40 MB of resident memory and 0.3-1 s,
paid by the first clean of a process that never uses pandas. Opening, cleaning and reading a store
convert through these functions instead, which read and wrap Arrow's buffers directly; results are the
same arrays (zero-copy where pyarrow's would be). ``tests/unit/test_import.py`` holds the rule.

Only fixed-width columns are converted (integers, floats, booleans); a column with nulls is refused where
its values would be read (the record columns that are converted are all not-null).
"""

from __future__ import annotations

import struct
from typing import Any, TypeAlias

import numpy as np
import pyarrow as pa

Column: TypeAlias = "pa.Array | pa.ChunkedArray"


def single_array(column: Column) -> pa.Array:
    """A column as one array (a chunked column's chunks combined; zero-copy when it has one)."""
    if isinstance(column, pa.ChunkedArray):
        if column.num_chunks == 1:
            return column.chunk(0)
        return column.combine_chunks() if column.num_chunks else pa.nulls(0, column.type)
    return column


def _bits(buffer: pa.Buffer | None, offset: int, length: int) -> np.ndarray:
    """Arrow's little-endian bitmap as a bool array."""
    if buffer is None or length == 0:
        return np.zeros(length, dtype=bool)
    start, stop = offset // 8, (offset + length + 7) // 8
    packed = np.frombuffer(buffer, dtype=np.uint8, count=stop - start, offset=start)
    skip = offset - start * 8
    return np.unpackbits(packed, bitorder="little", count=skip + length)[skip:].view(bool)


# The numpy dtypes of Arrow's integer and float types, by type id: asked for every column converted
# (``to_pandas_dtype`` costs more than the conversion of a small column).
_DTYPES: dict[int, np.dtype[Any]] = {
    type_.id: np.dtype(type_.to_pandas_dtype())
    for type_ in (pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64(),
                  pa.float32(), pa.float64())}


def to_numpy(column: Column) -> np.ndarray:
    """The values of a not-null fixed-width column (int, float or bool) as a numpy array (read-only)."""
    array = single_array(column)
    if array.null_count:
        raise ValueError(f"column of {array.type} has {array.null_count} nulls")
    n = len(array)
    dtype = _DTYPES.get(array.type.id)
    if dtype is None:
        if pa.types.is_boolean(array.type):
            return _bits(array.buffers()[1], array.offset, n)
        dtype = np.dtype(array.type.to_pandas_dtype())
    if n == 0:
        return np.empty(0, dtype=dtype)
    return np.frombuffer(array.buffers()[1], dtype=dtype, count=n, offset=array.offset * dtype.itemsize)


def is_null(column: Column) -> np.ndarray:
    """Where a column is null, as a bool array."""
    array = single_array(column)
    if array.null_count == 0:
        return np.zeros(len(array), dtype=bool)
    if array.type == pa.null():
        return np.ones(len(array), dtype=bool)
    return ~_bits(array.buffers()[0], array.offset, len(array))


def binary_lengths(column: Column) -> np.ndarray:
    """Per row, the byte length of a binary or string column's value, 0 for a null (int64), read from the
    offsets buffer of each chunk: a null's slot may span bytes, so nulls are zeroed by the validity bitmap."""
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    parts = []
    for chunk in chunks:
        width: np.dtype[Any]
        if pa.types.is_large_binary(chunk.type) or pa.types.is_large_string(chunk.type):
            width = np.dtype(np.int64)
        elif pa.types.is_binary(chunk.type) or pa.types.is_string(chunk.type):
            width = np.dtype(np.int32)
        else:
            raise TypeError(f"binary_lengths takes binary or string columns, not {chunk.type}")
        if len(chunk) == 0:
            continue
        if chunk.null_count == len(chunk):  # no value at all (a marker's key and value): no bitmap to read
            parts.append(np.zeros(len(chunk), np.int64))
            continue
        offsets = np.frombuffer(chunk.buffers()[1], width, count=len(chunk) + 1, offset=chunk.offset * width.itemsize)
        lengths = np.diff(offsets).astype(np.int64)
        if chunk.null_count:
            lengths[~_bits(chunk.buffers()[0], chunk.offset, len(chunk))] = 0
        parts.append(lengths)
    return np.concatenate(parts) if parts else np.zeros(0, np.int64)


# The width of a binary or string type's offsets, and their struct code, by type id.
_OFFSET_WIDTHS = {pa.binary().id: (4, "<i"), pa.string().id: (4, "<i"), pa.large_binary().id: (8, "<q"),
                  pa.large_string().id: (8, "<q")}


def binary_span(column: Column) -> int:
    """The bytes a binary or string column's values span in its data buffers: at least the sum of
    :func:`binary_lengths` (a null's slot may span bytes too), read from two offsets per chunk."""
    total = 0
    for chunk in column.chunks if isinstance(column, pa.ChunkedArray) else (column,):
        n = len(chunk)
        if n == 0 or chunk.null_count == n:
            continue
        width = _OFFSET_WIDTHS.get(chunk.type.id)
        if width is None:
            raise TypeError(f"binary_span takes binary or string columns, not {chunk.type}")
        size, code = width
        offsets = chunk.buffers()[1]
        total += struct.unpack_from(code, offsets, (chunk.offset + n) * size)[0] - \
            struct.unpack_from(code, offsets, chunk.offset * size)[0]
    return total


_TYPES = {np.dtype(np.int8): pa.int8(), np.dtype(np.int16): pa.int16(), np.dtype(np.int32): pa.int32(),
          np.dtype(np.int64): pa.int64(), np.dtype(np.uint8): pa.uint8(), np.dtype(np.uint16): pa.uint16(),
          np.dtype(np.uint32): pa.uint32(), np.dtype(np.uint64): pa.uint64(),
          np.dtype(np.float32): pa.float32(), np.dtype(np.float64): pa.float64()}


def from_numpy(values: np.ndarray, type: pa.DataType | None = None) -> pa.Array:
    """A not-null Arrow array of a 1-d numpy array of numbers or bools (of ``type``, cast from the array's
    own type when they differ)."""
    values = np.asarray(values)
    if values.ndim != 1:
        raise ValueError("only 1-d arrays convert")
    if values.dtype == np.bool_:
        bits = np.packbits(values, bitorder="little")
        array = pa.Array.from_buffers(pa.bool_(), len(values), [None, pa.py_buffer(bits)])
    else:
        own = _TYPES.get(values.dtype)
        if own is None:
            raise TypeError(f"no Arrow type for numpy {values.dtype}")
        array = pa.Array.from_buffers(own, len(values), [None, pa.py_buffer(np.ascontiguousarray(values))])
    return array if type is None or array.type == type else array.cast(type)


def repeat(value: object, type: pa.DataType, n: int) -> pa.Array:
    """``n`` copies of a number or bool as a not-null array of ``type`` (``pa.repeat`` without the
    ``pa.scalar`` that imports pandas)."""
    dtype = _DTYPES.get(type.id)
    if dtype is None:
        dtype = np.dtype(bool) if pa.types.is_boolean(type) else np.dtype(type.to_pandas_dtype())
    return from_numpy(np.full(n, value, dtype=dtype), type)
