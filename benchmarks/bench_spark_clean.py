"""Issue 4 benchmarks: the log cleaner on Spark against the in-process cleaner and against naive Spark.

(a) 8 partitions x 2M records (1M keys per partition, 100-byte values): ``store.clean(executor=spark)`` on
    ``local[2]`` vs ``store.clean()`` in a process pinned to one core. Target: Spark >= 1.7x the throughput.
(b) one partition of 10M records (2M keys): the same comparison. Target: >= 1.6x.
(c) the naive Spark job a user would write on the data of (a): read the Parquet segments, groupBy
    (partition, key) max(offset), join back, write Parquet. Target: compactlog on Spark >= 5x faster.
(d) the Spark overhead of cleaning a tiny topic (1,000 records) once the session is up. Target: < 2 s.

Every input is generated from fixed seeds, sealed into segments (all of it dirty), and each run cleans a
fresh copy (segment files hard-linked: a clean never changes a file in place, it writes new ones and
renames the old). Times are medians of ``--runs`` runs; ratios are against a baseline measured in the
same run, interleaved with the measured runs (a noisy neighbour slows both alike). The in-process baseline
runs in a child process pinned to one core (``os.sched_setaffinity``); the Spark session is warmed up first.

Run: ``python benchmarks/bench_spark_clean.py`` (scale 0.05, a minute or two), ``--scale 0.1``, or
``--full`` (the issue's sizes: about 3.6 GB of segments; needs ~10 GB of free disk).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import banner, fresh_copy, keyed_table

import compactlog

TOPIC = "bench"
CLOCK_MS = 1_000_000_000_000  # a fixed clock: every record has this timestamp; the clean runs at it + 1 s
CHUNK_RECORDS = 1_000_000  # records per store.append call while generating
FULL_SEGMENT_BYTES = 64 * 1024 * 1024
TARGETS = {"a": 1.7, "b": 1.6, "c": 5.0, "d": 2.0}


def build(data_dir: str, partitions: int, records: int, keys: int, segment_bytes: int, seed: int) -> None:
    """A compacted topic of ``partitions`` partitions, each ``records`` records over ``keys`` keys, all
    sealed (dirty and cleanable)."""
    store = compactlog.open(data_dir, clock=lambda: CLOCK_MS)
    store.create_topic(TOPIC, partitions, {"cleanup.policy": "compact", "segment.bytes": segment_bytes})
    for partition in range(partitions):
        for start in range(0, records, CHUNK_RECORDS):
            n = min(CHUNK_RECORDS, records - start)
            store.append(TOPIC, partition, keyed_table(n, keys, 100, seed=seed + partition * 1000 + start))
        store.roll(TOPIC, partition)
    store.close()


def open_loaded(data_dir: str) -> compactlog.Store:
    store = compactlog.open(data_dir, clock=lambda: CLOCK_MS + 1000)
    store.describe(TOPIC)  # every log opened and recovered before the clock starts
    return store


def summary(report: Any) -> dict[str, int]:
    return {"read": sum(p.records_read for p in report.partitions),
            "written": sum(p.records_written for p in report.partitions),
            "bytes_read": sum(p.bytes_read for p in report.partitions),
            "partitions": len(report.partitions)}


def clean_in_child(data_dir: str) -> dict[str, Any]:
    """An in-process clean in a child process pinned to one core; returns seconds and counts."""
    out = subprocess.run([sys.executable, __file__, "--child", data_dir], check=True, capture_output=True,
                         text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def child_main(data_dir: str) -> None:
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    store = open_loaded(data_dir)
    start = time.perf_counter()
    report = store.clean(force=True)
    seconds = time.perf_counter() - start
    print(json.dumps({"seconds": seconds, **summary(report)}))


def clean_on_spark(spark: Any, data_dir: str) -> dict[str, Any]:
    store = open_loaded(data_dir)
    try:
        start = time.perf_counter()
        report = store.clean(force=True, executor=spark)
        seconds = time.perf_counter() - start
        if report.skipped:
            raise RuntimeError(f"partitions skipped: {report.skipped}")
        return {"seconds": seconds, **summary(report)}
    finally:
        store.close()


def naive_spark(spark: Any, data_dir: str, partitions: int, out: str) -> dict[str, Any]:
    """What a user would write: latest offset per (partition, key), joined back to the records."""
    from pyspark.sql import functions as F

    start = time.perf_counter()
    frames = [spark.read.parquet(os.path.join(data_dir, f"{TOPIC}-{p}", "*.parquet"))
              .withColumn("partition", F.lit(p)) for p in range(partitions)]
    records = frames[0]
    for frame in frames[1:]:
        records = records.unionByName(frame)
    latest = records.groupBy("partition", "key").agg(F.max("offset").alias("offset"))
    kept = records.join(latest, ["partition", "key", "offset"])
    kept.write.mode("overwrite").parquet(out)
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "written": spark.read.parquet(out).count()}


def measure_pair(runs: int, prepare: Callable[[str], str], baseline: Callable[[str], dict[str, Any]],
                 subject: Callable[[str], dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Baseline and subject runs interleaved, so that a noisy neighbour slows both alike."""
    ours: list[dict[str, Any]] = []
    theirs: list[dict[str, Any]] = []
    for _ in range(runs):
        theirs.append(baseline(prepare("baseline")))
        ours.append(subject(prepare("subject")))
    return theirs, ours


def median(results: list[dict[str, Any]]) -> float:
    return statistics.median(r["seconds"] for r in results)


def line(name: str, results: list[dict[str, Any]], records: int) -> str:
    med = median(results)
    runs = ", ".join(f"{r['seconds']:.2f}" for r in results)
    return f"  {name:<34} median {med:7.2f} s  {records / med / 1e6:6.2f} M records/s  (runs: {runs})"


def check_same(label: str, spark_results: list[dict[str, Any]], reference: list[dict[str, Any]]) -> None:
    ours = {(r["read"], r["written"]) for r in spark_results}
    theirs = {(r["read"], r["written"]) for r in reference}
    if ours != theirs or len(ours) != 1:
        raise RuntimeError(f"{label}: Spark and in-process cleans disagree: {ours} vs {theirs}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=0.05,
                        help="fraction of the issue's sizes (default 0.05)")
    parser.add_argument("--full", action="store_true", help="the issue's sizes (scale 1)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--naive-runs", type=int, help="runs of (c), which is slow (default: --runs)")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--only", default="abcd", help="which benchmarks to run, e.g. 'ad'")
    parser.add_argument("--split", choices=("auto", "always", "never"), default="auto",
                        help="spark.compactlog.cleaner.split: split a partition's round over the slots")
    parser.add_argument("--work-dir", help="where to put the data (default: a temporary directory)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child_main(args.child)
        return
    scale = 1.0 if args.full else args.scale
    segment_bytes = max(1024 * 1024, int(FULL_SEGMENT_BYTES * scale))
    a_partitions, a_records, a_keys = 8, int(2_000_000 * scale), int(1_000_000 * scale)
    b_records, b_keys = int(10_000_000 * scale), int(2_000_000 * scale)
    banner(f"compactlog cleaner on Spark ({args.master}, split {args.split}) vs in process on one core; "
           f"scale {scale:g}, segment.bytes {segment_bytes / 2**20:.1f} MiB, {args.runs} runs")

    from compactlog.spark import session

    started = time.perf_counter()
    spark = session(args.master, log_level="ERROR", conf={"spark.compactlog.cleaner.split": args.split})
    print(f"Spark session up in {time.perf_counter() - started:.1f} s "
          f"(defaultParallelism={spark.sparkContext.defaultParallelism})")
    root = tempfile.mkdtemp(prefix="bench-spark-clean-", dir=args.work_dir)
    # Warm up: Python workers started and compactlog imported on them, the JVM past its first jobs.
    build(os.path.join(root, "warm-up"), 2, 1000, 100, 1024 * 1024, seed=4)
    clean_on_spark(spark, os.path.join(root, "warm-up"))
    verdicts: list[str] = []
    try:
        if "a" in args.only or "c" in args.only:
            pristine = os.path.join(root, "a")
            t = time.perf_counter()
            build(pristine, a_partitions, a_records, a_keys, segment_bytes, seed=1)
            print(f"(a) data: {a_partitions} x {a_records:,} records, {a_keys:,} keys per partition "
                  f"(built in {time.perf_counter() - t:.0f} s)")
            total = a_partitions * a_records

            def copy_a(kind: str) -> str:
                target = os.path.join(root, f"a-{kind}")
                fresh_copy(pristine, target)
                return target

            if "a" in args.only:
                inproc, on_spark = measure_pair(args.runs, copy_a, clean_in_child,
                                                lambda d: clean_on_spark(spark, d))
                check_same("(a)", on_spark, inproc)
                print(line("in process, 1 core", inproc, total))
                print(line(f"store.clean on Spark {args.master}", on_spark, total))
                ratio = median(inproc) / median(on_spark)
                verdicts.append(f"(a) 8 partitions: Spark/in-process throughput {ratio:.2f}x "
                                f"(target >= {TARGETS['a']}x) {'PASS' if ratio >= TARGETS['a'] else 'MISS'}")
                print("  " + verdicts[-1])
            if "c" in args.only:
                out = os.path.join(root, "naive-out")
                naive, ours = measure_pair(args.naive_runs or args.runs,
                                           lambda kind: pristine if kind == "baseline" else copy_a(kind),
                                           lambda d: naive_spark(spark, d, a_partitions, out),
                                           lambda d: clean_on_spark(spark, d))
                if {r["written"] for r in naive} != {r["written"] for r in ours}:
                    raise RuntimeError(f"(c): naive job kept {naive[0]['written']}, "
                                       f"compactlog {ours[0]['written']}")
                print(line("naive Spark groupBy/join/write", naive, total))
                print(line(f"store.clean on Spark {args.master}", ours, total))
                ratio = median(naive) / median(ours)
                verdicts.append(f"(c) naive Spark / compactlog on Spark: {ratio:.2f}x "
                                f"(target >= {TARGETS['c']}x) {'PASS' if ratio >= TARGETS['c'] else 'MISS'}")
                print("  " + verdicts[-1])
            shutil.rmtree(pristine)
            for kind in ("baseline", "subject"):
                shutil.rmtree(os.path.join(root, f"a-{kind}"), ignore_errors=True)
        if "b" in args.only:
            pristine = os.path.join(root, "b")
            t = time.perf_counter()
            build(pristine, 1, b_records, b_keys, segment_bytes, seed=2)
            print(f"(b) data: 1 x {b_records:,} records, {b_keys:,} keys "
                  f"(built in {time.perf_counter() - t:.0f} s)")

            def copy_b(kind: str) -> str:
                target = os.path.join(root, f"b-{kind}")
                fresh_copy(pristine, target)
                return target

            inproc, on_spark = measure_pair(args.runs, copy_b, clean_in_child, lambda d: clean_on_spark(spark, d))
            check_same("(b)", on_spark, inproc)
            print(line("in process, 1 core", inproc, b_records))
            print(line(f"store.clean on Spark {args.master}", on_spark, b_records))
            ratio = median(inproc) / median(on_spark)
            verdicts.append(f"(b) one partition: Spark/in-process throughput {ratio:.2f}x "
                            f"(target >= {TARGETS['b']}x) {'PASS' if ratio >= TARGETS['b'] else 'MISS'}")
            print("  " + verdicts[-1])
            shutil.rmtree(root + "/b", ignore_errors=True)
        if "d" in args.only:
            pristine = os.path.join(root, "d")
            build(pristine, 1, 1000, 100, 1024 * 1024, seed=3)

            def copy_d(kind: str) -> str:
                target = os.path.join(root, f"d-{kind}")
                fresh_copy(pristine, target)
                return target

            inproc, on_spark = measure_pair(max(args.runs, 5), copy_d, clean_in_child,
                                            lambda d: clean_on_spark(spark, d))
            print(line("tiny topic in process", inproc, 1000))
            print(line(f"tiny topic on Spark {args.master}", on_spark, 1000))
            overhead = median(on_spark) - median(inproc)
            passed = median(on_spark) < TARGETS["d"]
            verdicts.append(f"(d) tiny topic: {median(on_spark):.2f} s on Spark, overhead {overhead:.2f} s "
                            f"(target < {TARGETS['d']} s) {'PASS' if passed else 'MISS'}")
            print("  " + verdicts[-1])
    finally:
        shutil.rmtree(root, ignore_errors=True)
        spark.stop()
    print("== summary")
    for verdict in verdicts:
        print(verdict)


if __name__ == "__main__":
    main()
