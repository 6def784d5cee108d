"""The codecs from many threads at once, as the broker's storage threads run them: large batches of every
codec encoded and decoded concurrently, every byte compared with what one thread alone produces. A codec
context shared between threads (python-zstandard's are not thread-safe) gives other bytes or errors here."""

from __future__ import annotations

import threading

import numpy as np
import pyarrow as pa
import pytest

from compactlog.protocol import compression
from compactlog.protocol.record_batch import decode_batches, encode_batches
from compactlog.record import data_rows

THREADS = 8
ROUNDS = 12
TABLES = 4
CODECS = [compression.GZIP, compression.SNAPPY, compression.LZ4, compression.ZSTD]


def large_rows(seed: int) -> pa.Table:
    """Three records whose values (about 200 KB each, past zstd's 128 KiB block) mix random and repeated
    bytes, so that every codec both copies and matches; keys and values differ per seed."""
    rng = np.random.default_rng(seed)
    values = [b"".join(rng.bytes(256) + bytes([(seed + i + j) % 256]) * 768 for j in range(200))
              for i in range(3)]
    keys = [b"key-%d-%d" % (seed, i) for i in range(3)]
    table = data_rows(pa.array(1_700_000_000_000 + np.arange(3, dtype=np.int64)), pa.array(keys, pa.binary()),
                      pa.array(values, pa.binary()))
    return table.set_column(0, "offset", pa.array(np.arange(3, dtype=np.int64)))


def test_every_codec_encodes_and_decodes_the_same_bytes_from_many_threads() -> None:
    tables = [large_rows(seed) for seed in range(TABLES)]
    # What one thread alone writes and reads: the references every concurrent run must equal byte for byte.
    encoded = {(codec, k): encode_batches(tables[k], codec) for codec in CODECS for k in range(TABLES)}
    for (codec, k), data in encoded.items():
        (batch,) = decode_batches(data)
        assert batch.compression == codec
        assert batch.columns.value.equals(tables[k].column("value").chunk(0))
    failures: list[str] = []
    start = threading.Barrier(THREADS)

    def work(thread: int) -> None:
        start.wait()
        for round_ in range(ROUNDS):
            k = (thread + round_) % TABLES
            for codec in CODECS:
                name = compression.NAMES[codec]
                try:
                    if encode_batches(tables[k], codec) != encoded[codec, k]:
                        failures.append(f"{name} encode of table {k}: other bytes")
                    (batch,) = decode_batches(encoded[codec, k])
                except Exception as e:  # any error is a failure of this run: the thread goes on
                    failures.append(f"{name} table {k}: {e!r}")
                    continue
                if not (batch.columns.value.equals(tables[k].column("value").chunk(0))
                        and batch.columns.key.equals(tables[k].column("key").chunk(0))):
                    failures.append(f"{name} decode of table {k}: other bytes")

    threads = [threading.Thread(target=work, args=(i,)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures, f"{len(failures)} of {THREADS * ROUNDS * len(CODECS)} runs differ: {failures[:5]}"


@pytest.mark.parametrize("codec", CODECS)
def test_decompress_from_many_threads_returns_the_bytes_compressed(codec: int) -> None:
    """The codec functions themselves, without the record parsing: 200 KB sections from eight threads."""
    sections = [bytes(large_rows(seed).column("value").chunk(0)[0].as_py()) for seed in range(TABLES)]
    packed = [compression.compress(codec, section) for section in sections]
    failures: list[str] = []
    start = threading.Barrier(THREADS)

    def work(thread: int) -> None:
        start.wait()
        for round_ in range(ROUNDS * 2):
            k = (thread + round_) % TABLES
            try:
                if compression.decompress(codec, memoryview(packed[k])) != sections[k]:
                    failures.append(f"section {k}: other bytes")
                if compression.compress(codec, sections[k]) != packed[k]:
                    failures.append(f"section {k}: compressed to other bytes")
            except Exception as e:  # any error is a failure of this run: the thread goes on
                failures.append(f"section {k}: {e!r}")

    threads = [threading.Thread(target=work, args=(i,)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures, f"{len(failures)} of {THREADS * ROUNDS * 2} runs differ: {failures[:5]}"
