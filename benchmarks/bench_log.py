"""Benchmarks of the log (issue 2), each against a pyarrow baseline measured in the same run.

1. bulk ``store.append`` of N records (~10-byte keys, 100-byte values), against writing the same Arrow
   table to an Arrow IPC file with pyarrow (with and without fsync: append fsyncs). Targets: >= 1M
   records/s and >= 0.5x the baseline (with fsync).
2. ``producer.send`` one record at a time with batching, one partition. Target: >= 100k records/s.
3. ``store.read_arrow`` of a sealed N-record partition, against ``pyarrow.parquet.read_table`` of the same
   Parquet files (the same columns; all columns for reference). Target: >= 0.8x the baseline.

Usage: ``python benchmarks/bench_log.py [--records N] [--sends N] [--runs R] [--quick] [--dir DIR]``.
Inputs are generated (fixed seed); every figure is the median of ``--runs`` runs.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import compactlog
from compactlog.producer import Producer
from compactlog.record import READ_COLUMNS

KEY_BYTES = 10
VALUE_BYTES = 100
TARGET_APPEND_RATE = 1_000_000
TARGET_APPEND_RATIO = 0.5
TARGET_SEND_RATE = 100_000
TARGET_READ_RATIO = 0.8


def fixed_width_binary(n: int, width: int, rng: np.random.Generator, prefix: bytes = b"") -> pa.Array:
    """``n`` binary values of ``width`` bytes (an optional prefix, then random letters), zero-copy built."""
    data = rng.integers(ord("a"), ord("z") + 1, size=(n, width), dtype=np.uint8)
    if prefix:
        data[:, : len(prefix)] = np.frombuffer(prefix, dtype=np.uint8)
    offsets = np.arange(0, (n + 1) * width, width, dtype=np.int32)
    return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data.tobytes())])


def make_table(n: int, seed: int = 42) -> pa.Table:
    rng = np.random.default_rng(seed)
    return pa.table(
        {"key": fixed_width_binary(n, KEY_BYTES, rng, b"k"), "value": fixed_width_binary(n, VALUE_BYTES, rng)}
    )


def median_time(runs: int, setup: Callable[[], object], body: Callable[[object], object]) -> float:
    times = []
    for _ in range(runs):
        state = setup()
        started = time.perf_counter()
        body(state)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def fresh_dir(root: str, name: str) -> str:
    path = os.path.join(root, name)
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return path


def write_ipc(table: pa.Table, path: str, fsync: bool) -> None:
    with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)
    if fsync:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def bench_append(root: str, table: pa.Table, runs: int) -> dict[str, float]:
    """One untimed round first (the first writes into memory the page cache has not used yet cost several
    times more, on a VM), then runs that alternate which goes first, each into new files, with a sync
    between measurements."""
    n = table.num_rows
    times: dict[str, list[float]] = {"ours": [], "ipc_fsync": [], "ipc": []}

    def ours(run: int) -> float:
        directory = fresh_dir(root, f"append-{run}")
        try:
            with compactlog.open(directory) as store:
                store.create_topic("t")
                store.log_end_offset("t", 0)  # opens the partition: its files exist before the clock starts
                os.sync()
                started = time.perf_counter()
                store.append("t", 0, table)
                return time.perf_counter() - started
        finally:
            shutil.rmtree(directory)

    def baseline(run: int, fsync: bool) -> float:
        path = os.path.join(root, f"baseline-{run}-{fsync}.arrow")
        os.sync()
        try:
            started = time.perf_counter()
            write_ipc(table, path, fsync)
            return time.perf_counter() - started
        finally:
            os.unlink(path)

    def measure(name: str, run: int) -> float:
        return ours(run) if name == "ours" else baseline(run, fsync=name == "ipc_fsync")

    for run in range(-1, runs):
        order = list(times) if run % 2 == 0 else list(reversed(times))
        for name in order:
            seconds = measure(name, run)
            os.sync()  # nothing one measurement left to write back may slow down the next
            if run >= 0:
                times[name].append(seconds)
    seconds, fsynced, plain = (statistics.median(times[name]) for name in ("ours", "ipc_fsync", "ipc"))
    return {"seconds": seconds, "rate": n / seconds, "ipc_fsync_seconds": fsynced, "ipc_seconds": plain,
            "ratio_fsync": fsynced / seconds, "ratio": plain / seconds,
            "runs": {name: [round(t, 3) for t in values] for name, values in times.items()}}


def bench_send(root: str, sends: int, runs: int) -> dict[str, float]:
    table = make_table(sends, seed=7)
    keys = table.column("key").to_pylist()
    values = table.column("value").to_pylist()

    def new_producer() -> tuple[compactlog.Store, Producer]:
        store = compactlog.open(fresh_dir(root, "send"))
        store.create_topic("t")
        return store, store.producer()

    def send_all(state: object) -> None:
        assert isinstance(state, tuple)
        store, producer = state
        send = producer.send
        for key, value in zip(keys, values, strict=True):
            send("t", key=key, value=value)
        producer.close()
        assert store.log_end_offset("t", 0) == sends
        store.close()

    seconds = median_time(runs, new_producer, send_all)
    return {"seconds": seconds, "rate": sends / seconds}


def bench_read(root: str, table: pa.Table, runs: int) -> dict[str, float]:
    n = table.num_rows
    directory = fresh_dir(root, "read")
    with compactlog.open(directory) as store:
        store.create_topic("t")
        store.append("t", 0, table)
        store.roll("t", 0)
        files = [
            os.path.join(store.log("t", 0).directory, name)
            for name in sorted(os.listdir(store.log("t", 0).directory))
            if name.endswith(".parquet")
        ]
        segments = len(files)

        def read_ours(_: object) -> None:
            assert store.read_arrow("t", 0).num_rows == n

        def read_same_columns(_: object) -> None:
            assert pq.read_table(files, columns=list(READ_COLUMNS)).num_rows == n

        def read_all_columns(_: object) -> None:
            assert pq.read_table(files).num_rows == n

        readers = {"ours": read_ours, "same": read_same_columns, "every": read_all_columns}
        times: dict[str, list[float]] = {name: [] for name in readers}
        for run in range(-1, runs):  # an untimed round warms the page cache for everyone alike
            for name in readers if run % 2 == 0 else reversed(readers):
                started = time.perf_counter()
                readers[name](None)
                if run >= 0:
                    times[name].append(time.perf_counter() - started)
        ours, same, every = (statistics.median(times[name]) for name in readers)
    return {
        "seconds": ours,
        "rate": n / ours,
        "parquet_seconds": same,
        "parquet_all_seconds": every,
        "ratio": same / ours,
        "ratio_all": every / ours,
        "segments": segments,
        "runs": {name: [round(t, 3) for t in values] for name, values in times.items()},
    }


def verdict(ok: bool) -> str:
    return "meets target" if ok else "MISSES target"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=5_000_000, help="records for append and read_arrow")
    parser.add_argument("--sends", type=int, default=200_000, help="records for producer.send")
    parser.add_argument("--runs", type=int, default=3, help="runs per figure (the median is reported)")
    parser.add_argument("--quick", action="store_true", help="a small run: 200k records, 50k sends")
    parser.add_argument("--dir", default=None, help="where to write (default: a temporary directory)")
    args = parser.parse_args(argv)
    if args.quick:
        args.records, args.sends = 200_000, 50_000

    print(
        f"compactlog {compactlog.__version__}, Python {platform.python_version()}, pyarrow {pa.__version__}, "
        f"numpy {np.__version__}"
    )
    print(
        f"{platform.platform()}, {platform.machine()}, {platform.processor() or 'unknown processor'}, "
        f"{os.cpu_count()} CPUs"
    )
    print(f"records={args.records:,} sends={args.sends:,} runs={args.runs} (medians)\n")

    root = tempfile.mkdtemp(prefix="bench-log-", dir=args.dir)
    try:
        table = make_table(args.records)
        append = bench_append(root, table, args.runs)
        print(
            f"1. bulk append of {args.records:,} records ({KEY_BYTES}-byte keys, {VALUE_BYTES}-byte values)"
        )
        print(f"   store.append              {append['seconds']:8.3f} s  {append['rate']:>12,.0f} records/s")
        fsynced, ratio_fsync = append["ipc_fsync_seconds"], append["ratio_fsync"]
        print(f"   Arrow IPC file + fsync    {fsynced:8.3f} s  ratio {ratio_fsync:.2f}x")
        print(f"   Arrow IPC file, no fsync  {append['ipc_seconds']:8.3f} s  ratio {append['ratio']:.2f}x")
        print(f"   (every run, seconds: {append['runs']})")
        print(
            f"   target >= {TARGET_APPEND_RATE:,} records/s: "
            f"{verdict(append['rate'] >= TARGET_APPEND_RATE)}; "
            f"target >= {TARGET_APPEND_RATIO}x (fsync baseline): "
            f"{verdict(append['ratio_fsync'] >= TARGET_APPEND_RATIO)}\n"
        )

        send = bench_send(root, args.sends, args.runs)
        print(f"2. producer.send of {args.sends:,} records, one at a time (batch.size 16384, linger.ms 5)")
        print(f"   producer.send + close     {send['seconds']:8.3f} s  {send['rate']:>12,.0f} records/s")
        print(f"   target >= {TARGET_SEND_RATE:,} records/s: {verdict(send['rate'] >= TARGET_SEND_RATE)}\n")

        read = bench_read(root, table, args.runs)
        print(
            f"3. read_arrow of a sealed {args.records:,}-record partition ({read['segments']} segment files)"
        )
        print(f"   store.read_arrow          {read['seconds']:8.3f} s  {read['rate']:>12,.0f} records/s")
        print(f"   pq.read_table, same cols  {read['parquet_seconds']:8.3f} s  ratio {read['ratio']:.2f}x")
        every, ratio_all = read["parquet_all_seconds"], read["ratio_all"]
        print(f"   pq.read_table, all cols   {every:8.3f} s  ratio {ratio_all:.2f}x")
        print(f"   (every run, seconds: {read['runs']})")
        print(
            f"   target >= {TARGET_READ_RATIO}x (same columns): {verdict(read['ratio'] >= TARGET_READ_RATIO)}"
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
