"""Crash safety of the cleaner and the log: a crash at every step of the swap, and kill -9 of a real process.

In process, a hook stops the swap after each of its steps. In a child process that appends batches and
cleans, SIGKILL lands at every named :mod:`compactlog.faults` point (armed by ``COMPACTLOG_FAULT_POINT``:
the child proves where it died on stderr) and at random moments; the test counts where each kill landed.
Recovery must leave either the old segments or the new ones, never a mix: every acknowledged record's key
reads its newest acknowledged value, the batch in flight at most as a prefix, no ``.cleaned``, ``.swap``,
``.deleted``, ``.sealing`` or ``.tmp`` file behind, the checkpoint within the log; and the cleaner carries on.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import compactlog
from compactlog.checkpoint import read_checkpoint
from compactlog.faults import FAULT_POINT_ENV, FAULT_POINTS
from support import fault_landed, leftovers

pytestmark = pytest.mark.integration



class Crash(BaseException):
    """Stands for the process dying: not an Exception, so nothing on the way up handles it."""


def build(data_dir: Path, records: int = 3000, keys: int = 150, per_segment: int = 300) -> None:
    store = compactlog.open(str(data_dir), clock=lambda: 1_000_000)
    store.create_topic("t", 1, {"cleanup.policy": "compact", "segment.bytes": 8000,
                                "min.cleanable.dirty.ratio": 0.01})
    rng = np.random.default_rng(3)
    for start in range(0, records, per_segment):
        ids = rng.integers(0, keys, per_segment)
        values = [None if i % 17 == 0 else b"v%d-%d" % (start, i) for i in range(per_segment)]
        store.append("t", 0, pa.table({"key": [b"k%03d" % i for i in ids], "value": pa.array(values, pa.binary())}))
        store.roll("t", 0)
    store.append("t", 0, pa.table({"key": [b"active"], "value": [b"a"]}))
    store.close()


def snapshot(data_dir: Path) -> list[tuple[int, bytes | None, bytes | None]]:
    store = compactlog.open(str(data_dir), clock=lambda: 2_000_000)
    try:
        return [(r.offset, r.key, r.value) for r in store.read("t", 0)]
    finally:
        store.close()


def cleaned_copy(pristine: Path, target: Path) -> list[tuple[int, bytes | None, bytes | None]]:
    shutil.copytree(pristine, target)
    store = compactlog.open(str(target), clock=lambda: 2_000_000)
    store.clean(force=True)
    store.close()
    return snapshot(target)


def swap_steps(pristine: Path, tmp: Path) -> list[str]:
    steps: list[str] = []
    work = tmp / "steps"
    shutil.copytree(pristine, work)
    store = compactlog.open(str(work), clock=lambda: 2_000_000)
    from compactlog.cleaner.cleaner import clean

    clean(store, force=True, hook=steps.append)
    store.close()
    return steps


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("pristine") / "data"
    build(path)
    return path


def test_crash_at_every_swap_step_recovers_old_or_new(pristine: Path, tmp_path: Path) -> None:
    from compactlog.cleaner.cleaner import clean

    old = snapshot(pristine)
    new = cleaned_copy(pristine, tmp_path / "reference")
    assert new != old
    steps = swap_steps(pristine, tmp_path)
    assert "cleaned-written" in steps and "before-checkpoint" in steps
    assert sum(s.startswith("swap-renamed:") for s in steps) > 1  # several groups
    for i, step in enumerate(steps):
        work = tmp_path / f"crash-{i}"
        shutil.copytree(pristine, work)
        store = compactlog.open(str(work), clock=lambda: 2_000_000)

        def crash_here(name: str, step: str = step) -> None:
            if name == step:
                raise Crash(name)

        with pytest.raises(Crash):
            clean(store, force=True, hook=crash_here)
        del store  # the process is gone: nothing of its memory survives
        recovered = snapshot(work)
        assert recovered in (old, new), f"crash at {step}: neither the old nor the new segments"
        assert leftovers(work) == [], f"crash at {step}: {leftovers(work)}"
        # and the cleaner carries on from there
        again = compactlog.open(str(work), clock=lambda: 2_000_000)
        again.clean(force=True)
        again.close()
        assert snapshot(work) == new


# The workload of a child process: batches appended (each acknowledged on stdout once append returned,
# fsynced), a forced clean after every second one. The parent runs the same source to know the batches.
BATCHES_SOURCE = textwrap.dedent("""
    def batch_pairs(batch):
        return [(b"k%03d" % ((batch * 37 + i * 11) % 200), None if i % 13 == 0 else b"w%d-%d" % (batch, i))
                for i in range(300)]
""")
WORKLOAD = BATCHES_SOURCE + textwrap.dedent("""
    import sys
    import pyarrow as pa
    import compactlog
    store = compactlog.open(sys.argv[1], clock=lambda: 2_000_000)
    print("ready", flush=True)
    for batch in range(4):
        pairs = batch_pairs(batch)
        print("sending", batch, store.log_end_offset("t", 0), flush=True)
        table = pa.table({"key": pa.array([k for k, _ in pairs], pa.binary()),
                          "value": pa.array([v for _, v in pairs], pa.binary())})
        print("acked", batch, store.append("t", 0, table).base_offset, flush=True)
        if batch % 2:
            print("cleaning", batch, flush=True)
            store.clean(force=True)
            print("cleaned", batch, flush=True)
    print("done", flush=True)
""")
BATCHES: dict[str, Any] = {}
exec(BATCHES_SOURCE, BATCHES)


@dataclass
class Run:
    """What a child process said before it died: its acknowledged batches and the batch in flight."""

    lines: list[str]
    stderr: str
    returncode: int
    acked: dict[int, int]  # batch -> first offset
    in_flight: tuple[int, int] | None  # (batch, log end offset before it), sent but not acknowledged
    work_seconds: float  # from "ready" to the end

    @property
    def fault(self) -> str | None:
        return fault_landed(self.stderr)

    @property
    def phase(self) -> str:
        """Where the child was by its last line: "append", "clean", "between" or "done"."""
        last = self.lines[-1].split()[0] if self.lines else "ready"
        return {"sending": "append", "cleaning": "clean", "done": "done"}.get(last, "between")


def run_child(work: Path, fault: str | None = None, kill_after: float | None = None) -> Run:
    env = {k: v for k, v in os.environ.items() if k != FAULT_POINT_ENV}
    if fault is not None:
        env[FAULT_POINT_ENV] = fault
    proc = subprocess.Popen([sys.executable, "-c", WORKLOAD, str(work)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()  # "ready": the store is open
        ready = time.monotonic()
        if kill_after is not None:
            time.sleep(kill_after)  # a random moment of a real process: wall time, not the store's clock
            proc.send_signal(signal.SIGKILL)
        out, err = proc.communicate(timeout=60)
        out = first + out
        work_seconds = time.monotonic() - ready
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    lines = out.splitlines()
    acked = {int(w[1]): int(w[2]) for w in (line.split() for line in lines) if w[0] == "acked"}
    sent = [(int(w[1]), int(w[2])) for w in (line.split() for line in lines) if w[0] == "sending"]
    in_flight = sent[-1] if sent and sent[-1][0] not in acked else None
    return Run(lines, err, proc.returncode, acked, in_flight, work_seconds)


def check_recovered(work: Path, pristine_records: list[tuple[int, bytes | None, bytes | None]], run: Run) -> None:
    """Reopen the store and hold it to the model of acknowledged records."""
    written = {offset: (key, value) for offset, key, value in pristine_records}
    model: dict[bytes | None, bytes | None] = {key: value for _, key, value in pristine_records}
    for batch, first in sorted(run.acked.items()):
        for i, (key, value) in enumerate(BATCHES["batch_pairs"](batch)):
            written[first + i] = (key, value)
            model[key] = value
    store = compactlog.open(str(work), clock=lambda: 2_000_000)
    try:
        read = [(r.offset, r.key, r.value) for r in store.read("t", 0)]  # opening the log recovers it
        assert leftovers(work) == [], f"left after recovery: {leftovers(work)}"
        end = store.log_end_offset("t", 0)
        checkpoint = read_checkpoint(work / "cleaner-offset-checkpoint").get(("t", 0), 0)
        assert checkpoint <= end, f"checkpoint {checkpoint} beyond the log end {end}"
    finally:
        store.close()
    # The batch in flight may have left a prefix (whole frames), never a record out of place.
    if run.in_flight is not None:
        batch, first = run.in_flight
        prefix = [(o, k, v) for o, k, v in read if o >= first]
        pairs = BATCHES["batch_pairs"](batch)
        assert [(o, k, v) for o, k, v in prefix] == [(first + i, *pairs[i]) for i in range(len(prefix))]
        for offset, key, value in prefix:
            written[offset] = (key, value)
            model[key] = value
    for offset, key, value in read:
        assert written.get(offset) == (key, value), f"offset {offset}: {(key, value)} was never written there"
    state = {key: value for _, key, value in read}  # tombstones stay: the clock never passes their horizon
    assert state == model, "the newest record of some key is not the newest acknowledged one"


@pytest.fixture(scope="module")
def workload_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("workload") / "data"
    build(path, records=1500, keys=200, per_segment=150)
    return path


def test_kill_9_at_every_fault_point_and_at_random_moments(workload_base: Path, tmp_path: Path) -> None:
    base_records = snapshot(workload_base)
    landed: Counter[str] = Counter()
    # A run to the end: the workload passes every point, and all it acknowledged is there.
    work = tmp_path / "whole"
    shutil.copytree(workload_base, work)
    whole = run_child(work)
    assert whole.returncode == 0 and whole.lines[-1] == "done", whole.stderr
    check_recovered(work, base_records, whole)
    # Each point at its first hit, and the swap's steps and appends at a later one too.
    # (create_topic's and delete_topic's points are not on this workload's path: test_topic_creation.py and
    # test_delete_topic_crash.py kill there.)
    on_path = [p for p in FAULT_POINTS if not p.startswith(("store.create-", "store.delete-"))]
    armed = [*on_path, "log.frame-appended:5", "log.roll-sealed:3", "cleaner.swap-renamed:2",
             "cleaner.old-deleted:3", "cleaner.swap-installed:2", "checkpoint.tmp-written:2"]
    for n, fault in enumerate(armed):
        work = tmp_path / f"fault-{n}"
        shutil.copytree(workload_base, work)
        run = run_child(work, fault=fault)
        assert run.returncode == -signal.SIGKILL and run.fault == fault.partition(":")[0], (fault, run.stderr)
        landed[fault] += 1
        check_recovered(work, base_records, run)
        carry_on(work)
    # And at random moments of a run (kill -9 from outside), counted by where the child was.
    rng = random.Random(11)
    for n in range(6):
        work = tmp_path / f"random-{n}"
        shutil.copytree(workload_base, work)
        run = run_child(work, kill_after=rng.uniform(0.0, whole.work_seconds))
        inside = "swap" if any(f.endswith((".cleaned", ".swap")) for f in os.listdir(work / "t-0")) else run.phase
        landed[f"random:{inside}"] += 1
        check_recovered(work, base_records, run)
        carry_on(work)
    print("kills landed:", dict(landed))
    assert all(landed[fault] == 1 for fault in armed)
    assert sum(v for k, v in landed.items() if k.startswith("random:")) == 6


def carry_on(work: Path) -> None:
    """After recovery the cleaner runs again, and the checkpoint's temporary file is gone with its write."""
    before = snapshot(work)
    store = compactlog.open(str(work), clock=lambda: 2_000_000)
    store.clean(force=True)
    store.close()
    after = snapshot(work)
    assert {k: v for _, k, v in after} == {k: v for _, k, v in before}
    assert not (work / "cleaner-offset-checkpoint.tmp").exists()
