"""``verify-erasure`` and ``explain`` find a key wherever a real client put it: keys written by confluent-kafka
(librdkafka) through the broker, placed by its default partitioner (``consistent_random``: CRC32 of the key,
not Java's murmur2) and by an explicit partition, with a consumer group that has not read past the
tombstones. The broker is stopped before the commands run (they read the data directory)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from broker import running_broker
from compaction import clean

from compactlog.key_lookup import consistent_partition
from compactlog.partitioner import partition_for_key

confluent_kafka = pytest.importorskip("confluent_kafka")
admin = pytest.importorskip("confluent_kafka.admin")

pytestmark = pytest.mark.integration
TIMEOUT_S = 30
PARTITIONS = 3
KEYS = [f"key-{i}".encode() for i in range(10)]
PINNED = b"pinned"  # written with an explicit partition, neither partitioner's


def cli(data_dir: str, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "VIRTUAL_ENV")}
    return subprocess.run([sys.executable, "-m", "compactlog", *argv, "--data-dir", data_dir], env=env,
                          capture_output=True, text=True, timeout=120, check=False)


def pinned_partition() -> int:
    picked = {partition_for_key(PINNED, PARTITIONS), consistent_partition(PINNED, PARTITIONS)}
    return next(p for p in range(PARTITIONS) if p not in picked)


def write_with_librdkafka(broker: str) -> dict[bytes, set[int]]:
    """Values of every key by the default partitioner, then tombstones of key-5 and of the pinned key (its
    value and tombstone in an explicit partition); the group ``billing`` commits offset 0 everywhere (it has
    read nothing). Returns where the broker acknowledged each key's records."""
    client = admin.AdminClient({"bootstrap.servers": broker})
    topic = admin.NewTopic("ck", PARTITIONS, 1, config={"cleanup.policy": "compact", "file.delete.delay.ms": "0"})
    client.create_topics([topic], operation_timeout=TIMEOUT_S)["ck"].result(TIMEOUT_S)
    producer = confluent_kafka.Producer({"bootstrap.servers": broker, "acks": "all"})  # default partitioner
    placed: dict[bytes, set[int]] = {}

    def delivered(error: object, message: object) -> None:
        assert error is None, error
        placed.setdefault(message.key(), set()).add(message.partition())  # type: ignore[attr-defined]

    for key in KEYS:
        producer.produce("ck", key=key, value=b"secret of " + key, on_delivery=delivered)
    producer.produce("ck", key=PINNED, value=b"secret", partition=pinned_partition(), on_delivery=delivered)
    producer.flush(TIMEOUT_S)
    producer.produce("ck", key=b"key-5", value=None, on_delivery=delivered)
    producer.produce("ck", key=PINNED, value=None, partition=pinned_partition(), on_delivery=delivered)
    assert producer.flush(TIMEOUT_S) == 0
    consumer = confluent_kafka.Consumer({"bootstrap.servers": broker, "group.id": "billing",
                                         "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[confluent_kafka.TopicPartition("ck", p, 0) for p in range(PARTITIONS)],
                        asynchronous=False)
    finally:
        consumer.close()
    return placed


def test_a_key_placed_by_librdkafka_or_by_hand_is_found_in_its_partition_whatever_murmur2_says(
        data_dir: str) -> None:
    with running_broker(data_dir) as port:
        placed = write_with_librdkafka(f"127.0.0.1:{port}")
    crc32 = consistent_partition(b"key-5", PARTITIONS)
    murmur2 = partition_for_key(b"key-5", PARTITIONS)
    # librdkafka's default partitioner is CRC32's, and for key-5 not murmur2's: the case a lookup by
    # murmur2 alone answered "nothing stored" for.
    assert all(placed[key] == {consistent_partition(key, PARTITIONS)} for key in KEYS)
    assert crc32 != murmur2
    assert placed[PINNED] == {pinned_partition()}

    stored = cli(data_dir, "verify-erasure", "--topic", "ck", "--key", "key-5")
    assert stored.returncode == 1, stored.stdout  # the value is still in the (uncleaned) active segment
    assert f" of ck-{crc32} for key 'key-5': 2 record(s) found." in stored.stdout
    assert "  SURVIVES: value at offset " in stored.stdout
    assert f"consistent_random (librdkafka: kcat, confluent-kafka) -> ck-{crc32}" in stored.stdout
    assert stored.stdout.splitlines()[-1] == f"NOT ERASED: key 'key-5' survives in ck-{crc32}."

    clean(data_dir)  # drops the values; the tombstones stay (delete.retention.ms: a day)
    behind = cli(data_dir, "verify-erasure", "--topic", "ck", "--key", "key-5")
    assert behind.returncode == 3, behind.stdout
    assert f"Found in ck-{crc32}." in behind.stdout
    assert "  CONSUMERS BEHIND: 1 consumer group(s) have not read past the tombstone at offset " in behind.stdout
    assert behind.stdout.splitlines()[-1] == (
        f"ERASED FROM THE LOG, NOT FROM EVERY CONSUMER'S VIEW: no value of key 'key-5' survives in ck-0, ck-1, "
        f"ck-2, but 1 consumer group(s) have not read past its tombstone in ck-{crc32}.")

    pinned = cli(data_dir, "verify-erasure", "--topic", "ck", "--key", "pinned")
    assert pinned.returncode == 3, pinned.stdout
    assert f"Found in ck-{pinned_partition()}." in pinned.stdout

    narrowed = cli(data_dir, "verify-erasure", "--topic", "ck", "--key", "key-5", "--partition", str(murmur2))
    assert narrowed.returncode == 0, narrowed.stdout  # what --partition asks: that partition holds nothing
    assert narrowed.stdout.splitlines()[-1].endswith(
        f"Only ck-{murmur2} was searched (--partition): the key may be stored in another partition.")

    explained = json.loads(cli(data_dir, "explain", "--topic", "ck", "--key", "key-5", "--json").stdout)
    assert explained["partitions_searched"] == [0, 1, 2] and explained["found_in"] == [crc32]
    assert explained["partitioner_hints"] == {"murmur2": murmur2, "consistent_random": crc32}
    assert [(r["partition"], r["status"], r["groups_not_read_past"]) for r in explained["records"]] == [
        (crc32, "newest tombstone", ["billing"])]
