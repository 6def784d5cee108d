"""The coordinator's CPU for one transaction over 4 partitions, as the broker spends it: AddPartitionsToTxn
(``add_to_transaction``) and EndTxn (``end_ongoing_transaction``, commit: the PrepareCommit state fsynced,
4 COMMIT markers appended and fsynced together, the CompleteCommit state).

Each transaction adds the 4 partitions, appends one transactional batch of ``--rows`` rows to each (as a
Produce request does: ``store.append`` under the partition lock, ``flush=False``, then the 4 logs flushed),
and commits. Printed: the medians over the transactions of a run (then over the runs) of the calling
thread's CPU (``time.thread_time``) in AddPartitionsToTxn and in EndTxn, of the process's CPU in EndTxn (its
fsyncs run in the flush pool's threads), and, as the same run's baseline, of the calling thread's CPU in the
4 appends: the coordinator's share of a transaction is ``(add + end) / appends``.

Run: ``python benchmarks/bench_end_txn.py [--transactions N] [--runs R] [--rows 250] [--profile]``.
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

sys.path.insert(0, os.path.dirname(__file__))
from _common import banner
from bench_small_append import NOW_MS, batch_table

import compactlog
from compactlog.flush import flush_logs

PARTITIONS = 4
TRANSACTIONAL_ID = "bench-end-txn"


def run(transactions: int, rows: int, profiler: cProfile.Profile | None = None) -> dict[str, float]:
    """Median seconds per transaction of each phase, in a fresh data directory."""
    data_dir = tempfile.mkdtemp(prefix="bench-end-txn-")
    try:
        store = compactlog.open(data_dir, clock=lambda: NOW_MS)
        store.create_topic("t", PARTITIONS, {"cleanup.policy": "compact"})
        coordinator = store.transactions
        producer_id, epoch = coordinator.init_producer(TRANSACTIONAL_ID, 60_000)
        partitions = [("t", p) for p in range(PARTITIONS)]
        logs = [store.log("t", p) for p in range(PARTITIONS)]
        tables = [batch_table(rows, i) for i in range(16)]
        times: dict[str, list[float]] = {"add": [], "end": [], "end_process": [], "appends": []}
        for i in range(transactions):
            start = time.thread_time()
            if profiler is not None:
                profiler.enable()
            coordinator.add_to_transaction(TRANSACTIONAL_ID, producer_id, epoch, partitions)
            if profiler is not None:
                profiler.disable()
            added = time.thread_time()
            for partition, log in enumerate(logs):
                with log.locked():
                    store.append("t", partition, tables[(i + partition) % len(tables)], producer_id=producer_id,
                                 producer_epoch=epoch, base_sequence=i * rows, transactional=True, flush=False)
            flush_logs(logs)
            appended, appended_process = time.thread_time(), time.process_time()
            if profiler is not None:
                profiler.enable()
            coordinator.end_ongoing_transaction(TRANSACTIONAL_ID, producer_id, epoch, commit=True)
            if profiler is not None:
                profiler.disable()
            ended, ended_process = time.thread_time(), time.process_time()
            times["add"].append(added - start)
            times["appends"].append(appended - added)
            times["end"].append(ended - appended)
            times["end_process"].append(ended_process - appended_process)
        assert store.last_stable_offset("t", 0) == logs[0].log_end_offset  # every transaction committed
        store.close()
        return {name: statistics.median(values) for name, values in times.items()}
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transactions", type=int, default=300)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--rows", type=int, default=250)
    parser.add_argument("--profile", action="store_true",
                        help="print a cProfile (thread CPU) of AddPartitionsToTxn and EndTxn of one run instead")
    args = parser.parse_args()
    banner(f"AddPartitionsToTxn + EndTxn (commit) over {PARTITIONS} partitions: {args.transactions} transactions "
           f"of {PARTITIONS} x {args.rows} rows, {args.runs} runs")
    if args.profile:
        profiler = cProfile.Profile(time.thread_time)
        run(args.transactions, args.rows, profiler)
        pstats.Stats(profiler).sort_stats(os.environ.get("BENCH_SORT", "tottime")).print_stats(30)
        return
    run(20, args.rows)  # warm-up: imports, cached schemas and templates
    results = [run(args.transactions, args.rows) for _ in range(args.runs)]
    median = {name: statistics.median(r[name] for r in results) * 1e6 for name in results[0]}
    share = (median["add"] + median["end"]) / median["appends"]
    print(f"add {median['add']:7.0f} us  end {median['end']:7.0f} us (process {median['end_process']:.0f} us)  "
          f"appends {median['appends']:7.0f} us  (add + end) / appends {share:.2f}  (medians of {args.runs} runs)")


if __name__ == "__main__":
    main()
