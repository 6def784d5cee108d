"""Debian's kcat (librdkafka) against the broker: metadata, keyed produce with tombstones, consume from the
beginning before and after a clean from another process."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from broker import running_broker
from compaction import COMPACTED, RECORDS, TOPIC_CONFIGS, clean

import compactlog

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is installed by ./dev setup")]


def kcat(broker: str, *args: str, stdin: str | None = None) -> str:
    done = subprocess.run(["kcat", "-b", broker, *args], input=stdin, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def consume(broker: str, topic: str) -> dict[int, tuple[bytes, bytes | None]]:
    out = kcat(broker, "-C", "-t", topic, "-o", "beginning", "-e", "-Z", "-f", "%o|%k|%S|%s\n")
    records = {}
    for line in out.splitlines():
        offset, key, size, value = line.split("|", 3)
        records[int(offset)] = (key.encode(), None if size == "-1" else value.encode())
    return records


def test_kcat_lists_produces_and_reads_the_compacted_log(data_dir: str, broker: str) -> None:
    with compactlog.open(data_dir) as store:
        store.create_topic("changes", 1, TOPIC_CONFIGS)
    listing = kcat(broker, "-L", "-t", "changes")
    assert "broker 0 at 127.0.0.1" in listing and 'topic "changes" with 1 partitions' in listing

    lines = "".join(f"{k.decode()}:{'' if v is None else v.decode()}\n" for k, v in RECORDS)
    kcat(broker, "-P", "-t", "changes", "-K:", "-Z", stdin=lines)  # -Z: an empty value is a tombstone
    assert consume(broker, "changes") == dict(enumerate(RECORDS))

    clean(data_dir)
    assert consume(broker, "changes") == COMPACTED  # the latest per key at its offset; the gaps; the tombstone


def test_kcat_is_told_an_unknown_topic_does_not_exist(broker: str) -> None:
    listing = kcat(broker, "-L", "-t", "missing")
    assert "Broker: Unknown topic or partition" in listing


def test_metadata_tells_clients_the_advertised_listener(data_dir: str) -> None:
    with running_broker(data_dir, "--advertised-listeners", "PLAINTEXT://kafka.example:19092") as port:
        listing = kcat(f"127.0.0.1:{port}", "-L")
    assert "broker 0 at kafka.example:19092" in listing


def test_auto_creation_when_server_properties_enable_it(data_dir: str) -> None:
    compactlog.open(data_dir).close()
    with open(f"{data_dir}/server.properties", "w") as f:
        f.write("auto.create.topics.enable=true\nnum.partitions=2\n")
    with running_broker(data_dir) as port:
        kcat(f"127.0.0.1:{port}", "-P", "-t", "fresh", "-K:", stdin="k:v\n")
    with compactlog.open(data_dir) as store:  # created on the wire, a topic of the store like any other
        assert store.partitions("fresh") == 2
        assert sum(store.log_end_offset("fresh", p) for p in range(2)) == 1
