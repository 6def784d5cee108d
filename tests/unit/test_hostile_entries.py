"""Hostile input through every public entry, table by table: the Python API (:data:`API_CASES`), the
configuration files (:data:`FILE_CASES`) and the command line (:data:`CLI_CASES`). Each must give a
``CompactLogError`` subclass with a message (a configuration file: its ``ConfigError``, message for message;
the CLI: exit code 1 or 2 and one line on stderr), never a traceback from inside pyarrow or the standard
library. With tests/unit/test_hostile_input.py (record timestamps, read
offsets and columns, long transactional ids) these are the hostile inputs the README counts."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import compactlog
from compactlog import CompactLogError, ConfigError
from compactlog.cli.main import main
from support import FakeClock

ROW = pa.table({"key": [b"k"], "value": [b"v"]})

API_CASES: dict[str, Callable[[compactlog.Store], Any]] = {
    "topic name with a space": lambda s: s.create_topic("bad name"),
    "topic name of 250 characters": lambda s: s.create_topic("x" * 250),
    "topic name not a string": lambda s: s.create_topic(7),  # type: ignore[arg-type]
    "zero partitions": lambda s: s.create_topic("n", partitions=0),
    "partitions as a string": lambda s: s.create_topic("n", partitions="3"),  # type: ignore[arg-type]
    "unknown topic config": lambda s: s.create_topic("n", config={"no.such.config": 1}),
    "negative segment.bytes": lambda s: s.create_topic("n", config={"segment.bytes": -5}),
    "segment.bytes not a number": lambda s: s.create_topic("n", config={"segment.bytes": "lots"}),
    "unknown cleanup.policy": lambda s: s.create_topic("n", config={"cleanup.policy": "shred"}),
    "config not a mapping": lambda s: s.create_topic("n", config=[("segment.bytes", 1)]),  # type: ignore[arg-type]
    "topic created twice": lambda s: s.create_topic("t"),
    "dirty ratio above 1": lambda s: s.alter_topic_config("t", {"min.cleanable.dirty.ratio": 2}),
    "alter of an unknown topic": lambda s: s.alter_topic_config("nope", {"segment.bytes": 4096}),
    "delete of an unknown topic": lambda s: s.delete_topic("nope"),
    "append an integer key": lambda s: s.append("t", 0, pa.table({"key": [1], "value": [b"v"]})),
    "append without a key column": lambda s: s.append("t", 0, pa.table({"value": [b"v"]})),
    "append a string, not a table": lambda s: s.append("t", 0, "key,value"),  # type: ignore[arg-type]
    "append a keyless record to a compacted topic": lambda s: s.append(
        "t", 0, pa.table({"key": pa.array([None], pa.binary()), "value": [b"v"]})),
    "append to partition 5 of 1": lambda s: s.append("t", 5, ROW),
    "append to partition -1": lambda s: s.append("t", -1, ROW),
    "append to an unknown topic": lambda s: s.append("nope", 0, ROW),
    "append with a string producer id": lambda s: s.append("t", 0, ROW, producer_id="7"),  # type: ignore[arg-type]
    "append with epoch 2**15": lambda s: s.append("t", 0, ROW, producer_id=1, producer_epoch=2**15),
    "append with sequence -1": lambda s: s.append("t", 0, ROW, producer_id=1, base_sequence=-1),
    "producer with a negative batch size": lambda s: s.producer(batch_size=-1),
    "producer with linger 'soon'": lambda s: s.producer(linger_ms="soon"),
    "producer with an unknown config": lambda s: s.producer(no_such_config=1),
    "send a str key": lambda s: s.producer().send("t", key="k", value=b"v"),  # type: ignore[arg-type]
    "send an int value": lambda s: s.producer().send("t", key=b"k", value=5),  # type: ignore[arg-type]
    "send to partition 9": lambda s: s.producer().send("t", key=b"k", value=b"v", partition=9),
    "send headers as a string": lambda s: s.producer().send("t", key=b"k", value=b"v",
                                                            headers="h"),  # type: ignore[arg-type]
    "commit without a transaction": lambda s: s.producer(transactional_id="x").commit_transaction(),
    "read with isolation 'dirty'": lambda s: list(s.read("t", 0, isolation_level="dirty")),
    "read from offset -1": lambda s: list(s.read("t", 0, -1)),
    "read past the log end": lambda s: list(s.read("t", 0, 99)),
    "read partition 'zero'": lambda s: list(s.read("t", "zero")),  # type: ignore[arg-type]
    "offset for time 'yesterday'": lambda s: s.offset_for_time("t", 0, "yesterday"),  # type: ignore[arg-type]
    "roll partition 3 of 1": lambda s: s.roll("t", 3),
    "clean with executor 'sparky'": lambda s: s.clean(executor="sparky"),
    "describe an unknown topic": lambda s: s.describe("nope"),
}

# server.properties contents, each refused when the store opens: a ConfigError whose message is
# "<path>/server.properties: " and then this (a value dropped or clamped, with the store opening, fails).
FILE_CASES: dict[str, tuple[bytes, str]] = {
    "non-UTF-8 bytes": (b"log.segment.bytes=\xff\xfe\n",
                        "'utf-8' codec can't decode byte 0xff in position 18: invalid start byte"),
    "a value that is not a number": (b"log.segment.bytes=abc\n",
                                     "log.segment.bytes: 'abc' is not an integer; allowed: an integer in "
                                     "[14, 2147483647]"),
    "a negative thread count": (b"log.cleaner.threads=-1\n",
                                "log.cleaner.threads: -1 is out of range; allowed: an integer in [1, 2147483647]"),
    "a ratio above 1": (b"log.cleaner.min.cleanable.ratio=7\n",
                        "log.cleaner.min.cleanable.ratio: 7.0 is out of range; allowed: a number in [0.0, 1.0]"),
    # java.util.Properties reads "just some words" as the key "just" with the value "some words"
    "a line without '='": (b"just some words\n", "unknown broker config 'just'; known: log.cleanup.policy, "),
    "an unknown cleanup policy": (b"log.cleanup.policy=shred\n",
                                  "log.cleanup.policy: 'shred' is not allowed; allowed: a non-empty "
                                  "comma-separated list of delete, compact"),
    "a value of 2**70": (b"log.segment.bytes=1180591620717411303424\n",
                         "log.segment.bytes: 1180591620717411303424 is out of range; allowed: an integer in "
                         "[14, 2147483647]"),
    "a NUL byte": (b"log.segment.bytes=10\x0024\n",
                   "log.segment.bytes: '10\\x0024' is not an integer; allowed: an integer in [14, 2147483647]"),
}

CLI_CASES: dict[str, list[str]] = {
    "create with 0 partitions": ["topics", "create", "x", "--partitions", "0"],
    "create with partitions 'two'": ["topics", "create", "x", "--partitions", "two"],
    "create a bad name": ["topics", "create", "bad name"],
    "create with a config without '='": ["topics", "create", "x", "--config", "segment.bytes"],
    "create with an unknown config": ["topics", "create", "x", "--config", "no.such=1"],
    "create with segment.bytes=-1": ["topics", "create", "x", "--config", "segment.bytes=-1"],
    "describe an unknown topic": ["topics", "describe", "nope"],
    "alter with a bad value": ["topics", "alter", "t", "--config", "min.cleanable.dirty.ratio=2"],
    "alter with nothing": ["topics", "alter", "t"],
    "delete an unknown topic": ["topics", "delete", "nope"],
    "consume an unknown topic": ["consume", "--topic", "nope"],
    "consume partition 9": ["consume", "--topic", "t", "--partition", "9"],
    "consume from an offset without a partition": ["consume", "--topic", "t", "--offset", "5"],
    "consume from offset 999": ["consume", "--topic", "t", "--partition", "0", "--offset", "999"],
    "consume from offset -3": ["consume", "--topic", "t", "--partition", "0", "--offset", "-3"],
    "consume 'all' messages": ["consume", "--topic", "t", "--max-messages", "all"],
    "produce to partition 7": ["produce", "--topic", "t", "--partition", "7"],
    "produce keyless lines to a compacted topic": ["produce", "--topic", "t", "--no-key"],
    "produce with an empty key separator": ["produce", "--topic", "t", "--key-separator", ""],
    "clean an unknown topic": ["clean", "--topic", "nope", "--in-process"],
    "clean a partition without a topic": ["clean", "--partition", "0", "--in-process"],
    "an unknown command": ["shred"],
}
# Command lines that cannot run as given: exit 2, the command's usage then the error. The others run and
# fail: exit 1, one line.
USAGE_ERRORS = {"create with partitions 'two'", "create with a config without '='", "alter with nothing",
                "consume from an offset without a partition", "consume from offset -3", "consume 'all' messages",
                "produce with an empty key separator", "clean a partition without a topic", "an unknown command"}


@pytest.fixture
def store(tmp_path: Path) -> Iterator[compactlog.Store]:
    with compactlog.open(tmp_path / "data", clock=FakeClock()) as store:
        store.create_topic("t", config={"cleanup.policy": "compact"})
        yield store


@pytest.mark.parametrize("case", API_CASES)
def test_hostile_api_input_is_a_compact_log_error(store: compactlog.Store, case: str) -> None:
    with pytest.raises(CompactLogError) as raised:
        API_CASES[case](store)
    assert str(raised.value).strip()


@pytest.mark.parametrize("case", FILE_CASES)
def test_a_hostile_server_properties_is_refused_with_its_error(tmp_path: Path, case: str) -> None:
    data = tmp_path / "data"
    compactlog.open(data).close()
    content, error = FILE_CASES[case]
    (data / "server.properties").write_bytes(content)
    with pytest.raises(ConfigError) as raised:
        compactlog.open(data).close()
    assert str(raised.value).startswith(f"{data / 'server.properties'}: {error}")


@pytest.mark.parametrize("case", CLI_CASES)
def test_hostile_command_line_input_exits_1_or_2_with_one_error_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], case: str) -> None:
    monkeypatch.setenv("COMPACTLOG_DATA_DIR", str(tmp_path / "data"))
    with compactlog.open(tmp_path / "data") as store:
        store.create_topic("t", config={"cleanup.policy": "compact"})
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"a:b\nkeyless\n")))
    code = main(CLI_CASES[case])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    if case in USAGE_ERRORS:
        assert code == 2 and len(lines) == 2 and lines[0].startswith("usage: compactlog"), err
    else:
        assert code == 1 and len(lines) == 1, err
    assert lines[-1].startswith("compactlog"), err
