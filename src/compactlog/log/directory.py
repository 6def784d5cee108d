"""A partition directory: which of its files are live segments, and making its changes durable.

``<data-dir>/<topic>-<partition>/`` holds files named by a base offset (:mod:`compactlog.segment`). A live
segment is ``<base>.parquet`` (sealed) or ``<base>.log`` (active) with nothing after the suffix; any
other suffix marks a file in transit, which only the loader (:mod:`.loader`) and the swap (:mod:`.swap`)
act on. Renames and creations in the directory are made durable by fsyncing the directory itself.
"""

from __future__ import annotations

import os
import time

from ..faults import io_fault
from ..segment import ACTIVE_SUFFIX, SEALED_SUFFIX, fsync_path, is_segment_name, offset_from_name


def fsync_dir(path: str) -> None:
    """Make a directory's renames and creations durable (a directory fsyncs like a file)."""
    io_fault("log.dir-fsync")
    fsync_path(path)


def segment_names(directory: str) -> list[str]:
    """Every file of ``directory`` named by a base offset, live or in transit."""
    return [n for n in os.listdir(directory) if is_segment_name(n)]


def is_live_sealed(name: str) -> bool:
    """``<base>.parquet`` itself, not a file in transit such as ``<base>.parquet.swap``."""
    return name.endswith(SEALED_SUFFIX) and name.count(".") == 1


def live_segments(directory: str) -> tuple[dict[int, str], dict[int, str]]:
    """The live sealed and active segment files of ``directory``, each by base offset."""
    sealed: dict[int, str] = {}
    active: dict[int, str] = {}
    for name in segment_names(directory):
        if is_live_sealed(name):
            sealed[offset_from_name(name)] = name
        elif name.endswith(ACTIVE_SUFFIX) and name.count(".") == 1:
            active[offset_from_name(name)] = name
    return sealed, active


def segments_changed(directory: str, sealed_inodes: dict[int, int], active_base: int) -> bool:
    """Whether the live segments of ``directory`` are no longer the sealed ones known (base offset -> inode)
    and the active one at ``active_base``: a segment added, removed or replaced (rolled, swapped,
    retention-deleted, or a topic deleted and created again)."""
    sealed, active = live_segments(directory)
    if set(sealed) != set(sealed_inodes) or max(active, default=-1) != active_base or active_base in sealed:
        return True
    for base, inode in sealed_inodes.items():
        try:
            if os.stat(os.path.join(directory, sealed[base])).st_ino != inode:
                return True
        except FileNotFoundError:
            return True
    return False


# What a listing of a directory depends on: its inode and its modification time, which every creation, rename
# and removal of a file in it sets. (inode, st_mtime_ns).
DirectoryStamp = tuple[int, int]

# File systems keep a directory's times at a coarse granularity (a kernel tick; 1 s on ext3, 2 s on FAT), so a
# change in the same tick as a listing can leave the stamp as the listing saw it. A stamp therefore stands for
# its listing only when the directory had not changed for this long when it was read.
SETTLED_NS = 3_000_000_000


def directory_stamp(directory: str) -> DirectoryStamp | None:
    """The directory's stamp now; None if it does not exist."""
    try:
        stat = os.stat(directory)
    except FileNotFoundError:
        return None
    return stat.st_ino, stat.st_mtime_ns


def listing_stamp(directory: str) -> DirectoryStamp | None:
    """The stamp to keep with a listing of ``directory`` made right after this call: the directory's stamp
    when it is settled (:func:`stamp_settled`), else None (the next look lists it again)."""
    read_at = time.time_ns()  # before the stat: the file system's own clock, which its timestamps come from
    stamp = directory_stamp(directory)
    return stamp if stamp is not None and stamp_settled(stamp, read_at) else None


def stamp_settled(stamp: DirectoryStamp, read_at_ns: int) -> bool:
    """Whether a listing made after reading ``stamp`` at ``read_at_ns`` (wall-clock ns) stays true for as long
    as the directory's stamp equals ``stamp``: its last change was at least :data:`SETTLED_NS` before, so any
    later change gives a later modification time."""
    return read_at_ns - stamp[1] >= SETTLED_NS
