"""Crash safety of delete_topic: a child process killed (SIGKILL) at each of its fault points, then the
store reopened (which finishes the deletion) and the topic created again. No key of the deleted topic may come
back, the checkpoint may keep no entry of it, and the re-created topic's tombstones must delete its values
(a stale checkpoint entry would count its first offsets as cleaned, so tombstones expire while the values
they delete stay)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

import compactlog
from compactlog.checkpoint import read_checkpoint
from compactlog.faults import FAULT_POINT_ENV, FAULT_POINTS
from support import FakeClock

pytestmark = pytest.mark.integration

DELETE_POINTS = [p for p in FAULT_POINTS if p.startswith("store.delete-")]
KEYS = 200
CONFIG = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": 0.01, "delete.retention.ms": 1000}
DELETE = "import sys, compactlog; compactlog.open(sys.argv[1]).delete_topic('t'); print('deleted')"


def pairs() -> tuple[pa.Table, pa.Table]:
    keys = [b"k%03d" % i for i in range(KEYS)]
    values = pa.table({"key": keys, "value": [b"v%03d" % i for i in range(KEYS)]})
    tombstones = pa.table({"key": keys, "value": pa.nulls(KEYS, pa.binary())})
    return values, tombstones


def live_keys(store: compactlog.Store) -> dict[bytes | None, bytes | None]:
    state: dict[bytes | None, bytes | None] = {}
    for record in store.read("t", 0, store.log_start_offset("t", 0)):
        state[record.key] = record.value
    return {k: v for k, v in state.items() if v is not None}


def others(generation: int) -> pa.Table:
    return pa.table({"key": [b"o%03d" % i for i in range(KEYS)], "value": [b"o%d" % generation] * KEYS})


def build(data_dir: Path, clock: FakeClock) -> None:
    """Topic t: two generations of values for every key, cleaned, so its checkpoint is past them."""
    with compactlog.open(data_dir, clock=clock) as store:
        store.create_topic("t", config=CONFIG)
        values, _ = pairs()
        for _ in range(2):
            store.append("t", 0, values)
            store.roll("t", 0)
        store.clean(force=True)
        assert read_checkpoint(data_dir / "cleaner-offset-checkpoint")[("t", 0)] == 2 * KEYS


@pytest.mark.parametrize("point", DELETE_POINTS)
def test_a_crash_inside_delete_topic_brings_no_deleted_key_back(point: str, tmp_path: Path,
                                                                clock: FakeClock) -> None:
    data_dir = tmp_path / "data"
    build(data_dir, clock)
    env = {**{k: v for k, v in os.environ.items() if k != FAULT_POINT_ENV}, FAULT_POINT_ENV: point}
    child = subprocess.run([sys.executable, "-c", DELETE, str(data_dir)], capture_output=True, text=True,
                           env=env, timeout=120)
    assert child.returncode == -signal.SIGKILL and f"fault point {point} hit" in child.stderr, child.stderr
    with compactlog.open(data_dir, clock=clock) as store:  # the open finishes the deletion
        assert "t" not in store.topics()
        assert not [n for n in os.listdir(data_dir) if n.startswith("t-")]  # no partition directory left
        assert os.listdir(data_dir / ".topics") == [".lock"]
        store.create_topic("t", config=CONFIG)
        assert ("t", 0) not in read_checkpoint(data_dir / "cleaner-offset-checkpoint")
        assert live_keys(store) == {}  # nothing of the deleted topic
        # Values and their tombstones at offsets a stale checkpoint (400) would count as cleaned, then more.
        values, tombstones = pairs()
        for table in (values, tombstones, others(0)):
            store.append("t", 0, table)
            store.roll("t", 0)
        store.clean(force=True)
        clock.advance(10_000)  # past delete.retention.ms: the tombstones may go, with what they deleted
        store.append("t", 0, others(1))
        store.roll("t", 0)
        store.clean(force=True)
        assert live_keys(store) == {b"o%03d" % i: b"o1" for i in range(KEYS)}
    assert not [n for n in os.listdir(data_dir) if n.endswith("-delete")]
