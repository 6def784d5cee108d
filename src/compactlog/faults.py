"""Named fault points: where a crash test may kill the process, at every crash point of the log and cleaner.

``fault_point(name)`` does nothing unless the environment variable ``COMPACTLOG_FAULT_POINT`` named it when
this module was imported: ``<name>`` kills the process at the point's first hit, ``<name>:<n>`` at its
n-th. The kill is SIGKILL of the process itself (nothing is flushed, no handler runs, as in a power cut),
after one line ``compactlog fault point <name> hit <n>`` on stderr, so a test can tell where it landed.
Unarmed, a point costs one comparison.
"""

from __future__ import annotations

import os
import signal

from .errors import ConfigError

FAULT_POINT_ENV = "COMPACTLOG_FAULT_POINT"

# Every point, in the order a produce-roll-clean cycle meets them.
FAULT_POINTS = (
    "log.frame-appended",  # a frame is in the active segment, not yet flushed nor followed by the next
    "log.roll-sealed",  # <base>.parquet is in place, the next .log not yet created nor the old one removed
    "log.snapshot-tmp-written",  # a roll's producer-state snapshot is in .snapshot.tmp, not yet renamed
    "cleaner.cleaned-written",  # every group's .cleaned file is written and checked, none renamed yet
    "cleaner.swap-renamed",  # one .cleaned file renamed .swap (highest base first)
    "cleaner.old-deleted",  # one old segment renamed .deleted (lowest first)
    "cleaner.swap-installed",  # one .swap file renamed to its live name (lowest first)
    "cleaner.before-checkpoint",  # the swap is complete, the checkpoint not yet advanced
    "checkpoint.tmp-written",  # the new checkpoint file is written and fsynced, not yet renamed over the old
    "cleaner.after-checkpoint",  # the checkpoint is advanced
)


def _armed() -> tuple[str, int] | None:
    value = os.environ.get(FAULT_POINT_ENV)
    if not value:
        return None
    name, _, nth = value.partition(":")
    if name not in FAULT_POINTS or not (nth or "1").isdigit():
        raise ConfigError(f"{FAULT_POINT_ENV}={value!r}: expected <point>[:<n>], points: {', '.join(FAULT_POINTS)}")
    return name, int(nth or "1")


_ARMED = _armed()
_hits = 0


def fault_point(name: str) -> None:
    """Kill the process here if this point is armed and this is the armed hit (see the module docstring)."""
    global _hits
    if _ARMED is None or name != _ARMED[0]:
        return
    _hits += 1
    if _hits == _ARMED[1]:
        os.write(2, f"compactlog fault point {name} hit {_hits}\n".encode())
        os.kill(os.getpid(), signal.SIGKILL)


def rearm() -> None:
    """Read ``COMPACTLOG_FAULT_POINT`` again and count hits from zero: for a process that sets it after
    importing compactlog (the fault harness's workload, started ahead so that its imports overlap the
    driver's checks)."""
    global _ARMED, _hits
    _ARMED, _hits = _armed(), 0
