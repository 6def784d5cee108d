"""Three processes produce to one partition at once: offsets stay unique and contiguous, nothing is lost
or duplicated, each process's records keep their send order, and no batch is interleaved with another."""

from __future__ import annotations

import itertools
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

import compactlog

pytestmark = pytest.mark.integration

SRC = str(Path(compactlog.__file__).resolve().parent.parent)
PROCESSES = 3
BATCHES = 60
BATCH_SIZE = 50

WRITER = r"""
import os, sys, time
import pyarrow as pa
import compactlog

data_dir, name, go = sys.argv[1], sys.argv[2], sys.argv[5]
batches, batch_size = int(sys.argv[3]), int(sys.argv[4])
store = compactlog.open(data_dir)
producer = store.producer(linger_ms=0, batch_size=1 << 24)
open(go + "." + name, "w").close()  # ready
deadline = time.monotonic() + 60
while not os.path.exists(go):  # start together
    if time.monotonic() > deadline:
        sys.exit("no go signal")
    time.sleep(0.001)
for batch in range(batches):
    values = [b"%s-%d-%d" % (name.encode(), batch, i) for i in range(batch_size)]
    if batch % 2:  # the bulk path
        store.append("t", 0, pa.table({"key": [name.encode()] * batch_size, "value": values}))
    else:  # the producer: one flush = one batch appended under the partition lock
        for value in values:
            producer.send("t", key=name.encode(), value=value, partition=0)
        producer.flush()
producer.close()
store.close()
"""

VALUE = re.compile(rb"(p\d)-(\d+)-(\d+)")


def test_concurrent_producers_to_one_partition_neither_lose_nor_interleave(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    go = tmp_path / "go"
    with compactlog.open(data_dir) as store:
        store.create_topic("t", config={"segment.bytes": 65_536})  # rolls by every process
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    processes = [
        subprocess.Popen(
            [sys.executable, str(script), str(data_dir), f"p{n}", str(BATCHES), str(BATCH_SIZE), str(go)],
            env=env,
            stderr=subprocess.PIPE,
        )
        for n in range(PROCESSES)
    ]
    try:
        deadline = time.monotonic() + 60
        while not all(Path(f"{go}.p{n}").exists() for n in range(PROCESSES)):  # polling the subprocesses
            assert all(p.poll() is None for p in processes), "a writer died before starting"
            assert time.monotonic() < deadline, "the writers did not start"
            time.sleep(0.001)
        go.touch()
        for process in processes:
            _, err = process.communicate(timeout=120)
            assert process.returncode == 0, err.decode()
    finally:
        for process in processes:
            process.kill()
            process.wait()

    with compactlog.open(data_dir) as store:
        records = list(store.read("t", 0, 0))
        segments = store.describe("t")[0].segments
    total = PROCESSES * BATCHES * BATCH_SIZE
    assert [r.offset for r in records] == list(range(total))  # unique, contiguous
    assert len(segments) > PROCESSES
    seen: dict[bytes, list[tuple[int, int]]] = {}
    batch_offsets: dict[tuple[bytes, int], list[int]] = {}
    for record in records:
        match = VALUE.fullmatch(record.value or b"")
        assert match is not None, record
        name, batch, index = match.group(1), int(match.group(2)), int(match.group(3))
        assert record.key == name
        seen.setdefault(name, []).append((batch, index))
        batch_offsets.setdefault((name, batch), []).append(record.offset)
    every = [(b, i) for b in range(BATCHES) for i in range(BATCH_SIZE)]
    for n in range(PROCESSES):
        assert seen[b"p%d" % n] == every  # each exactly once, in send order
    for (name, batch), offsets in batch_offsets.items():
        assert offsets == list(range(offsets[0], offsets[0] + BATCH_SIZE)), (name, batch)  # not interleaved
    # The writers really overlapped: batches of different processes alternate in the log.
    order = [name for (name, _batch), offsets in sorted(batch_offsets.items(), key=lambda item: item[1][0])]
    switches = sum(1 for a, b in itertools.pairwise(order) if a != b)
    assert switches >= PROCESSES
