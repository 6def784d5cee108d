"""Crash safety of the cleaner: a crash at every step of the swap, and kill -9 at random moments.

Recovery must leave either the old segments or the new ones, never a mix, never a loss, and no
``.cleaned``, ``.swap`` or ``.deleted`` file behind.
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
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import compactlog

pytestmark = pytest.mark.integration

TRANSIT = (".cleaned", ".swap", ".deleted", ".sealing")


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


def leftovers(data_dir: Path) -> list[str]:
    return [n for n in os.listdir(data_dir / "t-0") if n.endswith(TRANSIT)]


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


CLEANER_SCRIPT = textwrap.dedent("""
    import sys
    import compactlog
    store = compactlog.open(sys.argv[1], clock=lambda: 2_000_000)
    store.describe("t")
    print("ready", flush=True)
    store.clean(force=True)
    print("done", flush=True)
""")


def test_kill_9_during_clean_recovers_old_or_new(pristine: Path, tmp_path: Path) -> None:
    big = tmp_path / "big"
    build(big, records=20_000, keys=2_000, per_segment=2_000)
    old = snapshot(big)
    new = cleaned_copy(big, tmp_path / "reference")
    script = tmp_path / "cleaner.py"
    script.write_text(CLEANER_SCRIPT)
    rng = random.Random(11)
    outcomes = set()
    for attempt in range(4):
        work = tmp_path / f"kill-{attempt}"
        shutil.copytree(big, work)
        proc = subprocess.Popen([sys.executable, str(script), str(work)], stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(rng.uniform(0.0, 0.6))
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        recovered = snapshot(work)
        assert recovered in (old, new), f"attempt {attempt}: neither old nor new"
        outcomes.add("old" if recovered == old else "new")
        assert leftovers(work) == []
    assert outcomes  # at least one attempt ran; which side each landed on depends on timing
