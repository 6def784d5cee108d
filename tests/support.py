"""Helpers shared by tests: a fake clock, so nothing time-dependent ever sleeps; a read-only view of a
directory; what crash tests look for after a kill (files left in transit, where an armed fault point landed)."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest


class FakeClock:
    """A clock for ``compactlog.open(..., clock=...)``: epoch milliseconds that move only when told."""

    def __init__(self, now: int = 1_700_000_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return int(self.now)

    def advance(self, ms: int) -> int:
        """Move the clock forward by ``ms`` milliseconds; returns the new time."""
        self.now += ms
        return int(self.now)


def check_cleaned_below(records: dict[int, list], present: set[int], end_offset: int, now: int,
                        retention_ms: int, status: Callable[[list], str] = lambda record: "committed") -> None:
    """The cleaner's liveness and safety after a clean to ``end_offset``, against a model's records
    (offset -> ``[key, value, _, stamped]``, ``stamped`` the time of the first clean that kept the record, or
    None) and the offsets ``present`` in the log: below the end no open transaction's data, no aborted
    record and no superseded record remains, every key's newest record does unless it is a tombstone whose
    ``retention_ms`` has passed since it was stamped. Records this clean kept are stamped ``now``."""
    newest: dict[bytes, int] = {}
    for offset in sorted(o for o in records if o < end_offset):
        record_status = status(records[offset])
        assert record_status != "open", f"a clean to {end_offset} passed open transaction data at {offset}"
        if record_status == "aborted":
            assert offset not in present, f"aborted record {offset} survived a clean to {end_offset}"
            continue
        key = records[offset][0]
        if key in newest:
            assert newest[key] not in present, f"superseded record {newest[key]} survived a clean to {end_offset}"
        newest[key] = offset
    for offset in newest.values():
        _, value, _, stamped = records[offset]
        expired = value is None and stamped is not None and now >= stamped + retention_ms
        assert (offset in present) == (not expired), (
            f"{'expired tombstone' if expired else 'newest record'} {offset}: present={offset in present} "
            f"after a clean to {end_offset}")
        if stamped is None:
            records[offset][3] = now  # this clean kept it and stamped it if it is a tombstone


@contextlib.contextmanager
def read_only_view(source: Path) -> Iterator[Path]:
    """``source`` seen through a read-only bind mount, where no process may write, root included (file
    permissions do not stop root). Without the right to mount (not root), ``source`` itself with its write
    permissions removed, restored afterwards. The mount is removed at exit."""
    if os.geteuid() != 0:
        modes = {p: p.stat().st_mode for p in [source, *source.rglob("*")]}
        for path, mode in modes.items():
            path.chmod(mode & ~0o222)
        try:
            yield source
        finally:
            for path, mode in modes.items():
                path.chmod(mode)
        return
    target = Path(tempfile.mkdtemp(prefix="compactlog-ro-"))
    try:
        mounted = subprocess.run(["mount", "--bind", str(source), str(target)], capture_output=True)
        if mounted.returncode != 0:
            pytest.skip(f"cannot bind-mount as root here: {mounted.stderr.decode().strip()}")
        try:
            subprocess.run(["mount", "-o", "remount,ro,bind", str(target)], check=True, capture_output=True)
            yield target
        finally:  # lazily if a file is still open under it (a failing test's store), so no mount is left
            if subprocess.run(["umount", str(target)], capture_output=True).returncode != 0:
                subprocess.run(["umount", "--lazy", str(target)], check=True, capture_output=True)
    finally:
        target.rmdir()


# Files that exist only while an operation is in flight (the swap's, a roll's, an atomic write's): recovery
# removes or completes each, so none may be left once a store has opened its logs.
TRANSIT_SUFFIXES = (".cleaned", ".swap", ".deleted", ".sealing", ".tmp", ".del", ".deleting", ".new")
FAULT_LINE = re.compile(r"^compactlog fault point (\S+) hit (\d+)$", re.M)


def leftovers(directory: Path) -> list[str]:
    """Files in transit anywhere under ``directory`` (relative paths)."""
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*") if p.name.endswith(TRANSIT_SUFFIXES))


def fault_landed(stderr: str) -> str | None:
    """The fault point a killed child reported on stderr (:mod:`compactlog.faults`), if any."""
    hit = FAULT_LINE.search(stderr)
    return hit.group(1) if hit else None
