"""How the transaction coordinator answers the wire's transactional requests: pure functions of a
transactional id's stored state (:class:`TransactionMetadata`, defined here), as Kafka's
``TransactionCoordinator`` (``handleInitProducerId``, ``handleAddPartitionsToTransaction``,
``handleEndTransaction``) and ``TransactionMetadata``'s transitions decide them.

States (``TransactionMetadata.state``), in Kafka's names where Kafka has one:

* ``Ready``: Kafka's ``Empty``: no wire transaction open (the store's Python producers keep their open
  transactions in the partitions' producer state only, never as a state here);
* ``Ongoing``: a wire transaction with partitions added (AddPartitionsToTxn, AddOffsetsToTxn), kept in
  ``ongoing``;
* ``PrepareCommit``: a commit across several partitions whose markers are being written; left only by a
  crash, and completed by the next InitProducerId or expiry pass;
* ``CompleteCommit`` / ``CompleteAbort``: the last wire transaction's outcome, so that a retried EndTxn of the
  same outcome is answered NONE.

Rules:

* a request whose producer id is not the id's is INVALID_PRODUCER_ID_MAPPING; one of another epoch is fenced
  (PRODUCER_FENCED, or INVALID_PRODUCER_EPOCH to older request versions); while a commit is being completed,
  CONCURRENT_TRANSACTIONS (retriable);
* InitProducerId naming a producer id and epoch (v3+, after an error) bumps the epoch only if they are the
  current ones; the previous epoch is a retry of a bump whose answer was lost (answered the current epoch);
  anything else is fenced;
* InitProducerId while a wire transaction is ``Ongoing`` (a producer restarted mid-transaction) fences the
  epoch, aborts the transaction with markers of the fenced epoch, and answers CONCURRENT_TRANSACTIONS; the
  client's retry finds ``CompleteAbort`` and gets the epoch after the fenced one, as from Kafka;
* EndTxn ends an ``Ongoing`` transaction; repeats a completed one's outcome as a no-op; anything else is
  INVALID_TXN_STATE (an EndTxn without partitions added, or the other outcome of a completed one);
* a transactional Produce or TxnOffsetCommit is accepted only for a partition of the ``Ongoing`` transaction
  of the batch's producer id and epoch (Kafka's transaction verification, KIP-890): else INVALID_TXN_STATE.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from .errors import (
    ConcurrentTransactionsError,
    InvalidProducerIdMappingError,
    InvalidTxnStateError,
    ProducerFencedError,
)

READY = "Ready"
ONGOING = "Ongoing"
PREPARE_COMMIT = "PrepareCommit"
COMPLETE_COMMIT = "CompleteCommit"
COMPLETE_ABORT = "CompleteAbort"

TopicPartition = tuple[str, int]


@dataclass
class TransactionMetadata:
    transactional_id: str
    producer_id: int
    epoch: int
    partitions: list[TopicPartition] = field(default_factory=list)
    state: str = READY
    prepared: list[TopicPartition] = field(default_factory=list)
    timeout_ms: int = 60_000
    txn_start_ms: int | None = None  # the store's clock when the id's latest transaction began
    ongoing: list[TopicPartition] = field(default_factory=list)  # a wire transaction's partitions
    last_epoch: int = -1  # the epoch before the last InitProducerId bump: a retry of it gets the current one

    def to_json(self) -> dict[str, Any]:
        return {"transactional_id": self.transactional_id, "producer_id": self.producer_id, "epoch": self.epoch,
                "partitions": [list(p) for p in self.partitions], "state": self.state,
                "prepared": [list(p) for p in self.prepared], "timeout_ms": self.timeout_ms,
                "txn_start_ms": self.txn_start_ms, "ongoing": [list(p) for p in self.ongoing],
                "last_epoch": self.last_epoch}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> TransactionMetadata:
        # Files written before txn_start_ms existed have none: abort_expired then starts the count.
        return cls(raw["transactional_id"], raw["producer_id"], raw["epoch"],
                   [(t, p) for t, p in raw["partitions"]], raw["state"], [(t, p) for t, p in raw["prepared"]],
                   raw["timeout_ms"], raw.get("txn_start_ms"), [(t, p) for t, p in raw.get("ongoing", [])],
                   raw.get("last_epoch", -1))


def init_producer_action(meta: TransactionMetadata, expected: tuple[int, int] | None,
                         ) -> Literal["bump", "retry", "fence"]:
    """What InitProducerId does to a registered id (Kafka's ``prepareInitProducerIdTransit``): bump its
    epoch, answer the current one (a retry), or fence the epoch and abort the ``Ongoing`` transaction, which
    is answered CONCURRENT_TRANSACTIONS so that the client retries and gets a second bump (the fenced epoch
    is never handed out). ``expected`` is the request's producer id and epoch (v3+, when the client sends
    them): another producer id is fenced whatever the state; the epoch is checked only when no transaction
    is ongoing."""
    if expected is not None and expected[0] != meta.producer_id:
        raise _fenced_init(meta, expected)
    if meta.state == ONGOING:
        return "fence"
    if expected is None or expected[1] == meta.epoch:
        return "bump"
    if expected[1] == meta.last_epoch:
        return "retry"
    raise _fenced_init(meta, expected)


def _fenced_init(meta: TransactionMetadata, expected: tuple[int, int]) -> ProducerFencedError:
    producer_id, epoch = expected
    return ProducerFencedError(f"transactional id {meta.transactional_id!r}: producer {producer_id} epoch {epoch} "
                               f"was fenced (producer {meta.producer_id} epoch {meta.epoch} now owns it)")


def check_producer(meta: TransactionMetadata | None, transactional_id: str, producer_id: int, epoch: int,
                   ) -> TransactionMetadata:
    """The id's state if this producer id and epoch own it and no commit is being completed; else the
    error Kafka's coordinator answers."""
    if meta is None or meta.producer_id != producer_id:
        owner = "no producer" if meta is None else f"producer {meta.producer_id}"
        raise InvalidProducerIdMappingError(f"transactional id {transactional_id!r} is held by {owner}, "
                                            f"not producer {producer_id}")
    if meta.epoch != epoch:
        raise ProducerFencedError(f"transactional id {transactional_id!r}: producer {producer_id} epoch {epoch} "
                                  f"was fenced (epoch {meta.epoch} now owns it)")
    if meta.state == PREPARE_COMMIT:
        raise ConcurrentTransactionsError(f"transactional id {transactional_id!r}: the previous commit is still "
                                          "being completed; retry")
    return meta


def begins_transaction(meta: TransactionMetadata) -> bool:
    """Whether adding partitions now begins a transaction (its timeout counts from here)."""
    return meta.state != ONGOING


def end_transaction_needed(meta: TransactionMetadata, commit: bool) -> bool:
    """EndTxn: True to write the markers of the ongoing transaction, False for a retry of a completed one
    with the same outcome (answered NONE); InvalidTxnStateError otherwise."""
    if meta.state == ONGOING:
        return True
    if (meta.state, commit) in ((COMPLETE_COMMIT, True), (COMPLETE_ABORT, False)):
        return False
    raise InvalidTxnStateError(f"transactional id {meta.transactional_id!r}: EndTxn "
                               f"({'commit' if commit else 'abort'}) in state {meta.state}, with no transaction "
                               "ongoing")


def check_in_transaction(meta: TransactionMetadata | None, transactional_id: str, producer_id: int, epoch: int,
                         partition: TopicPartition) -> None:
    """A transactional batch (Produce, TxnOffsetCommit) goes only to a partition of its producer's ongoing
    transaction."""
    meta = check_producer(meta, transactional_id, producer_id, epoch)
    if meta.state != ONGOING or partition not in meta.ongoing:
        raise InvalidTxnStateError(f"{partition[0]}-{partition[1]} is not part of the ongoing transaction of "
                                   f"transactional id {transactional_id!r} (AddPartitionsToTxn first)")
