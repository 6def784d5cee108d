"""Tests for compactlog.partitioner: Kafka's murmur2, the keyed partition choice (scalar and vectorised)
and the sticky partitioner for keyless records."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compactlog.errors import ConfigError, InvalidRecordError
from compactlog.partitioner import (
    StickyPartitioner,
    murmur2,
    murmur2_array,
    partition_for_key,
    partitions_for_keys,
    to_positive,
    to_signed32,
)

# Kafka's UtilsTest.testMurmur2 (the Java client's own expected values, signed ints).
KAFKA_UTILS_TEST_MURMUR2 = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}

# Further published values of the Java Utils.murmur2 (kafka-python / librdkafka compatibility tests),
# covering the empty key and tails of every length.
OTHER_MURMUR2 = {
    b"": 275646681,
    b"a": -1563381124,  # 2731586172 unsigned
    b"kafka": -798503068,  # 0xd067cf64
    b"hello": 2132663229,
    b"test": 716234879,
}

# Partitions chosen by the Java producer's default partitioner for 1000 partitions (kafka-python's
# test_murmur2_java_compatibility, "compare with output from Kafka's Partitioner").
JAVA_PARTITIONS_OF_1000 = {
    b"": 681,
    b"a": 524,
    b"ab": 434,
    b"abc": 107,
    b"123456789": 566,
    b"\x00 ": 742,
}

# A cross-language table pinned by another Kafka client against the Java producer, 12 partitions.
JAVA_PARTITIONS_OF_12 = {
    b"1039-36302-36840-2-9f138052": 4,
    b"1182-07205-22440-2-0ad4507d": 9,
    b"1388-20023-36900-2-c9985f66": 0,
    b"1010-98110-23700-2-295bfb4c": 10,
    b"1175-03505-36600-2-126dd9ca": 1,
    b"1137-01302-23820-2-d560d49a": 4,
    b"1011-98208-36480-2-9eef750a": 8,
    b"599999": 3,
    b"233-75504-36900-2-609151bd": 10,
}


# ---------------------------------------------------------------------------------------------- murmur2


@pytest.mark.parametrize(("data", "expected"), sorted({**KAFKA_UTILS_TEST_MURMUR2, **OTHER_MURMUR2}.items()))
def test_murmur2_matches_java(data: bytes, expected: int) -> None:
    assert murmur2(data) == expected


def test_murmur2_returns_signed_32_bit_ints() -> None:
    for i in range(2000):
        h = murmur2(str(i).encode())
        assert -(2**31) <= h < 2**31
    assert any(murmur2(str(i).encode()) < 0 for i in range(100))


def test_murmur2_accepts_bytes_like() -> None:
    assert murmur2(bytearray(b"foobar")) == murmur2(memoryview(b"foobar")) == -790332482


@pytest.mark.parametrize("bad", ["foobar", None, 42, [1, 2]])
def test_murmur2_refuses_non_bytes(bad: object) -> None:
    with pytest.raises(InvalidRecordError):
        murmur2(bad)  # type: ignore[arg-type]


def test_murmur2_high_bytes_are_unsigned() -> None:
    # Java masks tail bytes with 0xff; sign-extending them would change these hashes.
    assert murmur2(b"\xff") != murmur2(b"\x7f")
    assert murmur2(b"\x81" * 1001) == murmur2(bytearray(b"\x81" * 1001))


def test_to_signed32_and_to_positive() -> None:
    assert to_signed32(0xFFFFFFFF) == -1
    assert to_signed32(0x80000000) == -(2**31)
    assert to_signed32(0x7FFFFFFF) == 2**31 - 1
    assert to_signed32(2**32 + 5) == 5
    # toPositive clears the sign bit; it is not abs(): MIN_VALUE -> 0, -1 -> MAX_VALUE.
    assert to_positive(-(2**31)) == 0
    assert to_positive(-1) == 2**31 - 1
    assert to_positive(5) == 5
    assert to_positive(-790332482) == 1357151166


# ------------------------------------------------------------------------------------ partition_for_key


@pytest.mark.parametrize(("key", "expected"), sorted(JAVA_PARTITIONS_OF_1000.items()))
def test_partition_for_key_java_1000(key: bytes, expected: int) -> None:
    assert partition_for_key(key, 1000) == expected


@pytest.mark.parametrize(("key", "expected"), sorted(JAVA_PARTITIONS_OF_12.items()))
def test_partition_for_key_java_12(key: bytes, expected: int) -> None:
    assert partition_for_key(key, 12) == expected


def test_partition_for_key_is_murmur2_positive_mod() -> None:
    assert partition_for_key(b"foobar", 50) == 16
    for key, h in KAFKA_UTILS_TEST_MURMUR2.items():
        for n in (1, 2, 3, 7, 12, 50, 1000):
            assert partition_for_key(key, n) == (h & 0x7FFFFFFF) % n
    assert partition_for_key(b"anything", 1) == 0


@pytest.mark.parametrize("n", [0, -1, True, 1.5, "3", None])
def test_partition_for_key_refuses_bad_partition_counts(n: object) -> None:
    with pytest.raises(ConfigError):
        partition_for_key(b"k", n)  # type: ignore[arg-type]


def test_partition_for_key_refuses_null_and_str_keys() -> None:
    with pytest.raises(InvalidRecordError):
        partition_for_key(None, 3)  # type: ignore[arg-type]
    with pytest.raises(InvalidRecordError):
        partition_for_key("k", 3)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------- vectorised versions


def _scalar_partitions(keys: list[bytes], n: int) -> list[int]:
    return [partition_for_key(k, n) for k in keys]


@settings(max_examples=300, deadline=None)
@given(
    keys=st.lists(st.binary(min_size=0, max_size=64), min_size=0, max_size=200),
    num_partitions=st.integers(min_value=1, max_value=2**31 - 1),
    large=st.booleans(),
)
def test_vectorised_agrees_with_scalar(keys: list[bytes], num_partitions: int, large: bool) -> None:
    arr = pa.array(keys, type=pa.large_binary() if large else pa.binary())
    hashes = murmur2_array(arr)
    assert hashes.dtype == np.int32
    assert hashes.tolist() == [murmur2(k) for k in keys]
    parts = partitions_for_keys(arr, num_partitions)
    assert parts.dtype == np.int32
    assert parts.tolist() == _scalar_partitions(keys, num_partitions)


@settings(max_examples=100, deadline=None)
@given(
    chunks=st.lists(st.lists(st.binary(min_size=0, max_size=40), max_size=30), max_size=5),
    data=st.data(),
)
def test_vectorised_chunked_and_sliced(chunks: list[list[bytes]], data: st.DataObject) -> None:
    # Slices have a non-zero array offset and share their parent's data buffer.
    arrays = []
    for chunk in chunks:
        parent = pa.array([b"prefix-padding", *chunk, b"suffix"], type=pa.binary())
        arrays.append(parent.slice(1, len(chunk)))
    chunked = pa.chunked_array(arrays, type=pa.binary())
    flat = [k for chunk in chunks for k in chunk]
    n = data.draw(st.integers(min_value=1, max_value=10_000))
    assert partitions_for_keys(chunked, n).tolist() == _scalar_partitions(flat, n)


def test_vectorised_known_values() -> None:
    keys = list(KAFKA_UTILS_TEST_MURMUR2) + list(OTHER_MURMUR2)
    expected = list(KAFKA_UTILS_TEST_MURMUR2.values()) + list(OTHER_MURMUR2.values())
    assert murmur2_array(pa.array(keys, type=pa.binary())).tolist() == expected
    assert partitions_for_keys(pa.array(list(JAVA_PARTITIONS_OF_1000)), 1000).tolist() == list(
        JAVA_PARTITIONS_OF_1000.values()
    )
    assert partitions_for_keys(pa.array(list(JAVA_PARTITIONS_OF_12)), 12).tolist() == list(
        JAVA_PARTITIONS_OF_12.values()
    )


def test_vectorised_mixed_lengths_and_long_tail() -> None:
    # Many short keys plus a few very long ones: exercises the compaction of the block loop and the
    # hand-off of the last few long keys to the scalar code.
    rng = random.Random(7)
    keys = [rng.randbytes(rng.randrange(0, 300)) for _ in range(3000)]
    keys += [rng.randbytes(n) for n in (10_000, 4_097, 1_026, 1_027, 1_025)]
    rng.shuffle(keys)
    for key_type in (pa.binary(), pa.large_binary()):
        arr = pa.array(keys, type=key_type)
        assert murmur2_array(arr).tolist() == [murmur2(k) for k in keys]
        assert partitions_for_keys(arr, 97).tolist() == _scalar_partitions(keys, 97)


def test_vectorised_all_same_length_and_all_empty() -> None:
    keys = [bytes([i % 256, (i * 7) % 256, 3, 4, 5, 6, 7, 8]) for i in range(1000)]
    assert partitions_for_keys(pa.array(keys), 31).tolist() == _scalar_partitions(keys, 31)
    assert murmur2_array(pa.array([b""] * 5)).tolist() == [275646681] * 5


def test_vectorised_empty_inputs() -> None:
    assert partitions_for_keys(pa.array([], type=pa.binary()), 3).tolist() == []
    assert partitions_for_keys(pa.chunked_array([], type=pa.binary()), 3).tolist() == []
    assert partitions_for_keys(pa.chunked_array([pa.array([], pa.large_binary())]), 3).dtype == np.int32


def test_vectorised_refuses_null_keys() -> None:
    with pytest.raises(InvalidRecordError, match="null"):
        partitions_for_keys(pa.array([b"a", None, b"c"]), 3)
    with pytest.raises(InvalidRecordError, match="null"):
        murmur2_array(pa.chunked_array([pa.array([b"a"]), pa.array([None], pa.binary())]))


@pytest.mark.parametrize(
    "keys",
    [
        pa.array(["a", "b"]),  # string: encode to binary first
        pa.array([1, 2]),
        pa.array([[1]]),
    ],
)
def test_vectorised_refuses_non_binary_arrays(keys: pa.Array) -> None:
    with pytest.raises(InvalidRecordError, match="binary"):
        partitions_for_keys(keys, 3)


def test_vectorised_refuses_non_arrow_input() -> None:
    with pytest.raises(InvalidRecordError):
        partitions_for_keys([b"a", b"b"], 3)


@pytest.mark.parametrize("n", [0, -5, True])
def test_vectorised_refuses_bad_partition_counts(n: int) -> None:
    with pytest.raises(ConfigError):
        partitions_for_keys(pa.array([b"a"]), n)


# ------------------------------------------------------------------------------------ StickyPartitioner


def test_sticky_keeps_partition_until_new_batch() -> None:
    sticky = StickyPartitioner(random.Random(1))
    first = sticky.partition("t", 10)
    assert 0 <= first < 10
    assert all(sticky.partition("t", 10) == first for _ in range(100))
    sticky.on_new_batch("t", 10, first)
    second = sticky.partition("t", 10)
    assert second != first
    assert all(sticky.partition("t", 10) == second for _ in range(100))


def test_sticky_new_batch_always_moves_to_another_partition() -> None:
    sticky = StickyPartitioner(random.Random(2))
    seen = set()
    current = sticky.partition("t", 5)
    for _ in range(500):
        sticky.on_new_batch("t", 5, current)
        nxt = sticky.partition("t", 5)
        assert nxt != current
        seen.add(nxt)
        current = nxt
    assert seen == set(range(5))


def test_sticky_ignores_stale_new_batch() -> None:
    sticky = StickyPartitioner(random.Random(3))
    current = sticky.partition("t", 8)
    stale = (current + 1) % 8
    for _ in range(20):
        sticky.on_new_batch("t", 8, stale)
        assert sticky.partition("t", 8) == current


def test_sticky_single_partition() -> None:
    sticky = StickyPartitioner(random.Random(4))
    assert sticky.partition("t", 1) == 0
    sticky.on_new_batch("t", 1, 0)
    assert sticky.partition("t", 1) == 0


def test_sticky_topics_are_independent() -> None:
    sticky = StickyPartitioner(random.Random(5))
    a = sticky.partition("a", 100)
    b = sticky.partition("b", 100)
    sticky.on_new_batch("a", 100, a)
    assert sticky.partition("b", 100) == b
    assert sticky.partition("a", 100) != a


def test_sticky_new_batch_before_any_record_picks_a_partition() -> None:
    sticky = StickyPartitioner(random.Random(6))
    sticky.on_new_batch("t", 4, -1)
    p = sticky.partition("t", 4)
    assert 0 <= p < 4
    assert sticky.partition("t", 4) == p


class _ScriptedRandom(random.Random):
    """A Random whose randrange returns scripted values (and records the bounds it was asked for)."""

    def __init__(self, values: list[int]) -> None:
        super().__init__(0)
        self._values = iter(values)
        self.bounds: list[int] = []

    def randrange(self, start: int, stop: int | None = None, step: int = 1) -> int:
        self.bounds.append(start if stop is None else stop - start)
        return next(self._values)


def test_sticky_repicks_when_partition_count_shrinks() -> None:
    rng = _ScriptedRandom([7, 2])
    sticky = StickyPartitioner(rng)
    assert sticky.partition("t", 10) == 7
    assert sticky.partition("t", 5) == 2  # partition 7 no longer exists
    assert rng.bounds == [10, 5]


def test_sticky_new_partition_is_uniform_over_the_others() -> None:
    # With 5 partitions and current 3, the next is drawn from 4 values that skip 3: 0,1,2 -> 0,1,2; 3 -> 4.
    rng = _ScriptedRandom([3, 3, 2, 0])
    sticky = StickyPartitioner(rng)
    assert sticky.partition("t", 5) == 3
    sticky.on_new_batch("t", 5, 3)
    assert sticky.partition("t", 5) == 4
    sticky.on_new_batch("t", 5, 4)
    assert sticky.partition("t", 5) == 2
    sticky.on_new_batch("t", 5, 2)
    assert sticky.partition("t", 5) == 0
    assert rng.bounds == [5, 4, 4, 4]


def test_sticky_is_deterministic_with_injected_rng() -> None:
    def run(seed: int) -> list[int]:
        sticky = StickyPartitioner(random.Random(seed))
        out = []
        for _ in range(50):
            p = sticky.partition("t", 7)
            out.append(p)
            sticky.on_new_batch("t", 7, p)
        return out

    assert run(42) == run(42)
    assert run(42) != run(43)


def test_sticky_default_rng() -> None:
    sticky = StickyPartitioner()
    assert 0 <= sticky.partition("t", 3) < 3


@pytest.mark.parametrize("n", [0, -1, True])
def test_sticky_refuses_bad_partition_counts(n: int) -> None:
    sticky = StickyPartitioner(random.Random(0))
    with pytest.raises(ConfigError):
        sticky.partition("t", n)
    with pytest.raises(ConfigError):
        sticky.on_new_batch("t", n, 0)
