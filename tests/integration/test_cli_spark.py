"""``compactlog clean`` on Spark as a user runs it, in a child process: an unreachable master fails at once
in one line, and a pass with nothing to clean never starts Spark."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import compactlog

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

COMPACTLOG = os.path.join(os.path.dirname(sys.executable), "compactlog")  # the installed entry point
CHILD_TIMEOUT_S = 120
UNREACHABLE_WITHIN_S = 15


def child_env() -> dict[str, str]:
    env = {key: value for key, value in os.environ.items()
           if key not in ("PYSPARK_PYTHON", "VIRTUAL_ENV", "COMPACTLOG_SPARK_MASTER")}
    return env


def free_port() -> int:
    """A port nothing listens on: bound, then released, never listened on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def dirty_topic(data_dir: Path) -> None:
    with compactlog.open(data_dir) as store:
        store.create_topic("t", 1, {"cleanup.policy": "compact", "segment.bytes": 100})
        with store.producer() as producer:
            for i in range(8):
                producer.send("t", key=f"k{i % 2}".encode(), value=f"v{i}".encode())
            producer.flush()


def test_an_unreachable_master_fails_at_once_in_one_line(tmp_path: Path) -> None:
    if not os.access(COMPACTLOG, os.X_OK):
        pytest.fail(f"the compactlog entry point is not installed beside {sys.executable}")
    dirty_topic(tmp_path / "data")
    master = f"spark://127.0.0.1:{free_port()}"
    started = time.monotonic()

    run = subprocess.run([COMPACTLOG, "clean", "--data-dir", str(tmp_path / "data"), "--force",
                          "--spark-master", master],
                         env=child_env(), capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)

    elapsed = time.monotonic() - started
    assert run.returncode == 1, run.stderr[-3000:]  # a CompactLogError is a failure (see compactlog.cli.main)
    assert run.stderr.splitlines() == [
        f"compactlog: ExecutorError: Spark master {master} cannot be reached: no connection to "
        f"{master[len('spark://'):]} (Connection refused); is the master running and the URL right?"]
    assert elapsed < UNREACHABLE_WITHIN_S
    with compactlog.open(tmp_path / "data") as store:
        assert store.describe("t")[0].uncleanable_reason is None  # nothing was tried


NOTHING_TO_CLEAN = textwrap.dedent("""
    import json, sys
    from compactlog.cli.main import main

    code = main(["clean", "--data-dir", sys.argv[1], "--spark-master", "local[1]"])
    print(json.dumps({"code": code, "pyspark": "pyspark" in sys.modules}))
""")


def test_a_clean_with_nothing_to_clean_does_not_start_spark(tmp_path: Path) -> None:
    with compactlog.open(tmp_path / "data") as store:
        store.create_topic("t", 1, {"cleanup.policy": "compact"})  # an empty log: nothing to clean

    run = subprocess.run([sys.executable, "-c", NOTHING_TO_CLEAN, str(tmp_path / "data")],
                         env=child_env(), capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)

    assert run.returncode == 0, run.stderr[-3000:]
    report, result = run.stdout.splitlines()[:-1], json.loads(run.stdout.splitlines()[-1])
    assert result == {"code": 0, "pyspark": False}  # Spark was never imported, let alone started
    assert report == ["Cleaner pass (Spark local[1], not started): 0 partition(s) cleaned, 1 skipped",
                      "  skipped t-0: empty log"]
