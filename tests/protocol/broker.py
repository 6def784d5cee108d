"""The one way tests start the Kafka-protocol broker: a child process serving a data directory on a free
loopback port, stopped by its pid.

``compactlog serve --listeners PLAINTEXT://127.0.0.1:0`` (in process: no Spark; metrics on a free port),
which prints ``listening on NAME://host:port`` once it listens."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

BROKER_COMMAND = [sys.executable, "-m", "compactlog", "serve", "--in-process", "--metrics-address", "127.0.0.1:0"]
START_TIMEOUT_S = 60
IDLE_PASS, FAILED_PASS = "cleaner pass: cleaned 0 partition(s)", "cleaner pass failed"
_logs: dict[int, Any] = {}  # pid -> the file its stderr goes to


def start_broker(data_dir: str, *args: str) -> tuple[subprocess.Popen[str], int]:
    """Start a broker on ``data_dir`` listening on 127.0.0.1 (a free port); returns the process and the port
    once it listens. Stop it with :func:`stop_broker`.

    Its cleaner service has made its passes at start and idles when this returns: passes go on while they
    clean something (as Kafka's cleaner thread), and after one that cleans nothing it waits
    ``log.cleaner.backoff.ms``, one hour here unless the data directory's server.properties sets it. The
    tests' topics compact at once when a pass comes (``max.compaction.lag.ms`` 1 ms, records timestamped
    years ago), so a pass in the middle of a test would clean what the test is about to read; a test
    compacts with :func:`compaction.clean` when it means to."""
    _idle_cleaner(data_dir)
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "VIRTUAL_ENV")}
    log = tempfile.TemporaryFile("w+")  # noqa: SIM115 (closed by stop_broker) not a pipe: it never fills
    proc = subprocess.Popen([*BROKER_COMMAND, "--data-dir", data_dir, "--listeners", "PLAINTEXT://127.0.0.1:0",
                             *args], stdout=subprocess.PIPE, stderr=log, text=True, env=env)
    _logs[proc.pid] = log
    try:
        line = proc.stdout.readline() if proc.stdout else ""  # blocks until it listens or exits
        if not line.startswith("listening on "):
            proc.wait(timeout=START_TIMEOUT_S)
            raise RuntimeError(f"the broker did not start: {line!r} {_read_log(proc)}")
        _wait_for_idle_cleaner(proc, log)
        return proc, int(line.rsplit(":", 1)[1])
    except BaseException:
        stop_broker(proc)
        raise


def _wait_for_idle_cleaner(proc: subprocess.Popen[str], log: Any) -> None:
    """Until the broker's log shows a cleaner pass that cleaned nothing (or a failed one, retried after the
    backoff). The log is read through a file description of its own: the broker writes at the shared one's
    offset."""
    deadline = time.monotonic() + START_TIMEOUT_S
    seen = ""
    with open(f"/proc/self/fd/{log.fileno()}", encoding="utf-8", errors="replace") as reader:
        while IDLE_PASS not in seen and FAILED_PASS not in seen:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the broker's cleaner did not finish its first passes: {seen}")
            chunk = reader.read()
            if not chunk:
                time.sleep(0.01)  # polling a file another process writes: no event to wait on
            seen += chunk


def _idle_cleaner(data_dir: str) -> None:
    os.makedirs(data_dir, exist_ok=True)
    path = os.path.join(data_dir, "server.properties")
    text = open(path, encoding="utf-8").read() if os.path.exists(path) else ""  # noqa: SIM115
    if "log.cleaner.backoff.ms" not in text:
        with open(path, "a", encoding="utf-8") as f:
            f.write(("" if not text or text.endswith("\n") else "\n") + "log.cleaner.backoff.ms=3600000\n")


def stop_broker(proc: subprocess.Popen[str]) -> str:
    """Stop the broker by its pid (SIGTERM, then SIGKILL after 10 s); returns what it logged on stderr."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if proc.stdout:
        proc.stdout.close()
    return _read_log(proc)


def _read_log(proc: subprocess.Popen[str]) -> str:
    log = _logs.pop(proc.pid, None)
    if log is None:
        return ""
    log.seek(0)
    text = log.read()
    log.close()
    return text


@contextlib.contextmanager
def running_broker(data_dir: str, *args: str) -> Iterator[int]:
    """A broker for the duration of a ``with`` block; yields its port."""
    proc, port = start_broker(data_dir, *args)
    try:
        yield port
    finally:
        print(stop_broker(proc), file=sys.stderr)  # the broker's log, shown with a failing test
