"""Issue 3 benchmark: a full in-process clean of one partition against DuckDB and plain pyarrow.

One partition, 5M records, 1M distinct keys, 100-byte values, 5% tombstones, sealed in 10 segments.

* compactlog: ``store.clean(force=True)`` (map, filter, regroup, write, swap, checkpoint), in process;
* DuckDB: the latest record per key from the same Parquet files, written to one Parquet file
  (what a user would reach for instead);
* pyarrow: read the same files and write the rows the clean retains (the I/O floor; which rows is
  decided before its clock starts).

Each contender runs in a fresh process after the same warm-up (imports), so none inherits another's
warm memory pool, and reports its own peak RSS. Targets: compactlog <= DuckDB, <= 1.3x pyarrow, and a
peak RSS under the dedupe buffer + 300 MB.

Run: ``python benchmarks/bench_clean.py [--records N] [--keys K] [--runs R]``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import pyarrow.compute as pc
import pyarrow.dataset  # noqa: F401  (warm-up: pq.read_table imports it lazily)
import pyarrow.parquet as pq

sys.path.insert(0, os.path.dirname(__file__))
from _common import banner, keyed_table

import compactlog

KAFKA_CLEANER_MB_S = (16, 87)  # Kafka's published cleaner throughput per thread


def build(data_dir: str, records: int, keys: int, segments: int) -> None:
    store = compactlog.open(data_dir, clock=lambda: 1_000_000)
    store.create_topic("bench", 1, {"cleanup.policy": "compact", "segment.bytes": 2**31 - 1})
    per = records // segments
    for i in range(segments):
        store.append("bench", 0, keyed_table(per, keys, 100, 0.05, seed=i, timestamp=1_000_000))
        store.roll("bench", 0)
    store.close()


def segment_files(data_dir: str) -> list[str]:
    directory = os.path.join(data_dir, "bench-0")
    return sorted(os.path.join(directory, f) for f in os.listdir(directory) if f.endswith(".parquet"))


def peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def child_compactlog(data_dir: str) -> dict[str, float]:
    import psutil

    store = compactlog.open(data_dir, clock=lambda: 2_000_000)
    store.describe("bench")  # an open store: the partition's log is loaded and the cleaner imported
    before = psutil.Process().memory_info().rss
    start = time.perf_counter()
    report = store.clean(force=True)
    elapsed = time.perf_counter() - start
    part = report.partitions[0]
    return {"seconds": elapsed, "read": part.records_read, "written": part.records_written,
            "bytes_read": part.bytes_read, "peak_rss": peak_rss(), "rss_before": before,
            "dedupe": store.broker.log_cleaner_dedupe_buffer_size}


def child_duckdb(data_dir: str, out: str) -> dict[str, float]:
    import duckdb

    con = duckdb.connect()
    listing = ", ".join(f"'{f}'" for f in segment_files(data_dir))
    start = time.perf_counter()
    con.execute(
        f"COPY (SELECT * FROM read_parquet([{listing}]) "
        f"QUALIFY row_number() OVER (PARTITION BY key ORDER BY \"offset\" DESC) = 1) TO '{out}' (FORMAT parquet)")
    return {"seconds": time.perf_counter() - start, "peak_rss": peak_rss()}


def child_pyarrow(data_dir: str, retained_file: str, out: str) -> dict[str, float]:
    retained = pq.read_table(retained_file).column("offset").combine_chunks()
    files = segment_files(data_dir)
    masks = [pc.is_in(pq.read_table(path, columns=["offset"]).column("offset"), value_set=retained)
             for path in files]
    start = time.perf_counter()
    with pq.ParquetWriter(out, pq.read_schema(files[0])) as writer:
        for path, mask in zip(files, masks, strict=True):
            writer.write_table(pq.read_table(path).filter(mask))
    return {"seconds": time.perf_counter() - start, "peak_rss": peak_rss()}


def in_child(*args: str) -> dict[str, float]:
    out = subprocess.run([sys.executable, __file__, "--child", *args], check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=5_000_000)
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--segments", type=int, default=10)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, *rest = args.child
        result = {"compactlog": child_compactlog, "duckdb": child_duckdb, "pyarrow": child_pyarrow}[kind](*rest)
        print(json.dumps(result))
        return
    banner(f"full clean: {args.records:,} records, {args.keys:,} keys, {args.segments} segments, 5% tombstones")
    root = tempfile.mkdtemp(prefix="bench-clean-")
    pristine = os.path.join(root, "pristine")
    build(pristine, args.records, args.keys, args.segments)
    ours: list[dict[str, float]] = []
    duck: list[dict[str, float]] = []
    arrow: list[dict[str, float]] = []
    for run in range(args.runs):
        work = os.path.join(root, f"run{run}")
        shutil.copytree(pristine, work)
        ours.append(in_child("compactlog", work))
        retained = os.path.join(root, "retained.parquet")
        pq.write_table(compactlog.open(work).read_arrow("bench", 0, columns=["offset"]), retained)
        duck.append(in_child("duckdb", pristine, os.path.join(root, "duck.parquet")))
        arrow.append(in_child("pyarrow", pristine, retained, os.path.join(root, "arrow.parquet")))
        shutil.rmtree(work)
    med = statistics.median(r["seconds"] for r in ours)
    med_duck = statistics.median(r["seconds"] for r in duck)
    med_arrow = statistics.median(r["seconds"] for r in arrow)
    last = ours[-1]
    mb = last["bytes_read"] / 1e6
    print(f"compactlog clean: median {med:.2f}s  ({args.records / med / 1e6:.2f}M records/s, {mb / med:.0f} MB/s; "
          f"Kafka's cleaner: {KAFKA_CLEANER_MB_S[0]}-{KAFKA_CLEANER_MB_S[1]} MB/s per thread)  "
          f"runs={[round(r['seconds'], 2) for r in ours]}")
    print(f"  records read {int(last['read']):,}, written {int(last['written']):,}")
    print(f"duckdb latest-per-key + write: median {med_duck:.2f}s -> compactlog/duckdb = {med / med_duck:.2f}x "
          f"(target <= 1.0); duckdb peak RSS {max(r['peak_rss'] for r in duck) / 2**20:.0f} MiB")
    print(f"pyarrow read + write retained: median {med_arrow:.2f}s -> compactlog/pyarrow = {med / med_arrow:.2f}x "
          f"(target <= 1.3); pyarrow peak RSS {max(r['peak_rss'] for r in arrow) / 2**20:.0f} MiB")
    peak = max(r["peak_rss"] for r in ours) / 2**20
    start_rss = last["rss_before"] / 2**20
    budget = last["dedupe"] / 2**20 + 300
    print(f"compactlog peak RSS {peak:.0f} MiB (open store before the clean: {start_rss:.0f} MiB, growth "
          f"{peak - start_rss:.0f} MiB); budget dedupe {last['dedupe'] / 2**20:.0f} MiB + 300 MiB = {budget:.0f} MiB")
    shutil.rmtree(root)


if __name__ == "__main__":
    main()
