"""Issue 19's transactional-produce target against its ceiling: how fast could transactions of 1,000 records
go through ``compactlog serve`` on this machine if storing them cost nothing?

Each run starts two brokers, each on a new data directory holding two 4-partition compacted topics:

- ``real``: ``compactlog serve --in-process``, as bench_groups runs it.
- ``storage-free``: the same server with two things replaced in its process: the append of a produced batch
  (``compactlog.broker.produce._append_batch``) hands out the next offsets and writes nothing, and
  ``os.fsync``/``os.fdatasync`` do nothing. Requests are still read, decoded, checked and answered; the
  transaction state, its fencing and the markers still work (written, not synced). It keeps no records: it
  exists only for this measurement.

Against each broker, bench_groups' producer (confluent-kafka, ``acks=all``, ``linger.ms=5``, idempotent) sends
``--records`` records idempotently, then in transactions of 1,000. Printed per run and as medians: records/s;
each transactional figure against the real broker's idempotent one (issue 19's target is >= 0.7 for the real
broker); and the median split of one transaction between the client's own loop (``begin_transaction`` and
1,000 ``produce`` calls, which no broker can shorten) and ``commit_transaction`` (the batches' Produce
requests, their appends and fsync, and EndTxn). The storage-free broker's ratio bounds what any work on
appends, markers or fsync could reach; what remains is the client, the round trips and request handling.
The two brokers take turns being first, so that drifting load falls on both.

Run: ``python benchmarks/bench_txn_ceiling.py [--records N] [--keys K] [--runs R]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(__file__))
from _common import banner
from bench_groups import PARTITIONS, TARGET_TXN, TOPIC, TXN_SIZE, TXN_TOPIC, prepare, produce
from bench_protocol import start_broker

STORAGE_FREE_FLAG = "--storage-free-broker"
# How each broker is started: compactlog's own entry point, or this file's storage_free_broker.
COMMANDS = {"real": (sys.executable, "-m", "compactlog"), "storage-free": (sys.executable, __file__, STORAGE_FREE_FLAG)}
MODES = tuple(COMMANDS)


def storage_free_broker(argv: list[str]) -> int:
    """Run ``compactlog`` with ``argv`` in this process, with produced batches and fsyncs costing nothing."""
    import compactlog.broker.produce as produce_module
    from compactlog.cli.main import main
    from compactlog.log import Log
    from compactlog.protocol.record_batch import ProducedBatch

    next_offset = 0

    def append_nothing(log: Log, batch: ProducedBatch, max_message_bytes: int, topic: str) -> int:
        nonlocal next_offset
        first, next_offset = next_offset, next_offset + batch.record_count
        return first

    produce_module._append_batch = append_nothing
    os.fsync = os.fdatasync = lambda fd: None
    return main(argv)


def measure(mode: str, records: int, keys: int) -> tuple[float, float, list[tuple[float, float]]]:
    """Records/s idempotent and transactional against a new ``mode`` broker, and each transaction's phases."""
    phases: list[tuple[float, float]] = []
    with tempfile.TemporaryDirectory() as data_dir:
        prepare(data_dir, "log.cleaner.backoff.ms=3600000\n")
        proc, broker = start_broker(data_dir, COMMANDS[mode])
        try:
            idempotent = produce(broker, TOPIC, records, keys, transactional=False)
            transactional = produce(broker, TXN_TOPIC, records, keys, transactional=True, phases=phases)
        finally:
            proc.terminate()
            proc.wait(30)
    return records / idempotent, records / transactional, phases


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == STORAGE_FREE_FLAG:
        sys.exit(storage_free_broker(sys.argv[2:]))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    import confluent_kafka

    banner("bench_txn_ceiling: transactional produce against a real and a storage-free compactlog broker")
    print(f"confluent-kafka={confluent_kafka.__version__} librdkafka={confluent_kafka.libversion()[0]} "
          f"records={args.records} keys={args.keys} partitions={PARTITIONS} transaction={TXN_SIZE} records")
    print("load average at start: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    rates: dict[str, list[tuple[float, float]]] = {mode: [] for mode in MODES}
    loops: dict[str, list[float]] = {mode: [] for mode in MODES}
    commits: dict[str, list[float]] = {mode: [] for mode in MODES}
    for run in range(args.runs):
        for mode in MODES if run % 2 == 0 else MODES[::-1]:
            idempotent, transactional, phases = measure(mode, args.records, args.keys)
            rates[mode].append((idempotent, transactional))
            loops[mode].append(statistics.median(loop for loop, _ in phases))
            commits[mode].append(statistics.median(commit for _, commit in phases))
        baseline = rates["real"][-1][0]
        print(f"run {run}: " + "; ".join(
            f"{mode} idempotent {rates[mode][-1][0]:,.0f}/s transactional {rates[mode][-1][1]:,.0f}/s "
            f"({rates[mode][-1][1] / baseline:.2f}x real idempotent)" for mode in MODES), flush=True)
    print(f"medians of {args.runs} runs:")
    baselines = [idempotent for idempotent, _ in rates["real"]]
    for mode in MODES:
        ratios = [transactional / baseline for (_, transactional), baseline in zip(rates[mode], baselines, strict=True)]
        print(f"  {mode:12} idempotent {statistics.median(i for i, _ in rates[mode]):,.0f}/s, "
              f"transactional {statistics.median(t for _, t in rates[mode]):,.0f}/s = "
              f"{statistics.median(ratios):.2f}x the real broker's idempotent (runs: "
              f"{', '.join(f'{r:.2f}' for r in ratios)}); a transaction: client loop "
              f"{statistics.median(loops[mode]) * 1e3:.2f} ms + commit {statistics.median(commits[mode]) * 1e3:.2f} ms")
    real = statistics.median(t / b for (_, t), b in zip(rates["real"], baselines, strict=True))
    print(f"real transactional/idempotent = {real:.2f} "
          f"(target >= {TARGET_TXN}: {'met' if real >= TARGET_TXN else 'NOT met'})")
    print("load average at end: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))


if __name__ == "__main__":
    main()
