"""Decompression bombs: each codec stops as soon as the records pass their limit, quickly and without
holding more than about the limit; records within the limit still decompress whole."""

from __future__ import annotations

import time
import tracemalloc
from collections.abc import Callable

import pytest

from bombs import GIB, MIB, gzip_bomb, lz4_bomb, snappy_bomb, xerial_bomb, zstd_bomb
from compactlog.errors import CorruptRecordError, RecordTooLargeError
from compactlog.protocol import compression
from compactlog.protocol.record_batch import records_limit

LIMIT = records_limit(1_048_588)  # Kafka's default max.message.bytes: 32 MiB of records
BOMBS: dict[str, tuple[int, Callable[[], bytes]]] = {
    "gzip": (compression.GZIP, gzip_bomb), "lz4": (compression.LZ4, lz4_bomb),
    "zstd": (compression.ZSTD, zstd_bomb), "snappy": (compression.SNAPPY, snappy_bomb),
    "xerial": (compression.SNAPPY, xerial_bomb),
}


@pytest.mark.parametrize("name", list(BOMBS))
def test_a_gigabyte_bomb_is_refused_fast_holding_about_the_limit(name: str) -> None:
    code, build = BOMBS[name]
    bomb = memoryview(build())
    tracemalloc.start()
    started = time.monotonic()
    try:
        with pytest.raises(RecordTooLargeError, match=f"decompress to more than {LIMIT} bytes"):
            compression.decompress(code, bomb, LIMIT)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert time.monotonic() - started < 5  # decompressing the whole gigabyte takes far longer on this machine
    assert peak < LIMIT + 48 * MIB, peak  # the limit, plus one zstd step's worth and the joining of parts


@pytest.mark.parametrize("name", list(BOMBS))
def test_records_up_to_the_limit_decompress(name: str) -> None:
    code, _ = BOMBS[name]
    records = bytes(range(256)) * (MIB // 256)
    packed = memoryview(compression.compress(code, records))
    assert compression.decompress(code, packed, len(records)) == records
    with pytest.raises(RecordTooLargeError):
        compression.decompress(code, packed, len(records) - 1)


def test_the_limit_is_32_times_the_largest_batch_and_never_past_2_gib() -> None:
    assert records_limit(1000) == 32_000
    assert records_limit(GIB) == (1 << 31) - 1
    assert records_limit(None) == (1 << 31) - 1


@pytest.mark.parametrize("code", [compression.GZIP, compression.LZ4, compression.ZSTD])
def test_records_cut_short_are_corrupt(code: int) -> None:
    packed = compression.compress(code, b"x" * 100_000)
    with pytest.raises(CorruptRecordError, match="end before"):
        compression.decompress(code, memoryview(packed[:len(packed) // 2]), LIMIT)


@pytest.mark.parametrize("limit", [LIMIT, compression.UNLIMITED])
def test_a_small_lz4_frame_holds_about_its_size_whatever_the_limit(limit: int) -> None:
    """python-lz4 allocates a call's whole ``max_length``: steps from 64 KiB, never the limit at once."""
    records = bytes(range(256)) * 64  # 16 KiB, a producer's batch
    packed = memoryview(compression.compress(compression.LZ4, records))
    tracemalloc.start()
    try:
        assert compression.decompress(compression.LZ4, packed, limit) == records
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 256 * 1024, peak


def test_lz4_records_larger_than_the_first_step_decompress_whole_in_steps() -> None:
    records = bytes(range(256)) * (MIB // 256) + b"end"  # compresses about 250 times: many steps
    packed = memoryview(compression.compress(compression.LZ4, records))
    assert compression.decompress(compression.LZ4, packed, LIMIT) == records
    with pytest.raises(RecordTooLargeError):
        compression.decompress(compression.LZ4, packed, len(records) - 1)
