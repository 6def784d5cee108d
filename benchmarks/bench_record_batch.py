"""Benchmark of the record-batch codec (issue 18), against kafka-python's pure-Python codec (``kafka.record``)
measured in the same run on the same records.

1. decode: the batches a producer sends (``--batch-bytes``, 16 KiB as the Java client's ``batch.size``) into
   columns with ``decode_batches``, against iterating every record of the same batches with kafka-python's
   ``MemoryRecords`` / ``DefaultRecordBatch`` (reading key, value, headers, offset and timestamp).
2. encode: rows of ``compactlog.record.SCHEMA`` into batches with ``encode_batches``, against appending the
   same records to kafka-python's ``DefaultRecordBatchBuilder`` (1 MiB batches, as ours) and building them.

Each for codec none and for ``--codecs`` (default lz4 and zstd). The protocol benchmark's targets (produce
>= 250k and consume >= 500k records/s end to end on 2 cores) leave the codec a small share of the time, so
it must run at several million records/s.

Usage: ``python benchmarks/bench_record_batch.py [--records N] [--value-bytes B] [--runs R]``. Inputs are
generated (fixed seed: ~10-byte keys, random values); every figure is the median of ``--runs`` runs. Rates
are given by wall time and by the process's CPU time: on a machine shared with other work (the load average
is printed) the wall time of a run of tens of milliseconds is mostly waiting for a core, the CPU time is not.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import statistics
import time
import warnings
from collections.abc import Callable

import numpy as np
import pyarrow as pa
from _common import banner

from compactlog.protocol.compression import NAMES
from compactlog.protocol.record_batch import decode_batches, encode_batches
from compactlog.record import data_rows

warnings.filterwarnings("ignore", category=DeprecationWarning)  # kafka-python 3's importlib.resources calls

from kafka.record.default_records import DefaultRecordBatchBuilder  # noqa: E402
from kafka.record.memory_records import MemoryRecords  # noqa: E402


def make_rows(n: int, value_bytes: int, seed: int = 0) -> pa.Table:
    """``n`` rows at offsets 0.., keys ``key-%06d`` over n/10 keys, random values, no producer."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, max(n // 10, 1), n)
    keys = pa.array([b"key-%06d" % i for i in ids], pa.binary())
    raw = rng.integers(0, 256, size=n * value_bytes, dtype=np.uint8).tobytes()
    offsets = pa.array(np.arange(0, (n + 1) * value_bytes, value_bytes, dtype=np.int32))
    values = pa.BinaryArray.from_buffers(pa.binary(), n, [None, offsets.buffers()[1], pa.py_buffer(raw)])
    timestamps = pa.array(1_700_000_000_000 + np.arange(n, dtype=np.int64))
    table = data_rows(timestamps, keys, values)
    return table.set_column(0, "offset", pa.array(np.arange(n, dtype=np.int64)))


def kafka_python_encode(keys: list, values: list, timestamps: list, codec: int, batch_bytes: int) -> list[bytes]:
    batches = []
    builder = None
    for offset, (key, value, timestamp) in enumerate(zip(keys, values, timestamps, strict=True)):
        if builder is None:
            builder = DefaultRecordBatchBuilder(2, codec, False, -1, -1, -1, batch_bytes)
            base = offset
        if builder.append(offset - base, timestamp=timestamp, key=key, value=value, headers=[]) is None:
            batches.append(bytes(builder.build()))
            builder = DefaultRecordBatchBuilder(2, codec, False, -1, -1, -1, batch_bytes)
            base = offset
            builder.append(0, timestamp=timestamp, key=key, value=value, headers=[])
    if builder is not None:
        batches.append(bytes(builder.build()))
    return batches


def kafka_python_decode(data: bytes) -> int:
    count = 0
    for batch in MemoryRecords(data):
        for record in batch:
            record.key, record.value, record.headers, record.offset, record.timestamp  # noqa: B018
            count += 1
    return count


def medians(fn: Callable[[], object], runs: int) -> tuple[float, float]:
    """The median wall time and the median CPU time (this process) of ``runs`` calls."""
    wall, cpu = [], []
    for _ in range(runs):
        started, started_cpu = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - started)
        cpu.append(time.process_time() - started_cpu)
    return statistics.median(wall), statistics.median(cpu)


def report(what: str, n: int, ours: tuple[float, float], theirs: tuple[float, float]) -> None:
    print(f"{what}: ours {n / ours[1] / 1e6:5.2f}M records/s CPU ({ours[1] * 1e3:6.1f} ms; wall {ours[0] * 1e3:6.1f}), "
          f"kafka-python {n / theirs[1] / 1e6:5.3f}M ({theirs[1] * 1e3:6.0f} ms; wall {theirs[0] * 1e3:6.0f}) -> "
          f"{theirs[1] / ours[1]:5.1f}x CPU, {theirs[0] / ours[0]:5.1f}x wall")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--batch-bytes", type=int, default=16 * 1024, help="the producer's batch size (decode)")
    parser.add_argument("--codecs", default="lz4,zstd")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--baseline-runs", type=int, default=3)
    args = parser.parse_args()
    banner("record-batch codec (decode_batches / encode_batches) vs kafka-python's kafka.record")
    versions = {name: importlib.metadata.version(name) for name in ("kafka-python", "crc32c", "cramjam", "lz4")}
    print("libraries: " + " ".join(f"{name}={version}" for name, version in versions.items()))
    print("load average: " + " ".join(f"{load:.1f}" for load in os.getloadavg()))
    n = args.records
    print(f"records: {n:,} of ~10-byte keys and {args.value_bytes}-byte random values; medians of {args.runs} runs "
          f"(kafka-python: {args.baseline_runs})")
    table = make_rows(n, args.value_bytes)
    keys = table.column("key").to_pylist()
    values = table.column("value").to_pylist()
    timestamps = table.column("timestamp").to_pylist()
    by_name = {name: code for code, name in NAMES.items()}
    for codec in [0] + [by_name[name] for name in args.codecs.split(",") if name]:
        produced = b"".join(kafka_python_encode(keys, values, timestamps, codec, args.batch_bytes))
        assert sum(b.record_count for b in decode_batches(produced)) == n
        ours = medians(lambda data=produced: decode_batches(data), args.runs)
        theirs = medians(lambda data=produced: kafka_python_decode(data), args.baseline_runs)
        report(f"decode {NAMES[codec]:>4} ({len(produced) / n:.0f} B/record, {args.batch_bytes // 1024} KiB batches)",
               n, ours, theirs)
        fetched = encode_batches(table, codec)
        assert sum(1 for batch in MemoryRecords(fetched) for _ in batch) == n
        ours = medians(lambda c=codec: encode_batches(table, c), args.runs)
        theirs = medians(lambda c=codec: kafka_python_encode(keys, values, timestamps, c, 1 << 20),
                         args.baseline_runs)
        report(f"encode {NAMES[codec]:>4} ({len(fetched) / n:.0f} B/record, 1 MiB batches) ", n, ours, theirs)
    print(f"load average: {' '.join(f'{load:.1f}' for load in os.getloadavg())}")


if __name__ == "__main__":
    main()
