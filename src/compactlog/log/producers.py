"""A partition log's producer state, kept in step with its rows: the rebuild at open, the snapshot files,
and the active segment's transaction index (the log side of Kafka's ``ProducerStateManager``).

The decisions (idempotence, fencing, open transactions, expiry) are
:class:`compactlog.producer_state.ProducerStateManager`'s; :class:`LogProducerState` feeds it every
appended row and persists it:

* snapshot: at every roll the state as of the new active segment's base is written to
  ``<offset>.snapshot.tmp``, fsynced and renamed ``<offset>.snapshot``; snapshots older than the previous
  one are removed. Crash point ``log.snapshot-tmp-written``: the loader deletes a leftover ``.tmp`` (the
  older snapshot and the log rebuild the state); a write that fails (I/O point ``log.snapshot-write``)
  removes its ``.tmp`` at once and raises;
* rebuild, at open and whenever another process changed the directory: the newest snapshot at or below
  the log end that parses (a damaged one is passed over), then every row after it;
* transaction index of the active segment: the aborted transactions whose ABORT marker lies in it,
  written into the segment's footer when it is sealed (:func:`aborted_in` derives it from the rows of a
  ``.log`` that recovery seals).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterable

import pyarrow as pa

from ..active_segment import ActiveSegment
from ..columns import to_numpy
from ..faults import fault_point, io_fault
from ..producer_state import AbortedTxn, ProducerStateManager
from ..record import CONTROL_ABORT
from ..segment import is_segment_name, offset_from_name, removed_on_error, segment_name

# The columns producer state is rebuilt from.
PRODUCER_COLUMNS = ["offset", "timestamp", "producer_id", "producer_epoch", "sequence", "is_transactional",
                    "control_type"]
_log = logging.getLogger("compactlog")
SNAPSHOT_SUFFIX = ".snapshot"
_TMP_SUFFIX = ".tmp"
SNAPSHOT_TMP_SUFFIX = SNAPSHOT_SUFFIX + _TMP_SUFFIX


class LogProducerState:
    """The producer state of the log in ``directory`` and its active segment's transaction index. The log
    calls every method under its partition lock."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.manager = ProducerStateManager()
        self.active_aborted: list[AbortedTxn] = []

    def apply(self, rows: pa.Table, active_base: int) -> None:
        """Take appended rows (:data:`PRODUCER_COLUMNS`, in offset order) into the state; transactions they
        abort go into the active segment's index if their marker lies in it."""
        for aborted in self.manager.apply(rows):
            if aborted.last_offset >= active_base:
                self.active_aborted.append(aborted)

    def apply_marker(self, producer_id: int, epoch: int, control_type: int, offset: int, timestamp: int,
                     active_base: int) -> None:
        """Take one appended marker into the state (:meth:`apply` of its row)."""
        aborted = self.manager.apply_marker(producer_id, epoch, control_type, offset, timestamp)
        if aborted is not None and aborted.last_offset >= active_base:
            self.active_aborted.append(aborted)

    def apply_batch(self, producer_id: int, epoch: int, first_seq: int, last_seq: int, first_offset: int,
                    last_offset: int, first_timestamp: int, last_timestamp: int, transactional: bool) -> None:
        """:meth:`apply` of one producer's appended data rows, given by their ends (data rows abort nothing)."""
        self.manager.apply_batch(producer_id, epoch, first_seq, last_seq, first_offset, last_offset,
                                 first_timestamp, last_timestamp, transactional)

    def rebuild(self, end_offset: int, active_base: int, rows_from: Callable[[int], Iterable[pa.Table]]) -> None:
        """The newest usable snapshot at or below ``end_offset``, then ``rows_from`` its offset on."""
        state: ProducerStateManager | None = None
        for offset, path in sorted(self.snapshots(), reverse=True):
            if offset > end_offset:
                continue
            try:
                with open(path, "rb") as f:
                    state = ProducerStateManager.from_snapshot(f.read())
                break
            except (OSError, ValueError, KeyError, TypeError) as e:
                # A damaged snapshot: an older one, or the log itself, rebuilds the state.
                _log.warning("%s: passing over a damaged producer snapshot: %s", path, e)
                continue
        start = state.next_offset if state is not None else 0
        self.manager = state or ProducerStateManager()
        self.active_aborted = []
        for rows in rows_from(start):
            self.apply(rows, active_base)

    def rolled(self, next_offset: int) -> None:
        """The active segment was sealed and a new one starts at ``next_offset``: a fresh transaction index,
        and a snapshot of the state as of ``next_offset``."""
        self.active_aborted = []
        self.manager.next_offset = max(self.manager.next_offset, next_offset)
        self.write_snapshot()

    def snapshots(self) -> list[tuple[int, str]]:
        return [(offset_from_name(n), os.path.join(self.directory, n)) for n in os.listdir(self.directory)
                if n.endswith(SNAPSHOT_SUFFIX) and is_segment_name(n) and n.count(".") == 1]

    def write_snapshot(self) -> None:
        """The state as a snapshot named by its next offset; older snapshots but the previous one are
        removed."""
        path = os.path.join(self.directory, segment_name(self.manager.next_offset, SNAPSHOT_SUFFIX))
        tmp = path + _TMP_SUFFIX
        with removed_on_error(tmp):  # a full or failing disk: the partial file goes now, not at the next open
            with open(tmp, "wb") as f:
                io_fault("log.snapshot-write")
                f.write(self.manager.to_snapshot())
                f.flush()
                io_fault("log.snapshot-fsync")
                os.fsync(f.fileno())
            fault_point("log.snapshot-tmp-written")
            io_fault("log.snapshot-rename")
            os.replace(tmp, path)
        for _, old in sorted(self.snapshots())[:-2]:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(old)


def aborted_in(segment: ActiveSegment) -> list[AbortedTxn]:
    """The aborted transactions whose markers lie in ``segment``, from its rows alone (the data's first
    offset is the producer's first transactional offset seen in the segment, or the segment's base)."""
    table = segment.to_table().select(PRODUCER_COLUMNS)
    found = ProducerStateManager().apply(table)
    abort = to_numpy(table.column("control_type")) == CONTROL_ABORT
    known = {a.last_offset for a in found}
    pairs = zip(to_numpy(table.column("offset"))[abort].tolist(), to_numpy(table.column("producer_id"))[abort].tolist(),
                strict=True)
    for offset, pid in pairs:
        if offset not in known:
            found.append(AbortedTxn(pid, segment.base_offset, offset))
    return found
