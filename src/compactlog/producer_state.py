"""Producer state of one partition: idempotence, open transactions, the last stable offset.

For every producer id that appended to the partition the state keeps its epoch, the sequence ranges of
its last few batches (with the offsets they got), its last data offset and timestamp, and the first
offset of its open transaction, if any. It decides, before an append, whether a batch is

* fenced: its epoch is older than the producer's current epoch (``ProducerFencedError``);
* a duplicate: its sequence range lies inside an already appended batch of the same epoch, so the
  append is skipped and the original offsets returned (Kafka keeps 5 batches per producer; so do we);
* out of order: its first sequence does not follow the last one (``OutOfOrderSequenceError``); a new
  epoch must start at sequence 0, an unknown producer may start anywhere (its state may have expired).

The last stable offset (LSO) is the first offset of the oldest open transaction, else the log end.
Completed aborts are reported so the log can index them in the segment holding the ABORT marker.

The state is a value that can be rebuilt: a snapshot (JSON after a checksum line) is written at every roll
and the state is rebuilt from the newest snapshot plus the rows appended after it
(:meth:`ProducerStateManager.apply`).
"""

from __future__ import annotations

import json
import zlib
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from .columns import to_numpy
from .errors import InvalidRequestError, OutOfOrderSequenceError, ProducerFencedError
from .limits import INT_MAX, LONG_MAX
from .record import CONTROL_ABORT, CONTROL_NONE, NO_PRODUCER_ID

# The first line of a snapshot file, before the CRC32 of the JSON that follows it.
SNAPSHOT_MAGIC = b"CLPS1"
BATCHES_KEPT = 5


@dataclass(frozen=True)
class BatchMetadata:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int


@dataclass(frozen=True)
class AbortedTxn:
    """An aborted transaction: producer ``producer_id``'s data in ``[first_offset, last_offset)``, where
    ``last_offset`` is the offset of the ABORT marker."""

    producer_id: int
    first_offset: int
    last_offset: int


@dataclass
class ProducerEntry:
    producer_id: int
    epoch: int
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=BATCHES_KEPT))
    last_timestamp: int = -1
    last_data_offset: int = -1
    last_offset: int = -1  # last data or control offset
    txn_first_offset: int | None = None
    txn_start_ms: int = -1  # timestamp of the open transaction's first record

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1

    def to_json(self) -> dict[str, Any]:
        return {"producer_id": self.producer_id, "epoch": self.epoch, "last_timestamp": self.last_timestamp,
                "last_data_offset": self.last_data_offset, "last_offset": self.last_offset,
                "txn_first_offset": self.txn_first_offset, "txn_start_ms": self.txn_start_ms,
                "batches": [[b.first_seq, b.last_seq, b.first_offset, b.last_offset] for b in self.batches]}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> ProducerEntry:
        entry = cls(raw["producer_id"], raw["epoch"], last_timestamp=raw["last_timestamp"],
                    last_data_offset=raw["last_data_offset"], last_offset=raw["last_offset"],
                    txn_first_offset=raw["txn_first_offset"], txn_start_ms=raw.get("txn_start_ms", -1))
        entry.batches.extend(BatchMetadata(*b) for b in raw["batches"])
        return entry


class ProducerStateManager:
    """The producer state of one partition (see the module docstring)."""

    def __init__(self) -> None:
        self.entries: dict[int, ProducerEntry] = {}
        self.next_offset = 0  # the state covers rows below this offset

    # -- decisions before an append ------------------------------------------------------------------

    def check_batch(self, producer_id: int, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        """Validate an idempotent batch; returns the original batch when it is a duplicate."""
        entry = self.entries.get(producer_id)
        if entry is None:
            return None
        if epoch < entry.epoch:
            raise ProducerFencedError(
                f"producer {producer_id} epoch {epoch} is fenced by epoch {entry.epoch}")
        if epoch > entry.epoch:
            if first_seq != 0:
                raise OutOfOrderSequenceError(
                    f"producer {producer_id} new epoch {epoch} must start at sequence 0, not {first_seq}")
            return None
        for batch in entry.batches:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return batch
            # A part of a kept batch (one frame of a batch split into several) is its duplicate too; a range that
            # wraps past INT_MAX to 0 is a duplicate only of the same range (its ends are not ordered).
            if (first_seq <= last_seq and batch.first_seq <= batch.last_seq and batch.first_seq <= first_seq
                    and last_seq <= batch.last_seq):
                delta = first_seq - batch.first_seq
                return BatchMetadata(first_seq, last_seq, batch.first_offset + delta,
                                     batch.first_offset + delta + (last_seq - first_seq))
        expected = 0 if entry.last_seq == INT_MAX else entry.last_seq + 1
        if entry.batches and first_seq != expected:
            raise OutOfOrderSequenceError(
                f"producer {producer_id} epoch {epoch}: sequence {first_seq} does not follow {entry.last_seq}")
        return None

    def check_epoch(self, producer_id: int, epoch: int) -> None:
        entry = self.entries.get(producer_id)
        if entry is not None and epoch < entry.epoch:
            raise ProducerFencedError(f"producer {producer_id} epoch {epoch} is fenced by epoch {entry.epoch}")

    # -- applying appended rows ----------------------------------------------------------------------

    def _entry_at(self, producer_id: int, epoch: int) -> ProducerEntry:
        """The producer's entry for rows of ``epoch``: a newer epoch starts a new entry (its sequences start
        over), which keeps the open transaction's first offset and start time."""
        entry = self.entries.get(producer_id)
        if entry is None or epoch > entry.epoch:
            entry = ProducerEntry(producer_id, epoch, txn_first_offset=entry.txn_first_offset if entry else None,
                                  txn_start_ms=entry.txn_start_ms if entry else -1)
            self.entries[producer_id] = entry
        return entry

    def apply(self, rows: pa.Table | pa.RecordBatch) -> list[AbortedTxn]:
        """Update the state with appended rows (in offset order); returns the transactions they aborted."""
        if rows.num_rows == 0:
            return []
        pids = to_numpy(rows.column("producer_id"))
        offsets = to_numpy(rows.column("offset"))
        self.next_offset = max(self.next_offset, int(offsets[-1]) + 1)
        if not (pids != NO_PRODUCER_ID).any():
            return []
        epochs = to_numpy(rows.column("producer_epoch"))
        seqs = to_numpy(rows.column("sequence"))
        txn = to_numpy(rows.column("is_transactional"))
        control = to_numpy(rows.column("control_type"))
        timestamps = to_numpy(rows.column("timestamp"))
        aborted: list[AbortedTxn] = []
        # Runs of consecutive rows of one producer: a batch (data) or a marker (control).
        if len(pids) == 1:  # a marker, or a batch of one record: one run, no array arithmetic
            runs: Iterable[tuple[int, int]] = ((0, 1),)
        else:
            change = np.flatnonzero((pids[1:] != pids[:-1]) | (control[1:] != control[:-1]) | (control[1:] >= 0))
            starts = np.concatenate([[0], change + 1])
            ends = np.concatenate([change + 1, [len(pids)]])
            runs = zip(starts.tolist(), ends.tolist(), strict=True)
        for start, end in runs:
            pid = int(pids[start])
            if pid == NO_PRODUCER_ID:
                continue
            epoch = int(epochs[start])
            entry = self._entry_at(pid, epoch)
            entry.last_timestamp = max(entry.last_timestamp, int(timestamps[end - 1]))
            entry.last_offset = int(offsets[end - 1])
            if control[start] != CONTROL_NONE:
                if control[start] == CONTROL_ABORT and entry.txn_first_offset is not None:
                    aborted.append(AbortedTxn(pid, entry.txn_first_offset, int(offsets[start])))
                entry.txn_first_offset = None
                continue
            first_seq, last_seq = int(seqs[start]), int(seqs[end - 1])
            first_offset, last_offset = int(offsets[start]), int(offsets[end - 1])
            previous = entry.batches[-1] if entry.batches else None
            if (previous is not None and first_seq == previous.last_seq + 1
                    and first_offset == previous.last_offset + 1):
                entry.batches[-1] = BatchMetadata(previous.first_seq, last_seq, previous.first_offset, last_offset)
            elif first_seq >= 0:
                entry.batches.append(BatchMetadata(first_seq, last_seq, first_offset, last_offset))
            entry.last_data_offset = last_offset
            if txn[start] and entry.txn_first_offset is None:
                entry.txn_first_offset = first_offset
                entry.txn_start_ms = int(timestamps[start])
        return aborted

    def apply_marker(self, producer_id: int, epoch: int, control_type: int, offset: int,
                     timestamp: int) -> AbortedTxn | None:
        """Update the state with one appended marker (what :meth:`apply` does for a one-row control run,
        without reading columns back); returns the transaction it aborted, if any."""
        self.next_offset = max(self.next_offset, offset + 1)
        entry = self._entry_at(producer_id, epoch)
        entry.last_timestamp = max(entry.last_timestamp, timestamp)
        entry.last_offset = offset
        aborted = None
        if control_type == CONTROL_ABORT and entry.txn_first_offset is not None:
            aborted = AbortedTxn(producer_id, entry.txn_first_offset, offset)
        entry.txn_first_offset = None
        return aborted

    def apply_batch(self, producer_id: int, epoch: int, first_seq: int, last_seq: int, first_offset: int,
                    last_offset: int, first_timestamp: int, last_timestamp: int, transactional: bool) -> None:
        """:meth:`apply` of one producer's data rows at ``first_offset..last_offset`` (one run of its rows:
        one appended batch, or one frame of it), given by their ends instead of columns: the same state.
        Rows without a producer id (``NO_PRODUCER_ID``) move only the state's next offset, as in :meth:`apply`."""
        self.next_offset = max(self.next_offset, last_offset + 1)
        if producer_id == NO_PRODUCER_ID:
            return
        entry = self._entry_at(producer_id, epoch)
        entry.last_timestamp = max(entry.last_timestamp, last_timestamp)
        entry.last_offset = last_offset
        previous = entry.batches[-1] if entry.batches else None
        if previous is not None and first_seq == previous.last_seq + 1 and first_offset == previous.last_offset + 1:
            entry.batches[-1] = BatchMetadata(previous.first_seq, last_seq, previous.first_offset, last_offset)
        elif first_seq >= 0:
            entry.batches.append(BatchMetadata(first_seq, last_seq, first_offset, last_offset))
        entry.last_data_offset = last_offset
        if transactional and entry.txn_first_offset is None:
            entry.txn_first_offset = first_offset
            entry.txn_start_ms = first_timestamp

    # -- derived values --------------------------------------------------------------------------------

    def first_unstable_offset(self) -> int | None:
        opened = [e.txn_first_offset for e in self.entries.values() if e.txn_first_offset is not None]
        return min(opened) if opened else None

    def open_transaction(self, producer_id: int) -> tuple[int, int] | None:
        """``(first offset, start timestamp)`` of the producer's open transaction, if it has one."""
        entry = self.entries.get(producer_id)
        if entry is None or entry.txn_first_offset is None:
            return None
        return entry.txn_first_offset, entry.txn_start_ms

    def expire(self, now_ms: int, expiration_ms: int) -> None:
        """Forget producers idle for ``producer.id.expiration.ms`` with no open transaction."""
        for pid in [pid for pid, e in self.entries.items()
                    if e.txn_first_offset is None and now_ms - e.last_timestamp > expiration_ms]:
            del self.entries[pid]

    def last_offsets_of_active_producers(self, now_ms: int, expiration_ms: int) -> dict[int, int]:
        """Each unexpired producer's last offset: the cleaner keeps that row so its sequence survives."""
        return {pid: e.last_offset for pid, e in self.entries.items()
                if e.last_offset >= 0 and (e.txn_first_offset is not None
                                           or now_ms - e.last_timestamp <= expiration_ms)}

    # -- snapshots ---------------------------------------------------------------------------------------

    def to_snapshot(self) -> bytes:
        """The snapshot file's bytes: ``CLPS1 <crc32 of the rest, 8 hex digits>\n`` then the state as JSON."""
        body = json.dumps({"version": 0, "next_offset": self.next_offset,
                           "producers": [e.to_json() for e in self.entries.values()]}).encode()
        return SNAPSHOT_MAGIC + b" %08x\n" % zlib.crc32(body) + body

    @classmethod
    def from_snapshot(cls, data: bytes) -> ProducerStateManager:
        """The state a snapshot holds; ValueError for a damaged one. A snapshot without the checksum line
        (written before it existed) is bare JSON, read unchecked."""
        if data.startswith(SNAPSHOT_MAGIC):
            header, _, data = data.partition(b"\n")
            if header != SNAPSHOT_MAGIC + b" %08x" % zlib.crc32(data):
                raise ValueError("producer snapshot checksum mismatch")
        raw = json.loads(data)
        state = cls()
        state.next_offset = raw["next_offset"]
        for item in raw["producers"]:
            entry = ProducerEntry.from_json(item)
            state.entries[entry.producer_id] = entry
        return state


def aborted_mask(offsets: np.ndarray, producer_ids: np.ndarray, transactional: np.ndarray,
                 control: np.ndarray, aborted: Sequence[AbortedTxn]) -> np.ndarray:
    """Rows that are data of an aborted transaction: transactional data rows of the transaction's producer
    in ``[first_offset, marker offset)``. One sorted interval search per producer, not one pass per
    transaction (a partition may hold thousands of aborted transactions)."""
    mask = np.zeros(len(offsets), dtype=bool)
    if not aborted or len(offsets) == 0:
        return mask
    candidate = transactional & ~control
    by_producer: dict[int, list[AbortedTxn]] = {}
    for txn in aborted:
        by_producer.setdefault(txn.producer_id, []).append(txn)
    for producer_id, txns in by_producer.items():
        rows = np.flatnonzero(candidate & (producer_ids == producer_id))
        if not len(rows):
            continue
        txns.sort(key=lambda t: t.first_offset)
        firsts = np.array([t.first_offset for t in txns], dtype=np.int64)
        lasts = np.array([t.last_offset for t in txns], dtype=np.int64)
        # A producer's transactions do not overlap: the one that starts last at or before the row is the
        # only one that can hold it.
        index = np.searchsorted(firsts, offsets[rows], side="right") - 1
        inside = index >= 0
        inside[inside] &= offsets[rows][inside] < lasts[index[inside]]
        mask[rows[inside]] = True
    return mask


def check_batch_fields(producer_id: object, producer_epoch: object, base_sequence: object) -> None:
    """A producer batch's fields as Kafka types them, else :class:`InvalidRequestError`: the producer id a
    non-negative ``long``, the epoch a non-negative ``short``, the base sequence a non-negative ``int``."""
    for name, value, top in (("producer_id", producer_id, LONG_MAX), ("producer_epoch", producer_epoch, 2**15 - 1),
                             ("base_sequence", base_sequence, INT_MAX)):
        if isinstance(value, bool) or not isinstance(value, int | np.integer) or not 0 <= int(value) <= top:
            raise InvalidRequestError(f"{name} must be an int in [0, {top}], not {value!r}")
