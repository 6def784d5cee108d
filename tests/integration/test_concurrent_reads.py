"""Reads in one process while another cleans: a slow consumer part-way through a partition sees a
consistent snapshot, whatever the other process's cleaner swaps and deletes meanwhile.

The parent reads the partition one table (one segment) at a time; between two tables a child process
appends a batch, rolls and runs a forced cleaner pass, replacing and deleting (``file.delete.delay.ms=0``)
the very files the parent's read has still to reach. Every read must return the log as it was when the read began
(so strictly increasing offsets, each record one that was produced at that offset), and never an error.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from itertools import pairwise
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import compactlog
from compactlog.log.reads import READ_RETRIES

pytestmark = pytest.mark.integration

CONFIG = {"cleanup.policy": "compact", "segment.bytes": 12000, "min.cleanable.dirty.ratio": 0.01,
          "file.delete.delay.ms": 0}
BATCH_SOURCE = textwrap.dedent("""
    def batch(n):
        return [(b"k%03d" % ((n * 37 + i) % 300), b"v%d-%d" % (n, i)) for i in range(30)]
""")
# The cleaning process: on each line "step" from the parent, one batch appended, a roll and a forced clean.
CLEANER = BATCH_SOURCE + textwrap.dedent("""
    import sys
    import pyarrow as pa
    import compactlog
    store = compactlog.open(sys.argv[1], clock=lambda: 2_000_000)
    n = int(sys.argv[2])
    print("ready", flush=True)
    for line in sys.stdin:
        pairs = batch(n)
        first = store.append("t", 0, pa.table({"key": [k for k, _ in pairs], "value": [v for _, v in pairs]}))
        store.roll("t", 0)
        store.clean(force=True)
        print("acked", n, first.base_offset, flush=True)
        n += 1
""")
BATCHES: dict[str, Any] = {}
exec(BATCH_SOURCE, BATCHES)
INITIAL_BATCHES = 30


def produced_at(first: int, n: int) -> set[tuple[int, bytes, bytes]]:
    return {(first + i, key, value) for i, (key, value) in enumerate(BATCHES["batch"](n))}


def test_a_slow_reader_gets_a_consistent_snapshot_while_another_process_cleans(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    produced: set[tuple[int, bytes, bytes]] = set()
    with compactlog.open(data_dir, clock=lambda: 2_000_000) as store:
        store.create_topic("t", config=CONFIG)
        for n in range(INITIAL_BATCHES):
            pairs = BATCHES["batch"](n)
            first = store.append("t", 0, pa.table({"key": [k for k, _ in pairs], "value": [v for _, v in pairs]}))
            produced |= produced_at(first.base_offset, n)
            store.roll("t", 0)
    cleaner = subprocess.Popen([sys.executable, "-c", CLEANER, str(data_dir), str(INITIAL_BATCHES)],
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    steps = 0
    try:
        assert cleaner.stdin is not None and cleaner.stdout is not None
        assert cleaner.stdout.readline() == "ready\n"

        def step() -> None:
            nonlocal steps
            cleaner.stdin.write("step\n")  # type: ignore[union-attr]
            cleaner.stdin.flush()  # type: ignore[union-attr]
            line = cleaner.stdout.readline().split()  # type: ignore[union-attr]
            assert line[:1] == ["acked"], (line, cleaner.stderr.read() if cleaner.poll() is not None else "")
            produced.update(produced_at(int(line[2]), int(line[1])))
            steps += 1

        with compactlog.open(data_dir, clock=lambda: 2_000_000) as store:
            for _ in range(3):  # three whole reads, each from the log start, each slowed by the cleaner
                start = store.log_start_offset("t", 0)
                before = [(r.offset, r.key, r.value) for r in store.read("t", 0, start)]
                returned = []
                tables = store.read_tables("t", 0, start, columns=["offset", "key", "value"])
                for table in tables:
                    returned += zip(*(table.column(c).to_pylist() for c in ("offset", "key", "value")), strict=True)
                    step()  # the other process appends, rolls, cleans and deletes the replaced files
                offsets = [offset for offset, _, _ in returned]
                assert all(a < b for a, b in pairwise(offsets)), "duplicate or backward offset"
                wrong = [row for row in returned if row not in produced]
                assert not wrong, f"records never produced at their offsets: {wrong[:5]}"
                assert returned == before, "the read is not the log as it was when the read began"
    finally:
        if cleaner.stdin is not None:
            cleaner.stdin.close()
        try:
            cleaner.wait(timeout=60)
        finally:
            if cleaner.poll() is None:
                cleaner.kill()
                cleaner.wait()
    assert cleaner.returncode == 0
    assert steps > 3 * READ_RETRIES  # more cleaner passes under each read than a read used to survive
