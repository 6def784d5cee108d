"""Issue 5 benchmark: transactional produce and read_committed reads against their plain counterparts.

1. Produce N records in transactions of 100 (begin, 100 sends, commit) against a plain idempotent
   producer that flushes every 100 records (the same durability points: each 100 records fsynced), and
   against one that flushes only at the end. Target: transactional >= 0.5x plain (flush per 100).
2. read_committed read of a partition with 10% aborted data against a read_uncommitted read of the
   same partition. Target: >= 0.8x.

Run: ``python benchmarks/bench_transactions.py [--records N] [--runs R]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from _common import banner

import compactlog

TXN_SIZE = 100


def produce(data_dir: str, records: int, mode: str) -> float:
    store = compactlog.open(data_dir)
    store.create_topic("t", 1, {"cleanup.policy": "compact"})
    value = b"v" * 100
    start = time.perf_counter()
    if mode == "transactional":
        producer = store.producer(transactional_id="bench", linger_ms=0)
        for base in range(0, records, TXN_SIZE):
            producer.begin_transaction()
            for i in range(base, base + TXN_SIZE):
                producer.send("t", key=b"key-%d" % i, value=value)
            producer.commit_transaction()
    else:
        producer = store.producer(linger_ms=0)
        for base in range(0, records, TXN_SIZE):
            for i in range(base, base + TXN_SIZE):
                producer.send("t", key=b"key-%d" % i, value=value)
            if mode == "flush-per-100":
                producer.flush()
        producer.flush()
    elapsed = time.perf_counter() - start
    producer.close()
    store.close()
    return records / elapsed


def build_aborted(data_dir: str, records: int) -> None:
    """A partition of ``records`` records in transactions of 100, every tenth one aborted, sealed."""
    store = compactlog.open(data_dir)
    store.create_topic("t", 1, {"cleanup.policy": "compact", "segment.bytes": 64 * 1024 * 1024})
    producer = store.producer(transactional_id="bench", linger_ms=0, batch_size=1 << 20)
    value = b"v" * 100
    for n, base in enumerate(range(0, records, TXN_SIZE)):
        producer.begin_transaction()
        for i in range(base, base + TXN_SIZE):
            producer.send("t", key=b"key-%d" % i, value=value)
        producer.flush()
        producer.abort_transaction() if n % 10 == 9 else producer.commit_transaction()
    producer.close()
    store.roll("t", 0)
    store.close()


def read(data_dir: str, level: str) -> tuple[float, int]:
    """Seconds to read the whole partition at ``level``, and the records returned."""
    store = compactlog.open(data_dir)
    store.log("t", 0)  # the log opened and recovered before the clock starts
    start = time.perf_counter()
    table = store.read_arrow("t", 0, 0, isolation_level=level)
    elapsed = time.perf_counter() - start
    store.close()
    return elapsed, table.num_rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=50_000)
    parser.add_argument("--read-records", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    banner(f"transactions: produce {args.records:,} records in transactions of {TXN_SIZE}; "
           f"read {args.read_records:,} records with 10% aborted")
    root = tempfile.mkdtemp(prefix="bench-txn-")
    rates: dict[str, list[float]] = {"transactional": [], "flush-per-100": [], "flush-at-end": []}
    for run in range(args.runs):
        for mode in rates:
            directory = os.path.join(root, f"{mode}-{run}")
            rates[mode].append(produce(directory, args.records, mode))
            shutil.rmtree(directory)
    med = {mode: statistics.median(v) for mode, v in rates.items()}
    print(f"transactional produce: {med['transactional']:,.0f} records/s")
    print(f"plain produce, flush per 100: {med['flush-per-100']:,.0f} records/s -> ratio "
          f"{med['transactional'] / med['flush-per-100']:.2f}x (target >= 0.5)")
    print(f"plain produce, flush at end: {med['flush-at-end']:,.0f} records/s -> ratio "
          f"{med['transactional'] / med['flush-at-end']:.2f}x (for reference)")
    aborted = os.path.join(root, "aborted")
    build_aborted(aborted, args.read_records)
    committed, uncommitted = [], []
    for _ in range(args.runs):  # alternated, so neither always reads a warmer cache
        committed.append(read(aborted, "read_committed"))
        uncommitted.append(read(aborted, "read_uncommitted"))
    c = statistics.median(t for t, _ in committed)
    u = statistics.median(t for t, _ in uncommitted)
    rows_c, rows_u = committed[0][1], uncommitted[0][1]
    print(f"read the partition: read_committed {c:.3f}s ({rows_c:,} records), read_uncommitted {u:.3f}s "
          f"({rows_u:,} records) -> read_committed speed {u / c:.2f}x (target >= 0.8); "
          f"in records returned per second {(rows_c / c) / (rows_u / u):.2f}x")
    shutil.rmtree(root)


if __name__ == "__main__":
    main()
