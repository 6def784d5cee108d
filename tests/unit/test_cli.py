"""The ``compactlog`` command line, in process (``--in-process``; the Spark default is in tests/spark)."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest

import compactlog
from compactlog.cli.main import main


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def produce(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], data: str,
            *argv: str) -> int:
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(data.encode())))
    code, _, _ = run(capsys, "produce", *argv)
    return code


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> str:
    """A data directory with topic ``users`` (compacted, 2 partitions, tiny segments); also the default
    through $COMPACTLOG_DATA_DIR."""
    path = str(tmp_path / "data")
    monkeypatch.setenv("COMPACTLOG_DATA_DIR", path)
    code, out, _ = run(capsys, "topics", "create", "users", "--partitions", "2",
                       "--config", "cleanup.policy=compact", "--config", "segment.bytes=200",
                       "--config", "min.cleanable.dirty.ratio=0.01")
    assert code == 0 and out == "Created topic users.\n"
    return path


def test_topics_list_and_describe(data_dir: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "topics", "list") == (0, "users\n", "")
    code, out, _ = run(capsys, "topics", "describe", "users", "--segments")
    assert code == 0
    assert out.splitlines()[0] == ("Topic: users\tPartitionCount: 2\tConfigs: cleanup.policy=compact,"
                                   "min.cleanable.dirty.ratio=0.01,segment.bytes=200")
    assert "\tPartition: 1\tLogStart: 0\tLogEnd: 0\t" in out
    assert "\t\tSegment: 0\tRecords: 0" in out and "(active)" in out


def test_produce_consume_and_the_latest_view(data_dir: str, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    lines = "a:1\nb:1\na:2\nb:NULL\nc:x:y\n"
    code = produce(monkeypatch, capsys, lines, "--topic", "users", "--partition", "0",
                   "--null-marker", "NULL")
    assert code == 0

    keys = ("--property", "print.key=true", "--key-separator", ":")
    code, out, _ = run(capsys, "consume", "--topic", "users", "--from-beginning", "--property", "print.offset=true",
                       *keys)
    assert code == 0
    assert out == "Offset:0:a:1\nOffset:1:b:1\nOffset:2:a:2\nOffset:3:b:null\nOffset:4:c:x:y\n"
    assert run(capsys, "consume", "--topic", "users", "--latest", *keys)[1] == "a:2\nc:x:y\n"
    assert run(capsys, "consume", "--topic", "users", "--partition", "0", "--offset", "2",
               "--max-messages", "2", *keys)[1] == "a:2\nb:null\n"


def test_produce_partitions_keys_like_kafka(data_dir: str, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert produce(monkeypatch, capsys, "".join(f"k{i}:v{i}\n" for i in range(20)), "--topic", "users") == 0
    with compactlog.open(data_dir) as store:
        counts = [store.log_end_offset("users", p) for p in range(2)]
    assert sum(counts) == 20 and all(counts)


def test_clean_in_process_reports_cleaned_and_skipped_partitions(
        data_dir: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    produce(monkeypatch, capsys, "a:1\na:2\na:3\nb:1\n", "--topic", "users", "--partition", "0")

    code, out, _ = run(capsys, "clean", "--in-process")

    assert code == 0
    assert out.startswith("Cleaner pass (in process): 1 partition(s) cleaned, 1 skipped\n")
    assert "  cleaned users-0: dirty offsets [0, 3) read 3 records" in out
    assert "  skipped users-1: empty log" in out
    assert run(capsys, "consume", "--topic", "users", "--from-beginning", "--property", "print.key=true",
               "--key-separator", ":")[1] == "a:3\nb:1\n"


def test_clean_json(data_dir: str, monkeypatch: pytest.MonkeyPatch,
                    capsys: pytest.CaptureFixture[str]) -> None:
    produce(monkeypatch, capsys, "a:1\na:2\nb:1\n", "--topic", "users", "--partition", "1")

    code, out, _ = run(capsys, "clean", "--in-process", "--json", "--topic", "users", "--partition", "1")

    report = json.loads(out)
    assert code == 0
    cleaned = [(p["topic"], p["partition"], p["records_written"]) for p in report["cleaned"]]
    assert cleaned == [("users", 1, 1)]
    assert report["skipped"] == []


def test_a_partition_left_uncleanable_exits_1(data_dir: str, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    produce(monkeypatch, capsys, "a:1\na:2\nb:1\n", "--topic", "users", "--partition", "0")
    directory = os.path.join(data_dir, "users-0")
    segment = sorted(n for n in os.listdir(directory) if n.endswith(".parquet"))[0]
    with open(os.path.join(directory, segment), "r+b") as f:
        f.write(b"\0" * 64)

    code, out, _ = run(capsys, "clean", "--in-process")

    assert code == 1
    assert "  skipped users-0: uncleanable: " in out


@pytest.mark.parametrize(("argv", "message"), [
    (["topics", "describe", "nope"], "compactlog: UnknownTopicOrPartitionError: unknown topic 'nope'"),
    (["topics", "create", "users"], "compactlog: TopicExistsError: topic 'users' already exists"),
    (["topics", "create", "t2", "--config", "segment.bytes=1"],
     "compactlog: ConfigError: segment.bytes: 1 is out of range"),
    (["clean", "--topic", "nope", "--in-process"], "compactlog: UnknownTopicOrPartitionError: unknown topic"),
    (["consume", "--topic", "users", "--partition", "0", "--offset", "3"], "compactlog: OffsetOutOfRangeError: "),
    (["roll", "--topic", "nope"], "compactlog: UnknownTopicOrPartitionError: unknown topic 'nope'"),
])
def test_failures_go_to_stderr_in_one_line_with_exit_code_1(data_dir: str, capsys: pytest.CaptureFixture[str],
                                                            argv: list[str], message: str) -> None:
    code, out, err = run(capsys, *argv)
    assert code == 1
    assert err.startswith(message) and err.count("\n") == 1
    assert out == ""


@pytest.mark.parametrize(("argv", "message"), [
    (["topics", "create", "t3", "--config", "segment.bytes"], "compactlog topics create: error: --config takes"),
    (["clean", "--partition", "0", "--in-process"], "compactlog clean: error: --partition needs --topic"),
    (["consume", "--topic", "users", "--offset", "3"], "compactlog consume: error: --offset needs --partition"),
    (["topics", "alter", "users"], "compactlog topics alter: error: nothing to alter"),
    (["topics", "delete"], "compactlog topics delete: error: the topic is required: --topic TOPIC"),
    (["topics", "delete", "users", "--topic", "other"], "compactlog topics delete: error: two topics given"),
    (["roll", "--topic", "users", "--partition", "x"], "compactlog roll: error: argument --partition: invalid int"),
])
def test_usage_errors_show_the_commands_usage_with_exit_code_2(
        data_dir: str, capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    code, out, err = run(capsys, *argv)
    usage, error = err.splitlines()
    assert code == 2
    assert usage.startswith(f"usage: compactlog {argv[0]}")
    assert error.startswith(message)
    assert out == ""


def test_a_missing_data_directory_is_not_created(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = str(tmp_path / "missing")
    code, _, err = run(capsys, "topics", "list", "--data-dir", missing)
    assert code == 1 and "DataDirectoryError: data directory" in err and "does not exist" in err
    assert not os.path.exists(missing)


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert main(["clean", "--in-process", "--spark-master", "local[1]"]) == 2  # mutually exclusive
    assert main(["--help"]) == 0
    capsys.readouterr()


def test_alter_and_delete(data_dir: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "topics", "alter", "users", "--config", "delete.retention.ms=5",
               "--delete-config", "segment.bytes")[0] == 0
    described = json.loads(run(capsys, "topics", "describe", "users", "--json")[1])
    assert described["configs"] == {"cleanup.policy": "compact", "delete.retention.ms": 5,
                                    "min.cleanable.dirty.ratio": 0.01}
    assert run(capsys, "topics", "delete", "users") == (0, "Deleted topic users.\n", "")
    assert run(capsys, "topics", "list") == (0, "", "")


@pytest.mark.parametrize(("raised", "code", "message"), [
    (KeyError("k"), 1, "compactlog: KeyError: 'k'\n"),
    (RuntimeError("two\nlines"), 1, "compactlog: RuntimeError: two lines\n"),
    (KeyboardInterrupt(), 130, "compactlog: interrupted\n"),
])
def test_an_unexpected_exception_is_one_line_never_a_traceback(
        data_dir: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        raised: BaseException, code: int, message: str) -> None:
    def fail(args: object) -> int:
        raise raised

    monkeypatch.setattr("compactlog.cli.topics.run_list", fail)
    assert run(capsys, "topics", "list") == (code, "", message)
