"""Named fault points: where a crash test may kill the process, at every crash point of the log and cleaner.

``fault_point(name)`` does nothing unless the environment variable ``COMPACTLOG_FAULT_POINT`` named it when
this module was imported: ``<name>`` kills the process at the point's first hit, ``<name>:<n>`` at its
n-th. The kill is SIGKILL of the process itself (nothing is flushed, no handler runs, as in a power cut),
after one line ``compactlog fault point <name> hit <n>`` on stderr, so a test can tell where it landed.
Unarmed, a point costs one comparison.

``io_fault(name)`` is the same for injected I/O errors: at the I/O points below it raises ``OSError``
(``ENOSPC`` or ``EIO``) instead of writing or syncing, as a full or failing disk would. It is armed by
``COMPACTLOG_FAULT_IO=<name>[:<n>][:ENOSPC|EIO]`` at import (every hit from the n-th fails, as a full
disk stays full) or by :func:`arm_io_fault` in a test; unarmed it costs one comparison.
"""

from __future__ import annotations

import errno
import os
import signal

from .errors import ConfigError

FAULT_POINT_ENV = "COMPACTLOG_FAULT_POINT"
FAULT_IO_ENV = "COMPACTLOG_FAULT_IO"

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
    # create_topic's steps (compactlog.topic_creation):
    "store.create-marked",  # the .topics/<topic>.new marker is written, no partition directory made
    "store.create-partition-made",  # one partition directory is made, the metadata not yet written
    "store.create-metadata-written",  # the metadata is written (the topic exists), the marker not yet removed
    # delete_topic's steps (compactlog.topic_deletion):
    "store.delete-marked",  # the .topics/<topic>.del marker is written, nothing else done
    "store.delete-checkpoint-cleared",  # the topic's checkpoints are removed, no partition directory renamed
    "store.delete-partition-renamed",  # one partition directory renamed -delete, the metadata still there
    "store.delete-metadata-removed",  # the metadata is removed, the marker not yet
    "store.delete-unmarked",  # the marker is removed, the -delete directories not yet
)

# Every I/O point: where a write or an fsync may fail with an injected OSError.
IO_FAULT_POINTS = (
    "log.frame-write",  # one frame of an append is about to be written to the active segment
    "log.fsync",  # the active segment is about to be fsynced (an append's flush or Log.flush)
    "log.snapshot-write",  # a roll's producer-state snapshot is about to be written to its .snapshot.tmp
)
IO_ERRORS = {"ENOSPC": errno.ENOSPC, "EIO": errno.EIO}


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


def _io_armed(value: str | None) -> tuple[str, int, int] | None:
    """``(point, first failing hit, errno)`` from a ``COMPACTLOG_FAULT_IO`` value, None when unset."""
    if not value:
        return None
    name, *rest = value.split(":")
    nth, code = "1", "ENOSPC"
    for part in rest:
        if part.isdigit():
            nth = part
        else:
            code = part
    if name not in IO_FAULT_POINTS or code not in IO_ERRORS or len(rest) > 2 or int(nth) < 1:
        raise ConfigError(f"{FAULT_IO_ENV}={value!r}: expected <point>[:<n>][:ENOSPC|EIO], "
                          f"points: {', '.join(IO_FAULT_POINTS)}")
    return name, int(nth), IO_ERRORS[code]


_IO_ARMED = _io_armed(os.environ.get(FAULT_IO_ENV))
_io_hits = 0


def arm_io_fault(name: str | None, nth: int = 1, code: str = "ENOSPC") -> None:
    """Fail point ``name`` from its ``nth`` hit on with ``code`` (``None`` disarms); for in-process tests."""
    global _IO_ARMED, _io_hits
    _IO_ARMED = None if name is None else _io_armed(f"{name}:{nth}:{code}")
    _io_hits = 0


def io_fault(name: str) -> None:
    """Raise the armed ``OSError`` here if this I/O point is armed and its failing hit has come."""
    global _io_hits
    if _IO_ARMED is None or name != _IO_ARMED[0]:
        return
    _io_hits += 1
    if _io_hits >= _IO_ARMED[1]:
        raise OSError(_IO_ARMED[2], f"injected {os.strerror(_IO_ARMED[2])} at {name}")


def rearm() -> None:
    """Read ``COMPACTLOG_FAULT_POINT`` again and count hits from zero: for a process that sets it after
    importing compactlog (the fault harness's workload, started ahead so that its imports overlap the
    driver's checks)."""
    global _ARMED, _hits
    _ARMED, _hits = _armed(), 0
