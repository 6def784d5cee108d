"""The cost of one small transactional append and of one transaction marker, as the broker makes them.

A transaction of 1,000 records over 4 partitions is, per partition, one batch of ~250 rows
(``store.append`` with producer id, epoch, sequence, ``transactional=True``, ``flush=False``, under the
partition lock the broker holds for its request) and one COMMIT marker (``store.write_marker``,
``flush=False``). This times N such pairs on one partition and prints the median microseconds per append
and per marker over the runs. No baseline: the figure is compared with itself across changes.

Run: ``python benchmarks/bench_small_append.py [--appends N] [--runs R] [--rows 250] [--profile]``.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import shutil
import statistics
import sys
import tempfile
import time

import pyarrow as pa

sys.path.insert(0, os.path.dirname(__file__))
from _common import banner

import compactlog
from compactlog.record import HEADER_TYPE

NOW_MS = 1_700_000_000_000  # a fixed clock: no append is rolled by time
PRODUCER_ID = 1000
EPOCH = 0


def batch_table(rows: int, seed: int) -> pa.Table:
    """``rows`` records as the broker's decoder hands them to the store: key, value, timestamp, headers."""
    keys = [b"key-%010d" % (seed * rows + i) for i in range(rows)]
    return pa.table({
        "key": pa.array(keys, pa.binary()),
        "value": pa.array([b"v" * 100] * rows, pa.binary()),
        "timestamp": pa.array([NOW_MS] * rows, pa.int64()),
        "headers": pa.nulls(rows, HEADER_TYPE),
    })


def run(appends: int, rows: int) -> tuple[float, float]:
    """Per-append and per-marker seconds (means over ``appends`` pairs) in a fresh data directory."""
    data_dir = tempfile.mkdtemp(prefix="bench-small-append-")
    try:
        store = compactlog.open(data_dir, clock=lambda: NOW_MS)
        store.create_topic("t", 1, {"cleanup.policy": "compact"})
        log = store.log("t", 0)
        tables = [batch_table(rows, i % 16) for i in range(16)]
        append_s = marker_s = 0.0
        for i in range(appends):
            table = tables[i % len(tables)]
            start = time.perf_counter()
            with log.locked():
                store.append("t", 0, table, producer_id=PRODUCER_ID, producer_epoch=EPOCH,
                             base_sequence=i * rows, transactional=True, flush=False)
            middle = time.perf_counter()
            store.write_marker("t", 0, PRODUCER_ID, EPOCH, commit=True, flush=False)
            append_s += middle - start
            marker_s += time.perf_counter() - middle
        log.flush()
        store.close()
        return append_s / appends, marker_s / appends
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--appends", type=int, default=500)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--rows", type=int, default=250)
    parser.add_argument("--profile", action="store_true", help="print a cProfile of one run instead")
    args = parser.parse_args()
    banner(f"small transactional append: {args.rows} rows, {args.appends} appends + markers, {args.runs} runs")
    if args.profile:
        profiler = cProfile.Profile()
        profiler.runcall(run, args.appends, args.rows)
        pstats.Stats(profiler).sort_stats(os.environ.get("BENCH_SORT", "tottime")).print_stats(25)
        return
    run(20, args.rows)  # warm-up: imports, cached schemas and constant columns
    results = [run(args.appends, args.rows) for _ in range(args.runs)]
    append_us = statistics.median(a for a, _ in results) * 1e6
    marker_us = statistics.median(m for _, m in results) * 1e6
    print(f"append {append_us:8.1f} us  marker {marker_us:8.1f} us  (median of {args.runs} runs; "
          f"per run: {', '.join(f'{a * 1e6:.0f}/{m * 1e6:.0f}' for a, m in results)})")


if __name__ == "__main__":
    main()
