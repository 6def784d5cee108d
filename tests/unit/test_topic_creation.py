"""A topic's creation (:mod:`compactlog.topic_creation`): its checks come before anything is written, and a
creation cut short (a crash at each of its fault points, a failed write part-way) leaves nothing behind, or a
whole topic, once the store is opened again."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

import compactlog
from compactlog.cli.main import main
from compactlog.errors import (
    InvalidPartitionsError,
    InvalidTopicError,
    KafkaStorageError,
    TopicExistsError,
)
from compactlog.faults import FAULT_POINT_ENV, FAULT_POINTS
from compactlog.topic_metadata import GROUP_METADATA_TOPIC_NAME

CREATE_POINTS = [p for p in FAULT_POINTS if p.startswith("store.create-")]
CREATE = "import sys, compactlog; compactlog.open(sys.argv[1]).create_topic('t', 3); print('created')"
INT_MAX = 2**31 - 1


def leftovers(data_dir: Path, topic: str = "t") -> tuple[list[str], list[str]]:
    """The partition directories of ``topic`` and what ``.topics`` holds besides its lock and metadata files."""
    dirs = sorted(n for n in os.listdir(data_dir) if n.startswith(f"{topic}-"))
    extra = sorted(n for n in os.listdir(data_dir / ".topics") if n != ".lock" and not n.endswith(".json"))
    return dirs, extra


def rows(n: int) -> pa.Table:
    return pa.table({"key": [b"k%d" % i for i in range(n)], "value": [b"v%d" % i for i in range(n)]})


@pytest.mark.integration  # a child process, killed
@pytest.mark.parametrize("point", CREATE_POINTS)
def test_a_crash_inside_create_topic_leaves_no_topic_or_a_whole_one(point: str, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    compactlog.open(data_dir).close()
    env = {**{k: v for k, v in os.environ.items() if k != FAULT_POINT_ENV}, FAULT_POINT_ENV: f"{point}:2"
           if point == "store.create-partition-made" else point}  # the second of three partitions made
    child = subprocess.run([sys.executable, "-c", CREATE, str(data_dir)], capture_output=True, text=True, env=env,
                           timeout=120)
    assert child.returncode == -signal.SIGKILL and f"fault point {point} hit" in child.stderr, child.stderr
    with compactlog.open(data_dir) as store:  # the open finishes the creation
        assert leftovers(data_dir) == ([], []) or leftovers(data_dir) == (["t-0", "t-1", "t-2"], [])
        assert not [n for n in os.listdir(data_dir) if n.endswith("-delete")]
        if point == "store.create-metadata-written":  # the topic exists, whole
            assert store.topics() == ["t"] and store.partitions("t") == 3
        else:  # never created: the name is free
            assert store.topics() == [] and leftovers(data_dir) == ([], [])
            store.create_topic("t", 2)
        partitions = store.partitions("t")
        for partition in range(partitions):
            store.append("t", partition, rows(2))
            assert store.log_end_offset("t", partition) == 2
    assert leftovers(data_dir)[0] == [f"t-{p}" for p in range(partitions)]


def test_a_write_failing_part_way_leaves_nothing_and_the_name_free(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[str] = []
    real_mkdir = os.mkdir

    def mkdir(path: str, *args: object, **kwargs: object) -> None:
        if len(made) == 2:  # the third partition: the disk is full
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
        real_mkdir(path, *args, **kwargs)  # type: ignore[arg-type]
        made.append(path)

    with compactlog.open(tmp_path / "data") as store:
        monkeypatch.setattr(os, "mkdir", mkdir)
        with pytest.raises(KafkaStorageError, match=r"creating topic 't' failed; nothing of it is kept: .*No space"):
            store.create_topic("t", 4)
        monkeypatch.undo()
        assert len(made) == 2 and store.topics() == []
        assert leftovers(tmp_path / "data") == ([], [])
        store.create_topic("t", 2)
        assert store.partitions("t") == 2


def test_a_metadata_write_failing_leaves_no_temporary_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_fsync = os.fsync
    with compactlog.open(tmp_path / "data") as store:
        def fsync(fd: int) -> None:
            if os.readlink(f"/proc/self/fd/{fd}").endswith(".tmp"):  # the metadata file before its rename
                raise OSError(errno.EIO, os.strerror(errno.EIO))
            real_fsync(fd)

        monkeypatch.setattr(os, "fsync", fsync)
        with pytest.raises(KafkaStorageError, match="Input/output error"):
            store.create_topic("t", 2)
        monkeypatch.undo()
        assert store.topics() == [] and leftovers(tmp_path / "data") == ([], [])


def test_directories_of_no_topic_are_cleared_when_the_name_is_created(tmp_path: Path) -> None:
    """A creation killed before markers existed, or by another store that has not reopened since, left
    directories: a creation of the name renames every one away, also those past its new count."""
    data_dir = tmp_path / "data"
    with compactlog.open(data_dir) as store:
        for partition in range(5):
            os.mkdir(data_dir / f"t-{partition}")
            (data_dir / f"t-{partition}" / "00000000000000000000.log").write_bytes(b"stale")
        (data_dir / ".topics" / "t.new").write_text("a-killed-creation")  # after this store opened
        store.create_topic("t", 2)
        assert leftovers(data_dir) == (["t-0", "t-1"], [])  # no -delete directory left either
        assert os.listdir(data_dir / "t-0") == []  # a fresh directory: the stale file went with the old one
        assert store.log_end_offset("t", 0) == 0


@pytest.mark.parametrize("partitions", [INT_MAX, 0, -1, True, 2.0])
def test_a_bad_partition_count_is_refused_before_anything_is_written(tmp_path: Path, partitions: object) -> None:
    data_dir = tmp_path / "data"
    with compactlog.open(data_dir) as store:
        before = sorted(os.listdir(data_dir)), sorted(os.listdir(data_dir / ".topics"))
        for validate_only in (True, False):
            with pytest.raises(InvalidPartitionsError, match="max.broker.partitions is 10000" if partitions == INT_MAX
                               else f"number of partitions {partitions!r} is not a positive integer"):
                store.create_topic("t", partitions, validate_only=validate_only)  # type: ignore[arg-type]
        assert (sorted(os.listdir(data_dir)), sorted(os.listdir(data_dir / ".topics"))) == before


def test_max_broker_partitions_counts_every_topic_and_names_must_leave_room(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    (data_dir / "server.properties").write_text("max.broker.partitions=100001\n")
    with compactlog.open(data_dir) as store:
        store.create_topic("a", 3)
        name = "n" * 249  # its partition 100000's directory would be 256 bytes
        with pytest.raises(InvalidPartitionsError, match="longer than a file name may be"):
            store.create_topic(name, 100_001, validate_only=True)
        store.create_topic(name, 99_998, validate_only=True)
        with pytest.raises(InvalidPartitionsError, match="would make 100002 in this data directory, which holds 3"):
            store.create_topic(name, 99_999, validate_only=True)
    (data_dir / "server.properties").write_text("max.broker.partitions=5\n")
    with compactlog.open(data_dir) as store:
        with pytest.raises(InvalidPartitionsError, match=r"^topic 'b': 3 partitions would make 6 in this data "
                           r"directory, which holds 3; max\.broker\.partitions is 5$"):
            store.create_topic("b", 3)
        store.create_topic("b", 2)
        assert store.topics() == ["a", "b"]


def test_validate_only_checks_everything_and_creates_nothing(tmp_path: Path) -> None:
    with compactlog.open(tmp_path / "data") as store:
        store.create_topic("big.0")
        store.create_topic("t", 2, {"cleanup.policy": "compact"}, validate_only=True)
        assert store.topics() == ["big.0"] and leftovers(tmp_path / "data") == ([], [])
        with pytest.raises(TopicExistsError):
            store.create_topic("big.0", validate_only=True)
        with pytest.raises(InvalidTopicError, match=r"^Topic 'big_0' collides with existing topics: big\.0$"):
            store.create_topic("big_0", validate_only=True)
        with pytest.raises(compactlog.ConfigError):
            store.create_topic("t", 1, {"cleanup.policy": "shred"}, validate_only=True)


def test_the_command_line_refuses_a_bad_count_with_the_limit_named(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    data = str(tmp_path / "data")
    assert main(["topics", "create", "t", "--partitions", str(INT_MAX), "--data-dir", data]) == 1
    err = capsys.readouterr().err
    assert err.startswith("compactlog: InvalidPartitionsError: topic 't': 2147483647 partitions") and \
        "max.broker.partitions is 10000" in err
    assert main(["topics", "create", "t", "--partitions", "0", "--data-dir", data]) == 1
    assert "number of partitions 0 is not a positive integer" in capsys.readouterr().err
    assert not [n for n in os.listdir(data) if n.startswith("t-")]


def test_the_consumer_offsets_topic_is_never_deleted(tmp_path: Path) -> None:
    with compactlog.open(tmp_path / "data") as store:
        store.create_topic(GROUP_METADATA_TOPIC_NAME, 2, {"cleanup.policy": "compact"})
        with pytest.raises(InvalidTopicError, match="is a kafka internal topic and is not allowed to be marked for "
                                                   "deletion"):
            store.delete_topic(GROUP_METADATA_TOPIC_NAME)
        assert store.topics() == [GROUP_METADATA_TOPIC_NAME]
        assert leftovers(tmp_path / "data", GROUP_METADATA_TOPIC_NAME)[0] == ["__consumer_offsets-0",
                                                                              "__consumer_offsets-1"]
