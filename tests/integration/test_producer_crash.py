"""A producer process killed with SIGKILL mid-write loses nothing it had flushed, and leaves nothing torn.

The producer loops: send a batch, flush, then record the last flushed offset in a side file (written
atomically). The test kills it once the side file shows a randomly chosen number of flushes, so the kill
lands anywhere in the loop: mid-frame, mid-fsync, mid-roll (segments are small, so rolls are frequent).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import compactlog

pytestmark = pytest.mark.integration

SRC = str(Path(compactlog.__file__).resolve().parent.parent)

PRODUCER = r"""
import os, sys
import compactlog

data_dir, side_file, start = sys.argv[1], sys.argv[2], int(sys.argv[3])

def value(offset):
    return b"value-%d-" % offset + bytes([offset % 251]) * (offset % 97)

store = compactlog.open(data_dir)
producer = store.producer(linger_ms=0, batch_size=1 << 20)
offset = start
batch = 0
while True:
    batch += 1
    for _ in range(1 + batch % 40):
        producer.send("t", key=b"key-%d" % offset, value=value(offset), partition=0)
        offset += 1
    producer.flush()
    tmp = side_file + ".tmp"
    with open(tmp, "w") as f:
        f.write("%d %d" % (offset - 1, batch))
    os.replace(tmp, side_file)
"""


def expected_value(offset: int) -> bytes:
    return b"value-%d-" % offset + bytes([offset % 251]) * (offset % 97)


def read_side_file(path: Path) -> tuple[int, int] | None:
    try:
        last, flushes = path.read_text().split()
    except (FileNotFoundError, ValueError):
        return None
    return int(last), int(flushes)


def run_and_kill(script: Path, data_dir: Path, side_file: Path, start: int, flushes: int) -> int:
    """Start a producer at ``start`` and SIGKILL it after ``flushes`` flushes; returns the last flushed
    offset."""
    side_file.unlink(missing_ok=True)
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    process = subprocess.Popen(
        [sys.executable, str(script), str(data_dir), str(side_file), str(start)],
        env=env,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            state = read_side_file(side_file)
            if state is not None and state[1] >= flushes:
                break
            assert process.poll() is None, process.stderr.read().decode() if process.stderr else ""
            assert time.monotonic() < deadline, "the producer made no progress"
            time.sleep(0.001)  # polling a subprocess, not waiting for time to pass
        process.send_signal(signal.SIGKILL)
    finally:
        process.kill()
        process.wait(timeout=30)
    state = read_side_file(side_file)
    assert state is not None
    return state[0]


def test_records_flushed_before_a_sigkill_survive_and_nothing_torn_is_readable(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    script = tmp_path / "producer.py"
    script.write_text(PRODUCER)
    with compactlog.open(data_dir) as store:
        store.create_topic("t", config={"segment.bytes": 4096})
    rng = random.Random(os.getpid())
    start = 0
    for _round in range(4):
        acknowledged = run_and_kill(script, data_dir, tmp_path / "flushed", start, rng.randint(3, 40))
        with compactlog.open(data_dir) as store:
            end = store.log_end_offset("t", 0)
            assert end > acknowledged  # every acknowledged record survived
            records = list(store.read("t", 0, 0))
            # Whole and in order: records past the last acknowledgement may have survived too, but only
            # whole ones, each exactly as sent.
            assert [r.offset for r in records] == list(range(end))
            for record in records:
                assert record.key == b"key-%d" % record.offset
                assert record.value == expected_value(record.offset)
            table = store.read_arrow("t", 0)
            assert table.column("offset").to_pylist() == list(range(end))
            # The log goes on at its end.
            result = store.append("t", 0, compactlog_table([end]))
            assert result.base_offset == end
            assert store.log_end_offset("t", 0) == end + 1
            start = end + 1
    with compactlog.open(data_dir) as store:
        assert len(store.describe("t")[0].segments) > 4  # kills can have landed in rolls


def compactlog_table(offsets: list[int]):  # type: ignore[no-untyped-def]
    import pyarrow as pa

    return pa.table({"key": [b"key-%d" % o for o in offsets], "value": [expected_value(o) for o in offsets]})
