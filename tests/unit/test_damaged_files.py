"""One damaged file fails only what depends on it: the cleaner marks that partition uncleanable with a reason
naming the file (in ``describe`` and the metrics), cleans the others, and retries on the next pass; a damaged
topic metadata file fails only its topic, a damaged transaction state file only its transactional id."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pytest

import compactlog
from compactlog.cli.main import main
from compactlog.errors import CorruptTransactionStateError
from support import FakeClock

CONFIG = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": 0.01}


def build(data_dir: Path, clock: FakeClock) -> None:
    """Topics a and b, two partitions each: three sealed segments of superseded keys and an active one."""
    store = compactlog.open(str(data_dir), clock=clock)
    for topic in ("a", "b"):
        store.create_topic(topic, 2, CONFIG)
        for partition in range(2):
            for n in range(3):
                store.append(topic, partition, pa.table({"key": [b"k%d" % (i % 5) for i in range(20)],
                                                         "value": [b"v%d-%d" % (n, i) for i in range(20)]}))
                store.roll(topic, partition)
            store.append(topic, partition, pa.table({"key": [b"active"], "value": [b"x"]}))
    store.close()


def first(directory: Path, suffix: str) -> Path:
    return sorted(p for p in directory.iterdir() if p.name.endswith(suffix))[0]


def truncate(path: Path) -> None:
    with open(path, "r+b") as f:
        f.truncate(path.stat().st_size // 2)


def pad(path: Path) -> None:
    with open(path, "ab") as f:
        f.write(b"\0" * 64)


def bad_magic(path: Path) -> None:
    with open(path, "r+b") as f:
        f.write(b"XXXX")


@pytest.mark.parametrize(("suffix", "damage"), [(".parquet", truncate), (".parquet", pad), (".log", bad_magic)],
                         ids=["truncated-sealed", "padded-sealed", "unknown-magic-active"])
def test_a_damaged_segment_fails_its_partition_only_and_is_retried(tmp_path: Path, clock: FakeClock,
                                                                   suffix: str, damage: object) -> None:
    data = tmp_path / "data"
    build(data, clock)
    damaged = first(data / "a-0", suffix)
    saved = tmp_path / "saved"
    shutil.copy(damaged, saved)
    damage(damaged)  # type: ignore[operator]
    store = compactlog.open(str(data), clock=clock)
    report = store.clean(force=True)
    assert sorted((p.topic, p.partition) for p in report.partitions) == [("a", 1), ("b", 0), ("b", 1)]
    assert str(damaged) in report.skipped[("a", 0)]
    assert str(damaged) in store.cleaner_state.uncleanable[("a", 0)]
    metrics = store.cleaner_metrics()
    assert metrics["uncleanable-partitions-count"] == 1 and metrics["uncleanable-bytes"] > 0
    described = store.describe("a")
    assert described[0].uncleanable_reason is not None and str(damaged) in described[0].uncleanable_reason
    assert described[1].uncleanable_reason is None
    store.close()
    shutil.copy(saved, damaged)  # repaired: the next pass cleans it and clears the mark
    store = compactlog.open(str(data), clock=clock)
    store.cleaner_state.mark_uncleanable(("a", 0), "from the last pass", 1)
    report = store.clean(force=True)
    assert report.partition("a", 0) is not None
    assert store.cleaner_metrics()["uncleanable-partitions-count"] == 0
    store.close()


def test_a_damaged_topic_file_fails_that_topic_only(tmp_path: Path, clock: FakeClock) -> None:
    data = tmp_path / "data"
    build(data, clock)
    meta = data / ".topics" / "b.json"
    saved = meta.read_bytes()
    meta.write_text("{garbage")
    store = compactlog.open(str(data), clock=clock)
    report = store.clean(force=True)
    assert sorted((p.topic, p.partition) for p in report.partitions) == [("a", 0), ("a", 1)]
    assert str(meta) in report.failed_topics["b"]
    store.close()
    meta.write_bytes(saved)
    store = compactlog.open(str(data), clock=clock)
    report = store.clean(force=True)
    assert sorted((p.topic, p.partition) for p in report.partitions) == [("b", 0), ("b", 1)]
    store.close()


def test_a_damaged_transaction_file_fails_that_transactional_id_only(tmp_path: Path, clock: FakeClock) -> None:
    data = tmp_path / "data"
    build(data, clock)
    store = compactlog.open(str(data), clock=clock)
    for tid in ("good", "bad"):
        producer = store.producer(transactional_id=tid)
        producer.begin_transaction()
        producer.send("a", b"k", b"v-" + tid.encode(), partition=1)
        producer.commit_transaction()
        producer.close()
    store.close()
    state = data / ".transactions" / "bad.state"
    state.write_bytes(b"\xff\xfe not json")
    store = compactlog.open(str(data), clock=clock)
    report = store.clean(force=True)  # expiring transactions scans every id: the damaged one is reported
    assert str(state) in report.failed_transactions[str(state)]
    assert sorted((p.topic, p.partition) for p in report.partitions) == [("a", 0), ("a", 1), ("b", 0), ("b", 1)]
    with pytest.raises(CorruptTransactionStateError, match=r"bad\.state"):
        store.producer(transactional_id="bad")
    producer = store.producer(transactional_id="good")  # the other id still works
    producer.begin_transaction()
    producer.send("a", b"k", b"again", partition=1)
    producer.commit_transaction()
    producer.close()
    store.close()


def test_describing_every_topic_shows_the_damaged_one_with_its_error(tmp_path: Path, clock: FakeClock,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data"
    build(data, clock)
    meta = data / ".topics" / "b.json"
    meta.write_text("[]")
    truncate(first(data / "a-0", ".parquet"))
    assert main(["topics", "describe", "--data-dir", str(data)]) == 1
    out = capsys.readouterr().out
    assert f"Topic: b\tError: topic 'b': cannot read its metadata file {meta}" in out
    assert "Topic: a\t" in out and "Partition: 1\t" in out
    assert "Uncleanable: " in out and "00000000000000000000.parquet" in out  # a-0's damaged segment
