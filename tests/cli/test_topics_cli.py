"""The ``compactlog`` command as a user types it: the installed entry point in a child process, for the global
options (``--data-dir`` before or after the command, ``$COMPACTLOG_DATA_DIR``, ``./data``, ``--version``), exit
codes and one-line errors, ``topics`` (``--topic``, ``describe --all`` and ``--json``) and ``roll``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import compactlog

pytestmark = pytest.mark.timeout(300)

COMPACTLOG = os.path.join(os.path.dirname(sys.executable), "compactlog")  # the installed entry point
CHILD_TIMEOUT_S = 120


def cli(*argv: str, cwd: Path, data_dir_env: str | None = None, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """Run ``compactlog ARGV...`` in ``cwd`` as a shell would, ``$COMPACTLOG_DATA_DIR`` set only when given."""
    if not os.access(COMPACTLOG, os.X_OK):
        pytest.fail(f"the compactlog entry point is not installed beside {sys.executable}")
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "VIRTUAL_ENV", "COMPACTLOG_DATA_DIR")}
    if data_dir_env is not None:
        env["COMPACTLOG_DATA_DIR"] = data_dir_env
    return subprocess.run([COMPACTLOG, *argv], cwd=cwd, env=env, input=stdin, capture_output=True, text=True,
                          timeout=CHILD_TIMEOUT_S)


def ok(run: subprocess.CompletedProcess[str]) -> str:
    assert run.returncode == 0, run.stderr
    return run.stdout


def describe_json(tmp_path: Path, data: str, topic: str) -> dict[str, Any]:
    return dict(json.loads(ok(cli("topics", "describe", "--topic", topic, "--json", "--data-dir", data,
                                  cwd=tmp_path))))


def test_version_prints_the_package_version(tmp_path: Path) -> None:
    assert ok(cli("--version", cwd=tmp_path)) == f"compactlog {compactlog.__version__}\n"


def test_the_data_directory_before_or_after_the_command_else_the_environment_else_dot_data(tmp_path: Path) -> None:
    data, other = str(tmp_path / "d"), str(tmp_path / "other")

    created = cli("--data-dir", data, "topics", "create", "--topic", "t", "--config", "cleanup.policy=compact",
                  cwd=tmp_path)
    assert ok(created) == "Created topic t.\n"
    assert ok(cli("topics", "create", "t2", "--data-dir", data, "--partitions", "2", cwd=tmp_path)) == (
        "Created topic t2.\n")
    assert ok(cli("topics", "list", cwd=tmp_path, data_dir_env=data)) == "t\nt2\n"
    ok(cli("topics", "create", "--topic", "elsewhere", cwd=tmp_path, data_dir_env=other))
    # An explicit --data-dir, before or after the command, wins over the environment.
    assert ok(cli("topics", "list", "--data-dir", data, cwd=tmp_path, data_dir_env=other)) == "t\nt2\n"
    assert ok(cli("--data-dir", data, "topics", "list", cwd=tmp_path, data_dir_env=other)) == "t\nt2\n"
    # Neither: ./data of the working directory.
    assert ok(cli("topics", "create", "--topic", "here", cwd=tmp_path)) == "Created topic here.\n"
    with compactlog.open(tmp_path / "data") as store:
        assert store.topics() == ["here"]
    with compactlog.open(data) as store:
        assert store.partitions("t2") == 2 and store.topic_config("t").compact


def test_failures_exit_1_and_usage_errors_exit_2_each_in_one_line_never_a_traceback(tmp_path: Path) -> None:
    data = str(tmp_path / "d")
    ok(cli("topics", "create", "--topic", "t", "--data-dir", data, cwd=tmp_path))

    unknown = cli("topics", "describe", "--topic", "nope", "--data-dir", data, cwd=tmp_path)
    assert unknown.returncode == 1 and unknown.stdout == ""
    assert unknown.stderr.splitlines() == [f"compactlog: UnknownTopicOrPartitionError: unknown topic 'nope' in {data}"]

    missing = cli("--data-dir", str(tmp_path / "typo"), "topics", "list", cwd=tmp_path)
    assert missing.returncode == 1 and not (tmp_path / "typo").exists()
    assert missing.stderr.splitlines() == [f"compactlog: DataDirectoryError: data directory "
                                           f"'{tmp_path / 'typo'}' does not exist (use --data-dir or "
                                           "$COMPACTLOG_DATA_DIR)"]

    no_topic = cli("topics", "create", "--data-dir", data, cwd=tmp_path)
    usage, error = no_topic.stderr.splitlines()
    assert no_topic.returncode == 2
    assert usage.startswith("usage: compactlog topics create [-h] [--data-dir DIR] [--topic TOPIC]")
    assert error == "compactlog topics create: error: the topic is required: --topic TOPIC"

    bad_int = cli("roll", "--topic", "t", "--partition", "one", "--data-dir", data, cwd=tmp_path)
    usage, error = bad_int.stderr.splitlines()
    assert bad_int.returncode == 2 and usage.startswith("usage: compactlog roll ")
    assert error == "compactlog roll: error: argument --partition: invalid int value: 'one'"

    unknown_command = cli("topic", "list", cwd=tmp_path)
    assert unknown_command.returncode == 2 and len(unknown_command.stderr.splitlines()) == 2

    # An error that is not compactlog's own: still one line with its type, exit 1.
    os.rename(os.path.join(data, ".topics"), os.path.join(data, "topics-moved"))
    Path(data, ".topics").write_text("not a directory")
    unexpected = cli("topics", "list", "--data-dir", data, cwd=tmp_path)
    assert unexpected.returncode == 1
    assert unexpected.stderr.splitlines() == [
        f"compactlog: NotADirectoryError: [Errno 20] Not a directory: '{data}/.topics/.lock'"]


def test_a_reader_that_closed_the_pipe_is_no_error(tmp_path: Path) -> None:
    """``compactlog topics describe --all | head -0``: output to a closed pipe, more than a write buffer, ends
    the command quietly with exit 0."""
    data = str(tmp_path / "d")
    with compactlog.open(data) as store:
        for number in range(40):  # each topic's --all description is over a kilobyte
            store.create_topic(f"t{number}")
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "VIRTUAL_ENV")}
        done = subprocess.run([COMPACTLOG, "topics", "describe", "--all", "--data-dir", data], cwd=tmp_path,
                              env=env, stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=CHILD_TIMEOUT_S)
    finally:
        os.close(write_end)
    assert (done.returncode, done.stderr) == (0, "")


def test_describe_all_shows_every_config_with_its_source_and_json_carries_the_same(tmp_path: Path) -> None:
    data = str(tmp_path / "d")
    ok(cli("topics", "create", "--topic", "t", "--config", "cleanup.policy=compact",
           "--config", "segment.bytes=1073741824", "--data-dir", data, cwd=tmp_path))  # equal to the default
    ok(cli("topics", "create", "u", "--data-dir", data, cwd=tmp_path))  # the name given positionally
    Path(data, "server.properties").write_text("log.retention.hours=1\n")

    out = ok(cli("topics", "describe", "t", "--all", "--data-dir", data, cwd=tmp_path)).splitlines()
    assert not any(line.startswith("Topic: u") for line in out)  # only the topic named

    assert out[0] == "Topic: t\tPartitionCount: 1\tConfigs: cleanup.policy=compact,segment.bytes=1073741824"
    assert out[2] == "All configs for topic t are:"
    configs = out[3:]
    assert "  cleanup.policy=compact source=topic synonyms={topic:cleanup.policy=compact, " \
           "default:log.cleanup.policy=delete}" in configs
    assert "  segment.bytes=1073741824 source=topic synonyms={topic:segment.bytes=1073741824, " \
           "default:log.segment.bytes=1073741824}" in configs
    assert "  retention.ms=3600000 source=data-directory synonyms={data-directory:log.retention.hours=1, " \
           "default:log.retention.hours=168}" in configs
    assert "  min.compaction.lag.ms=0 source=default synonyms={default:log.cleaner.min.compaction.lag.ms=0}" \
           in configs
    assert len(configs) == 13  # every topic config once

    described = json.loads(ok(cli("topics", "describe", "--topic", "t", "--all", "--json", "--data-dir", data,
                                  cwd=tmp_path)))
    assert described["configs"] == {"cleanup.policy": "compact", "segment.bytes": 1073741824}
    sources = {c["name"]: (c["value"], c["source"]) for c in described["all_configs"]}
    assert sources["retention.ms"] == (3600000, "data-directory")
    assert sources["segment.bytes"] == (1073741824, "topic")
    assert sources["delete.retention.ms"] == (86400000, "default")
    partition = described["partitions"][0]
    assert partition["cleanability"]["cleanable"] is False
    assert partition["cleanability"]["reason"] == "empty_log"


def test_roll_seals_the_active_segment_and_describe_then_shows_the_partition_cleanable(tmp_path: Path) -> None:
    data = str(tmp_path / "d")
    ok(cli("--data-dir", data, "topics", "create", "--topic", "t", "--partitions", "2",
           "--config", "cleanup.policy=compact", cwd=tmp_path))
    ok(cli("produce", "--topic", "t", "--partition", "0", "--data-dir", data, stdin="a:1\na:2\nb:1\n", cwd=tmp_path))

    before = describe_json(tmp_path, data, "t")
    p0, p1 = before["partitions"]
    assert [s["active"] for s in p0["segments"]] == [True]
    assert p0["cleanability"]["cleanable"] is False and p0["cleanability"]["reason"] == "active_segment"
    assert p0["cleanability"]["uncleanable_bytes"] == p0["size_bytes"] > 0
    assert p1["cleanability"]["reason"] == "empty_log"
    text = ok(cli("topics", "describe", "t", "--data-dir", data, cwd=tmp_path))
    assert "\tCleanable: no (active segment only: the dirty records 0..2 are all in the active segment" in text

    rolled = ok(cli("roll", "--topic", "t", "--data-dir", data, cwd=tmp_path)).splitlines()

    assert rolled[0].startswith("t-0: sealed segment 0 (offsets 0..2, 3 records, ")
    assert rolled[0].endswith("); the active segment now starts at 3.")
    assert rolled[1] == "t-1: active segment 0 is empty; nothing to seal."
    after = describe_json(tmp_path, data, "t")["partitions"][0]
    sealed, active = after["segments"]
    assert (sealed["base_offset"], sealed["record_count"], sealed["active"]) == (0, 3, False)
    assert (active["base_offset"], active["record_count"], active["active"]) == (3, 0, True)
    answer = after["cleanability"]
    assert (answer["cleanable"], answer["reason"]) == (True, "dirty_ratio")
    assert (answer["clean_bytes"], answer["dirty_bytes"], answer["uncleanable_bytes"]) == (0, sealed["size_bytes"], 0)
    assert "\tCleanable: yes (dirty ratio 1.00 > min.cleanable.dirty.ratio 0.50)" in ok(
        cli("topics", "describe", "t", "--data-dir", data, cwd=tmp_path))

    ok(cli("clean", "--in-process", "--topic", "t", "--data-dir", data, cwd=tmp_path))
    cleaned = describe_json(tmp_path, data, "t")["partitions"][0]["cleanability"]
    assert (cleaned["cleanable"], cleaned["reason"], cleaned["first_dirty_offset"]) == (False, "nothing_dirty", 3)

    beyond = cli("roll", "t", "--partition", "5", "--data-dir", data, cwd=tmp_path)
    assert beyond.returncode == 1
    assert beyond.stderr.startswith("compactlog: UnknownTopicOrPartitionError: topic 't' has partitions 0..1")
