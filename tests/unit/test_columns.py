"""Arrow <-> numpy without pyarrow's pandas bridge: the same arrays pyarrow's own conversions give."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compactlog.columns import from_numpy, is_null, repeat, to_numpy

TYPES = [pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint64(), pa.float64(), pa.bool_()]


def sample(type_: pa.DataType, n: int, seed: int, nulls: bool) -> pa.Array:
    rng = np.random.default_rng(seed)
    if pa.types.is_boolean(type_):
        values = rng.integers(0, 2, n).astype(bool)
    elif pa.types.is_floating(type_):
        values = rng.normal(size=n)
    else:
        info = np.iinfo(type_.to_pandas_dtype())
        values = rng.integers(info.min, info.max, n, dtype=type_.to_pandas_dtype(), endpoint=True)
    mask = rng.integers(0, 3, n) == 0 if nulls else None
    return pa.array(values, type_, mask=mask)


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(TYPES), st.integers(0, 70), st.integers(0, 2**32), st.integers(0, 9), st.integers(0, 9),
       st.integers(1, 3))
def test_to_numpy_is_pyarrows_conversion_on_slices_and_chunks(type_: pa.DataType, n: int, seed: int, start: int,
                                                               cut: int, chunks: int) -> None:
    """Bit-packed booleans at every offset within a byte, slices, and chunked columns."""
    parts = [sample(type_, n, seed + i, nulls=False) for i in range(chunks)]
    column = pa.chunked_array(parts, type_).slice(min(start, n), max(0, n - start - cut))
    got = to_numpy(column)
    assert got.dtype == column.to_numpy().dtype
    assert got.tolist() == column.to_numpy().tolist()
    single = parts[0].slice(min(start, n))
    assert to_numpy(single).tolist() == single.to_numpy(zero_copy_only=False).tolist()


@settings(max_examples=100, deadline=None)
@given(st.sampled_from([*TYPES, pa.binary()]), st.integers(0, 70), st.integers(0, 2**32), st.integers(0, 9),
       st.booleans())
def test_is_null_is_pyarrows(type_: pa.DataType, n: int, seed: int, start: int, nulls: bool) -> None:
    if type_ == pa.binary():
        rng = np.random.default_rng(seed)
        array = pa.array([None if nulls and rng.integers(0, 3) == 0 else b"x" * int(rng.integers(0, 4))
                          for _ in range(n)], pa.binary())
    else:
        array = sample(type_, n, seed, nulls)
    for column in (array.slice(min(start, n)), pa.chunked_array([array, array.slice(min(start, n))], type_)):
        assert is_null(column).tolist() == column.is_null().to_pylist()


def test_is_null_of_a_null_column() -> None:
    assert is_null(pa.nulls(3)).tolist() == [True] * 3


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(TYPES), st.integers(0, 70), st.integers(0, 2**32))
def test_from_numpy_is_pa_array(type_: pa.DataType, n: int, seed: int) -> None:
    values = sample(type_, n, seed, nulls=False).to_numpy(zero_copy_only=False)
    got = from_numpy(values)
    assert got.equals(pa.array(values)), (got, pa.array(values))
    assert got.null_count == 0
    if pa.types.is_signed_integer(type_):  # widened as pa.array(values, pa.int64()) does
        assert from_numpy(values, pa.int64()).equals(pa.array(values, pa.int64()))


def test_from_numpy_refuses_what_it_cannot_convert() -> None:
    with pytest.raises(ValueError, match="1-d"):
        from_numpy(np.zeros((2, 2)))
    with pytest.raises(TypeError, match="no Arrow type"):
        from_numpy(np.array(["a"]))
    with pytest.raises(ValueError, match="nulls"):
        to_numpy(pa.array([1, None]))


@pytest.mark.parametrize(("value", "type_"), [(0, pa.int64()), (-1, pa.int16()), (7, pa.int8()), (True, pa.bool_()),
                                              (False, pa.bool_()), (-1, pa.int32())])
def test_repeat_is_pa_repeat(value: object, type_: pa.DataType) -> None:
    for n in (0, 1, 9, 1000):
        assert repeat(value, type_, n).equals(pa.repeat(pa.scalar(value, type_), n))


def test_binary_lengths_read_the_offsets_and_count_nothing_for_a_null() -> None:
    from compactlog.columns import binary_lengths

    # The null at index 1 spans bytes 2..5 (legal Arrow under a clear validity bit).
    array = pa.Array.from_buffers(pa.binary(), 4, [pa.py_buffer(bytes([0b1101])), pa.py_buffer(
        np.array([0, 2, 5, 5, 9], np.int32).tobytes()), pa.py_buffer(b"aabbbcccc")])
    assert binary_lengths(array).tolist() == [2, 0, 0, 4]
    assert binary_lengths(array.slice(1, 3)).tolist() == [0, 0, 4]
    assert binary_lengths(pa.chunked_array([array.slice(0, 1), array.slice(3)])).tolist() == [2, 4]
    assert binary_lengths(pa.array(["é", None, "abc"], pa.large_string())).tolist() == [2, 0, 3]
    assert binary_lengths(pa.chunked_array([], pa.binary())).tolist() == []
    # Every row null, the slots spanning bytes (all-zero validity bits), alone and beside a chunk with values.
    all_null = pa.Array.from_buffers(pa.binary(), 2, [pa.py_buffer(bytes([0])), pa.py_buffer(
        np.array([0, 3, 5], np.int32).tobytes()), pa.py_buffer(b"abcde")])
    assert binary_lengths(all_null).tolist() == [0, 0]
    assert binary_lengths(pa.chunked_array([all_null, array.slice(0, 1)])).tolist() == [0, 0, 2]
    assert binary_lengths(pa.nulls(3, pa.binary())).tolist() == [0, 0, 0]
    with pytest.raises(TypeError, match="binary or string"):
        binary_lengths(pa.array([1, 2]))
