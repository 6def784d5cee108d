"""The transaction coordinator of a store: producer ids, transactional ids, epochs, markers, timeouts.

Files under ``<data-dir>/.transactions/`` (every change under an exclusive ``flock`` on ``.lock``):

* ``producer-ids``: the next producer id to hand out (a decimal number);
* ``<transactional id>.json``: ``{"producer_id", "epoch", "state" ("Empty" | "Ongoing"), "partitions":
  [[topic, partition], ...], "start_ms", "timeout_ms"}``, written to a temporary file, fsynced, renamed.

Rules (Kafka's transaction coordinator, on one machine):

* ``init_producer`` with a transactional id bumps its epoch, which fences every older instance; a
  transaction the older instance left open is aborted first (ABORT markers in its partitions);
* a transaction's partitions are recorded before its first record reaches them, so an abort or a
  timeout knows where to write markers;
* ``end_transaction`` writes a COMMIT or ABORT marker (a control row) into every partition of the
  transaction and fsyncs them; read_committed readers see the data from then on;
* a transaction open for longer than its ``transaction.timeout.ms`` is aborted by
  :meth:`TransactionCoordinator.abort_expired` (called by every cleaner pass and by
  ``store.abort_expired_transactions()``), with the epoch bumped so the stalled producer is fenced.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .errors import InvalidTxnStateError, ProducerFencedError, UnknownTopicOrPartitionError

if TYPE_CHECKING:
    from .store import Store

TXN_DIR = ".transactions"
EPOCH_MAX = 32767
_SAFE_ID = re.compile(r"[^A-Za-z0-9._-]")


@dataclass
class TransactionMetadata:
    transactional_id: str
    producer_id: int
    epoch: int
    state: str = "Empty"
    partitions: list[tuple[str, int]] = field(default_factory=list)
    start_ms: int = -1
    timeout_ms: int = 60_000

    def to_json(self) -> dict[str, Any]:
        return {"transactional_id": self.transactional_id, "producer_id": self.producer_id, "epoch": self.epoch,
                "state": self.state, "partitions": [list(p) for p in self.partitions],
                "start_ms": self.start_ms, "timeout_ms": self.timeout_ms}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> TransactionMetadata:
        return cls(raw["transactional_id"], raw["producer_id"], raw["epoch"], raw["state"],
                   [(t, p) for t, p in raw["partitions"]], raw["start_ms"], raw["timeout_ms"])


def _file_name(transactional_id: str) -> str:
    """A file name for any transactional id: safe characters kept, the rest escaped, never a path."""
    return _SAFE_ID.sub(lambda m: f"%{ord(m.group()):04x}", transactional_id) + ".json"


class TransactionCoordinator:
    """Producer ids and transactions of one store."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.directory = os.path.join(store.data_dir, TXN_DIR)
        os.makedirs(self.directory, exist_ok=True)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        fd = os.open(os.path.join(self.directory, ".lock"), os.O_CREAT | os.O_RDWR, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _write(self, name: str, text: str) -> None:
        path = os.path.join(self.directory, name)
        tmp = f"{path}.{uuid.uuid4().hex}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)

    def _next_producer_id(self) -> int:
        path = os.path.join(self.directory, "producer-ids")
        try:
            with open(path, encoding="utf-8") as f:
                next_id = int(f.read().strip() or 0)
        except FileNotFoundError:
            next_id = 0
        self._write("producer-ids", str(next_id + 1))
        return next_id

    def _load(self, transactional_id: str) -> TransactionMetadata | None:
        try:
            with open(os.path.join(self.directory, _file_name(transactional_id)), encoding="utf-8") as f:
                return TransactionMetadata.from_json(json.load(f))
        except FileNotFoundError:
            return None

    def _save(self, meta: TransactionMetadata) -> None:
        self._write(_file_name(meta.transactional_id), json.dumps(meta.to_json()))

    # -- producer ids ------------------------------------------------------------------------------------

    def init_producer(self, transactional_id: str | None, timeout_ms: int) -> tuple[int, int]:
        """A producer id and epoch; for a transactional id, the next epoch (fencing older instances)."""
        with self._locked():
            if transactional_id is None:
                return self._next_producer_id(), 0
            meta = self._load(transactional_id)
            if meta is None:
                meta = TransactionMetadata(transactional_id, self._next_producer_id(), 0, timeout_ms=timeout_ms)
            else:
                if meta.state == "Ongoing":
                    self._complete(meta, commit=False, epoch=meta.epoch)
                if meta.epoch >= EPOCH_MAX:
                    meta.producer_id, meta.epoch = self._next_producer_id(), 0
                else:
                    meta.epoch += 1
                meta.timeout_ms = timeout_ms
            self._save(meta)
            return meta.producer_id, meta.epoch

    # -- transactions ------------------------------------------------------------------------------------

    def _current(self, transactional_id: str, producer_id: int, epoch: int) -> TransactionMetadata:
        meta = self._load(transactional_id)
        if meta is None or meta.producer_id != producer_id or meta.epoch != epoch:
            current = f"epoch {meta.epoch}" if meta is not None else "no producer"
            raise ProducerFencedError(
                f"transactional id {transactional_id!r}: producer {producer_id} epoch {epoch} was fenced "
                f"({current} now owns it)")
        return meta

    def verify(self, transactional_id: str, producer_id: int, epoch: int) -> None:
        """Raise ProducerFencedError unless this producer id and epoch still own the transactional id."""
        with self._locked():
            self._current(transactional_id, producer_id, epoch)

    def add_partitions(self, transactional_id: str, producer_id: int, epoch: int,
                       partitions: list[tuple[str, int]]) -> None:
        with self._locked():
            meta = self._current(transactional_id, producer_id, epoch)
            if meta.state != "Ongoing":
                meta.state = "Ongoing"
                meta.partitions = []
                meta.start_ms = self.store.clock()
            for tp in partitions:
                if tp not in meta.partitions:
                    meta.partitions.append(tp)
            self._save(meta)

    def end_transaction(self, transactional_id: str, producer_id: int, epoch: int, commit: bool) -> None:
        with self._locked():
            meta = self._current(transactional_id, producer_id, epoch)
            if meta.state != "Ongoing":
                if commit:
                    raise InvalidTxnStateError(f"transactional id {transactional_id!r} has no open transaction")
                return
            self._complete(meta, commit=commit, epoch=epoch)
            self._save(meta)

    def _complete(self, meta: TransactionMetadata, commit: bool, epoch: int) -> None:
        """Write the markers of ``meta``'s transaction (caller holds the coordinator lock)."""
        for topic, partition in meta.partitions:
            try:
                self.store.write_marker(topic, partition, meta.producer_id, epoch, commit)
            except UnknownTopicOrPartitionError:
                continue  # the topic was deleted while the transaction was open: nothing left to mark
        meta.state = "Empty"
        meta.partitions = []
        meta.start_ms = -1

    def abort_expired(self) -> list[str]:
        """Abort every transaction open longer than its timeout, fencing its producer. Returns their ids."""
        now = self.store.clock()
        aborted = []
        with self._locked():
            for name in sorted(os.listdir(self.directory)):
                if not name.endswith(".json"):
                    continue
                with open(os.path.join(self.directory, name), encoding="utf-8") as f:
                    meta = TransactionMetadata.from_json(json.load(f))
                if meta.state == "Ongoing" and now - meta.start_ms > meta.timeout_ms:
                    if meta.epoch >= EPOCH_MAX:
                        meta.producer_id, meta.epoch = self._next_producer_id(), 0
                    else:
                        meta.epoch += 1
                    self._complete(meta, commit=False, epoch=meta.epoch)
                    self._save(meta)
                    aborted.append(meta.transactional_id)
        return aborted
