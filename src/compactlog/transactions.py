"""The transaction coordinator of a store: producer ids, transactional ids, epochs, markers, timeouts.

Files under ``<data-dir>/.transactions/`` (every change under an exclusive ``flock`` on ``.lock``):

* ``producer-ids``: the next producer id to hand out, ``<decimal number> <CRC32 of it, 8 hex digits>``
  (a file of the number alone, written before the checksum, is still read), replaced whole (a ``.tmp``
  renamed over it) at every id handed out. A write that fails (``ENOSPC``, ``EIO``) while a producer id and
  epoch are given (InitProducerId) is a KafkaStorageError (KAFKA_STORAGE_ERROR over the wire) and leaves no
  ``.tmp`` behind; no id is handed out;
* ``<transactional id>.state``: the id's state log (:mod:`compactlog.transaction_state_manager`: a line a
  change, appended, the latest last, each line ``<CRC32> {"transactional_id", "producer_id", "epoch",
  "partitions": [[topic, partition], ...] (every partition the id ever wrote to), "state": "Ready" |
  "Ongoing" | "PrepareCommit" | "CompleteCommit" | "CompleteAbort"
  (:mod:`compactlog.transaction_transitions`), "prepared": [[topic, partition], ...], "timeout_ms",
  "txn_start_ms": when the coordinator saw the id's latest transaction begin (the store's clock), or null,
  "ongoing": the partitions of a wire producer's ongoing transaction, "last_epoch": the epoch before the
  last InitProducerId bump, or -1}``), fdatasynced where a machine crash must not undo the change; kept in
  memory too, checked against the file's identity (another process may have changed it) at each use.

The wire's transactions (:mod:`compactlog.broker.txn_apis`) keep their state here too rather than in a
``__transaction_state`` topic as Kafka does: the store's Python producers, in other processes, register
the same transactional ids with this coordinator under its ``flock``, and a second copy of the state in a
topic could disagree with this one; these files are the one record both share. What a crash of the
machine must not lose (a partition new to the id, a PrepareCommit) is fsynced before it is answered, the
rest survives a crash of the process (:meth:`TransactionCoordinator.add_to_transaction`). Kafka's
transactions add partitions explicitly (AddPartitionsToTxn) and end with EndTxn, so a wire transaction's
partitions are kept (``ongoing``, state ``Ongoing``), while a Python producer's are known to it and to the
partitions' producer state.

Whether a transaction has rows open is not kept here: the partitions' producer state knows it (a producer's
transactional rows since its last marker, :mod:`compactlog.producer_state`), and that state is as
durable as the rows themselves. When it began is kept here, as Kafka's coordinator keeps
``txnStartTimestamp``: a transaction costs one coordinator write when it begins (its first records, Kafka's
first AddPartitionsToTxn; not fsynced, see :meth:`TransactionCoordinator.add_partitions`), an fsynced one
when it reaches a partition the id never wrote to, and two when it commits across several partitions. A
transaction that sends nothing costs none and writes no marker (Kafka's producer sends no EndTxn for it).

Rules (Kafka's transaction coordinator, on one machine):

* ``init_producer`` with a transactional id bumps its epoch, which fences every older instance; a
  transaction the older instance left open is aborted first (ABORT markers), and a commit it left half
  written is completed (COMMIT markers); a wire transaction left ``Ongoing`` is aborted with the epoch
  fenced and the call answered CONCURRENT_TRANSACTIONS, as Kafka does (the retry gets the next epoch);
* a partition is recorded before the id's first record reaches it, so an abort or a timeout knows where
  to look for open transactions;
* ``end_transaction`` writes a COMMIT or ABORT marker (a control row) into every partition of the
  transaction and fsyncs it, which also makes the transaction's rows in that partition durable. A
  commit across several partitions is first recorded as ``PrepareCommit`` with its partitions: if the
  process dies between markers, the next ``init_producer`` or maintenance pass writes the missing
  COMMIT markers (never ABORT ones);
* ``transaction.timeout.ms`` may not exceed the broker's ``transaction.max.timeout.ms``: ``init_producer``
  refuses it with :class:`InvalidTransactionTimeoutError` (Kafka's InitProducerId does);
* a transaction open for longer than its ``transaction.timeout.ms``, counted on the store's clock from when
  the coordinator saw it begin (never from a record's CreateTime, which the producer chooses), is aborted
  by :meth:`TransactionCoordinator.abort_expired` (every cleaner pass, the broker's expiry thread and
  ``store.abort_expired_transactions()`` call it), with the epoch bumped so the stalled producer is fenced;
  so is a wire transaction ``Ongoing`` past its timeout before any of its rows arrived.
"""

from __future__ import annotations

import contextlib
import os
import zlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from .errors import (
    ConcurrentTransactionsError,
    CorruptTransactionStateError,
    InvalidTransactionTimeoutError,
    ProducerFencedError,
    UnknownTopicOrPartitionError,
    storage_errors,
)
from .flush import flush_logs
from .record import CONTROL_ABORT, CONTROL_COMMIT
from .transaction_state_manager import TransactionStateManager, read_transaction_state
from .transaction_transitions import (
    COMPLETE_ABORT,
    COMPLETE_COMMIT,
    ONGOING,
    PREPARE_COMMIT,
    READY,
    TopicPartition,
    TransactionMetadata,
    begins_transaction,
    check_in_transaction,
    check_producer,
    end_transaction_needed,
    init_producer_action,
)

if TYPE_CHECKING:
    from .config import BrokerConfig
    from .log import Log

__all__ = ["EPOCH_MAX", "TXN_DIR", "CoordinatedStore", "TransactionCoordinator", "check_transaction_timeout",
           "format_producer_ids", "parse_producer_ids", "read_transaction_state", "transaction_expired"]

TXN_DIR = ".transactions"
EPOCH_MAX = 32767


def check_transaction_timeout(transactional_id: str, timeout_ms: int, max_timeout_ms: int) -> None:
    """Kafka's InitProducerId rule: a transactional producer's timeout is positive and at most the broker's
    maximum."""
    if not 1 <= timeout_ms <= max_timeout_ms:
        raise InvalidTransactionTimeoutError(
            f"transactional id {transactional_id!r}: transaction.timeout.ms={timeout_ms} is larger than the "
            f"broker's transaction.max.timeout.ms={max_timeout_ms}; allowed: [1, {max_timeout_ms}]")


def transaction_expired(now_ms: int, txn_start_ms: int, timeout_ms: int) -> bool:
    """Whether a transaction that began at ``txn_start_ms`` (coordinator clock) has outlived its timeout
    (Kafka: ``txnStartTimestamp + txnTimeoutMs < now``)."""
    return now_ms - txn_start_ms > timeout_ms


def format_producer_ids(next_id: int) -> str:
    """The ``producer-ids`` file's text for ``next_id``."""
    return f"{next_id} {zlib.crc32(str(next_id).encode()):08x}\n"


def parse_producer_ids(data: bytes) -> int:
    """The next producer id a ``producer-ids`` file holds; ValueError for a damaged one."""
    fields = data.split()
    if not fields or not fields[0].isdigit() or len(fields) > 2:  # written whole (renamed), so never empty
        raise ValueError(f"not a producer id: {data[:40]!r}")
    if len(fields) == 2 and fields[1] != b"%08x" % zlib.crc32(fields[0]):
        raise ValueError("checksum mismatch")
    return int(fields[0])


class CoordinatedStore(Protocol):
    """What the coordinator uses of its store (:class:`compactlog.store.Store` is one): the coordinator
    depends on this, never on the store, so that the store can own the coordinator."""

    data_dir: str
    broker: BrokerConfig
    clock: Callable[[], int]

    def log(self, topic: str, partition: int) -> Log: ...

    def check_writable(self, doing: str) -> None: ...


class TransactionCoordinator:
    """Producer ids and transactions of one store."""

    def __init__(self, store: CoordinatedStore) -> None:
        self.store = store
        self.directory = os.path.join(store.data_dir, TXN_DIR)
        self.unreadable: dict[str, str] = {}  # the state files the last scan could not read, with why
        # Called (producer id, commit) once a transaction's markers are written by this coordinator object:
        # the broker's group metadata manager completes the transaction's offsets (TxnOffsetCommit).
        self.completion_listeners: list[Callable[[int, bool], None]] = []
        self.state = TransactionStateManager(self.directory)
        with self._locked():
            self.state.remove_killed_writes()

    def _locked(self) -> contextlib.AbstractContextManager[None]:
        return self.state.locked()

    def _next_producer_id(self) -> int:
        path = os.path.join(self.directory, "producer-ids")
        try:
            with open(path, "rb") as f:
                next_id = parse_producer_ids(f.read())
        except FileNotFoundError:
            next_id = 0
        except ValueError as e:
            raise CorruptTransactionStateError(f"cannot read {path}: {e}") from e
        self.state.write_whole("producer-ids", format_producer_ids(next_id + 1))
        return next_id

    def _load(self, transactional_id: str) -> TransactionMetadata | None:
        return self.state.load(transactional_id)

    def _save(self, meta: TransactionMetadata, sync: bool = True) -> None:
        self.state.save(meta, sync)

    def _all(self) -> list[TransactionMetadata]:
        """Every transactional id's state that can be read; an unreadable file fails only its own id: it is
        left out and kept in ``self.unreadable`` (file -> reason) until the next call."""
        found, self.unreadable = self.state.all_states()
        return found

    def states(self) -> list[TransactionMetadata]:
        """Every readable transactional id's state, as stored (reads only; unreadable files in
        ``self.unreadable``)."""
        return self._all()

    # -- producer ids ------------------------------------------------------------------------------------

    def init_producer(self, transactional_id: str | None, timeout_ms: int,
                      expected: tuple[int, int] | None = None) -> tuple[int, int]:
        """A producer id and epoch; for a transactional id, the next epoch (fencing older instances).
        ``expected``: the producer id and epoch the caller holds (InitProducerId v3+ after an error)."""
        with self._locked(), storage_errors(f"giving a producer id (transactional id {transactional_id!r})"):
            if transactional_id is None:
                return self._next_producer_id(), 0
            check_transaction_timeout(transactional_id, timeout_ms, self.store.broker.transaction_max_timeout_ms)
            meta = self._load(transactional_id)
            if meta is None:
                meta = TransactionMetadata(transactional_id, self._next_producer_id(), 0, timeout_ms=timeout_ms)
            else:
                action = init_producer_action(meta, expected)
                if action == "retry":
                    return meta.producer_id, meta.epoch
                if action == "fence":
                    self._fence_and_abort(meta, self._open_partitions(meta))
                    raise ConcurrentTransactionsError(
                        f"transactional id {transactional_id!r}: its ongoing transaction was aborted and the "
                        f"producer that began it fenced; retry")
                self._finish_prepared(meta)
                # A Python producer's transaction is never Ongoing here (its partitions' producer state knows
                # it): aborted at once, with the epoch it was written under.
                self._write_markers(meta, self._open_partitions(meta), commit=False, epoch=meta.epoch)
                meta.last_epoch = meta.epoch
                self._bump_epoch(meta)
                meta.timeout_ms = timeout_ms
            self._save(meta)
            return meta.producer_id, meta.epoch

    def register_producer(self, transactional_id: str, timeout_ms: int) -> tuple[int, int]:
        """A Python producer's InitProducerId: retried once, as Kafka's clients retry, when the first call
        fenced and aborted a wire transaction left ``Ongoing`` (CONCURRENT_TRANSACTIONS)."""
        try:
            return self.init_producer(transactional_id, timeout_ms)
        except ConcurrentTransactionsError:
            return self.init_producer(transactional_id, timeout_ms)

    def _fence_and_abort(self, meta: TransactionMetadata, open_partitions: list[TopicPartition]) -> None:
        """Abort the id's open transaction with markers of the next epoch and make that epoch current, which
        fences the producer that began it (Kafka's PrepareEpochFence, then CompleteAbort). The fenced epoch
        is never handed out: the next InitProducerId bumps past it (``last_epoch`` -1: no retry of it)."""
        marker_epoch = meta.epoch + 1 if meta.epoch < EPOCH_MAX else meta.epoch
        self._write_markers(meta, open_partitions, commit=False, epoch=marker_epoch)
        self._bump_epoch(meta)
        meta.last_epoch = -1
        if meta.state == ONGOING:
            meta.state, meta.ongoing = COMPLETE_ABORT, []
        self._save(meta)

    def _bump_epoch(self, meta: TransactionMetadata) -> None:
        if meta.epoch >= EPOCH_MAX:  # Kafka starts a new producer id when the epoch runs out
            meta.producer_id, meta.epoch, meta.partitions = self._next_producer_id(), 0, []
        else:
            meta.epoch += 1

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
                       partitions: list[TopicPartition], begins: bool = False) -> None:
        """Check the producer is not fenced and record partitions it reaches for the first time; ``begins``
        (the transaction's first records) records now, on the store's clock, as the transaction's start."""
        with self._locked():
            meta = self._current(transactional_id, producer_id, epoch)
            new = [tp for tp in partitions if tp not in meta.partitions]
            meta.partitions.extend(new)
            if begins:
                meta.txn_start_ms = self.store.clock()
            if new or begins:
                # A start alone is not fsynced (that doubled the fsyncs of a one-partition transaction and
                # halved bench_transactions): a process crash keeps it (the page cache survives); a machine
                # crash may lose it or bring back an older start, but it also killed every producer of this
                # data directory (they run on this machine), so their open transactions can never commit
                # and aborting them sooner is no loss (a missing start is counted from the next look).
                self._save(meta, sync=bool(new))

    def end_transaction(self, transactional_id: str, producer_id: int, epoch: int, commit: bool,
                        partitions: list[TopicPartition]) -> None:
        """Write the markers of the transaction in ``partitions``; fenced producers get ProducerFencedError."""
        with self._locked():
            meta = self._current(transactional_id, producer_id, epoch)
            if not partitions:
                return
            if commit and len(partitions) > 1:
                # Decided before any marker is written: a crash between markers is completed, not aborted.
                meta.state, meta.prepared = PREPARE_COMMIT, list(partitions)
                self._save(meta)
            self._write_markers(meta, partitions, commit=commit, epoch=epoch)
            if meta.state == PREPARE_COMMIT:
                meta.state, meta.prepared = READY, []
                self._save(meta)

    # -- transactions over the wire (Kafka's AddPartitionsToTxn, EndTxn; rules in transaction_transitions) --

    def add_to_transaction(self, transactional_id: str, producer_id: int, epoch: int,
                           partitions: list[TopicPartition]) -> bool:
        """Add partitions to the producer's ongoing transaction, beginning one (its timeout counted from
        now, on the store's clock) if none is. Returns whether it began one.

        Fsynced when a partition is new to the id, as :meth:`add_partitions`: an open transaction is then
        always found in a partition the id is known to have written to, whatever a machine crash loses, so
        an expiry aborts it. The rest (the ``Ongoing`` state, a start time) survives a process crash (the
        page cache does); after a machine crash the producer's EndTxn is INVALID_TXN_STATE and its rows
        are aborted by the expiry, counted from the next look."""
        with self._locked():
            meta = check_producer(self._load(transactional_id), transactional_id, producer_id, epoch)
            begins = begins_transaction(meta)
            new = [tp for tp in partitions if tp not in meta.ongoing]
            if not begins and not new:
                return False  # Kafka's shortcut: every partition is already in the transaction
            if begins:
                meta.state, meta.ongoing, meta.txn_start_ms = ONGOING, [], self.store.clock()
            meta.ongoing.extend(new)
            unknown = [tp for tp in new if tp not in meta.partitions]
            meta.partitions.extend(unknown)
            self._save(meta, sync=bool(unknown))
            return begins

    def end_ongoing_transaction(self, transactional_id: str, producer_id: int, epoch: int, commit: bool) -> None:
        """EndTxn: write the markers of the producer's ongoing transaction into each of its partitions
        (a commit across several is PrepareCommit first, as :meth:`end_transaction`)."""
        with self._locked():
            meta = check_producer(self._load(transactional_id), transactional_id, producer_id, epoch)
            if not end_transaction_needed(meta, commit):
                return
            if commit and len(meta.ongoing) > 1:
                meta.state, meta.prepared = PREPARE_COMMIT, list(meta.ongoing)
                self._save(meta)
            self._write_markers(meta, meta.ongoing, commit=commit, epoch=epoch)
            meta.state, meta.prepared, meta.ongoing = COMPLETE_COMMIT if commit else COMPLETE_ABORT, [], []
            # Not fsynced: the markers are; a state lost with the machine leaves Ongoing, whose EndTxn or
            # InitProducerId finds no open transaction left to mark.
            self._save(meta, sync=False)

    def check_in_transaction(self, transactional_id: str, producer_id: int, epoch: int,
                             partition: TopicPartition) -> None:
        """Raise unless ``partition`` is in the producer's ongoing transaction (Produce, TxnOffsetCommit).
        Reads without the lock (:meth:`TransactionStateManager.peek`: the cached state while its file is
        unchanged; called for every transactional batch)."""
        check_in_transaction(self.state.peek(transactional_id), transactional_id, producer_id, epoch, partition)

    def _open_partitions(self, meta: TransactionMetadata) -> list[TopicPartition]:
        """The id's partitions where its producer has an open transaction."""
        found = []
        for topic, partition in meta.partitions:
            try:
                if self.store.log(topic, partition).open_transaction(meta.producer_id) is not None:
                    found.append((topic, partition))
            except UnknownTopicOrPartitionError:
                continue  # the topic was deleted: nothing left to mark
        return found

    def _finish_prepared(self, meta: TransactionMetadata) -> None:
        if meta.state == PREPARE_COMMIT:
            self._write_markers(meta, meta.prepared, commit=True, epoch=meta.epoch)
            meta.state, meta.prepared, meta.ongoing = COMPLETE_COMMIT, [], []

    def _write_markers(self, meta: TransactionMetadata, partitions: list[TopicPartition], commit: bool,
                       epoch: int) -> None:
        # Every marker is appended first, then all are fsynced together (flush_logs: concurrently, one wait
        # for the disk instead of one a partition); nothing after this returns before all are durable. A
        # crash before that is what a crash between two fsynced markers was: a commit across several
        # partitions is PrepareCommit (fsynced before the first marker) and is completed; a one-partition
        # commit or an abort, never answered, leaves an open transaction that the expiry aborts.
        written: list[Log] = []
        control_type = CONTROL_COMMIT if commit else CONTROL_ABORT
        if partitions:
            self.store.check_writable("write transaction markers")
        try:
            for topic, partition in partitions:
                try:
                    log = self.store.log(topic, partition)
                except UnknownTopicOrPartitionError:
                    continue  # the topic was deleted while the transaction was open: nothing left to mark
                if log.append_marker_if_open(meta.producer_id, epoch, control_type):  # else ended there already
                    written.append(log)
        finally:  # the markers written before a failure are made durable too, as each was when fsynced alone
            flush_logs(written)
        if written:
            for listener in self.completion_listeners:
                listener(meta.producer_id, commit)

    def abort_expired(self) -> list[str]:
        """Abort every transaction open longer than its timeout, fencing its producer. Returns their ids."""
        now = self.store.clock()
        aborted = []
        with self._locked():
            for meta in self._all():
                if meta.state == PREPARE_COMMIT:  # a commit cut short by a crash: finish it
                    self._finish_prepared(meta)
                    self._save(meta)
                open_partitions = self._open_partitions(meta)
                if not open_partitions and meta.state != ONGOING:  # a wire transaction may have no rows yet
                    continue
                if meta.txn_start_ms is None:  # begun before the coordinator kept start times: count from now
                    meta.txn_start_ms = now
                    self._save(meta)
                if transaction_expired(now, meta.txn_start_ms, meta.timeout_ms):
                    self._fence_and_abort(meta, open_partitions)
                    aborted.append(meta.transactional_id)
        return aborted
