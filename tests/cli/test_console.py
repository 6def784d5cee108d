"""``compactlog produce`` and ``compactlog consume`` end to end, as a user types them: the installed console
script in a child process, on a data directory written (where the test needs exact timestamps, open
transactions or volume) through the Python API on a fake clock."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import signal
import struct
import subprocess
import sys
import termios
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import compactlog
from support import FakeClock

COMPACTLOG = str(Path(sys.executable).with_name("compactlog"))
NOW = 1_700_000_000_000
WAIT_S = 60  # the longest a test waits on a child's output before it fails


@pytest.fixture
def data(tmp_path: Path) -> Path:
    """A data directory with ``t`` (compacted, one partition) and ``two`` (two partitions)."""
    path = tmp_path / "data"
    with compactlog.open(path) as store:
        store.create_topic("t", 1, {"cleanup.policy": "compact"})
        store.create_topic("two", 2)
    return path


def env(data: Path) -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "VIRTUAL_ENV")}
    environ["COMPACTLOG_DATA_DIR"] = str(data)
    return environ


def cli(data: Path, *argv: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([COMPACTLOG, *argv], input=stdin, capture_output=True, env=env(data), timeout=WAIT_S)


def consumed(data: Path, *argv: str) -> list[str]:
    done = cli(data, "consume", *argv)
    assert done.returncode == 0, done.stderr
    return done.stdout.decode().splitlines()


def stored(data: Path, topic: str = "t", partition: int = 0) -> list[tuple[bytes | None, bytes | None, list]]:
    with compactlog.open(data) as store:
        return [(r.key, r.value, r.headers) for r in store.read(topic, partition)]


def test_produce_parses_keys_and_makes_the_null_marker_a_tombstone(data: Path) -> None:
    done = cli(data, "produce", "--topic", "t", "--property", "parse.key=true", "--property", "null.marker=NULL",
               stdin=b"a:1\nb:x:y\r\na:NULL")  # CRLF, and a last line without an ending
    assert done.returncode == 0, done.stderr
    assert done.stderr == b"Produced 3 record(s) to t.\n"
    assert stored(data) == [(b"a", b"1", []), (b"b", b"x:y", []), (b"a", None, [])]
    # a null key is refused by a compacted topic: that line is bad, the three before it are kept
    done = cli(data, "produce", "--topic", "t", "--property", "null.marker=NULL", stdin=b"NULL:v\n")
    assert done.returncode == 1 and b"line 1: " in done.stderr and b"the 0 record(s) before it" in done.stderr


def test_produce_parses_headers(data: Path) -> None:
    lines = b"h1:v1,h2:NULL\tk:v\nNULL\tk2:v2\n"
    done = cli(data, "produce", "--topic", "t", "--property", "parse.headers=true", "--property", "null.marker=NULL",
               stdin=lines)
    assert done.returncode == 0, done.stderr
    assert stored(data) == [(b"k", b"v", [("h1", b"v1"), ("h2", None)]), (b"k2", b"v2", [])]
    custom = ["--property", "parse.headers=true", "--property", "headers.delimiter=|", "--property",
              "headers.separator=;", "--property", "headers.key.separator==", "--property", "key.separator=\\t"]
    assert cli(data, "produce", "--topic", "t", *custom, stdin=b"a=1;b=2|k3\tv|3\n").returncode == 0
    assert stored(data)[2] == (b"k3", b"v|3", [("a", b"1"), ("b", b"2")])
    assert consumed(data, "--topic", "t", "--from-beginning", "--property", "print.headers=true") == [
        "h1:v1,h2:null\tv", "NO_HEADERS\tv2", "a:1,b:2\tv|3"]


def test_a_bad_line_stops_the_command_with_its_number_and_what_was_made_durable(data: Path) -> None:
    done = cli(data, "produce", "--topic", "t", stdin=b"a:1\nb:2\nno separator\nc:3\n")

    assert done.returncode == 1
    assert done.stdout == b""
    assert done.stderr == (b"compactlog produce: line 3: no key separator ':' in 'no separator'; stopped there: "
                           b"the 2 record(s) before it were produced and are durable\n")
    assert stored(data) == [(b"a", b"1", []), (b"b", b"2", [])]  # and nothing after the bad line


def test_unknown_properties_and_bad_booleans_are_usage_errors(data: Path) -> None:
    for command in ("produce", "consume"):
        done = cli(data, command, "--topic", "t", "--property", "print.kye=true")
        assert done.returncode == 2 and b"unknown property 'print.kye'" in done.stderr
        usage, error = done.stderr.decode().splitlines()  # the command's usage line, then the one-line error
        assert usage.startswith(f"usage: compactlog {command} ") and "unknown property" in error
    done = cli(data, "consume", "--topic", "t", "--property", "print.key=yes")
    assert done.returncode == 2 and b"'yes' is not a boolean" in done.stderr


@pytest.fixture
def written(data: Path) -> Path:
    """``two``: partition 1 holds a:1 (header h:x), a keyless record, b:null, all at NOW; ``appended``
    (LogAppendTime) one record."""
    with compactlog.open(data, clock=FakeClock(NOW)) as store, store.producer() as producer:
        producer.send("two", b"a", b"1", headers=[("h", b"x")], partition=1)
        producer.send("two", None, b"keyless", partition=1)
        producer.send("two", b"b", None, partition=1)
        store.create_topic("appended", 1, {"message.timestamp.type": "LogAppendTime"})
        producer.send("appended", b"k", b"v", timestamp=5)
    return data


@pytest.mark.parametrize(("prop", "lines"), [
    (None, ["1", "keyless", "null"]),
    ("print.timestamp", [f"CreateTime:{NOW}\t1", f"CreateTime:{NOW}\tkeyless", f"CreateTime:{NOW}\tnull"]),
    ("print.partition", ["Partition:1\t1", "Partition:1\tkeyless", "Partition:1\tnull"]),
    ("print.offset", ["Offset:0\t1", "Offset:1\tkeyless", "Offset:2\tnull"]),
    ("print.headers", ["h:x\t1", "NO_HEADERS\tkeyless", "NO_HEADERS\tnull"]),
    ("print.key", ["a\t1", "null\tkeyless", "b\tnull"]),
])
def test_consume_prints_each_field_its_property_asks_for(written: Path, prop: str | None, lines: list[str]) -> None:
    argv = ["--topic", "two", "--from-beginning"] + (["--property", f"{prop}=true"] if prop else [])
    assert consumed(written, *argv) == lines


def test_consume_prints_every_field_in_kafkas_order_with_its_separators(written: Path) -> None:
    every = [arg for field in ("timestamp", "partition", "offset", "headers", "key")
             for arg in ("--property", f"print.{field}=true")]
    assert consumed(written, "--topic", "two", "--offset", "earliest", *every, "--property", "key.separator=|",
                    "--property", "null.literal=-") == [f"CreateTime:{NOW}|Partition:1|Offset:0|h:x|a|1",
                                                        f"CreateTime:{NOW}|Partition:1|Offset:1|NO_HEADERS|-|keyless",
                                                        f"CreateTime:{NOW}|Partition:1|Offset:2|NO_HEADERS|b|-"]
    assert consumed(written, "--topic", "appended", "--from-beginning", "--property", "print.timestamp=true") == [
        f"LogAppendTime:{NOW}\tv"]


def test_consume_starts_at_the_log_end_unless_told_where(written: Path) -> None:
    done = cli(written, "consume", "--topic", "two")
    assert (done.returncode, done.stdout, done.stderr) == (0, b"", b"Processed a total of 0 messages\n")
    assert consumed(written, "--topic", "two", "--offset", "latest") == []
    assert consumed(written, "--topic", "two", "--offset", "earliest", "--max-messages", "2") == ["1", "keyless"]
    assert consumed(written, "--topic", "two", "--partition", "1", "--offset", "1") == ["keyless", "null"]
    assert consumed(written, "--topic", "two", "--partition", "1", "--offset", "3") == []  # the log end
    done = cli(written, "consume", "--topic", "two", "--partition", "1", "--offset", "4")
    assert done.returncode != 0 and b"OffsetOutOfRangeError" in done.stderr
    done = cli(written, "consume", "--topic", "two", "--offset", "1")
    assert done.returncode == 2 and b"--offset needs --partition" in done.stderr


def test_read_committed_stops_at_an_open_transaction_and_hides_aborted_records(data: Path) -> None:
    with compactlog.open(data) as store:
        with store.producer(transactional_id="aborts") as txn:
            txn.begin_transaction()
            txn.send("t", b"x", b"aborted")
            txn.flush()
            txn.abort_transaction()
        with store.producer() as plain:
            plain.send("t", b"a", b"committed")
        txn = store.producer(transactional_id="stays-open")
        txn.begin_transaction()
        txn.send("t", b"y", b"open")
        txn.flush()
        with store.producer() as plain:
            plain.send("t", b"b", b"after the open transaction")

        committed = consumed(data, "--topic", "t", "--from-beginning", "--isolation-level", "read_committed")
        uncommitted = consumed(data, "--topic", "t", "--from-beginning", "--isolation-level", "read_uncommitted")
        txn.abort_transaction()
        txn.close()
    assert committed == ["committed"]
    assert uncommitted == ["aborted", "committed", "open", "after the open transaction"]


def read_line(child: subprocess.Popen[bytes]) -> bytes:
    """The child's next stdout line, waiting at most WAIT_S for it."""
    assert child.stdout is not None
    ready, _, _ = select.select([child.stdout], [], [], WAIT_S)
    assert ready, "no output from the consumer"
    return child.stdout.readline()


@pytest.fixture
def children() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Child processes a test starts; any still running at the end is killed by its pid."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for child in started:
        if child.poll() is None:
            os.kill(child.pid, signal.SIGKILL)
            child.wait()


def test_follow_prints_a_record_produced_meanwhile_then_stops_after_timeout_ms(
        data: Path, children: list[subprocess.Popen[bytes]]) -> None:
    with compactlog.open(data) as store:
        store.append("t", 0, pa.table({"key": [b"a"], "value": [b"first"]}))
        child = subprocess.Popen([COMPACTLOG, "consume", "--topic", "t", "--from-beginning", "--follow",
                                  "--timeout-ms", "3000"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 env=env(data))
        children.append(child)
        assert read_line(child) == b"first\n"  # it has polled once: what comes next comes while it follows
        store.append("t", 0, pa.table({"key": [b"b"], "value": [b"second"]}))
        assert read_line(child) == b"second\n"
        _, err = child.communicate(timeout=WAIT_S)
    assert child.returncode == 0
    assert err == b"Processed a total of 2 messages\n"


def test_ctrl_c_ends_follow_quietly_with_the_count(data: Path, children: list[subprocess.Popen[bytes]]) -> None:
    with compactlog.open(data) as store:
        store.append("t", 0, pa.table({"key": [b"a"], "value": [b"first"]}))
    child = subprocess.Popen([COMPACTLOG, "consume", "--topic", "t", "--offset", "earliest", "--follow"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env(data))
    children.append(child)
    assert read_line(child) == b"first\n"
    child.send_signal(signal.SIGINT)
    _, err = child.communicate(timeout=WAIT_S)
    assert child.returncode == 0
    assert err == b"Processed a total of 1 messages\n"


def test_produce_shows_progress_on_a_terminal_only(data: Path) -> None:
    lines = b"".join(b"k%d:v\n" % i for i in range(20_000))
    assert b"produced" not in cli(data, "produce", "--topic", "t", stdin=lines).stderr  # plain when piped
    primary, secondary = pty.openpty()
    fcntl.ioctl(secondary, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # a new pty is 0 wide
    try:
        child = subprocess.Popen([COMPACTLOG, "produce", "--topic", "t"], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=secondary, env=env(data))
        os.close(secondary)
        child.communicate(lines, timeout=WAIT_S)
        shown = b""
        while select.select([primary], [], [], 0)[0]:
            try:
                chunk = os.read(primary, 65536)
            except OSError:  # the terminal closed with the child
                break
            if not chunk:
                break
            shown += chunk
    finally:
        os.close(primary)
    assert child.returncode == 0
    assert b"produced: " in shown and b" lines" in shown  # tqdm's bar: "produced: 20000 lines [...]"
    assert b"Produced 20000 record(s) to t." in shown


def peak_rss_kib(data: Path, *argv: str) -> tuple[int, bytes]:
    """The peak resident set of ``compactlog consume`` run by a fresh Python (so that no other child counts)."""
    measure = ("import resource, subprocess, sys; done = subprocess.run(sys.argv[1:], capture_output=True); "
               "sys.stdout.buffer.write(done.stdout); "
               "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", measure, COMPACTLOG, "consume", *argv], capture_output=True,
                          env=env(data), timeout=WAIT_S)
    assert done.returncode == 0, done.stderr
    return int(done.stderr.split()[-1]), done.stdout


@pytest.mark.slow
def test_max_messages_1_reads_a_window_not_the_partition(data: Path) -> None:
    """100 MB in one partition (sealed segments and the active one): one record costs less than 40 MB over
    the same command reading nothing from the same partition (a read of the whole partition: some 140 MB).
    The unit a read decodes is one row group of 65,536 records (here 5 MB), which pyarrow reads at a peak of
    about 4 times its size plus 14 MB: the bound holds for records up to about 100 bytes, and a one-record
    read of 1 kB records would cost some 270 MB (estimated; reading a row group page by page would lift
    that, in the sealed segment's reader)."""
    size, count = 64, 1_600_000  # 100 MB of values that do not compress
    rng = np.random.default_rng(17)
    with compactlog.open(data) as store:
        store.create_topic("big", 1, {"segment.bytes": 40_000_000})
        for start in range(0, count, 100_000):
            n = min(100_000, count - start)
            values = pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(np.arange(n + 1, dtype=np.int32) * size),
                                                           pa.py_buffer(rng.bytes(n * size))])
            keys = pa.array([b"%d" % (start + i) for i in range(n)], pa.binary())
            store.append("big", 0, pa.table({"key": keys, "value": values}))
        segments = len(store.describe("big")[0].segments)
    assert segments >= 3

    baseline, nothing = peak_rss_kib(data, "--topic", "big", "--partition", "0", "--offset", "latest")
    one, first = peak_rss_kib(data, "--topic", "big", "--partition", "0", "--offset", "earliest",
                              "--max-messages", "1", "--property", "print.key=true")

    assert nothing == b"" and first.startswith(b"0\t")
    assert (one - baseline) / 1024 < 40, f"{(one - baseline) / 1024:.0f} MB over the baseline ({baseline // 1024} MB)"
