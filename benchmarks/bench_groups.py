"""Issue 19 benchmark: consumer groups and transactions over Kafka's protocol, each against its plain
counterpart in the same run.

1. Produce: 1M records (``--records``) of 100-byte values over 100k keys to a 4-partition compacted topic,
   by one confluent-kafka Producer (``acks=all``, ``linger.ms=5``): idempotent, then transactional in
   transactions of 1,000 records (begin, 1,000 produce calls, commit) to a second topic of 4 partitions.
   Target: transactional >= 0.7x idempotent.
2. Consume the idempotent topic from the beginning with two confluent-kafka Consumers in two processes:
   assigned (each ``assign``s two partitions), then as one group (each ``subscribe``s; the group splits the
   partitions; offsets auto-committed as by default). Timed from the start of the two processes until every
   partition's last offset has been read by some member, group joins included. Target: group >= 0.9x
   assigned. ``group.initial.rebalance.delay.ms`` is 0 in the broker's server.properties here (Kafka's 3 s
   default would hold the first join that long, which measures a setting, not the protocol). So the first
   member's join completes alone; a second member joining after the first has synced waits for the first's
   next Heartbeat (librdkafka's ``heartbeat.interval.ms``, 3 s by default) to learn of the rebalance, while
   the first reads all four partitions alone, then the first revokes them all (eager ``range``), commits
   and both resume from the committed offsets. That wait is the client's setting, not the protocol's cost:
   Kafka's documentation of ``heartbeat.interval.ms`` says it "can be adjusted even lower to control the
   expected time for normal rebalances", so the group consumers here set it to 300 ms (assigned consumers send
   no heartbeats). ``--consumer-config KEY=VALUE`` sets a client setting for both modes, replacing that
   default: ``--consumer-config heartbeat.interval.ms=3000`` measures librdkafka's default wait.

Client and ``compactlog serve --in-process`` share this machine (loopback).
Run: ``python benchmarks/bench_groups.py [--records N] [--keys K] [--runs R] [--skip-txn]
[--consumer-config KEY=VALUE ...]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
from _common import banner
from bench_protocol import cpu_seconds, start_broker

import compactlog

TOPIC, TXN_TOPIC, PARTITIONS, TXN_SIZE = "bench", "bench-txn", 4, 1_000
TARGET_TXN, TARGET_GROUP = 0.7, 0.9
# Part 2's client settings unless --consumer-config is given (the docstring says why).
DEFAULT_CONSUMER_CONFIG = ["heartbeat.interval.ms=300"]


def prepare(data_dir: str, properties: str) -> None:
    """The benchmark's two compacted topics of :data:`PARTITIONS` in ``data_dir``, and its server.properties."""
    with compactlog.open(data_dir) as store:
        for topic in (TOPIC, TXN_TOPIC):
            store.create_topic(topic, PARTITIONS, {"cleanup.policy": "compact"})
    with open(os.path.join(data_dir, "server.properties"), "w") as f:
        f.write(properties)


def produce(broker: str, topic: str, records: int, keys: int, transactional: bool,
            phases: list[tuple[float, float]] | None = None) -> float:
    """Produce ``records``; returns the seconds taken. With ``phases``, each transaction appends to it the
    seconds of its begin and 1,000 produce calls (the client's own loop) and of its ``commit_transaction``."""
    import confluent_kafka

    config: dict[str, object] = {"bootstrap.servers": broker, "acks": "all", "linger.ms": 5,
                                 "enable.idempotence": True, "queue.buffering.max.messages": 1_000_000}
    if transactional:
        config["transactional.id"] = f"bench-{os.getpid()}"
    producer = confluent_kafka.Producer(config)
    value = b"v" * 100
    encoded_keys = [b"key-%08d" % i for i in range(keys)]
    started = time.perf_counter()
    if transactional:
        producer.init_transactions(60)
    for first in range(0, records, TXN_SIZE):
        began = time.perf_counter()
        if transactional:
            producer.begin_transaction()
        for i in range(first, min(first + TXN_SIZE, records)):
            while True:
                try:
                    producer.produce(topic, key=encoded_keys[i % keys], value=value)
                    break
                except BufferError:  # the client's queue is full: let it send
                    producer.poll(0.01)
        if transactional:
            looped = time.perf_counter()
            producer.commit_transaction(60)
            if phases is not None:
                phases.append((looped - began, time.perf_counter() - looped))
    if producer.flush(600) != 0:
        raise SystemExit("records left unsent")
    return time.perf_counter() - started


def consumer_child(broker: str, mode: str, index: int, group: str, extra: dict[str, str]) -> None:
    """One consuming process: prints ``{"partition": last offset read}`` lines as it goes, until killed."""
    import confluent_kafka

    consumer = confluent_kafka.Consumer({"bootstrap.servers": broker, "group.id": group,
                                         "auto.offset.reset": "earliest", "fetch.max.bytes": 52_428_800,
                                         "enable.auto.commit": mode == "group", **extra})
    if mode == "assigned":
        consumer.assign([confluent_kafka.TopicPartition(TOPIC, p, confluent_kafka.OFFSET_BEGINNING)
                         for p in range(index, PARTITIONS, 2)])
    else:
        consumer.subscribe([TOPIC])
    last: dict[int, int] = {}
    reported = time.monotonic()
    while True:
        for message in consumer.consume(10_000, 0.2):
            partition, offset = message.partition(), message.offset()
            if message.error() is None and partition is not None and offset is not None:
                last[partition] = max(last.get(partition, -1), offset)
        if time.monotonic() - reported > 0.05 and last:
            print(json.dumps(last), flush=True)
            reported = time.monotonic()


def consume(broker: str, mode: str, ends: dict[int, int], run: int, extra: dict[str, str]) -> float:
    """Two consuming processes until every partition's last offset has been read; the wall time."""
    group = f"bench-{mode}-{run}"
    done = threading.Event()
    seen: dict[int, int] = {}
    lock = threading.Lock()

    def follow(proc: subprocess.Popen[str]) -> None:
        for line in proc.stdout or ():
            with lock:
                for partition, offset in json.loads(line).items():
                    seen[int(partition)] = max(seen.get(int(partition), -1), offset)
                if all(seen.get(p, -1) >= end - 1 for p, end in ends.items()):
                    done.set()

    started = time.perf_counter()
    children = [subprocess.Popen([sys.executable, __file__, "--child", mode, str(i), broker, group,
                                  json.dumps(extra)],
                                 stdout=subprocess.PIPE, text=True) for i in range(2)]
    try:
        for child in children:
            threading.Thread(target=follow, args=(child,), daemon=True).start()
        if not done.wait(600):
            raise SystemExit(f"{mode} consumption did not finish: read up to {seen}, ends {ends}")
        return time.perf_counter() - started
    finally:
        for child in children:
            child.kill()
            child.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3, help="consumption runs of each mode (medians)")
    parser.add_argument("--skip-txn", action="store_true",
                        help="skip the transactional produce (part 1's second half): for iterating on part 2")
    parser.add_argument("--consumer-config", action="append", default=[], metavar="KEY=VALUE",
                        help="a librdkafka setting for every consumer of part 2, both modes "
                             f"(repeatable; replaces the default {' '.join(DEFAULT_CONSUMER_CONFIG)})")
    parser.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        mode, index, broker, group, extra = args.child
        consumer_child(broker, mode, int(index), group, json.loads(extra))
        return
    consumer_config = dict(setting.split("=", 1) for setting in args.consumer_config or DEFAULT_CONSUMER_CONFIG)
    import confluent_kafka

    banner("bench_groups: confluent-kafka groups and transactions -> compactlog broker (loopback)")
    print(f"confluent-kafka={confluent_kafka.__version__} librdkafka={confluent_kafka.libversion()[0]} "
          f"records={args.records} keys={args.keys} partitions={PARTITIONS} value=100 B acks=all linger.ms=5"
          f"{''.join(f' {key}={value}' for key, value in consumer_config.items())}")
    print("load average at start: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    with tempfile.TemporaryDirectory() as data_dir:
        prepare(data_dir, "group.initial.rebalance.delay.ms=0\nlog.cleaner.backoff.ms=3600000\n")
        proc, broker = start_broker(data_dir)
        try:
            cpu = cpu_seconds(proc.pid)
            plain = produce(broker, TOPIC, args.records, args.keys, transactional=False)
            txn = None if args.skip_txn else produce(broker, TXN_TOPIC, args.records, args.keys, transactional=True)
            print(f"broker CPU while producing: {cpu_seconds(proc.pid) - cpu:.2f} s")
            with compactlog.open(data_dir) as store:
                ends = {p: store.log_end_offset(TOPIC, p) for p in range(PARTITIONS)}
            times: dict[str, list[float]] = {"assigned": [], "group": []}
            for run in range(args.runs):
                for mode in times:  # interleaved, so that drifting load falls on both
                    times[mode].append(consume(broker, mode, ends, run, consumer_config))
        finally:
            proc.terminate()
            proc.wait(30)
    print(f"produce idempotent: {plain:.2f} s, {args.records / plain:,.0f} records/s")
    if txn is not None:
        ratio = (args.records / txn) / (args.records / plain)
        print(f"produce transactional ({TXN_SIZE} a transaction): {txn:.2f} s, {args.records / txn:,.0f} records/s; "
              f"transactional/idempotent = {ratio:.2f} (target >= {TARGET_TXN}: "
              f"{'met' if ratio >= TARGET_TXN else 'NOT met'})")
    medians = {mode: statistics.median(values) for mode, values in times.items()}
    for mode, values in times.items():
        print(f"consume {mode}: median {medians[mode]:.2f} s ({', '.join(f'{v:.2f}' for v in values)}), "
              f"{args.records / medians[mode]:,.0f} records/s")
    group_ratio = medians["assigned"] / medians["group"]
    print(f"group/assigned = {group_ratio:.2f} (target >= {TARGET_GROUP}: "
          f"{'met' if group_ratio >= TARGET_GROUP else 'NOT met'})")
    print("load average at end: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))


if __name__ == "__main__":
    main()
