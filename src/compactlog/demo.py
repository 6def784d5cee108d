"""``python -m compactlog.demo [DATA_DIR]``: compaction end to end in well under a minute.

The demo owns nothing the library uses; it is the README's first command. It

1. creates a fresh data directory (default ``./demo-data``; an existing one is wiped only if it is empty
   or a compactlog data directory) with a compacted topic ``customers`` of 3 partitions and small segments;
2. produces a change stream of customer profiles: creations, updates and deletions (tombstones);
3. reads it back, then runs the log cleaner on a local Spark (:func:`compactlog.spark.session`) and shows
   the records and bytes before and after, and that the latest value of every key did not change;
4. shows the latest value per key through ``spark.read.format("compactlog")`` (``mode=latest``);
5. checks, GDPR style, that a deleted customer's old profiles are physically gone from every file once a
   clean has run past ``delete.retention.ms`` (the tombstone too).

Time is a fake clock the demo advances (a day in a second), so nothing sleeps.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

import compactlog

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

TOPIC = "customers"
PARTITIONS = 3
HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS
CUSTOMERS = 400
EVENTS = 4_000
FORGOTTEN = 42  # the customer who asks to be forgotten
FILE_DELETE_DELAY_MS = 60_000
TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    "segment.bytes": 32 * 1024,  # small segments, so the demo has many
    "min.cleanable.dirty.ratio": 0.1,
    "delete.retention.ms": DAY_MS,  # tombstones outlive the clean that first sees them by a day
    "max.compaction.lag.ms": HOUR_MS,  # a quiet active segment is rolled and cleaned within the hour
    "file.delete.delay.ms": FILE_DELETE_DELAY_MS,  # replaced files linger a minute (Kafka's default)
}
CITIES = ("Lisbon", "Oslo", "Nairobi", "Lima", "Osaka", "Quebec", "Tartu", "Hobart")

Out = Callable[[str], None]


class DemoClock:
    """Epoch milliseconds that move only when the demo says so."""

    def __init__(self, now: int) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


def key_of(customer: int) -> bytes:
    return f"customer-{customer:04d}".encode()


def email_of(customer: int, version: int) -> str:
    return f"customer{customer}.v{version}@example.com"


def profile(customer: int, version: int, rng: random.Random) -> bytes:
    return json.dumps({"id": customer, "name": f"Customer {customer}", "email": email_of(customer, version),
                       "city": rng.choice(CITIES), "version": version}, sort_keys=True).encode()


def prepare_data_dir(path: str) -> None:
    """Wipe ``path`` if it is empty or a compactlog data directory; refuse anything else."""
    if os.path.exists(path):
        if os.listdir(path) and not os.path.isdir(os.path.join(path, ".topics")):
            raise compactlog.CompactLogError(
                f"{path} exists and is not a compactlog data directory; the demo wipes its data directory, "
                "so give it a new or empty path")
        shutil.rmtree(path)


def produce_changes(store: compactlog.Store, clock: DemoClock, rng: random.Random) -> dict[str, int]:
    """Every customer is created, then customers are updated or deleted at random (a deleted customer may
    sign up again); halfway through, the forgotten customer is deleted for good. Returns what was sent."""
    versions: dict[int, int] = {}
    sent = {"creates": 0, "updates": 0, "deletes": 0}
    halfway = (EVENTS - CUSTOMERS) // 2
    with store.producer(linger_ms=0) as producer:
        for customer in range(CUSTOMERS):
            versions[customer] = 0
            producer.send(TOPIC, key_of(customer), profile(customer, 0, rng))
            sent["creates"] += 1
        for event in range(EVENTS - CUSTOMERS):
            clock.advance(250)
            customer = FORGOTTEN if event == halfway else rng.randrange(CUSTOMERS)
            while customer == FORGOTTEN and event > halfway:  # never to come back
                customer = rng.randrange(CUSTOMERS)
            if customer in versions and (event == halfway or rng.random() < 0.04):
                producer.send(TOPIC, key_of(customer), None)
                versions.pop(customer)
                sent["deletes"] += 1
                continue
            versions[customer] = versions.get(customer, -1) + 1
            producer.send(TOPIC, key_of(customer), profile(customer, versions[customer], rng))
            sent["updates"] += 1
        producer.flush()
    return sent


@dataclass(frozen=True)
class Snapshot:
    records: int
    segments: int
    size_bytes: int
    latest: dict[bytes, bytes]  # the latest value of every live key


def snapshot(store: compactlog.Store) -> Snapshot:
    records = segments = size = 0
    latest: dict[bytes, bytes] = {}
    for partition in range(PARTITIONS):
        table = store.read_arrow(TOPIC, partition, store.log_start_offset(TOPIC, partition),
                                 columns=["key", "value"])
        records += table.num_rows
        keys, values = table.column("key").to_pylist(), table.column("value").to_pylist()
        for key, value in zip(keys, values, strict=True):
            if value is None:
                latest.pop(key, None)
            else:
                latest[key] = value
    for info in store.describe(TOPIC):
        segments += len(info.segments)
        size += info.size_bytes
    return Snapshot(records, segments, size, latest)


def latest_through_spark(spark: SparkSession, data_dir: str) -> tuple[str, dict[bytes, bytes]]:
    """The latest value per key as a Spark user reads it: the ``compactlog`` data source, ``mode=latest``
    (falls back to the store when the data source is not available)."""
    from .spark.session import register_data_source

    if not register_data_source(spark):
        store = compactlog.open(data_dir)
        try:
            return "compactlog.Store.read_arrow", snapshot(store).latest
        finally:
            store.close()
    from .spark.job_failure import describe, worker_python

    try:
        df = (spark.read.format("compactlog").option("path", data_dir).option("topic", TOPIC)
              .option("mode", "latest").load())
        rows = df.select("key", "value").collect()
    except Exception as e:  # a Spark error: its first line rarely says why
        raise compactlog.ExecutorError(
            f"reading through the compactlog data source failed: {describe(e, worker_python(spark))}") from e
    how = 'spark.read.format("compactlog").option("mode", "latest")'
    return how, {bytes(r.key): bytes(r.value) for r in rows}


def files_holding(directory: str, key: bytes, store: compactlog.Store, partition: int) -> list[str]:
    """Every file of a partition directory with a row of ``key``: sealed segments and files in transit
    (``.cleaned``, ``.swap``, ``.deleted``: all Parquet) decoded one by one, and the active segment."""
    holding = []
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if ".parquet" in name:
            keys = pq.read_table(path, columns=["key"]).column("key")
            if pc.any(pc.equal(keys, pa.scalar(key, pa.binary()))).as_py():
                holding.append(name)
    log = store.log(TOPIC, partition)
    active = log.active
    tail = store.read_arrow(TOPIC, partition, active.base_offset, columns=["key"]).column("key")
    if pc.any(pc.equal(tail, pa.scalar(key, pa.binary()))).as_py():
        holding.append(os.path.basename(active.path))
    return holding


def run(data_dir: str, spark: SparkSession | None = None, out: Out = print,
        seed: int = 2024) -> dict[str, Any]:
    """The demo (see the module docstring); returns its numbers. ``spark`` defaults to a local session."""
    started = time.monotonic()
    data_dir = os.path.abspath(data_dir)
    prepare_data_dir(data_dir)
    rng = random.Random(seed)
    clock = DemoClock(1_704_067_200_000)  # 2024-01-01T00:00:00Z
    store = compactlog.open(data_dir, clock=clock)
    try:
        store.create_topic(TOPIC, PARTITIONS, TOPIC_CONFIG)
        out(f"Data directory {data_dir}: topic {TOPIC!r}, {PARTITIONS} partitions, "
            + ", ".join(f"{k}={v}" for k, v in TOPIC_CONFIG.items()))
        sent = produce_changes(store, clock, rng)
        out(f"Produced {sum(sent.values())} changes for {CUSTOMERS} customers: {sent['creates']} creates, "
            f"{sent['updates']} updates, {sent['deletes']} deletes (tombstones).")
        before = snapshot(store)
        out(f"Before cleaning: {before.records} records in {before.segments} segments, "
            f"{before.size_bytes / 1e6:.2f} MB; {len(before.latest)} live customers.")

        if spark is None:
            from .spark import session

            out("Starting a local Spark session (compactlog.spark.session()) ...")
            spark = session()
        clock.advance(2 * HOUR_MS)  # the active segments go quiet: max.compaction.lag.ms rolls them
        report = store.clean(executor=spark)
        for p in report.partitions:
            out(f"  cleaned {p.topic}-{p.partition} on Spark: read {p.records_read} records, kept "
                f"{p.records_written}, stamped {p.tombstones_stamped} tombstones, {p.duration_ms} ms")
        for (topic, partition), reason in sorted(report.skipped.items()):
            out(f"  skipped {topic}-{partition}: {reason}")
        after = snapshot(store)
        out(f"After cleaning:  {after.records} records in {after.segments} segments, "
            f"{after.size_bytes / 1e6:.2f} MB; {len(after.latest)} live customers.")
        if after.latest != before.latest:
            raise compactlog.CleanerError("the clean changed the latest value of some key")
        out("The latest value of every customer is unchanged: compaction only drops superseded records.")

        how, latest = latest_through_spark(spark, data_dir)
        if latest != after.latest:
            raise compactlog.CleanerError(f"{how} disagrees with the log's latest values")
        sample = sorted(latest)[:3]
        out(f"Latest value per key via {how}: {len(latest)} keys, e.g.")
        for key in sample:
            out(f"  {key.decode()} -> {latest[key].decode()}")

        # GDPR: the forgotten customer's profiles went with the first clean (the tombstone superseded them);
        # the tombstone stays for delete.retention.ms so that every consumer sees the deletion.
        key = key_of(FORGOTTEN)
        partition = next(p for p in range(PARTITIONS) if any(
            r.key == key for r in store.read(TOPIC, p, store.log_start_offset(TOPIC, p))))
        directory = store.log(TOPIC, partition).directory
        start = store.log_start_offset(TOPIC, partition)
        kept = [r for r in store.read(TOPIC, partition, start) if r.key == key]
        out(f"GDPR: {key.decode()} was deleted; after the first clean partition {partition} holds "
            f"{len(kept)} record(s) of it: " + ", ".join(
                f"offset {r.offset} {'tombstone' if r.value is None else 'profile'}" for r in kept))
        clock.advance(DAY_MS + HOUR_MS)  # past delete.retention.ms, and past file.delete.delay.ms
        with store.producer(linger_ms=0) as producer:  # life goes on: a day of other customers' updates
            for _ in range(200):
                customer = rng.choice([c for c in range(CUSTOMERS) if c != FORGOTTEN])
                producer.send(TOPIC, key_of(customer), profile(customer, 1000 + rng.randrange(1000), rng))
        clock.advance(2 * HOUR_MS)
        store.clean(executor=spark)
        # The files this clean replaced (they hold the tombstone) wait file.delete.delay.ms as .deleted.
        clock.advance(FILE_DELETE_DELAY_MS + 1)
        store.enforce_retention()  # removes .deleted files whose file.delete.delay.ms has passed
        holding = files_holding(directory, key, store, partition)
        if holding:
            raise compactlog.CleanerError(f"{key.decode()} is still in {holding}")
        out(f"GDPR: a day later, after another clean, no file of {directory} holds {key.decode()} any more "
            "(no profile, no tombstone).")
        elapsed = time.monotonic() - started
        out(f"Demo finished in {elapsed:.1f} s.")
        return {"before": before.records, "after": after.records, "live": len(after.latest),
                "forgotten_partition": partition, "seconds": elapsed}
    finally:
        store.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m compactlog.demo", description=__doc__.split("\n\n")[0])
    parser.add_argument("data_dir", nargs="?", default="demo-data",
                        help="where to create the demo's data directory (default ./demo-data; wiped first)")
    parser.add_argument("--spark-master",
                        help="Spark master (default: $COMPACTLOG_SPARK_MASTER, else local[*])")
    args = parser.parse_args(argv)
    spark = None
    try:
        if args.spark_master:
            from .spark import session

            spark = session(args.spark_master)
        run(args.data_dir, spark)
    except compactlog.CompactLogError as e:
        print(f"demo failed: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
