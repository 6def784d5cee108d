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

(a) also prints what the machine itself gives two cores, without Spark: two child processes, each pinned to
a core of its own, clean half the partitions each (every other one), started together; the time is from the
start to the end of the later. Nothing is shared but the machine, so no cleaner on Spark can beat this ratio
on it, and the gap between the two is what Spark's tasks cost. (b) prints, the same way, the in-process
round in a child process free to use every core: the round's own two-core speed-up, Spark aside.

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


def clean_in_child(data_dir: str, pinned: bool = True) -> dict[str, Any]:
    """An in-process clean in a child process pinned to one core (or free on every core); returns seconds
    and counts."""
    out = subprocess.run([sys.executable, __file__, "--child", data_dir, "--child-core",
                          str(min(os.sched_getaffinity(0))) if pinned else "-1"],
                         check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def clean_in_two_children(data_dir: str, partitions: int) -> dict[str, Any]:
    """Two pinned children, one per core, each cleaning every other partition of its own copy of the data
    (two processes must not open one store); both start cleaning when both are ready."""
    cores = sorted(os.sched_getaffinity(0))[:2]
    if len(cores) < 2:
        raise RuntimeError("two cores needed")
    copies = [data_dir, data_dir + "-twin"]
    fresh_copy(data_dir, copies[1])
    children = [subprocess.Popen([sys.executable, __file__, "--child", copy, "--child-core", str(core),
                                  "--child-partitions", ",".join(map(str, range(i, partitions, 2)))],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                for i, (copy, core) in enumerate(zip(copies, cores, strict=True))]
    try:
        for child in children:
            assert child.stdin is not None and child.stdout is not None
            if child.stdout.readline().strip() != "ready":
                raise RuntimeError("a child failed before cleaning")
        start = time.time()
        for child in children:
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        results = []
        for child in children:
            assert child.stdout is not None
            results.append(json.loads(child.stdout.readline()))
    except BaseException:
        for child in children:  # a child waiting for "go" would wait for ever
            child.kill()
        raise
    finally:
        for child in children:
            child.wait()
        shutil.rmtree(copies[1], ignore_errors=True)
    return {"seconds": max(r["ended"] for r in results) - start,
            **{k: sum(r[k] for r in results) for k in ("read", "written", "bytes_read", "partitions")}}


def child_main(data_dir: str, core: int, partitions: list[int] | None) -> None:
    """Clean in this process, pinned to ``core`` (-1: not pinned)."""
    if core >= 0:
        os.sched_setaffinity(0, {core})
    store = open_loaded(data_dir)
    if partitions is not None:  # one of two children: wait until both are ready
        print("ready", flush=True)
        sys.stdin.readline()
    start = time.perf_counter()
    reports = [store.clean(force=True)] if partitions is None else \
        [store.clean(force=True, topic=TOPIC, partition=p) for p in partitions]
    seconds = time.perf_counter() - start
    counts = [summary(report) for report in reports]
    print(json.dumps({"seconds": seconds, "ended": time.time(),
                      **{k: sum(c[k] for c in counts) for k in counts[0]}}))


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


def measure(runs: int, prepare: Callable[[str], str],
            *contenders: Callable[[str], dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The contenders' runs interleaved (the first is the baseline), so that a noisy neighbour slows all
    alike; ``prepare`` gets "baseline" for the first contender and "subject" for the others."""
    results: list[list[dict[str, Any]]] = [[] for _ in contenders]
    for _ in range(runs):
        for i, contender in enumerate(contenders):
            results[i].append(contender(prepare("subject" if i else "baseline")))
    return results


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
    parser.add_argument("--child-core", type=int, default=-1, help=argparse.SUPPRESS)
    parser.add_argument("--child-partitions", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child_main(args.child, args.child_core,
                   None if args.child_partitions is None else [int(p) for p in args.child_partitions.split(",")])
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
                inproc, two, on_spark = measure(args.runs, copy_a, clean_in_child,
                                                 lambda d: clean_in_two_children(d, a_partitions),
                                                 lambda d: clean_on_spark(spark, d))
                check_same("(a)", on_spark, inproc)
                check_same("(a) two processes", two, inproc)
                print(line("in process, 1 core", inproc, total))
                print(line("2 pinned processes, no Spark", two, total))
                print(line(f"store.clean on Spark {args.master}", on_spark, total))
                ratio = median(inproc) / median(on_spark)
                verdicts.append(f"(a) 8 partitions: Spark/in-process throughput {ratio:.2f}x "
                                f"(target >= {TARGETS['a']}x) {'PASS' if ratio >= TARGETS['a'] else 'MISS'}; "
                                f"2 pinned processes without Spark: {median(inproc) / median(two):.2f}x")
                print("  " + verdicts[-1])
            if "c" in args.only:
                out = os.path.join(root, "naive-out")
                naive, ours = measure(args.naive_runs or args.runs,
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

            inproc, free, on_spark = measure(args.runs, copy_b, clean_in_child,
                                             lambda d: clean_in_child(d, pinned=False),
                                             lambda d: clean_on_spark(spark, d))
            check_same("(b)", on_spark, inproc)
            check_same("(b) in process, every core", free, inproc)
            print(line("in process, 1 core", inproc, b_records))
            print(line("in process, every core, no Spark", free, b_records))
            print(line(f"store.clean on Spark {args.master}", on_spark, b_records))
            ratio = median(inproc) / median(on_spark)
            verdicts.append(f"(b) one partition: Spark/in-process throughput {ratio:.2f}x "
                            f"(target >= {TARGETS['b']}x) {'PASS' if ratio >= TARGETS['b'] else 'MISS'}; "
                            f"in process on every core, without Spark: {median(inproc) / median(free):.2f}x")
            print("  " + verdicts[-1])
            shutil.rmtree(root + "/b", ignore_errors=True)
        if "d" in args.only:
            pristine = os.path.join(root, "d")
            build(pristine, 1, 1000, 100, 1024 * 1024, seed=3)

            def copy_d(kind: str) -> str:
                target = os.path.join(root, f"d-{kind}")
                fresh_copy(pristine, target)
                return target

            inproc, on_spark = measure(max(args.runs, 5), copy_d, clean_in_child,
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
