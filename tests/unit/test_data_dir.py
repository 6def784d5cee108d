"""Data directories: meta.properties, what compactlog.open accepts, read-only directories, corrupt topic
metadata and colliding topic names (compactlog.data_dir, compactlog.topic_metadata)."""

from __future__ import annotations

import base64
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

import compactlog
from compactlog import (
    CorruptTopicMetadataError,
    DataDirectoryError,
    InvalidTopicError,
    ReadOnlyStoreError,
    TopicExistsError,
)
from compactlog.cli.main import main
from compactlog.data_dir import (
    META_PROPERTIES,
    MetaProperties,
    format_meta_properties,
    is_directory_id,
    open_action,
    parse_meta_properties,
    random_directory_id,
)
from compactlog.segment import CLEANED_SUFFIX, SWAP_SUFFIX
from support import FakeClock, read_only_view


def tree(path: Path) -> dict[str, bytes | None]:
    """Every entry under ``path`` with its content (None for directories)."""
    return {str(p.relative_to(path)): (None if p.is_dir() else p.read_bytes()) for p in path.rglob("*")}


def records(store: compactlog.Store, topic: str, partition: int = 0) -> list[tuple[bytes | None, bytes | None]]:
    return [(r.key, r.value) for r in store.read(topic, partition)]


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# ---------------------------------------------------------------------------------- meta.properties


def test_meta_properties_round_trip_in_kafkas_format() -> None:
    meta = MetaProperties(0, random_directory_id())
    text = format_meta_properties(meta)
    assert f"version=0\ndirectory.id={meta.directory_id}\n" in text
    assert parse_meta_properties(text, "m") == meta


def test_a_kafka_version_1_file_is_read() -> None:
    text = "#\nnode.id=1\ndirectory.id=J8aAPcfLQt2bqs1JT_rlFQ\nversion=1\ncluster.id=abc\n"
    assert parse_meta_properties(text, "m") == MetaProperties(1, "J8aAPcfLQt2bqs1JT_rlFQ")


@pytest.mark.parametrize("text, problem", [
    ("version=2\ndirectory.id=J8aAPcfLQt2bqs1JT_rlFQ\n", "unsupported version '2'"),
    ("version=0\n", "no directory.id"),
    ("version=0\ndirectory.id=J8aAPcfLQt2bqs1JT_rlF\n", "is not a base64 UUID"),
    ("version=0\ndirectory.id=J8aAPcfLQt2bqs1JT_rlFQ==\n", "is not a base64 UUID"),
    ("version=0\ndirectory.id=J8aAPcfLQt2bqs1JT+rlFQ\n", "is not a base64 UUID"),
])
def test_a_malformed_meta_properties_is_refused_naming_the_file(text: str, problem: str) -> None:
    with pytest.raises(DataDirectoryError, match=rf"^/d/meta\.properties: .*{re.escape(problem)}"):
        parse_meta_properties(text, "/d/meta.properties")


def test_directory_ids_are_kafka_uuids_never_reserved_or_starting_with_a_dash() -> None:
    for _ in range(2000):
        text = random_directory_id()
        assert is_directory_id(text) and not text.startswith("-")
        raw = base64.urlsafe_b64decode(text + "==")
        assert raw[:8] != bytes(8) or int.from_bytes(raw[8:], "big") >= 100
    assert not is_directory_id("AAAAAAAAAAAAAAAAAAAAAA" + "A")


@pytest.mark.parametrize("entries, action", [
    (set(), "create"),
    ({"server.properties"}, "create"),
    ({"lost+found", "server.properties"}, "create"),
    ({".lock"}, "create"),  # serve locks a new directory before its store is created
    ({"meta.properties", ".topics", "t-0"}, "open"),
    ({".topics", "t-0", "cleaner-offset-checkpoint"}, "upgrade"),
    ({"passwd", "hosts"}, "refuse"),
    ({".bashrc"}, "refuse"),
    ({"server.properties", "notes.txt"}, "refuse"),
])
def test_open_action(entries: set[str], action: str) -> None:
    assert open_action(entries) == action


# ------------------------------------------------------------------------------------ opening paths


def test_a_new_store_gets_a_meta_properties_whose_id_stays(tmp_path: Path, clock: FakeClock) -> None:
    with compactlog.open(tmp_path / "data", clock=clock) as store:
        first = store.directory_id
        assert not store.read_only
    text = (tmp_path / "data" / META_PROPERTIES).read_text()
    assert parse_meta_properties(text, "m").directory_id == first
    assert [p.name for p in tmp_path.joinpath("data").iterdir() if p.name.endswith(".tmp")] == []
    with compactlog.open(tmp_path / "data", clock=clock) as store:
        assert store.directory_id == first


def test_an_empty_directory_or_one_with_only_server_properties_becomes_a_store(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with compactlog.open(tmp_path / "empty") as store:
        store.create_topic("t")
    (tmp_path / "configured").mkdir()
    (tmp_path / "configured" / "server.properties").write_text("log.segment.bytes=4096\n")
    with compactlog.open(tmp_path / "configured") as store:
        store.create_topic("t")
        assert store.topic_config("t").segment_bytes == 4096
    assert (tmp_path / "configured" / META_PROPERTIES).exists()


def test_a_non_empty_directory_that_is_not_a_store_is_refused_and_left_alone(tmp_path: Path,
                                                                             capsys: pytest.CaptureFixture[str]
                                                                             ) -> None:
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "passwd").write_text("root:x:0:0\n")
    before = tree(etc)
    with pytest.raises(DataDirectoryError, match=r"not empty and has no meta\.properties"):
        compactlog.open(etc)
    code, out, err = cli(capsys, "topics", "list", "--data-dir", str(etc))
    assert (code, out) == (1, "")
    assert err.startswith("compactlog: DataDirectoryError: ") and err.count("\n") == 1
    assert tree(etc) == before


def test_a_store_made_before_meta_properties_is_upgraded_silently(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with compactlog.open(data) as store:
        store.create_topic("t")
        store.append("t", 0, pa.table({"key": [b"k"], "value": [b"v"]}))
    (data / META_PROPERTIES).unlink()  # as the code before meta.properties left it
    with compactlog.open(data) as store:
        assert records(store, "t") == [(b"k", b"v")]
        assert store.directory_id is not None
    assert parse_meta_properties((data / META_PROPERTIES).read_text(), "m").directory_id == store.directory_id


@pytest.mark.parametrize("inside", [False, True])
def test_a_path_that_is_a_file_is_one_clear_error(tmp_path: Path, inside: bool,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    file = tmp_path / "file"
    file.write_text("x")
    path = file / "data" if inside else file
    message = f"cannot create data directory {path}: Not a directory" if inside else \
        f"data directory {path} is not a directory"
    with pytest.raises(DataDirectoryError, match=f"^{re.escape(message)}$"):
        compactlog.open(path)
    code, out, err = cli(capsys, "topics", "create", "t", "--data-dir", str(path))
    assert (code, out) == (1, "")
    assert err.startswith("compactlog: DataDirectoryError: ") and err.count("\n") == 1, err
    code, out, err = cli(capsys, "topics", "list", "--data-dir", str(path))
    assert (code, out) == (1, "")
    assert err.count("\n") == 1  # a command that only reads: a path under a file does not exist
    assert err.startswith(f"compactlog: DataDirectoryError: data directory '{path}' does not exist" if inside
                          else "compactlog: DataDirectoryError: "), err


def test_an_unreadable_directory_is_one_clear_error(tmp_path: Path) -> None:
    """Root reads any directory, so as root the command runs in a user namespace, where it has no
    capabilities over the host's files; otherwise as it is."""
    data = tmp_path / "data"
    with compactlog.open(data) as store:
        store.create_topic("t")
    data.chmod(0)
    prefix: list[str] = []
    if os.geteuid() == 0:
        if shutil.which("unshare") is None or subprocess.run(["unshare", "--user", "true"]).returncode:
            pytest.skip("root without unshare --user: a directory cannot be made unreadable")
        prefix = ["unshare", "--user"]
    try:
        done = subprocess.run([*prefix, sys.executable, "-m", "compactlog", "topics", "list", "--data-dir",
                               str(data)], capture_output=True, text=True, cwd=tmp_path)
    finally:
        data.chmod(0o755)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr == f"compactlog: DataDirectoryError: cannot read data directory {data}: Permission denied\n"


def test_a_malformed_meta_properties_fails_the_open(tmp_path: Path) -> None:
    with compactlog.open(tmp_path / "data"):
        pass
    (tmp_path / "data" / META_PROPERTIES).write_text("version=0\ndirectory.id=nope\n")
    with pytest.raises(DataDirectoryError, match=re.escape(f"{tmp_path / 'data' / META_PROPERTIES}: directory.id")):
        compactlog.open(tmp_path / "data")


# ---------------------------------------------------------------------------------------- read-only


@pytest.fixture
def filled(tmp_path: Path) -> Path:
    """A store with a compacted topic: a sealed segment, an active one, an aborted transaction; a topic
    whose partition was never opened (no files at all)."""
    data = tmp_path / "data"
    with compactlog.open(data, clock=FakeClock()) as store:
        store.create_topic("t", 1, {"cleanup.policy": "compact"})
        store.append("t", 0, pa.table({"key": [b"a", b"b", b"a"], "value": [b"1", b"2", b"3"]}))
        store.roll("t", 0)
        with store.producer(transactional_id="tx") as producer:
            producer.begin_transaction()
            producer.send("t", key=b"c", value=b"x", partition=0)
            producer.flush()
            producer.abort_transaction()
        store.append("t", 0, pa.table({"key": [b"d"], "value": [b"4"]}))
        store.create_topic("never-opened")
    return data


def test_a_read_only_store_reads_and_refuses_every_write(filled: Path) -> None:
    (filled / "cleaner-offset-checkpoint").unlink()  # a writable open would create it; missing reads as empty
    (filled / "gone-0.1234-delete").mkdir()  # a writable open would finish this topic deletion
    with read_only_view(filled) as view:
        before = tree(view)
        with compactlog.open(view, clock=FakeClock()) as store:
            assert store.read_only and store.directory_id is not None
            assert store.topics() == ["never-opened", "t"]
            assert records(store, "t") == [(b"a", b"1"), (b"b", b"2"), (b"a", b"3"), (b"c", b"x"), (b"d", b"4")]
            committed = store.read_arrow("t", 0, isolation_level="read_committed", columns=["key"])
            assert committed.column("key").to_pylist() == [b"a", b"b", b"a", b"d"]
            assert [p.log_end_offset for p in store.describe("t")] == [6]
            assert records(store, "never-opened") == []
            assert store.describe("never-opened")[0].log_end_offset == 0
            table = pa.table({"key": [b"k"], "value": [b"v"]})
            writes = [
                lambda: store.create_topic("u"),
                lambda: store.alter_topic_config("t", {"segment.bytes": 4096}),
                lambda: store.delete_topic("t"),
                lambda: store.append("t", 0, table),
                lambda: store.producer(),
                lambda: store.roll("t", 0),
                lambda: store.clean(force=True),
                lambda: store.enforce_retention(),
                lambda: store.abort_expired_transactions(),
                lambda: store.write_marker("t", 0, 0, 0, True),
            ]
            for write in writes:
                with pytest.raises(ReadOnlyStoreError, match=re.escape(f"the data directory {view} is read-only")):
                    write()
        assert tree(view) == before


def test_a_read_only_store_made_before_meta_properties_opens_without_an_id(filled: Path) -> None:
    (filled / META_PROPERTIES).unlink()
    with read_only_view(filled) as view, compactlog.open(view) as store:
        assert store.read_only and store.directory_id is None
        assert len(records(store, "t")) == 5
    assert not (filled / META_PROPERTIES).exists()


def test_an_empty_read_only_directory_cannot_become_a_store(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with read_only_view(tmp_path / "empty") as view, pytest.raises(DataDirectoryError, match="read-only"):
        compactlog.open(view)


def test_a_read_only_partition_reads_past_a_torn_tail_without_truncating_it(filled: Path) -> None:
    active = next((filled / "t-0").glob("*.log"))
    with active.open("ab") as f:
        f.write(b"\x00torn")
    size = active.stat().st_size
    with read_only_view(filled) as view, compactlog.open(view) as store:
        assert records(store, "t")[-1] == (b"d", b"4")
    assert active.stat().st_size == size


def test_a_read_only_partition_that_needs_crash_recovery_is_refused(filled: Path) -> None:
    """A crashed cleaner swap left a .swap file to install: recovery would write, so reads refuse."""
    sealed = next((filled / "t-0").glob("*.parquet"))
    shutil.copy(sealed, str(sealed) + SWAP_SUFFIX)
    with read_only_view(filled) as view, compactlog.open(view) as store:
        assert store.topics() == ["never-opened", "t"]
        with pytest.raises(ReadOnlyStoreError, match="needs crash recovery of an interrupted cleaner swap"):
            store.read_arrow("t", 0)
    # a .cleaned file at or below it means the swap had not started: recovery only deletes, reads go on
    shutil.copy(sealed, str(sealed) + CLEANED_SUFFIX)
    with read_only_view(filled) as view, compactlog.open(view) as store:
        assert len(records(store, "t")) == 5


def test_read_only_commands_work_and_writes_are_one_line(filled: Path, capsys: pytest.CaptureFixture[str],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    with read_only_view(filled) as view:
        assert cli(capsys, "consume", "--topic", "t", "--from-beginning", "--property", "print.key=true",
                   "--key-separator", ":", "--data-dir", str(view))[:2] == (0, "a:1\nb:2\na:3\nc:x\nd:4\n")
        code, out, _ = cli(capsys, "topics", "describe", "t", "--data-dir", str(view))
        assert code == 0 and "LogEnd: 6" in out
        code, out, err = cli(capsys, "topics", "create", "u", "--data-dir", str(view))
        assert (code, out) == (1, "")
        assert err == f"compactlog: ReadOnlyStoreError: cannot create topic 'u': the data directory {view} is " \
                      "read-only (opened for reads only)\n"
        monkeypatch.setattr("compactlog.cli.clean._clean_on_spark", lambda *a: pytest.fail("started Spark"))
        code, out, err = cli(capsys, "clean", "--data-dir", str(view))
        assert (code, out) == (1, "") and err.startswith("compactlog: ReadOnlyStoreError: cannot clean: ")


# ------------------------------------------------------------------------------- topic metadata files


@pytest.mark.parametrize("content", [b"{not json", b"\xff\xfe", b"[]", b'{"partitions": 1}',
                                     b'{"partitions": 0, "config": {}}', b'{"partitions": "2", "config": {}}',
                                     b'{"partitions": 1, "config": []}'])
def test_a_corrupt_topic_file_fails_only_that_topic(tmp_path: Path, content: bytes,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data"
    with compactlog.open(data) as store:
        store.create_topic("bad")
        store.create_topic("good")
        store.append("good", 0, pa.table({"key": [b"k"], "value": [b"v"]}))
    path = data / ".topics" / "bad.json"
    path.write_bytes(content)
    with compactlog.open(data) as store:
        assert store.topics() == ["bad", "good"]
        assert records(store, "good") == [(b"k", b"v")]
        expected = re.escape(f"topic 'bad': cannot read its metadata file {path}")
        for use in (lambda: store.partitions("bad"), lambda: store.read_arrow("bad", 0),
                    lambda: store.topic_config("bad")):
            with pytest.raises(CorruptTopicMetadataError, match=expected):
                use()
    code, _, err = cli(capsys, "consume", "--topic", "bad", "--data-dir", str(data))
    assert code == 1 and err.startswith("compactlog: CorruptTopicMetadataError: ") and err.count("\n") == 1


@pytest.mark.parametrize("existing, new", [("my.topic", "my_topic"), ("my_topic", "my.topic"),
                                           ("a.b_c", "a_b.c")])
def test_topic_names_that_collide_once_dot_and_underscore_are_alike_are_refused(
        tmp_path: Path, existing: str, new: str) -> None:
    with compactlog.open(tmp_path / "data") as store:
        store.create_topic(existing)
        message = f"Topic '{new}' collides with existing topics: {existing}"  # Kafka's words
        with pytest.raises(InvalidTopicError, match=f"^{re.escape(message)}$"):
            store.create_topic(new)
        assert store.topics() == [existing]
        with pytest.raises(TopicExistsError):
            store.create_topic(existing)
        store.create_topic(existing.replace(".", "-").replace("_", "-"))  # '-' is not a collision character


def test_two_creators_of_one_store_agree_on_its_id(tmp_path: Path) -> None:
    """meta.properties is linked into place: the second writer finds the first one's file and takes it."""
    from compactlog.data_dir import _write_meta_once

    first = _write_meta_once(str(tmp_path), MetaProperties(0, random_directory_id()))
    second = _write_meta_once(str(tmp_path), MetaProperties(0, random_directory_id()))
    assert second == first
    assert sorted(p.name for p in tmp_path.iterdir()) == [META_PROPERTIES]
