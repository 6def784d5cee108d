"""``compactlog clean``, ``explain``, ``verify-erasure`` and ``dump-segment`` end to end: the installed
``compactlog`` entry point in a child process, as a user types it (``--in-process``: Spark's start-up is
covered by tests/integration/test_cli_spark.py). Topics and records are set up through the Python API, so
that record timestamps can be chosen (no test sleeps)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest

import compactlog

CLI = str(Path(sys.executable).with_name("compactlog"))
HOUR = 3_600_000


def cli(data: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "VIRTUAL_ENV")}
    env["COMPACTLOG_DATA_DIR"] = str(data)
    return subprocess.run([CLI, *argv], env=env, capture_output=True, text=True, timeout=300, check=False)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def setup_topic(data: Path, topic: str, config: dict[str, object], records: list[tuple[bytes, bytes | None]],
                timestamp: int | None = None, roll: bool = False) -> None:
    with compactlog.open(data) as store:
        if topic not in store.topics():
            store.create_topic(topic, 1, config)
        table = {"key": pa.array([k for k, _ in records], pa.binary()),
                 "value": pa.array([v for _, v in records], pa.binary())}
        if timestamp is not None:
            table["timestamp"] = pa.array([timestamp] * len(records), pa.int64())
        store.append(topic, 0, pa.table(table))
        if roll:
            store.roll(topic, 0)


def contents(data: Path, topic: str) -> list[tuple[int, bytes, bytes | None]]:
    with compactlog.open(data) as store:
        return [(r.offset, r.key, r.value) for r in store.read(topic, 0, store.log_start_offset(topic, 0))]


def tree(data: Path) -> dict[str, tuple[int, int]]:
    """Every file and directory under ``data``: (size, mtime in ns)."""
    found = {}
    for root, dirs, files in os.walk(data):
        for name in dirs + files:
            stat = os.stat(os.path.join(root, name))
            found[os.path.relpath(os.path.join(root, name), data)] = (stat.st_size, stat.st_mtime_ns)
    return found


def test_dry_run_changes_nothing_then_force_rolls_and_compacts_a_fresh_topic(tmp_path: Path) -> None:
    data = tmp_path / "data"
    setup_topic(data, "t", {"cleanup.policy": "compact"}, [(b"a", b"1"), (b"a", b"2"), (b"b", b"1")])
    # A file a crashed process left for removal: opening the partition to write would remove it.
    (data / "t-0" / "00000000000000000000.parquet.deleted").write_bytes(b"left by a crash")
    before = tree(data)

    plain = cli(data, "clean", "--dry-run")
    forced = cli(data, "clean", "--dry-run", "--force")

    assert tree(data) == before
    assert plain.returncode == 0, plain.stderr
    assert "t-0 (cleanup.policy=compact):\n    would not clean: nothing cleanable: first dirty offset 0 is at the " \
           "active segment" in plain.stdout
    assert forced.returncode == 0, forced.stderr
    assert "would roll the active segment: --force: compact now" in forced.stdout
    assert "would clean offsets [0, 3)" in forced.stdout
    assert "estimate: 1 of 3 record(s) freed" in forced.stdout
    assert "compactlog clean: planning t-0" in forced.stderr  # plain log lines when stderr is not a terminal

    done = cli(data, "clean", "--force", "--in-process")

    assert done.returncode == 0, done.stderr
    assert "rolled t-0: --force: compact now" in done.stdout and "cleaned t-0" in done.stdout
    assert contents(data, "t") == [(1, b"a", b"2"), (2, b"b", b"1")]


def test_force_honours_min_compaction_lag(tmp_path: Path) -> None:
    data = tmp_path / "data"
    lag = {"cleanup.policy": "compact", "min.compaction.lag.ms": HOUR}
    setup_topic(data, "young", lag, [(b"a", b"1"), (b"a", b"2")], timestamp=now_ms())
    setup_topic(data, "old", lag, [(b"a", b"1"), (b"a", b"2")], timestamp=now_ms() - 2 * HOUR)

    done = cli(data, "clean", "--force", "--in-process", "--topic", "young", "--topic", "old")

    assert done.returncode == 0, done.stderr
    assert "rolled young-0: --force: compact now" in done.stdout
    assert "skipped young-0: nothing cleanable: min.compaction.lag.ms holds segment 0 back" in done.stdout
    assert contents(data, "young") == [(0, b"a", b"1"), (1, b"a", b"2")]
    assert contents(data, "old") == [(1, b"a", b"2")]


def test_clean_applies_retention_to_a_delete_topic(tmp_path: Path) -> None:
    data = tmp_path / "data"
    setup_topic(data, "d", {"cleanup.policy": "delete", "retention.ms": HOUR}, [(b"a", b"1"), (b"b", b"2")],
                timestamp=now_ms() - 2 * HOUR, roll=True)
    setup_topic(data, "d", {}, [(b"c", b"3")], timestamp=now_ms())

    planned = cli(data, "clean", "--dry-run", "--topic", "d")
    done = cli(data, "clean", "--in-process", "--topic", "d")

    assert "retention would delete 1 segment(s)" in planned.stdout and "retention.ms 3600000 exceeded" in planned.stdout
    assert done.returncode == 0, done.stderr
    assert "retention d-0: removed" in done.stdout
    assert contents(data, "d") == [(2, b"c", b"3")]


def test_explain_before_and_after_a_clean(tmp_path: Path) -> None:
    data = tmp_path / "data"
    setup_topic(data, "t", {"cleanup.policy": "compact"}, [(b"a", b"1"), (b"b", b"1"), (b"a", b"2")])

    before = cli(data, "explain", "--topic", "t", "--key", "a")
    cli(data, "clean", "--force", "--in-process")
    after = cli(data, "explain", "--topic", "t", "--key", "a")

    assert before.returncode == 0, before.stderr
    lines = before.stdout.splitlines()
    assert lines[0].startswith("Key 'a': searched the 1 partition(s) of t at ") and "; found in t-0." in lines[0]
    assert lines[1] == "t-0: 2 stored record(s); log [0, 3), cleaner checkpoint -"
    assert "00000000000000000000.log\tactive\tsuperseded value: superseded by offset 2, which is not " \
           "cleanable yet: active segment: rolls at" in lines[2]
    assert lines[3].startswith("  offset 2\t") and "newest value" in lines[3]
    assert after.returncode == 0, after.stderr
    assert "1 stored record(s)" in after.stdout
    assert "  offset 2\t" in after.stdout and "00000000000000000000.parquet\tclean\tnewest value" in after.stdout
    described = json.loads(cli(data, "explain", "--topic", "t", "--key", "a", "--json").stdout)
    assert [(r["offset"], r["section"], r["status"]) for r in described["records"]] == [(2, "clean", "newest value")]


def test_verify_erasure_before_and_after_the_tombstones_horizon(tmp_path: Path) -> None:
    data = tmp_path / "data"
    config = {"cleanup.policy": "compact", "delete.retention.ms": 0, "file.delete.delay.ms": 0}
    setup_topic(data, "t", config, [(b"a", b"secret"), (b"b", b"1"), (b"a", None)])

    live = cli(data, "verify-erasure", "--topic", "t", "--key", "b")
    before = cli(data, "verify-erasure", "--topic", "t", "--key", "a")
    cli(data, "clean", "--force", "--in-process")  # drops the value, stamps the tombstone (horizon: now)
    stamped = cli(data, "verify-erasure", "--topic", "t", "--key", "a")
    setup_topic(data, "t", {}, [(b"c", b"1")])
    cli(data, "clean", "--force", "--in-process")  # past the horizon: the tombstone goes too
    gone = cli(data, "verify-erasure", "--topic", "t", "--key", "a")

    assert live.returncode == 1 and "LIVE: the newest record is a value" in live.stdout
    assert before.returncode == 1
    assert "SURVIVES: value at offset 0" in before.stdout and "00000000000000000000.log" in before.stdout
    assert "NOT ERASED" in before.stdout
    assert stamped.returncode == 0, stamped.stdout
    assert "newest record: tombstone at offset 2" in stamped.stdout and "ERASED" in stamped.stdout
    assert gone.returncode == 0, gone.stdout
    assert "no record of the key is left" in gone.stdout
    assert gone.stdout.splitlines()[-1] == ("NOTHING STORED: no record of key 'a' was found in t-0: nothing stored, "
                                            "nothing to erase (a key never written, or misspelt, reads the same: "
                                            "check the key and topic).")


def test_verify_erasure_of_a_key_never_written_says_nothing_is_stored(tmp_path: Path) -> None:
    data = tmp_path / "data"
    setup_topic(data, "t", {"cleanup.policy": "compact"}, [(b"a", b"1")])

    typo = cli(data, "verify-erasure", "--topic", "t", "--key", "A", "--partition", "0")
    no_partition = cli(data, "verify-erasure", "--topic", "t", "--key", "a", "--partition", "1")

    assert typo.returncode == 0, typo.stderr
    assert "ERASED:" not in typo.stdout and typo.stdout.splitlines()[-1].startswith(
        "NOTHING STORED: no record of key 'A' was found in t-0: nothing stored, nothing to erase")
    assert no_partition.returncode == 1
    assert no_partition.stderr == "compactlog: UnknownTopicOrPartitionError: topic 't' has no partition 1\n"


def test_verify_erasure_finds_a_value_in_a_deleted_file(tmp_path: Path) -> None:
    data = tmp_path / "data"
    config = {"cleanup.policy": "compact", "delete.retention.ms": 0, "file.delete.delay.ms": HOUR}
    setup_topic(data, "t", config, [(b"a", b"secret"), (b"b", b"1"), (b"a", None)])
    cli(data, "clean", "--force", "--in-process")
    assert any(n.endswith(".parquet.deleted") for n in os.listdir(data / "t-0"))

    result = cli(data, "verify-erasure", "--topic", "t", "--key", "a")

    assert result.returncode == 1
    assert "SURVIVES: value at offset 0" in result.stdout
    assert "in 00000000000000000000.parquet.deleted: a replaced or retention-deleted file awaiting " \
           "file.delete.delay.ms (3600000 ms)" in result.stdout


def test_verify_erasure_searches_a_torn_tail(tmp_path: Path) -> None:
    data = tmp_path / "data"
    setup_topic(data, "t", {"cleanup.policy": "compact"}, [(b"user-42", None)])
    active = data / "t-0" / "00000000000000000000.log"
    whole = active.read_bytes()
    setup_topic(data, "t", {}, [(b"user-42", b"secret")])
    torn = active.read_bytes()[len(whole):-3]  # the second frame, cut short: a torn write
    active.write_bytes(whole + torn)

    result = cli(data, "verify-erasure", "--topic", "t", "--key", "user-42")

    assert result.returncode == 1
    assert "newest record: tombstone at offset 0" in result.stdout
    assert f"SURVIVES: the key's bytes in 00000000000000000000.log at byte {len(whole) + torn.find(b'user-42')}" \
        in result.stdout


def test_dump_segment_of_sealed_active_and_corrupt_files(tmp_path: Path) -> None:
    data = tmp_path / "data"
    setup_topic(data, "t", {"cleanup.policy": "compact"}, [(b"a", b"1"), (b"b", b"2")], roll=True)
    setup_topic(data, "t", {}, [(b"c", b"3")])
    setup_topic(data, "t", {}, [(b"d", b"4")])
    sealed = data / "t-0" / "00000000000000000000.parquet"
    active = data / "t-0" / "00000000000000000002.log"

    quiet = cli(data, "dump-segment", str(sealed))
    full = cli(data, "dump-segment", str(sealed), "--print-data-log")
    frames = cli(data, "dump-segment", str(active), "--print-data-log")
    damaged = tmp_path / "00000000000000000002.log"
    raw = bytearray(active.read_bytes())
    raw[60] ^= 0xFF  # inside the first frame's payload
    damaged.write_bytes(bytes(raw))
    corrupt = cli(data, "dump-segment", str(damaged), "--print-data-log")

    assert quiet.returncode == 0, quiet.stderr
    assert "baseOffset: 0 lastOffset: 1 count: 2" in quiet.stdout and "| offset: 1 CreateTime:" in quiet.stdout
    assert "payload:" not in quiet.stdout
    assert "| offset: 0" in full.stdout and "key: a payload: 1" in full.stdout
    assert frames.returncode == 0, frames.stderr
    assert "Frame position: 0" in frames.stdout and "key: c payload: 3" in frames.stdout
    assert "key: d payload: 4" in frames.stdout
    assert corrupt.returncode == 1
    assert "Corrupt frame at position 0: CRC mismatch; resuming at position" in corrupt.stdout
    assert "key: d payload: 4" in corrupt.stdout and "key: c" not in corrupt.stdout
    assert "corrupt data at byte 0: CRC mismatch" in corrupt.stderr


@pytest.mark.parametrize("argv", [["clean", "--partition", "0", "--in-process"],
                                  ["dump-segment", "/nonexistent/segment.log"]])
def test_usage_errors_exit_2_with_one_line(tmp_path: Path, argv: list[str]) -> None:
    data = tmp_path / "data"
    setup_topic(data, "t", {"cleanup.policy": "compact"}, [(b"a", b"1")])
    result = cli(data, *argv)
    usage, error = result.stderr.splitlines()  # the command's usage line, then the one-line error
    assert result.returncode == 2 and usage.startswith(f"usage: compactlog {argv[0]} ")
    assert error.startswith(f"compactlog {argv[0]}: error: ")


@pytest.mark.integration
@pytest.mark.slow
def test_clean_force_on_the_default_spark_path_rolls_and_compacts(tmp_path: Path) -> None:
    data = tmp_path / "data"
    setup_topic(data, "t", {"cleanup.policy": "compact"}, [(b"a", b"1"), (b"a", b"2"), (b"b", b"1")])

    done = cli(data, "clean", "--force", "--spark-master", "local[1]")

    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Cleaner pass (Spark local[1]): 1 partition(s) cleaned")
    assert "rolled t-0: --force: compact now" in done.stdout
    assert contents(data, "t") == [(1, b"a", b"2"), (2, b"b", b"1")]
