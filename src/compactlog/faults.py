"""Named fault points: where a crash test may kill the process, at every crash point of the log and cleaner.

``fault_point(name)`` does nothing unless the environment variable ``COMPACTLOG_FAULT_POINT`` named it when
this module was imported: ``<name>`` kills the process at the point's first hit, ``<name>:<n>`` at its
n-th. The kill is SIGKILL of the process itself (nothing is flushed, no handler runs, as in a power cut),
after one line ``compactlog fault point <name> hit <n>`` on stderr, so a test can tell where it landed.
Unarmed, a point costs one comparison.

``io_fault(name)`` is the same for injected I/O errors: at the I/O points below (every write, fsync, rename
and truncation of the store's files) it raises ``OSError`` (``ENOSPC`` or ``EIO``) instead of doing it, as a
full or failing disk would. It is armed by ``COMPACTLOG_FAULT_IO=<name>[:<n>][:ENOSPC|EIO]`` at import
(several entries separated by ``,``; every hit from the n-th fails, as a full disk stays full) or by
:func:`arm_io_fault` in a test; unarmed it costs one test of an empty dict. The error's message starts with
``injected`` and ends with ``at <name>``: :func:`injected_point` finds it in an error's chain.
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

# Every I/O point: where a write, an fsync, a rename or a truncation may fail with an injected OSError. Each
# is placed once, just before the call it stands for.
IO_FAULT_POINTS = (
    # a partition's log (compactlog.log, compactlog.active_segment):
    "log.frame-write",  # one frame of an append is about to be written to the active segment
    "log.fsync",  # the active segment is about to be fsynced (an append's flush or Log.flush)
    "log.truncate",  # the active segment is about to be cut: a failed append's frames, or a torn tail at open
    "log.segment-create",  # a new active segment's .log is about to be created and fsynced (a roll, a new log)
    "log.seal-rename",  # a roll's <base>.parquet.sealing, written and fsynced, is about to be renamed .parquet
    "log.delete-rename",  # a segment (retention, or replaced by the cleaner) is about to be renamed .deleted
    "log.dir-fsync",  # a partition directory (or the data directory, a topic created) is about to be fsynced
    "log.snapshot-write",  # a roll's producer-state snapshot is about to be written to its .snapshot.tmp
    "log.snapshot-fsync",  # the snapshot's .snapshot.tmp is about to be fsynced
    "log.snapshot-rename",  # the snapshot's .snapshot.tmp is about to be renamed .snapshot
    # a sealed segment's Parquet file (sealed_segment.SegmentWriter: a roll's seal, the cleaner's .cleaned):
    "segment.row-group-write",  # a row group is about to be encoded and written
    "segment.footer-write",  # the footer is about to be written (the writer closed)
    "segment.footer-reverse",  # a newest-first file's footer is about to be rewritten oldest first
    "segment.fsync",  # the whole file is about to be fsynced
    # the cleaner's swap (compactlog.log.swap):
    "cleaner.swap-rename",  # a .cleaned file is about to be renamed .swap
    "cleaner.install-rename",  # a .swap file is about to be renamed to its live name
    "cleaner.recovery-rename",  # recovery is about to install a .swap file an interrupted swap left
    # the cleaner checkpoint (compactlog.checkpoint):
    "checkpoint.write",  # cleaner-offset-checkpoint.tmp is about to be written
    "checkpoint.fsync",  # the .tmp is about to be fsynced
    "checkpoint.rename",  # the .tmp is about to be renamed over cleaner-offset-checkpoint
    "checkpoint.dir-fsync",  # the data directory is about to be fsynced after the rename
    # cleaner-state.json (compactlog.cleaner.state):
    "cleaner-state.write",  # cleaner-state.json.tmp is about to be written
    "cleaner-state.fsync",  # the .tmp is about to be fsynced
    "cleaner-state.rename",  # the .tmp is about to be renamed over cleaner-state.json
    "cleaner-state.dir-fsync",  # the data directory is about to be fsynced after the rename
    # a topic's .topics/<topic>.json (compactlog.topic_metadata):
    "topic-metadata.write",  # the .<uuid>.tmp is about to be written
    "topic-metadata.fsync",  # the .tmp is about to be fsynced
    "topic-metadata.rename",  # the .tmp is about to be renamed <topic>.json
    "topic-metadata.dir-fsync",  # .topics is about to be fsynced after the rename
    # create_topic (compactlog.topic_creation):
    "topic-creation.marker-write",  # the .topics/<topic>.new marker is about to be written
    "topic-creation.marker-fsync",  # the marker is about to be fsynced
    "topic-creation.marker-dir-fsync",  # .topics is about to be fsynced after the marker's creation
    "topic-creation.partition-mkdir",  # a partition directory is about to be made
    "topic-creation.partition-dir-fsync",  # the data directory is about to be fsynced after the mkdirs
    "topic-creation.unmark-dir-fsync",  # .topics is about to be fsynced after the marker's removal
    # delete_topic (compactlog.topic_deletion):
    "topic-deletion.marker-write",  # the .topics/<topic>.del marker is about to be written
    "topic-deletion.marker-fsync",  # the marker is about to be fsynced
    "topic-deletion.marker-dir-fsync",  # .topics is about to be fsynced after the marker's creation
    "topic-deletion.partition-rename",  # a partition directory is about to be renamed <...>-delete
    "topic-deletion.partition-dir-fsync",  # the data directory is about to be fsynced after that rename
    "topic-deletion.metadata-dir-fsync",  # .topics is about to be fsynced after the metadata's removal
    "topic-deletion.unmark-dir-fsync",  # .topics is about to be fsynced after the marker's removal
    # .transactions (compactlog.transaction_state_manager):
    "transaction-state.append",  # a state line is about to be appended to <id>.state
    "transaction-state.fdatasync",  # <id>.state is about to be fdatasynced
    "transaction-state.dir-fsync",  # .transactions is about to be fsynced after a new <id>.state
    "transaction-state.compact-write",  # a state log's compaction is about to write its .tmp
    "transaction-state.compact-rename",  # the compaction's .tmp is about to be renamed over <id>.state
    "transaction-state.compact-dir-fsync",  # .transactions is about to be fsynced after that rename
    "producer-ids.write",  # the producer-ids block file's .tmp is about to be written
    "producer-ids.fsync",  # the .tmp is about to be fsynced
    "producer-ids.rename",  # the .tmp is about to be renamed over producer-ids
    "producer-ids.dir-fsync",  # .transactions is about to be fsynced after the rename
    # meta.properties (compactlog.data_dir), when a store is created:
    "meta-properties.write",  # its .tmp is about to be written
    "meta-properties.fsync",  # the .tmp is about to be fsynced
    "meta-properties.link",  # the .tmp is about to be linked as meta.properties
    "meta-properties.dir-fsync",  # the data directory is about to be fsynced after the link
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
    """``(point, first failing hit, errno)`` from one ``COMPACTLOG_FAULT_IO`` entry, None when unset."""
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


def _io_armed_all(value: str | None) -> dict[str, list[int]]:
    """The armed I/O points of a ``COMPACTLOG_FAULT_IO`` value (entries separated by ``,``): point ->
    ``[first failing hit, errno, hits so far]``."""
    armed: dict[str, list[int]] = {}
    for entry in (value or "").split(","):
        parsed = _io_armed(entry)
        if parsed is not None:
            armed[parsed[0]] = [parsed[1], parsed[2], 0]
    return armed


_IO_ARMED = _io_armed_all(os.environ.get(FAULT_IO_ENV))


def arm_io_fault(name: str | None, nth: int = 1, code: str = "ENOSPC", add: bool = False) -> None:
    """Fail point ``name`` from its ``nth`` hit on with ``code``, alone or, with ``add``, beside the points
    already armed; ``None`` disarms every point. For in-process tests."""
    global _IO_ARMED
    armed = dict(_IO_ARMED) if add else {}
    if name is not None:
        armed.update(_io_armed_all(f"{name}:{nth}:{code}"))
    _IO_ARMED = armed


def io_fault(name: str) -> None:
    """Raise the armed ``OSError`` here if this I/O point is armed and its failing hit has come; its first
    failure writes ``compactlog io fault <name> hit <n>`` on stderr (as a crash point does)."""
    if not _IO_ARMED:
        return
    armed = _IO_ARMED.get(name)
    if armed is None:
        return
    armed[2] += 1
    if armed[2] >= armed[0]:
        if armed[2] == armed[0]:
            os.write(2, f"compactlog io fault {name} hit {armed[2]}\n".encode())
        raise OSError(armed[1], f"{INJECTED} {os.strerror(armed[1])} at {name}")


def io_hits(name: str) -> int:
    """How often armed point ``name`` was met since it was armed (0 when it is not armed)."""
    armed = _IO_ARMED.get(name)
    return armed[2] if armed is not None else 0


INJECTED = "injected"  # the first word of an injected OSError's message


def injected_point(error: BaseException | None) -> str | None:
    """The I/O point whose injected ``OSError`` ``error`` is, or was raised from or while handling (its
    ``__cause__`` and ``__context__`` chain), else None."""
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, OSError) and isinstance(error.strerror, str) and error.strerror.startswith(INJECTED):
            return error.strerror.rsplit(" at ", 1)[-1]
        error = error.__cause__ or error.__context__
    return None


def rearm() -> None:
    """Read ``COMPACTLOG_FAULT_POINT`` and ``COMPACTLOG_FAULT_IO`` again and count hits from zero: for a
    process that sets them after importing compactlog (the fault harness's workload, started ahead so that
    its imports overlap the driver's checks)."""
    global _ARMED, _hits, _IO_ARMED
    _ARMED, _hits = _armed(), 0
    _IO_ARMED = _io_armed_all(os.environ.get(FAULT_IO_ENV))
