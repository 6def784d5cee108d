"""The one way tests start the Kafka-protocol broker: a child process serving a data directory on a free
loopback port, stopped by its pid.

``python -m compactlog.broker`` today; ``compactlog serve --listeners`` once that command lands (only
:data:`BROKER_COMMAND` changes)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator

BROKER_COMMAND = [sys.executable, "-m", "compactlog.broker"]
START_TIMEOUT_S = 60


def start_broker(data_dir: str, *args: str) -> tuple[subprocess.Popen[str], int]:
    """Start a broker on ``data_dir`` listening on 127.0.0.1 (a free port); returns the process and the port
    once it listens. Stop it with :func:`stop_broker`."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "VIRTUAL_ENV")}
    proc = subprocess.Popen([*BROKER_COMMAND, "--data-dir", data_dir, "--listeners", "PLAINTEXT://127.0.0.1:0",
                             *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = proc.stdout.readline() if proc.stdout else ""  # blocks until it listens or exits
        if not line.startswith("listening on "):
            proc.wait(timeout=START_TIMEOUT_S)
            raise RuntimeError(f"the broker did not start: {line!r} {proc.stderr.read() if proc.stderr else ''}")
        return proc, int(line.rsplit(":", 1)[1])
    except BaseException:
        stop_broker(proc)
        raise


def stop_broker(proc: subprocess.Popen[str]) -> str:
    """Stop the broker by its pid (SIGTERM, then SIGKILL after 10 s); returns what it logged on stderr."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.stderr.read() if proc.stderr else ""


@contextlib.contextmanager
def running_broker(data_dir: str, *args: str) -> Iterator[int]:
    """A broker for the duration of a ``with`` block; yields its port."""
    proc, port = start_broker(data_dir, *args)
    try:
        yield port
    finally:
        print(stop_broker(proc), file=sys.stderr)  # the broker's log, shown with a failing test
