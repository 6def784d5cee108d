"""``compactlog serve`` as a user runs it: the installed entry point in a child process, on a free loopback
port, cleaning a compacted topic produced through the Python API while it runs, answering ``/metrics``,
refusing a second ``serve`` of the same data directory, and stopping on SIGTERM with exit code 0 within
10 s and no file in transit left; ``compactlog metrics`` in a fresh process then shows the pass's figures.

The test waits on the server's log lines (a reader thread, a queue with a deadline), never by sleeping.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pyarrow as pa
import pytest
from prometheus_client.parser import text_string_to_metric_families

import compactlog
from compactlog.server import DataDirectoryLock

pytestmark = pytest.mark.integration

COMPACTLOG = os.path.join(os.path.dirname(sys.executable), "compactlog")
DEADLINE_S = 60
IN_TRANSIT = (".tmp", ".cleaned", ".swap", ".sealing")


def child_env() -> dict[str, str]:
    unset = ("PYSPARK_PYTHON", "VIRTUAL_ENV", "COMPACTLOG_SPARK_MASTER")
    return {k: v for k, v in os.environ.items() if k not in unset}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LogLines:
    """The child's stderr, line by line, through a reader thread."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        assert process.stderr is not None
        stream = process.stderr
        threading.Thread(target=lambda: [self.lines.put(line) for line in stream] + [self.lines.put(None)],
                         daemon=True).start()

    def wait_for(self, text: str) -> str:
        """The first line, logged so far or until the deadline, that holds ``text``."""
        for line in self.seen:
            if text in line:
                return line
        deadline = time.monotonic() + DEADLINE_S
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                break
            if line is None:
                break
            self.seen.append(line)
            if text in line:
                return line
        pytest.fail(f"no log line with {text!r}; the server logged:\n{''.join(self.seen)[-3000:]}")

    def exit_code(self, process: subprocess.Popen[str], timeout_s: float = 10) -> int:
        """``process``'s exit code once it exits within ``timeout_s``; else the test fails with what it logged
        (the caller's ``finally`` kills it)."""
        try:
            return process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(queue.Empty):
                while (line := self.lines.get_nowait()) is not None:
                    self.seen.append(line)
            logged = "".join(self.seen)[-3000:]
            pytest.fail(f"still running {timeout_s} s after SIGTERM; the server logged:\n{logged}")


def scrape(port: int) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as response:
        text = response.read().decode()
    samples: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return samples


def files_in_transit(data_dir: Path) -> list[str]:
    return [os.path.join(root, name) for root, _, names in os.walk(data_dir) for name in names
            if name.endswith(IN_TRANSIT)]


def test_serve_cleans_answers_metrics_and_stops_on_sigterm(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "server.properties").write_text("log.cleaner.backoff.ms=200\n")
    with compactlog.open(data) as store:
        store.create_topic("t", 1, {"cleanup.policy": "compact"})
    port = free_port()
    partition = (("partition", "0"), ("topic", "t"))
    serve = subprocess.Popen([COMPACTLOG, "serve", "--data-dir", str(data), "--metrics-address",
                              f"127.0.0.1:{port}", "--in-process", "--listeners", "PLAINTEXT://127.0.0.1:0"],
                             env=child_env(), stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        log = LogLines(serve)
        log.wait_for("server started")
        log.wait_for("cleaner pass:")  # the first pass: nothing to clean
        before = scrape(port)
        assert before["kafka_log_log_logendoffset"][partition] == 0
        assert before["kafka_log_logcleaner_cleaner_recopy_percent"][()] == 0
        assert not math.isnan(before["kafka_log_logcleanermanager_time_since_last_run_ms"][()])

        second = subprocess.run([COMPACTLOG, "serve", "--data-dir", str(data), "--metrics-address",
                                 f"127.0.0.1:{free_port()}", "--in-process", "--listeners", "PLAINTEXT://127.0.0.1:0"],
                                env=child_env(), capture_output=True, text=True, timeout=DEADLINE_S)
        assert second.returncode != 0
        assert second.stderr.count("\n") == 1 and f"process {serve.pid}" in second.stderr, second.stderr

        with compactlog.open(data) as store:  # ten records in the active segment, then sealed in one step
            store.append("t", 0, pa.table({"key": [f"k{i % 2}".encode() for i in range(10)],
                                           "value": [f"v{i}".encode() for i in range(10)]}))
            store.roll("t", 0)
        log.wait_for("cleaned 1 partition(s): t-0 (10->2 records)")
        after = scrape(port)
        assert after["kafka_log_log_logendoffset"][partition] == 10
        assert after["kafka_log_log_size"][partition] > 0
        recopy = after["kafka_log_logcleaner_cleaner_recopy_percent"][()]
        assert 0 < recopy < 100
        with compactlog.open(data) as store:  # compacted: the older values of k0 and k1 are gone
            assert [(r.offset, r.key, r.value) for r in store.read("t", 0)] == [(8, b"k0", b"v8"), (9, b"k1", b"v9")]

        serve.send_signal(signal.SIGTERM)
        assert log.exit_code(serve) == 0
        log.wait_for("server stopped")
        assert files_in_transit(data) == []
    finally:
        if serve.poll() is None:
            os.kill(serve.pid, signal.SIGKILL)
            serve.wait()

    fresh = subprocess.run([COMPACTLOG, "metrics", "--data-dir", str(data), "--format", "json"],
                           env=child_env(), capture_output=True, text=True, timeout=DEADLINE_S)
    assert fresh.returncode == 0, fresh.stderr
    figures = json.loads(fresh.stdout)
    assert figures["cleaner"]["time-since-last-run-ms"] is not None
    assert figures["cleaner"]["cleaner-recopy-percent"] == recopy  # of the last pass that cleaned
    served = [p for p in figures["partitions"] if p["topic"] != "__consumer_offsets"]  # serve's group offsets
    assert [(p["topic"], p["log-end-offset"]) for p in served] == [("t", 10)]


def test_sigterm_during_a_busy_pass_exits_0_and_leaves_every_partition_whole(tmp_path: Path) -> None:
    """Eight dirty partitions are waiting when serve starts; SIGTERM lands during its first pass (in its
    planning or in a round: where varies from run to run): a round under way finishes, no other starts, the
    exit is 0 within 10 s, no file is left in transit, every partition still holds every key's newest value,
    and no partition is marked uncleanable for the rounds it did not run."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "server.properties").write_text("log.cleaner.backoff.ms=100\n")
    partitions, rows = 8, 5000
    with compactlog.open(data) as store:
        store.create_topic("t", partitions, {"cleanup.policy": "compact"})
        for p in range(partitions):
            store.append("t", p, pa.table({"key": [f"k{i % 500}".encode() for i in range(rows)],
                                           "value": [f"{p}-{i}".encode() * 10 for i in range(rows)]}))
            store.roll("t", p)
    serve = subprocess.Popen([COMPACTLOG, "serve", "--data-dir", str(data), "--metrics-address",
                              f"127.0.0.1:{free_port()}", "--in-process", "--listeners", "PLAINTEXT://127.0.0.1:0"],
                             env=child_env(), stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        log = LogLines(serve)
        log.wait_for("server started")
        serve.send_signal(signal.SIGTERM)
        assert log.exit_code(serve) == 0
        log.wait_for("server stopped")
    finally:
        if serve.poll() is None:
            os.kill(serve.pid, signal.SIGKILL)
            serve.wait()
    assert files_in_transit(data) == []
    with compactlog.open(data) as store:
        for p in range(partitions):
            newest = {r.key: r.value for r in store.read("t", p)}
            assert newest == {f"k{i % 500}".encode(): f"{p}-{i}".encode() * 10 for i in range(rows - 500, rows)}
        assert store.cleaner_metrics()["uncleanable-partitions-count"] == 0


def test_a_second_serve_is_refused_before_it_opens_the_store(tmp_path: Path) -> None:
    """Opening a writable store finishes interrupted topic deletions; a refused serve must not have done it
    to a directory another server holds. The lock is held here, as a running server holds it."""
    data = tmp_path / "data"
    with compactlog.open(data) as store:
        store.create_topic("t", 1, {"cleanup.policy": "compact"})
    topic_id = json.loads((data / ".topics" / "t.json").read_text())["topic_id"]
    marker = data / ".topics" / "t.deleting"
    marker.write_text(topic_id)  # a deletion a crash interrupted after its first step
    lock = DataDirectoryLock(str(data))
    lock.start()
    try:
        second = subprocess.run([COMPACTLOG, "serve", "--data-dir", str(data), "--metrics-address", "127.0.0.1:0",
                                 "--in-process", "--listeners", "PLAINTEXT://127.0.0.1:0"],
                                env=child_env(), capture_output=True, text=True, timeout=DEADLINE_S)
    finally:
        lock.shutdown()
    assert second.returncode == 1
    assert second.stderr == (f"compactlog: DataDirectoryLockedError: {data} is already served by process "
                             f"{os.getpid()} (it holds {data / '.lock'})\n")
    assert marker.read_text() == topic_id  # the deletion is left to the server that holds the directory
    assert (data / ".topics" / "t.json").exists() and (data / "t-0").is_dir()


def test_serve_creates_a_missing_data_directory_under_its_lock(tmp_path: Path) -> None:
    data = tmp_path / "new"
    serve = subprocess.Popen([COMPACTLOG, "serve", "--data-dir", str(data), "--metrics-address", "127.0.0.1:0",
                              "--in-process", "--listeners", "PLAINTEXT://127.0.0.1:0"],
                             env=child_env(), stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        log = LogLines(serve)
        log.wait_for("server started")  # .lock, made first, did not make the directory foreign
        assert (data / "meta.properties").is_file()
        serve.send_signal(signal.SIGTERM)
        assert log.exit_code(serve) == 0
    finally:
        if serve.poll() is None:
            os.kill(serve.pid, signal.SIGKILL)
            serve.wait()
