"""Fetch read-ahead: the records of a consumer's next fetch, read while it parses the last response.

librdkafka keeps one Fetch in flight per broker, so without read-ahead a consumer waits, for every
response, for the broker to read the records and encode them as record batches. When a fetch of one
partition answers records, the broker starts reading the records of the fetch that will follow it (from
the offset after the last record, with the same byte limits and isolation level) in a storage thread, and
keeps them until that fetch arrives; any other fetch reads as before. Both isolation levels are read
ahead: librdkafka's consumers fetch read_committed unless told otherwise.

Rules, so that an answer read ahead is one a read at the moment of the fetch could give:

* only records of the partition's active segment are read ahead, and they are used only while the
  partition's active segment is the same object: its frames are appended to and never changed in place
  (a roll, a reopen after another process's change or an undone append makes a new object), and the
  cleaner never touches it, so the records read are still those at their offsets;
* the answer's high watermark, last stable offset and log start offset are read when it is used; the log
  only grew meanwhile, so they cover the records;
* the isolation level is part of what a read-ahead answers (:data:`ReadAheadKey`): a read_uncommitted
  read-ahead may hold records past the last stable offset, never given to a read_committed fetch. A
  read_committed read-ahead reads up to the last stable offset of its moment, which only grows while the
  active segment is the same object (it moves when the oldest open transaction ends; a new transaction
  starts at or past the log end); its records lie below it, so every transaction with records among them
  had ended by then, and the aborted transactions are listed when it is used (:mod:`.fetch`);
* only fetches whose byte limit is at most :data:`READ_AHEAD_MAX_BYTES` are read ahead, and at most
  :data:`MAX_READ_AHEADS` are kept (the oldest dropped), each used once: read-aheads hold at most
  MAX_READ_AHEADS x READ_AHEAD_MAX_BYTES of records. A read-ahead that meets
  an error (the offset was cleaned away meanwhile, the partition deleted) reads nothing: the fetch then
  reads as before, and meets and reports the error itself.

Runs on the event loop's thread; the reads run in the storage threads.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from dataclasses import dataclass

from ..active_segment import ActiveSegment

__all__ = ["MAX_READ_AHEADS", "READ_AHEAD_MAX_BYTES", "ReadAhead", "ReadAheadKey", "ReadAheads", "is_usable",
           "worth_reading_ahead"]

_log = logging.getLogger("compactlog.broker")
# Read-aheads kept at once: one a consumer of one partition; each holds one response (partition_max_bytes).
MAX_READ_AHEADS = 16
# The largest byte limit (the smaller of partition_max_bytes and max_bytes) of a fetch that is read ahead.
READ_AHEAD_MAX_BYTES = 8 << 20

# topic, partition, fetch offset, partition_max_bytes, max_bytes, read_committed: a fetch that asks exactly
# this.
ReadAheadKey = tuple[str, int, int, int, int, bool]


@dataclass(frozen=True)
class ReadAhead:
    """Records read ahead: the active segment they were read from, the encoded batches, the next offset."""

    active: ActiveSegment
    records: bytes
    next_offset: int


class ReadAheads:
    """The read-aheads in flight or done, by the fetch that may use them."""

    def __init__(self, max_entries: int = MAX_READ_AHEADS) -> None:
        self.max_entries = max_entries
        self._entries: OrderedDict[ReadAheadKey, asyncio.Future[ReadAhead | None]] = OrderedDict()
        self.used = 0  # read-aheads a fetch answered with, for tests and metrics

    def put(self, key: ReadAheadKey, read: asyncio.Future[ReadAhead | None]) -> None:
        replaced = self._entries.get(key)
        if replaced is not None:  # another consumer's read-ahead of the same fetch: the newer is kept
            replaced.add_done_callback(_consume_error)
        self._entries[key] = read
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            _, dropped = self._entries.popitem(last=False)
            dropped.add_done_callback(_consume_error)

    async def take(self, key: ReadAheadKey) -> ReadAhead | None:
        """The read-ahead for a fetch that asks ``key`` (waiting for it if it is still being read), or None."""
        read = self._entries.pop(key, None)
        return None if read is None else await read


def worth_reading_ahead(partition_max_bytes: int, max_bytes: int) -> bool:
    """Whether a fetch with these limits is read ahead (:data:`READ_AHEAD_MAX_BYTES`)."""
    return min(partition_max_bytes, max_bytes) <= READ_AHEAD_MAX_BYTES


def is_usable(ahead: ReadAhead | None, active: ActiveSegment) -> bool:
    """Whether ``ahead`` may answer a fetch now: read from the partition's current active segment object."""
    return ahead is not None and ahead.active is active


def _consume_error(read: asyncio.Future[ReadAhead | None]) -> None:
    """A dropped read-ahead's failure (a bug: store errors read nothing) is logged, as no fetch awaits it."""
    error = None if read.cancelled() else read.exception()
    if error is not None:
        _log.error("a dropped fetch read-ahead failed", exc_info=error)
