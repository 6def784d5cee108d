"""Tests for compactlog.checkpoint: the cleaner-offset-checkpoint format, crash-safe writes, and the
locked read-modify-write of CheckpointFile."""

from __future__ import annotations

import fcntl
import multiprocessing
import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import compactlog
from compactlog import checkpoint as checkpoint_module
from compactlog.checkpoint import (
    CHECKPOINT_FILE_NAME,
    CURRENT_VERSION,
    CheckpointFile,
    format_checkpoint,
    parse_checkpoint,
    read_checkpoint,
    write_checkpoint,
)
from compactlog.errors import CheckpointError

# The example of the seed article: one partition cleaned up to offset 6.
GOLDEN_TEXT = "0\n1\nlatest-product-price 0 6\n"
GOLDEN_ENTRIES = {("latest-product-price", 0): 6}


@pytest.fixture
def cp_path(tmp_path: Path) -> Path:
    return tmp_path / CHECKPOINT_FILE_NAME


def test_constants() -> None:
    assert CHECKPOINT_FILE_NAME == "cleaner-offset-checkpoint"
    assert CURRENT_VERSION == 0


# ----------------------------------------------------------------------------------- format and parse


def test_golden_format_and_parse() -> None:
    assert format_checkpoint(GOLDEN_ENTRIES) == GOLDEN_TEXT
    assert parse_checkpoint(GOLDEN_TEXT) == GOLDEN_ENTRIES


def test_golden_file_bytes(cp_path: Path) -> None:
    write_checkpoint(cp_path, GOLDEN_ENTRIES)
    assert cp_path.read_bytes() == GOLDEN_TEXT.encode()
    assert read_checkpoint(cp_path) == GOLDEN_ENTRIES


def test_empty_mapping_format() -> None:
    assert format_checkpoint({}) == "0\n0\n"
    assert parse_checkpoint("0\n0\n") == {}


def test_entries_sorted_by_topic_then_numeric_partition() -> None:
    entries = {("b", 10): 1, ("a", 2): 5, ("b", 2): 7, ("a", 10): 3, ("a.b", 0): 9}
    assert format_checkpoint(entries) == "0\n5\na 2 5\na 10 3\na.b 0 9\nb 2 7\nb 10 1\n"
    assert format_checkpoint(dict(reversed(list(entries.items())))) == format_checkpoint(entries)


@pytest.mark.parametrize(
    "topic",
    ["__consumer_offsets", "orders.v2", "my-topic", "my_topic", "a.b-c_d.E-9", "x" * 249, "...", "-_-"],
)
def test_topic_names_round_trip(topic: str, cp_path: Path) -> None:
    entries = {(topic, 0): 0, (topic, 7): 123456789012, ("other", 3): 2**63 - 1}
    assert parse_checkpoint(format_checkpoint(entries)) == entries
    write_checkpoint(cp_path, entries)
    assert read_checkpoint(cp_path) == entries


def test_extreme_values_round_trip() -> None:
    entries = {("t", 0): 0, ("t", 2**31 - 1): 2**63 - 1}
    assert parse_checkpoint(format_checkpoint(entries)) == entries


@pytest.mark.parametrize("text", ["", "0", "0\n", "0\r\n", "00\n"])
def test_parse_no_entries(text: str) -> None:
    # Empty file, or a version line without a count line: no entries, as in Kafka.
    assert parse_checkpoint(text) == {}


def test_parse_is_lenient_where_kafka_is() -> None:
    # Line breaks as BufferedReader.readLine accepts them, whitespace runs as field separators, no final
    # line break, and Integer.parseInt's optional sign.
    assert parse_checkpoint("0\r\n2\r\nt 0 5\r\nu 1 6\r\n") == {("t", 0): 5, ("u", 1): 6}
    assert parse_checkpoint("0\r2\rt 0 5\ru 1 6") == {("t", 0): 5, ("u", 1): 6}
    assert parse_checkpoint("0\n1\nt\t0   5 \n") == {("t", 0): 5}
    assert parse_checkpoint("+0\n+1\nt +0 +5\n") == {("t", 0): 5}


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("1\n0\n", 1, "unrecognised version 1"),
        ("-1\n0\n", 1, "unrecognised version -1"),
        ("x\n0\n", 1, "malformed version"),
        (" 0\n0\n", 1, "malformed version"),
        ("0.0\n0\n", 1, "malformed version"),
        ("\n0\n", 1, "malformed version"),
        ("0\nabc\n", 2, "malformed entry count"),
        ("0\n\n", 2, "malformed entry count"),
        ("0\n1 \n", 2, "malformed entry count"),
        ("0\n-1\n", 2, "negative entry count"),
        ("0\n2\nt 0 5\n", 2, "declares 2 entries but contains 1"),
        ("0\n1\n", 2, "declares 1 entries but contains 0"),
        ("0\n0\nt 0 5\n", 2, "declares 0 entries but contains 1"),
        ("0\n1\nt 0\n", 3, "malformed entry"),
        ("0\n1\nt 0 5 9\n", 3, "malformed entry"),
        ("0\n1\nt\n", 3, "malformed entry"),
        ("0\n1\n\n", 3, "malformed entry"),
        ("0\n1\nt 0 5\n\n", 4, "malformed entry"),
        ("0\n2\nt 0 5\nt 1\n", 4, "malformed entry"),
        ("0\n1\nt x 5\n", 3, "partition is not an integer"),
        ("0\n1\nt 0.0 5\n", 3, "partition is not an integer"),
        ("0\n1\nt 0 five\n", 3, "offset is not an integer"),
        ("0\n1\nt 0 5.0\n", 3, "offset is not an integer"),
        ("0\n1\nt 0 1_000\n", 3, "offset is not an integer"),
        ("0\n1\nt 0 0x10\n", 3, "offset is not an integer"),
        ("0\n1\nt -1 5\n", 3, "partition out of range"),
        ("0\n1\nt 2147483648 5\n", 3, "partition out of range"),
        ("0\n1\nt 0 -1\n", 3, "offset out of range"),
        ("0\n1\nt 0 9223372036854775808\n", 3, "offset out of range"),
        ("0\n2\nt 0 5\nt 0 6\n", 4, "duplicate entry for t-0"),
    ],
)
def test_parse_malformed(text: str, line: int, message: str) -> None:
    with pytest.raises(CheckpointError) as info:
        parse_checkpoint(text, source="/data/cleaner-offset-checkpoint")
    assert str(info.value).startswith(f"/data/cleaner-offset-checkpoint: line {line}: ")
    assert message in str(info.value)


def test_parse_default_source() -> None:
    with pytest.raises(CheckpointError, match=r"^<string>: line 1: "):
        parse_checkpoint("7\n0\n")


@pytest.mark.parametrize(
    "entries",
    [
        {("has space", 0): 1},
        {("tab\there", 0): 1},
        {("new\nline", 0): 1},
        {("", 0): 1},
        {(" ", 0): 1},
        {(b"bytes", 0): 1},
        {("t", -1): 1},
        {("t", 2**31): 1},
        {("t", True): 1},
        {("t", 1.0): 1},
        {("t", "0"): 1},
        {("t", 0): -1},
        {("t", 0): 2**63},
        {("t", 0): False},
        {("t", 0): 5.0},
        {("t", 0): None},
        {"t": 1},
        {("t", 0, 1): 1},
    ],
)
def test_format_refuses_unrepresentable_entries(entries: dict, cp_path: Path) -> None:
    with pytest.raises(CheckpointError):
        format_checkpoint(entries)
    # and nothing reaches the disk
    with pytest.raises(CheckpointError):
        write_checkpoint(cp_path, entries)
    assert list(cp_path.parent.iterdir()) == []


def test_format_accepts_numpy_integers() -> None:
    text = format_checkpoint({("t", np.int32(3)): np.int64(42)})  # type: ignore[dict-item]
    assert text == "0\n1\nt 3 42\n"


# --------------------------------------------------------------------------------------------- files


def test_read_missing_file(cp_path: Path) -> None:
    assert read_checkpoint(cp_path) == {}
    assert not cp_path.exists()


def test_read_empty_file(cp_path: Path) -> None:
    cp_path.write_bytes(b"")
    assert read_checkpoint(cp_path) == {}


def test_read_error_names_file_and_line(cp_path: Path) -> None:
    cp_path.write_text("0\n2\nt 0 5\nbroken line here too\n")
    with pytest.raises(CheckpointError) as info:
        read_checkpoint(cp_path)
    assert str(cp_path) in str(info.value)
    assert "line 4" in str(info.value)


def test_read_invalid_utf8(cp_path: Path) -> None:
    cp_path.write_bytes(b"0\n1\nt\xff 0 5\n")
    with pytest.raises(CheckpointError, match="line 3: not valid UTF-8"):
        read_checkpoint(cp_path)


def test_read_accepts_path_and_str(cp_path: Path) -> None:
    cp_path.write_text(GOLDEN_TEXT)
    assert read_checkpoint(str(cp_path)) == read_checkpoint(cp_path) == GOLDEN_ENTRIES


def test_write_leaves_no_tmp(cp_path: Path) -> None:
    write_checkpoint(cp_path, GOLDEN_ENTRIES)
    write_checkpoint(cp_path, {("t", 1): 2})
    assert sorted(p.name for p in cp_path.parent.iterdir()) == [CHECKPOINT_FILE_NAME]
    assert cp_path.read_text() == "0\n1\nt 1 2\n"


def test_write_overwrites_stale_tmp(cp_path: Path) -> None:
    tmp = cp_path.with_name(CHECKPOINT_FILE_NAME + ".tmp")
    # A crash left a longer, half-written .tmp behind; it must not leak into the new file.
    tmp.write_text("0\n3\ngarbage 0 1\ngarbage 1 2\ngarbage 2 3 and more junk\n" * 10)
    write_checkpoint(cp_path, GOLDEN_ENTRIES)
    assert cp_path.read_bytes() == GOLDEN_TEXT.encode()
    assert not tmp.exists()


def test_write_replaces_atomically_and_fsyncs(cp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_checkpoint(cp_path, {("old", 0): 1})
    events: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        events.append("fsync-dir" if os.path.isdir(f"/proc/self/fd/{fd}") else "fsync-file")
        real_fsync(fd)

    def replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        # When the rename happens, the new content is complete in the .tmp and the old file is intact.
        assert Path(src).read_bytes() == GOLDEN_TEXT.encode()
        assert Path(dst).read_text() == "0\n1\nold 0 1\n"
        events.append("replace")
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    write_checkpoint(cp_path, GOLDEN_ENTRIES)
    if os.path.isdir("/proc/self/fd"):
        assert events == ["fsync-file", "replace", "fsync-dir"]
    else:
        assert len(events) == 3 and events[1] == "replace"
    assert cp_path.read_bytes() == GOLDEN_TEXT.encode()


def test_failed_write_keeps_old_file_and_removes_tmp(cp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_checkpoint(cp_path, GOLDEN_ENTRIES)

    def failing_replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        raise OSError("disk on fire")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError, match="disk on fire"):
        write_checkpoint(cp_path, {("t", 0): 99})
    assert cp_path.read_bytes() == GOLDEN_TEXT.encode()
    assert sorted(p.name for p in cp_path.parent.iterdir()) == [CHECKPOINT_FILE_NAME]


def test_write_into_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        write_checkpoint(tmp_path / "nope" / CHECKPOINT_FILE_NAME, GOLDEN_ENTRIES)
    assert list(tmp_path.iterdir()) == []


def test_checkpoint_module_exports() -> None:
    for name in checkpoint_module.__all__:
        assert hasattr(checkpoint_module, name)


# ------------------------------------------------------------------------------------ CheckpointFile


def test_checkpoint_file_read_write(cp_path: Path) -> None:
    cf = CheckpointFile(cp_path)
    assert cf.path == cp_path
    assert cf.read() == {}
    cf.write(GOLDEN_ENTRIES)
    assert cf.read() == GOLDEN_ENTRIES
    assert cp_path.read_bytes() == GOLDEN_TEXT.encode()
    assert cf.lock_path == cp_path.with_name(CHECKPOINT_FILE_NAME + ".lock")
    assert CHECKPOINT_FILE_NAME in repr(cf)


def test_update_on_missing_file_creates_it(cp_path: Path) -> None:
    cf = CheckpointFile(cp_path)
    assert cf.update(add={("t", 0): 5}) == {("t", 0): 5}
    assert cp_path.read_text() == "0\n1\nt 0 5\n"
    assert cf.lock_path.exists()
    assert not cp_path.with_name(CHECKPOINT_FILE_NAME + ".tmp").exists()


def test_update_with_nothing_rewrites_same_content(cp_path: Path) -> None:
    cf = CheckpointFile(cp_path)
    cf.write(GOLDEN_ENTRIES)
    assert cf.update() == GOLDEN_ENTRIES
    assert cp_path.read_bytes() == GOLDEN_TEXT.encode()


def test_update_semantics(cp_path: Path) -> None:
    cf = CheckpointFile(cp_path)
    cf.write({("a", 0): 10, ("a", 1): 11, ("b", 0): 20, ("gone", 0): 30, ("gone", 1): 31})
    result = cf.update(
        # keep() runs first: partitions no longer in the pool are dropped ...
        keep=lambda tp: tp[0] != "gone",
        # ... then removals (a missing key is fine) ...
        remove=[("a", 1), ("never", 0), ("b", 0)],
        # ... then additions, which override and may re-add a removed key.
        add={("a", 0): 100, ("b", 0): 21, ("c", 3): 7},
    )
    expected = {("a", 0): 100, ("b", 0): 21, ("c", 3): 7}
    assert result == expected
    assert cf.read() == expected
    assert cp_path.read_text() == "0\n3\na 0 100\nb 0 21\nc 3 7\n"


def test_update_keep_sees_topic_partition_tuples(cp_path: Path) -> None:
    cf = CheckpointFile(cp_path)
    cf.write({("a", 0): 1, ("a", 1): 2})
    seen: list[tuple[str, int]] = []

    def keep(tp: tuple[str, int]) -> bool:
        seen.append(tp)
        return tp[1] == 1

    assert cf.update(keep=keep) == {("a", 1): 2}
    assert sorted(seen) == [("a", 0), ("a", 1)]


def test_update_remove_accepts_any_iterable(cp_path: Path) -> None:
    cf = CheckpointFile(cp_path)
    cf.write({("a", 0): 1, ("a", 1): 2, ("a", 2): 3})
    assert cf.update(remove=(("a", p) for p in (0, 2))) == {("a", 1): 2}


def test_update_normalises_numpy_offsets(cp_path: Path) -> None:
    cf = CheckpointFile(cp_path)
    result = cf.update(add={("t", 0): np.int64(8)})  # type: ignore[dict-item]
    assert result == {("t", 0): 8}
    assert all(type(v) is int for v in result.values())


def test_update_with_invalid_addition_changes_nothing(cp_path: Path) -> None:
    cf = CheckpointFile(cp_path)
    cf.write(GOLDEN_ENTRIES)
    with pytest.raises(CheckpointError):
        cf.update(remove=[("latest-product-price", 0)], add={("bad topic", 0): 1})
    assert cp_path.read_bytes() == GOLDEN_TEXT.encode()


def test_update_on_corrupt_file_raises_and_keeps_it(cp_path: Path) -> None:
    cp_path.write_text("0\n5\nt 0 1\n")
    cf = CheckpointFile(cp_path)
    with pytest.raises(CheckpointError, match="declares 5 entries"):
        cf.update(add={("t", 1): 2})
    assert cp_path.read_text() == "0\n5\nt 0 1\n"


def test_update_waits_for_the_file_lock(cp_path: Path) -> None:
    # Another process (here: another open file description, which flock treats the same way) holds the
    # lock: update must wait for it.
    cf = CheckpointFile(cp_path)
    fd = os.open(cf.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        done = threading.Event()

        def work() -> None:
            cf.update(add={("t", 0): 1})
            done.set()

        worker = threading.Thread(target=work)
        worker.start()
        assert not done.wait(0.3)
        assert not cp_path.exists()
        fcntl.flock(fd, fcntl.LOCK_UN)
        worker.join(10)
        assert done.is_set()
    finally:
        os.close(fd)
    assert cf.read() == {("t", 0): 1}


def test_concurrent_thread_updates_lose_nothing(cp_path: Path) -> None:
    cf = CheckpointFile(cp_path)
    errors: list[BaseException] = []

    def work(worker: int) -> None:
        try:
            for i in range(15):
                cf.update(add={(f"topic-{worker}", i): i})
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(w,)) for w in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert cf.read() == {(f"topic-{w}", i): i for w in range(6) for i in range(15)}


def _process_worker(path: str, worker: int, count: int) -> None:
    # A separate CheckpointFile object per process, as separate cleaner processes would have.
    cf = CheckpointFile(path)
    for i in range(count):
        cf.update(add={(f"proc-{worker}", i): i * 10})


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="needs fork")
def test_concurrent_process_updates_lose_nothing(cp_path: Path) -> None:
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_process_worker, args=(str(cp_path), w, 10)) for w in range(4)]
    start = time.monotonic()
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
    assert time.monotonic() - start < 60
    assert read_checkpoint(cp_path) == {(f"proc-{w}", i): i * 10 for w in range(4) for i in range(10)}


def test_opening_a_store_removes_the_tmp_of_a_write_killed_before_its_rename(tmp_path: Path) -> None:
    compactlog.open(str(tmp_path / "data")).close()
    stale = tmp_path / "data" / "cleaner-offset-checkpoint.tmp"
    stale.write_text("0\n1\nt 0 99\n")  # the fault point checkpoint.tmp-written: written, never renamed
    store = compactlog.open(str(tmp_path / "data"))
    assert not stale.exists()
    assert store.checkpoint.read() == {}
    store.close()


def test_opening_a_store_removes_the_tmp_files_of_killed_metadata_writes(tmp_path: Path) -> None:
    # A kill between the write of a topic's or a transactional id's state file and its rename leaves these.
    store = compactlog.open(str(tmp_path / "data"))
    store.create_topic("t")
    store.close()
    data = tmp_path / "data"
    stale = [data / ".topics" / ".0123abcd.tmp", data / ".transactions" / "x.json.0123abcd.tmp"]
    for path in stale:
        path.write_text("{}")
    store = compactlog.open(str(tmp_path / "data"))
    assert [p for p in stale if p.exists()] == []
    assert store.topics() == ["t"]
    store.close()
