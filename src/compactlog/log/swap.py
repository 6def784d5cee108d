"""The cleaner's swap, Kafka's ``.cleaned`` -> ``.swap`` -> live protocol, and its crash recovery.

Installing a round's cleaned groups (:func:`install`; the cleaner reaches it only through
:meth:`compactlog.log.Log.swap_cleaned`, which holds the partition lock for the whole of it):

1. check that every source segment is still the file the round read (another cleaner or retention may
   have replaced it); if not, the round is abandoned and its ``.cleaned`` files removed;
2. rename every new file ``.cleaned`` -> ``.swap``, highest base offset first;
3. rename every old segment to ``.deleted`` (removed after ``file.delete.delay.ms``), lowest first;
4. rename every new file ``.swap`` -> ``<base>.parquet``, lowest first, and fsync the directory.

Either all of a round's groups in one call are installed or none. Recovery (:func:`recover`, run by the
loader when the log is opened, unless a live cleaner holds ``.cleaner.lock``) finishes or undoes a crash
at any step, as Kafka's loader: a ``.cleaned`` file left means step 2 had not finished, so ``.swap``
files at or above the lowest ``.cleaned`` offset and every ``.cleaned`` file are deleted and the old
segments stay; the remaining ``.swap`` files (the swap had started) replace the live segments in their
offset range. The ``.deleted`` files of step 3 are removed by the loader.
An I/O error at any step runs that recovery at once (the caller holds the cleaner's lock, which keeps the
loader's from running), so nothing of the failed swap stays in transit.

``hook`` (tests only) is called with the name of each step just after it happens, so a test can stop
the protocol there as a crash would; each step is also a named :mod:`compactlog.faults` point, where a
crash test kills the process for real.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Protocol

from ..errors import CleanerError
from ..faults import fault_point, io_fault
from ..sealed_segment import SealedSegment
from ..segment import CLEANED_SUFFIX, SWAP_SUFFIX, offset_from_name
from .directory import fsync_dir, is_live_sealed, segment_names

SwapHook = Callable[[str], None]
CLEANER_LOCK = ".cleaner.lock"


class CleanedFile(Protocol):
    """A cleaned group ready to swap in: its ``<base>.parquet.cleaned`` file, its base offset and the base
    offsets of the segments it replaces (the cleaner's ``GroupResult``)."""

    @property
    def cleaned_path(self) -> str: ...

    @property
    def base_offset(self) -> int: ...

    @property
    def source_bases(self) -> tuple[int, ...]: ...


def _no_hook(step: str) -> None:
    return None


def discard(cleaned: Iterable[CleanedFile]) -> None:
    """Remove the ``.cleaned`` files of groups that will not be installed."""
    for group in cleaned:
        if os.path.exists(group.cleaned_path):
            os.unlink(group.cleaned_path)


def install(directory: str, cleaned: Sequence[CleanedFile], live: Mapping[int, SealedSegment],
            source_inodes: Mapping[int, int], schedule_delete: Callable[[str], None],
            hook: SwapHook | None = None) -> tuple[set[int], list[SealedSegment]]:
    """Swap ``cleaned`` in for their source segments among the ``live`` ones (the caller holds the partition
    lock); ``schedule_delete`` renames a replaced file ``.deleted``. Returns the base offsets replaced and
    the segments installed."""
    hook = hook or _no_hook
    for group in cleaned:
        for base in group.source_bases:
            segment = live.get(base)
            if segment is None or segment.inode != source_inodes.get(base):
                discard(cleaned)
                raise CleanerError(
                    f"{directory}: segment {base} changed while it was being cleaned; round abandoned")
    hook("cleaned-written")
    fault_point("cleaner.cleaned-written")
    try:
        return _renamed(directory, cleaned, live, schedule_delete, hook)
    except OSError:  # an I/O error part-way: finished or undone now as after a crash (the cleaner's lock is ours)
        recover(directory)
        raise


def _renamed(directory: str, cleaned: Sequence[CleanedFile], live: Mapping[int, SealedSegment],
             schedule_delete: Callable[[str], None], hook: SwapHook) -> tuple[set[int], list[SealedSegment]]:
    """:func:`install`'s renames, once every source is known unchanged."""
    ordered = sorted(cleaned, key=lambda g: g.base_offset)
    for group in reversed(ordered):
        io_fault("cleaner.swap-rename")
        os.replace(group.cleaned_path, group.cleaned_path[: -len(CLEANED_SUFFIX)] + SWAP_SUFFIX)
        hook(f"swap-renamed:{group.base_offset}")
        fault_point("cleaner.swap-renamed")
    fsync_dir(directory)
    replaced = {base for group in ordered for base in group.source_bases}
    for base in sorted(replaced):
        schedule_delete(live[base].path)
        hook(f"old-deleted:{base}")
        fault_point("cleaner.old-deleted")
    installed = []
    for group in ordered:
        final = group.cleaned_path[: -len(CLEANED_SUFFIX)]
        io_fault("cleaner.install-rename")
        os.replace(final + SWAP_SUFFIX, final)
        hook(f"swap-installed:{group.base_offset}")
        fault_point("cleaner.swap-installed")
        installed.append(SealedSegment.open(final, group.base_offset))
    fsync_dir(directory)
    return replaced, installed


def interrupted_swap(names: Sequence[str]) -> tuple[list[str], list[str]]:
    """Of a directory's file names: the files an interrupted swap's recovery deletes (``.cleaned`` files and
    the ``.swap`` files at or above the lowest of them, in that order: swaps first), and the ``.swap``
    files it installs."""
    cleaned = [n for n in names if n.endswith(CLEANED_SUFFIX)]
    swaps = [n for n in names if n.endswith(SWAP_SUFFIX)]
    if not cleaned:
        return [], swaps
    min_cleaned = min(offset_from_name(n) for n in cleaned)
    doomed = [n for n in swaps if offset_from_name(n) >= min_cleaned]
    return doomed + cleaned, [n for n in swaps if offset_from_name(n) < min_cleaned]


def recover(directory: str) -> None:
    """Finish or undo an interrupted swap (see the module docstring); the caller fsyncs the directory."""
    doomed, swaps = interrupted_swap(segment_names(directory))
    for name in doomed:
        os.unlink(os.path.join(directory, name))
    if not swaps:
        return
    opened = [SealedSegment.open(os.path.join(directory, n)) for n in swaps]
    low = min(s.base_offset for s in opened)
    high = max(s.next_offset for s in opened)
    for name in segment_names(directory):
        if is_live_sealed(name) and low <= offset_from_name(name) < high:
            os.unlink(os.path.join(directory, name))
    for name in swaps:
        io_fault("cleaner.recovery-rename")
        os.replace(os.path.join(directory, name), os.path.join(directory, name[: -len(SWAP_SUFFIX)]))


def cleaner_is_live(directory: str) -> bool:
    """Whether a cleaner holds ``.cleaner.lock`` (its swap, in progress, must not be recovered)."""
    fd = os.open(os.path.join(directory, CLEANER_LOCK), os.O_CREAT | os.O_RDWR, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False
