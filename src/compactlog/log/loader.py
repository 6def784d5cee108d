"""Opening a partition's log (Kafka's ``LogLoader``): every crash point of the partition directory with its
recovery, and loading the segment list.

Crash points and their recovery (:func:`recover`, run when the log is opened and again whenever the lock
holder finds the directory changed by another process):

* append (``log.frame-appended``): a torn or corrupt tail of the active segment is truncated at the last
  whole, checksummed frame when it is opened (:func:`load`);
* roll (:func:`seal`, then :meth:`compactlog.log.Log.roll`; ``log.roll-sealed``): ``<base>.parquet.sealing``
  is written and fsynced, renamed to ``<base>.parquet``, the next ``.log`` created, the old ``.log``
  removed. A leftover ``.sealing`` file is deleted (the ``.log`` still holds the data); a ``.log`` beside a
  ``.parquet`` of the same base is deleted (the roll completed); an older ``.log`` without its
  ``.parquet`` is sealed again;
* the cleaner's swap (``.cleaned`` -> ``.swap`` -> live): its recovery sits next to the swap, in
  :func:`.swap.recover`; skipped, as is the sealing of older ``.log`` files, while a live cleaner holds
  ``.cleaner.lock``;
* ``.deleted`` files (segments replaced by the swap or removed by retention, awaiting
  ``file.delete.delay.ms`` in a process that crashed): removed;
* producer-state snapshot (``log.snapshot-tmp-written``, :mod:`.producers`): a leftover
  ``.snapshot.tmp`` is deleted (the older snapshot and the log rebuild the state).

A read-only log writes nothing, not even recovery: :func:`check_recovered` refuses a directory whose
recovery would write, and :func:`load` opens the active segment without truncating it.
"""

from __future__ import annotations

import itertools
import os

from ..active_segment import ActiveSegment
from ..errors import CorruptSegmentError, ReadOnlyStoreError
from ..faults import io_fault
from ..producer_state import AbortedTxn
from ..sealed_segment import SealedSegment, write_sealed
from ..segment import (
    ACTIVE_SUFFIX,
    DELETED_SUFFIX,
    SEALED_SUFFIX,
    SEALING_SUFFIX,
    offset_from_name,
    removed_on_error,
    segment_name,
)
from . import swap
from .directory import fsync_dir, is_live_sealed, live_segments, segment_names
from .producers import SNAPSHOT_TMP_SUFFIX, aborted_in


def recover(directory: str, read_only: bool, compression: str) -> None:
    """Bring ``directory`` to a state with no crash left to recover (see the module docstring)."""
    names = segment_names(directory)
    if read_only:
        return check_recovered(directory, names)  # nothing may be written: refuse what needs it
    for name in names:
        if name.endswith((DELETED_SUFFIX, SEALING_SUFFIX, SNAPSHOT_TMP_SUFFIX)):
            os.unlink(os.path.join(directory, name))
    if swap.cleaner_is_live(directory):
        return
    swap.recover(directory)
    sealed, active = live_segments(directory)
    for base, name in sorted(active.items()):
        path = os.path.join(directory, name)
        if base in sealed:
            os.unlink(path)
        elif base != max(active):
            segment, _ = ActiveSegment.open(path, base, truncate=True)
            seal(directory, segment, compression)
            os.unlink(path)
    fsync_dir(directory)


def check_recovered(directory: str, names: list[str]) -> None:
    """Refuse to open a read-only partition whose files need recovery, which writes: ``.swap`` files a
    cleaner swap left to install (with no ``.cleaned`` file at or below them), or an older ``.log`` whose
    roll never sealed it. Leftovers that recovery only deletes (``.deleted``, ``.sealing``, ``.cleaned``, a
    ``.log`` beside its ``.parquet``) are ignored by reads."""
    _, pending = swap.interrupted_swap(names)
    sealed = {offset_from_name(n) for n in names if is_live_sealed(n)}
    active = [offset_from_name(n) for n in names if n.endswith(ACTIVE_SUFFIX) and n.count(".") == 1]
    unsealed = [b for b in active if b not in sealed and b != max(active)]
    if pending or unsealed:
        what = f"an interrupted cleaner swap ({pending[0]})" if pending else f"an unsealed segment ({unsealed[0]})"
        raise ReadOnlyStoreError(f"{directory}: needs crash recovery of {what}, which writes, but the data "
                                 "directory is read-only; open it once from a process that can write it")


def seal(directory: str, segment: ActiveSegment, compression: str,
         aborted: list[AbortedTxn] | None = None) -> SealedSegment:
    """Write ``segment`` as ``<base>.parquet`` (via ``.sealing``) with its transaction index ``aborted``
    (derived from its rows when None: an orphaned ``.log`` found by recovery); the caller removes the
    ``.log``."""
    final = os.path.join(directory, segment_name(segment.base_offset, SEALED_SUFFIX))
    sealing = final + SEALING_SUFFIX
    if aborted is None:
        aborted = aborted_in(segment)
    write_sealed(sealing, segment.to_table(), segment.base_offset, segment.next_offset, compression, aborted)
    with removed_on_error(sealing):
        io_fault("log.seal-rename")
        os.replace(sealing, final)
    fsync_dir(directory)
    return SealedSegment.open(final, segment.base_offset)


def load(directory: str, read_only: bool) -> tuple[list[SealedSegment], ActiveSegment, int | None]:
    """The recovered directory's sealed segments in offset order and its active segment (created, empty,
    at the end of the sealed ones if there is none), and the bytes truncated from the active segment's
    tail when an existing one was opened (else None)."""
    sealed_names, active_names = live_segments(directory)
    sealed = [SealedSegment.open(os.path.join(directory, sealed_names[b]), b) for b in sorted(sealed_names)]
    for before, after in itertools.pairwise(sealed):
        if before.next_offset > after.base_offset:
            raise CorruptSegmentError(
                f"{directory}: segment {before.base_offset} ends at {before.next_offset}, "
                f"past the next segment's base {after.base_offset}")
    end = sealed[-1].next_offset if sealed else 0
    active_bases = [b for b in active_names if b not in sealed_names]
    if active_bases:
        base = max(active_bases)
        if base < end:  # reads would skip [base, end) of the active segment
            raise CorruptSegmentError(
                f"{directory}: segment {sealed[-1].base_offset} ends at {end}, past the active segment's "
                f"base {base}")
        active, recovered = ActiveSegment.open(os.path.join(directory, active_names[base]), base,
                                               truncate=not read_only)
        return sealed, active, recovered
    path = os.path.join(directory, segment_name(end, ACTIVE_SUFFIX))
    if read_only:
        return sealed, ActiveSegment(path, end), None
    active = ActiveSegment.create(path, end)
    fsync_dir(directory)
    return sealed, active, None
