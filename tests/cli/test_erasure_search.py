"""``verify-erasure`` and ``explain`` over every partition of a topic, end to end (the installed entry point in
a child process): keys placed by the Python API's producer (murmur2) and by explicit partitions, one key in
several partitions with different verdicts, the worst deciding the exit code. Records and committed offsets
are written through the Python API and the GroupMetadataManager, as the broker writes them. The librdkafka
placement (CRC32) through the broker: tests/protocol/test_erasure_librdkafka.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

import compactlog
from compactlog.coordinator.group_metadata_manager import GroupMetadataManager, OffsetAndMetadata
from compactlog.partitioner import partition_for_key
from compactlog.server_config import server_config

pytestmark = pytest.mark.timeout(300)

CLI = str(Path(sys.executable).with_name("compactlog"))
CONFIG = {"cleanup.policy": "compact", "delete.retention.ms": 86_400_000, "file.delete.delay.ms": 0}
PARTITIONS = 3


def cli(data: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "VIRTUAL_ENV")}
    env["COMPACTLOG_DATA_DIR"] = str(data)
    return subprocess.run([CLI, *argv], env=env, capture_output=True, text=True, timeout=120, check=False)


def commit_log_end(data: Path, group: str, partition: int) -> None:
    """``group`` commits the log end offset of ``m``-``partition``: it has read past everything there."""
    with compactlog.open(data) as store:
        manager = GroupMetadataManager(store, server_config({"offsets.topic.num.partitions": 3}))
        end = store.log_end_offset("m", partition)
        manager.store_offsets(group, {("m", partition): OffsetAndMetadata(end)})


def away(key: bytes, step: int) -> int:
    """A partition ``step`` partitions after the one murmur2 picks for ``key``."""
    return (partition_for_key(key, PARTITIONS) + step) % PARTITIONS


def append(store: compactlog.Store, partition: int, key: bytes, value: bytes | None) -> None:
    store.append("m", partition, pa.table({"key": pa.array([key], pa.binary()),
                                          "value": pa.array([value], pa.binary())}))


@pytest.fixture
def data(tmp_path: Path) -> Path:
    """``m`` (3 partitions, compacted, cleaned once: superseded values gone, tombstones kept a day):
    ``user-1`` by the Python API's producer (murmur2), a value then its tombstone; ``user-2`` a value and its
    tombstone in the partition after murmur2's, and a live value in the one after that; ``user-3`` a value and
    its tombstone in each of the two partitions murmur2 does not pick."""
    data = tmp_path / "data"
    with compactlog.open(data) as store:
        store.create_topic("m", PARTITIONS, CONFIG)
        with store.producer() as producer:
            producer.send("m", key=b"user-1", value=b"secret")
            producer.send("m", key=b"user-1", value=None)
            producer.flush()
        append(store, away(b"user-2", 1), b"user-2", b"secret")
        append(store, away(b"user-2", 1), b"user-2", None)
        append(store, away(b"user-2", 2), b"user-2", b"still here")
        for step in (1, 2):
            append(store, away(b"user-3", step), b"user-3", b"secret")
            append(store, away(b"user-3", step), b"user-3", None)
    assert cli(data, "clean", "--force", "--in-process").returncode == 0
    return data


def test_a_key_placed_by_murmur2_is_found_and_narrowing_elsewhere_finds_nothing(data: Path) -> None:
    erased = cli(data, "verify-erasure", "--topic", "m", "--key", "user-1")
    elsewhere = cli(data, "verify-erasure", "--topic", "m", "--key", "user-1", "--partition", str(away(b"user-1", 1)))

    assert erased.returncode == 0, erased.stdout
    assert f"Found in m-{partition_for_key(b'user-1', PARTITIONS)}." in erased.stdout
    assert erased.stdout.splitlines()[-1] == "ERASED: no value of key 'user-1' survives in m-0, m-1, m-2."
    assert elsewhere.returncode == 0 and elsewhere.stdout.splitlines()[-1].startswith("NOTHING STORED: ")


def test_a_key_in_two_partitions_is_reported_in_both_and_the_worst_verdict_decides(data: Path) -> None:
    erased_in, live_in = away(b"user-2", 1), away(b"user-2", 2)

    both = cli(data, "verify-erasure", "--topic", "m", "--key", "user-2")
    only_erased = cli(data, "verify-erasure", "--topic", "m", "--key", "user-2", "--partition", str(erased_in))
    explained = json.loads(cli(data, "explain", "--topic", "m", "--key", "user-2", "--json").stdout)

    assert both.returncode == 1, both.stdout
    assert f" of m-{erased_in} for key 'user-2': 1 record(s) found." in both.stdout
    assert f" of m-{live_in} for key 'user-2': 1 record(s) found." in both.stdout
    assert f"Found in {', '.join(f'm-{p}' for p in sorted((erased_in, live_in)))}." in both.stdout
    assert both.stdout.splitlines()[-1] == f"NOT ERASED: key 'user-2' is live in m-{live_in}."
    assert only_erased.returncode == 0, only_erased.stdout
    assert only_erased.stdout.splitlines()[-1] == (
        f"ERASED: no value of key 'user-2' survives in m-{erased_in}. Only m-{erased_in} was searched (--partition): "
        "the key may be stored in another partition.")
    assert explained["found_in"] == sorted((erased_in, live_in))
    assert sorted((r["partition"], r["status"]) for r in explained["records"]) == sorted(
        [(erased_in, "newest tombstone"), (live_in, "newest value")])


def test_a_group_behind_the_tombstone_in_one_partition_of_two_decides_exit_3_until_it_reads_past(data: Path) -> None:
    read, unread = away(b"user-3", 1), away(b"user-3", 2)
    commit_log_end(data, "billing", read)  # past the tombstone of one partition only

    behind = cli(data, "verify-erasure", "--topic", "m", "--key", "user-3")
    commit_log_end(data, "billing", unread)
    erased = cli(data, "verify-erasure", "--topic", "m", "--key", "user-3")
    text = cli(data, "explain", "--topic", "m", "--key", "user-3").stdout

    assert behind.returncode == 3, behind.stdout
    assert behind.stdout.splitlines()[-1] == (
        "ERASED FROM THE LOG, NOT FROM EVERY CONSUMER'S VIEW: no value of key 'user-3' survives in m-0, m-1, m-2, "
        f"but 1 consumer group(s) have not read past its tombstone in m-{unread}.")
    assert behind.stdout.count("CONSUMERS BEHIND: 1 consumer group(s)") == 1
    assert erased.returncode == 0, erased.stdout
    assert erased.stdout.splitlines()[-1] == "ERASED: no value of key 'user-3' survives in m-0, m-1, m-2."
    assert f"; found in {', '.join(f'm-{p}' for p in sorted((read, unread)))}." in text.splitlines()[0]
    assert text.count("newest tombstone") == 2


def test_explain_names_a_partition_it_cannot_read_and_still_explains_the_others(data: Path) -> None:
    damaged, intact = away(b"user-3", 1), away(b"user-3", 2)
    segment = next((data / f"m-{damaged}").glob("*.parquet"))
    segment.write_bytes(segment.read_bytes()[:-12])  # no footer: the partition's log cannot be opened

    explained = cli(data, "explain", "--topic", "m", "--key", "user-3")
    described = json.loads(cli(data, "explain", "--topic", "m", "--key", "user-3", "--json").stdout)

    assert explained.returncode == 1, explained.stderr
    assert f"; found in m-{intact}." in explained.stdout.splitlines()[0]
    assert f"\nm-{damaged}: UNREADABLE, not searched (the key may be stored there): " in explained.stdout
    assert described["found_in"] == [intact] and list(described["unreadable"]) == [str(damaged)]
