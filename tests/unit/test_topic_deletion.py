"""delete_topic's crash points, each in process: the deletion stopped at the point (as a kill would stop
it), then a store opened, which must finish it; and the recovery leaves a concurrent creation alone."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pytest

import compactlog
from compactlog import topic_deletion
from compactlog.checkpoint import read_checkpoint
from compactlog.faults import FAULT_POINTS
from support import FakeClock

DELETE_POINTS = [p for p in FAULT_POINTS if p.startswith("store.delete-")]
PARTITIONS = 3


class Crash(BaseException):
    """Stands for the kill at a fault point: nothing after it runs."""


def table(prefix: bytes, n: int = 20) -> pa.Table:
    return pa.table({"key": [b"k%02d" % (i % 5) for i in range(n)], "value": [prefix + b"%02d" % i for i in range(n)]})


def build(data_dir: Path, clock: FakeClock) -> None:
    """Topic t (three partitions, cleaned, so the checkpoint holds it) and topic u, which must survive."""
    with compactlog.open(data_dir, clock=clock) as store:
        store.create_topic("t", PARTITIONS, {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": 0.01})
        store.create_topic("u")
        for partition in range(PARTITIONS):
            store.append("t", partition, table(b"t"))
            store.roll("t", partition)
            store.append("t", partition, table(b"t"))
        store.append("u", 0, table(b"u"))
        store.clean(force=True)
    assert {tp[0] for tp in read_checkpoint(data_dir / "cleaner-offset-checkpoint")} == {"t"}


def crash_at(monkeypatch: pytest.MonkeyPatch, point: str, nth: int = 1) -> None:
    hits = 0

    def fault_point(name: str) -> None:
        nonlocal hits
        if name == point:
            hits += 1
            if hits == nth:
                raise Crash(name)

    monkeypatch.setattr(topic_deletion, "fault_point", fault_point)


def assert_deleted(data_dir: Path) -> None:
    """Topic t is gone with all its files; topic u is whole."""
    with compactlog.open(data_dir, clock=FakeClock()) as store:
        assert store.topics() == ["u"]
        assert [r.value for r in store.read("u", 0)] == table(b"u").column("value").to_pylist()
    assert sorted(n for n in os.listdir(data_dir) if n.startswith("t")) == []  # no t-<p>, no -delete
    assert not [n for n in os.listdir(data_dir) if n.endswith(topic_deletion.DELETE_DIR_SUFFIX)]
    assert sorted(os.listdir(data_dir / ".topics")) == [".lock", "u.json"]  # no marker
    assert ("t", 0) not in read_checkpoint(data_dir / "cleaner-offset-checkpoint")


@pytest.mark.parametrize(("point", "nth"), [(p, 1) for p in DELETE_POINTS] + [("store.delete-partition-renamed", 2)])
def test_an_open_finishes_a_deletion_stopped_at_each_crash_point(point: str, nth: int, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    data_dir = tmp_path / "data"
    build(data_dir, FakeClock())
    crash_at(monkeypatch, point, nth)
    store = compactlog.open(data_dir, clock=FakeClock())
    with pytest.raises(Crash):
        store.delete_topic("t")
    store.close()
    monkeypatch.undo()
    assert_deleted(data_dir)
    with compactlog.open(data_dir, clock=FakeClock()) as store:  # created again: empty, no old checkpoint
        store.create_topic("t", PARTITIONS)
        assert [store.log_end_offset("t", p) for p in range(PARTITIONS)] == [0] * PARTITIONS


def test_a_marker_of_a_topic_created_again_is_only_removed(tmp_path: Path) -> None:
    """A deletion finished up to its metadata, then the name created again: the open keeps the new topic."""
    data_dir = tmp_path / "data"
    with compactlog.open(data_dir, clock=FakeClock()) as store:
        store.create_topic("t")
        store.append("t", 0, table(b"new"))
    (data_dir / ".topics" / "t.deleting").write_text("an-older-topic-id")
    with compactlog.open(data_dir, clock=FakeClock()) as store:
        assert store.topics() == ["t"]
        assert store.log_end_offset("t", 0) == 20
    assert not (data_dir / ".topics" / "t.deleting").exists()


def test_recovery_leaves_the_directories_of_a_creation_under_way_alone(tmp_path: Path) -> None:
    """A marker whose metadata is gone, and t-0 made by a creation that has not written its metadata yet:
    the directory is the creation's, not the deleted topic's."""
    data_dir = tmp_path / "data"
    compactlog.open(data_dir, clock=FakeClock()).close()
    (data_dir / ".topics" / "t.deleting").write_text("some-id")
    (data_dir / "t-0").mkdir()
    compactlog.open(data_dir, clock=FakeClock()).close()
    assert (data_dir / "t-0").is_dir()
    assert not (data_dir / ".topics" / "t.deleting").exists()


def test_a_deletion_of_a_topic_another_store_deleted_and_created_again_touches_nothing(tmp_path: Path) -> None:
    """A store read the topic's metadata (its id), then another deleted the topic and created it again: the
    first store's deletion must not take the new topic's directories."""
    data_dir = tmp_path / "data"
    with compactlog.open(data_dir, clock=FakeClock()) as store:
        store.create_topic("t")
        old_id = json.loads((data_dir / ".topics" / "t.json").read_text())["topic_id"]
        store.delete_topic("t")
        store.create_topic("t")
        store.append("t", 0, table(b"new"))
        with pytest.raises(compactlog.UnknownTopicOrPartitionError, match="deleted by another store"):
            topic_deletion.delete_topic_files(store.data_dir, str(data_dir / ".topics"), "t", 1, old_id,
                                              store.checkpoint)
        assert store.log_end_offset("t", 0) == 20
        assert store.topics() == ["t"]


def test_a_topic_of_the_longest_name_is_deleted(tmp_path: Path) -> None:
    """Its marker (``<name>.del``) fits a file name: ``<name>.deleting`` did not, so a name of 247 characters
    or more could not be deleted."""
    name = "n" * 249
    with compactlog.open(tmp_path / "data", clock=FakeClock()) as store:
        store.create_topic(name, 2)
        store.append(name, 1, table(b"n"))
        store.delete_topic(name)
        assert store.topics() == []
    assert sorted(os.listdir(tmp_path / "data" / ".topics")) == [".lock"]
    assert not [n for n in os.listdir(tmp_path / "data") if n.startswith("n")]


def test_a_marker_of_an_earlier_version_is_finished(tmp_path: Path) -> None:
    """``<topic>.deleting``, the marker earlier versions wrote: a deletion it announced is finished too."""
    data_dir = tmp_path / "data"
    build(data_dir, FakeClock())
    topic_id = json.loads((data_dir / ".topics" / "t.json").read_text())["topic_id"]
    (data_dir / ".topics" / "t.deleting").write_text(topic_id)  # killed after its first step
    assert_deleted(data_dir)
