"""Segments: the files of one partition, the names they go by, and what planning sees of each.

A partition directory holds segments named by their base offset, zero-padded to 20 digits
(:func:`segment_name`), then a suffix:

* ``<base>.log``: the **active segment**, one append-only file of checksummed frames
  (:mod:`compactlog.active_segment`, which owns its format and the recovery of a torn tail);
* ``<base>.parquet``: a **sealed segment**, a Parquet file written once, its footer holding the segment's
  metadata and transaction index (:mod:`compactlog.sealed_segment`, which owns its format).

Suffixes of files in transit (Kafka's): ``.cleaned`` (cleaner output being written), ``.swap`` (output
ready to replace old segments), ``.deleted`` (replaced, awaiting ``file.delete.delay.ms``) and ``.sealing``
(a roll writing its Parquet file). Recovery of each is in :mod:`compactlog.log`.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .faults import io_fault

OFFSET_DIGITS = 20
ACTIVE_SUFFIX = ".log"
SEALED_SUFFIX = ".parquet"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
DELETED_SUFFIX = ".deleted"
SEALING_SUFFIX = ".sealing"


def segment_name(base_offset: int, suffix: str) -> str:
    """``00000000000000000042.parquet``: the base offset, zero-padded to 20 digits, then the suffix."""
    return f"{base_offset:0{OFFSET_DIGITS}d}{suffix}"


def offset_from_name(name: str) -> int:
    """The base offset a file name starts with (the text before the first dot)."""
    return int(name.split(".", 1)[0])


def is_segment_name(name: str) -> bool:
    head = name.split(".", 1)[0]
    return len(head) == OFFSET_DIGITS and head.isdigit()


@dataclass(frozen=True, slots=True)
class SegmentMeta:
    """What a segment holds, as planning and describe() see it."""

    base_offset: int
    next_offset: int
    size_bytes: int
    record_count: int
    control_count: int
    first_timestamp: int
    max_timestamp: int
    active: bool


@contextlib.contextmanager
def removed_on_error(path: str) -> Iterator[None]:
    """Around the writing (and renaming) of a temporary file: an error removes it, so a full or failing disk
    leaves no partial file behind."""
    try:
        yield
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        raise


def truncate_file(path: str, size: int) -> None:
    """Cut the file at ``path`` to ``size`` bytes, durably: an active segment's torn tail at its opening, or
    the frames of an append that failed."""
    with open(path, "r+b") as f:
        io_fault("log.truncate")
        f.truncate(size)
        os.fsync(f.fileno())


def fsync_path(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass(frozen=True, slots=True)
class SegmentStats:
    """One segment as the planner sees it.

    ``next_offset`` is one past the offsets the segment covers: the next segment's base offset, or the log end
    offset for the active segment. ``max_timestamp``/``first_timestamp`` are -1 for an empty segment.
    ``first_timestamp`` plays Kafka's first-batch timestamp (used by max.compaction.lag.ms and time rolls).
    """

    base_offset: int
    next_offset: int
    size_bytes: int
    record_count: int
    max_timestamp: int
    first_timestamp: int
    active: bool

    @classmethod
    def from_meta(cls, meta: Any) -> SegmentStats:
        """The stats of any segment-metadata object with the same attribute names (duck typed)."""
        return cls(meta.base_offset, meta.next_offset, meta.size_bytes, meta.record_count, meta.max_timestamp,
                   meta.first_timestamp, meta.active)

    @property
    def is_empty(self) -> bool:
        return self.size_bytes == 0 and self.record_count == 0
