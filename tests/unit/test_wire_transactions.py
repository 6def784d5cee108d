"""The transaction coordinator as the wire's transactional APIs use it (AddPartitionsToTxn, EndTxn,
InitProducerId with a producer id and epoch, transactional Produce checks, expiry), scenario by scenario on
a FakeClock; and the codes the handlers answer per request version."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest

import compactlog
from compactlog import active_segment
from compactlog.broker.context import BrokerContext
from compactlog.broker.error_codes import (
    CONCURRENT_TRANSACTIONS,
    COORDINATOR_NOT_AVAILABLE,
    FENCED_INSTANCE_ID,
    ILLEGAL_GENERATION,
    INVALID_PRODUCER_EPOCH,
    INVALID_PRODUCER_ID_MAPPING,
    INVALID_TXN_STATE,
    NONE,
    PRODUCER_FENCED,
    UNKNOWN_MEMBER_ID,
)
from compactlog.broker.transaction_expiry import TransactionExpiry
from compactlog.broker.txn_apis import (
    attach,
    handle_add_offsets_to_txn,
    handle_txn_offset_commit,
    txn_error_code,
)
from compactlog.coordinator.group_metadata import UNKNOWN_MEMBER, GroupMetadata, GroupState
from compactlog.errors import (
    ConcurrentTransactionsError,
    InvalidProducerIdMappingError,
    InvalidTxnStateError,
    ProducerFencedError,
)
from compactlog.log import Log
from compactlog.maintenance import plan_transaction_expiry
from compactlog.server_config import server_config
from support import FakeClock

ROWS = pa.table({"key": [b"k"], "value": [b"v"]})


def open_store(path: Path, clock: FakeClock) -> compactlog.Store:
    store = compactlog.open(str(path), clock=clock)
    store.create_topic("out", 2, {"cleanup.policy": "delete"})
    return store


def values(store: compactlog.Store, partition: int, level: str) -> list[bytes | None]:
    return [r.value for r in store.read("out", partition, 0, isolation_level=level)]


def test_a_wire_transaction_takes_only_its_partitions_and_commits_once(tmp_path: Path) -> None:
    store = open_store(tmp_path, FakeClock())
    coordinator = store.transactions
    completed: list[tuple[int, bool]] = []
    coordinator.completion_listeners.append(lambda pid, commit: completed.append((pid, commit)))
    pid, epoch = coordinator.init_producer("app", 60_000)
    with pytest.raises(InvalidTxnStateError, match="not part of the ongoing transaction"):
        coordinator.check_in_transaction("app", pid, epoch, ("out", 0))  # nothing added yet
    with pytest.raises(InvalidTxnStateError, match="no transaction ongoing"):
        coordinator.end_ongoing_transaction("app", pid, epoch, commit=True)  # EndTxn before AddPartitionsToTxn
    assert coordinator.add_to_transaction("app", pid, epoch, [("out", 0)]) is True  # begins one
    assert coordinator.add_to_transaction("app", pid, epoch, [("out", 0)]) is False
    coordinator.check_in_transaction("app", pid, epoch, ("out", 0))
    with pytest.raises(InvalidTxnStateError):
        coordinator.check_in_transaction("app", pid, epoch, ("out", 1))
    store.append("out", 0, ROWS, producer_id=pid, producer_epoch=epoch, transactional=True)
    assert values(store, 0, "read_committed") == []
    coordinator.end_ongoing_transaction("app", pid, epoch, commit=True)
    assert values(store, 0, "read_committed") == [b"v"] and completed == [(pid, True)]
    coordinator.end_ongoing_transaction("app", pid, epoch, commit=True)  # a retried EndTxn: nothing more
    assert store.log_end_offset("out", 0) == 2 and completed == [(pid, True)]
    with pytest.raises(InvalidTxnStateError, match="CompleteCommit"):
        coordinator.end_ongoing_transaction("app", pid, epoch, commit=False)
    with pytest.raises(InvalidTxnStateError):
        coordinator.check_in_transaction("app", pid, epoch, ("out", 0))  # the transaction is over


def test_requests_of_another_producer_id_or_epoch_are_refused_as_kafka_does(tmp_path: Path) -> None:
    store = open_store(tmp_path, FakeClock())
    coordinator = store.transactions
    with pytest.raises(InvalidProducerIdMappingError):
        coordinator.add_to_transaction("nobody", 0, 0, [("out", 0)])
    pid, epoch = coordinator.init_producer("app", 60_000)
    with pytest.raises(InvalidProducerIdMappingError):
        coordinator.add_to_transaction("app", pid + 1, epoch, [("out", 0)])
    new_pid, new_epoch = coordinator.init_producer("app", 60_000)
    assert (new_pid, new_epoch) == (pid, epoch + 1)
    with pytest.raises(ProducerFencedError):
        coordinator.add_to_transaction("app", pid, epoch, [("out", 0)])
    with pytest.raises(ProducerFencedError):
        coordinator.end_ongoing_transaction("app", pid, epoch, commit=True)
    with pytest.raises(ProducerFencedError):
        coordinator.check_in_transaction("app", pid, epoch, ("out", 0))


def test_init_producer_id_with_a_producer_id_and_epoch_bumps_retries_or_fences(tmp_path: Path) -> None:
    coordinator = open_store(tmp_path, FakeClock()).transactions
    pid, epoch = coordinator.init_producer("app", 60_000)
    assert coordinator.init_producer("app", 60_000, (pid, epoch)) == (pid, epoch + 1)  # its current epoch: bumped
    assert coordinator.init_producer("app", 60_000, (pid, epoch)) == (pid, epoch + 1)  # a retry: the same answer
    with pytest.raises(ProducerFencedError):
        coordinator.init_producer("app", 60_000, (pid, epoch + 5))
    with pytest.raises(ProducerFencedError):
        coordinator.init_producer("app", 60_000, (pid + 1, epoch + 1))
    assert coordinator.init_producer("app", 60_000) == (pid, epoch + 2)  # no expectation: always bumped


def test_a_new_instance_aborts_the_ongoing_wire_transaction(tmp_path: Path) -> None:
    store = open_store(tmp_path, FakeClock())
    coordinator = store.transactions
    completed: list[tuple[int, bool]] = []
    coordinator.completion_listeners.append(lambda pid, commit: completed.append((pid, commit)))
    pid, epoch = coordinator.init_producer("app", 60_000)
    coordinator.add_to_transaction("app", pid, epoch, [("out", 0), ("out", 1)])
    store.append("out", 1, ROWS, producer_id=pid, producer_epoch=epoch, transactional=True)
    # Kafka's answer while it aborts: CONCURRENT_TRANSACTIONS; the abort is done, under the fenced epoch.
    with pytest.raises(ConcurrentTransactionsError, match="aborted"):
        coordinator.init_producer("app", 60_000)
    assert completed == [(pid, False)]
    assert values(store, 1, "read_committed") == [] and store.last_stable_offset("out", 1) == 2
    (state,) = coordinator.states()
    assert (state.state, state.ongoing, state.epoch) == ("CompleteAbort", [], epoch + 1)
    with pytest.raises(ProducerFencedError):  # the restarted producer's old epoch is fenced at once
        coordinator.add_to_transaction("app", pid, epoch, [("out", 0)])
    assert coordinator.init_producer("app", 60_000) == (pid, epoch + 2)  # the retry: past the fenced epoch
    assert completed == [(pid, False)]  # nothing more to abort


def test_a_python_producer_restarting_over_an_ongoing_wire_transaction_retries_its_init(tmp_path: Path) -> None:
    store = open_store(tmp_path, FakeClock())
    pid, epoch = store.transactions.init_producer("app", 60_000)
    store.transactions.add_to_transaction("app", pid, epoch, [("out", 0)])
    store.append("out", 0, ROWS, producer_id=pid, producer_epoch=epoch, transactional=True)
    with store.producer(transactional_id="app") as producer:
        producer.begin_transaction()
        producer.send("out", b"k", b"new", partition=0)
        producer.commit_transaction()
    assert values(store, 0, "read_committed") == [b"new"]
    assert store.transactions.states()[0].epoch == epoch + 2


def test_an_ongoing_wire_transaction_expires_after_its_timeout_even_without_records(tmp_path: Path) -> None:
    clock = FakeClock()
    store = open_store(tmp_path, clock)
    coordinator = store.transactions
    pid, epoch = coordinator.init_producer("app", 1_000)
    coordinator.add_to_transaction("app", pid, epoch, [("out", 0)])
    clock.advance(1_000)
    assert plan_transaction_expiry(store) == [] and store.abort_expired_transactions() == []  # not past it yet
    clock.advance(1)
    assert plan_transaction_expiry(store) == ["app"]  # what clean's dry run shows
    assert store.abort_expired_transactions() == ["app"]
    with pytest.raises(ProducerFencedError):  # its producer is fenced
        coordinator.end_ongoing_transaction("app", pid, epoch, commit=True)
    assert store.abort_expired_transactions() == []


def test_a_commit_being_completed_answers_concurrent_transactions(tmp_path: Path) -> None:
    coordinator = open_store(tmp_path, FakeClock()).transactions
    pid, epoch = coordinator.init_producer("app", 60_000)
    coordinator.add_to_transaction("app", pid, epoch, [("out", 0)])
    (state,) = coordinator.states()
    state.state = "PrepareCommit"  # as a crash between the markers of a commit leaves it
    coordinator._save(state)
    with pytest.raises(ConcurrentTransactionsError):
        coordinator.add_to_transaction("app", pid, epoch, [("out", 1)])


def test_a_fenced_producer_gets_producer_fenced_only_from_the_versions_that_know_it() -> None:
    fenced = ProducerFencedError("fenced")
    assert txn_error_code(fenced, 1, 2) == INVALID_PRODUCER_EPOCH
    assert txn_error_code(fenced, 2, 2) == PRODUCER_FENCED
    assert txn_error_code(fenced, 5, None) == INVALID_PRODUCER_EPOCH
    assert txn_error_code(InvalidProducerIdMappingError("x"), 3, 2) == INVALID_PRODUCER_ID_MAPPING
    assert txn_error_code(ConcurrentTransactionsError("x"), 3, 2) == CONCURRENT_TRANSACTIONS


def test_the_expiry_thread_aborts_each_interval_until_shut_down(tmp_path: Path) -> None:
    clock = FakeClock()
    store = open_store(tmp_path, clock)
    pid, epoch = store.transactions.init_producer("app", 1_000)
    store.transactions.add_to_transaction("app", pid, epoch, [("out", 0)])
    waits: list[float] = []

    def wait(seconds: float) -> bool:  # each wait is an interval of the store's clock; the third one stops
        waits.append(seconds)
        clock.advance(600)
        return len(waits) == 3

    expiry = TransactionExpiry(store, 250, wait)
    expiry.run()
    assert waits == [0.25, 0.25, 0.25] and expiry.passes == 2
    assert store.transactions.states()[0].state == "CompleteAbort"  # 1,200 ms > 1,000 ms at the second pass


def test_txn_offset_commit_checks_member_instance_and_generation_as_kafka_does() -> None:
    group = GroupMetadata("g", 0, 10, 0)
    group.generation = 3

    def check(group: GroupMetadata, member_id: str, instance_id: str | None, generation: int) -> int:
        return group.validate_offset_commit(member_id, instance_id, generation, transactional=True)

    assert check(group, UNKNOWN_MEMBER, None, -1) == NONE  # a consumer that assigns its partitions
    assert check(group, "someone", None, -1) == NONE  # no generation while the group is Empty
    group.state = GroupState.STABLE
    group.members["m"] = group.members["s"] = SimpleNamespace()  # type: ignore[assignment]
    group.static_members["instance-1"] = "s"
    assert check(group, UNKNOWN_MEMBER, None, -1) == NONE
    assert check(group, "someone", None, 3) == UNKNOWN_MEMBER_ID
    assert check(group, UNKNOWN_MEMBER, None, 3) == UNKNOWN_MEMBER_ID  # a generation asks for a member
    assert check(group, "m", None, 2) == ILLEGAL_GENERATION
    assert check(group, "m", None, 3) == NONE
    assert check(group, "s", "instance-1", 3) == NONE
    assert check(group, "m", "instance-1", 3) == FENCED_INSTANCE_ID  # a member, but not this instance's
    assert check(group, "old-s", "instance-1", -1) == FENCED_INSTANCE_ID  # a replaced static member
    assert check(group, "m", "instance-2", 3) == UNKNOWN_MEMBER_ID  # an instance id nobody registered
    group.state = GroupState.DEAD
    assert check(group, UNKNOWN_MEMBER, None, -1) == COORDINATOR_NOT_AVAILABLE


def txn_offset_commit(transactional_id: str, producer_id: int, epoch: int, group_id: str, offset: int) -> Any:
    """A TxnOffsetCommit v3 request of one offset for ``in``-0, as the decoder gives it."""
    partition = SimpleNamespace(partition_index=0, committed_offset=offset, committed_leader_epoch=-1,
                                committed_metadata=None)
    return SimpleNamespace(transactional_id=transactional_id, group_id=group_id, producer_id=producer_id,
                           producer_epoch=epoch, generation_id=-1, member_id="", group_instance_id=None,
                           topics=[SimpleNamespace(name="in", partitions=[partition])])


def test_offsets_aborted_by_another_process_are_not_committed_by_the_producers_next_transaction(
        tmp_path: Path) -> None:
    clock = FakeClock()
    store = open_store(tmp_path, clock)
    store.create_topic("in", 1, {"cleanup.policy": "delete"})
    context = BrokerContext(store, server_config({"offsets.topic.num.partitions": 1}))
    attach(context)
    manager = context.groups.manager
    add_offsets = SimpleNamespace(transactional_id="app", group_id="g")

    async def scenario() -> None:
        pid, epoch = store.transactions.init_producer("app", 1_000)
        add_offsets.producer_id, add_offsets.producer_epoch = pid, epoch
        answer = await handle_txn_offset_commit(context, txn_offset_commit("app", pid, epoch, "g", 3), 3, "PLAINTEXT")
        assert answer["topics"][0]["partitions"][0]["error_code"] == INVALID_TXN_STATE  # AddOffsetsToTxn first
        assert (await handle_add_offsets_to_txn(context, add_offsets, 3, "PLAINTEXT"))["error_code"] == NONE
        answer = await handle_txn_offset_commit(context, txn_offset_commit("app", pid, epoch, "g", 7), 3, "PLAINTEXT")
        assert answer["topics"][0]["partitions"][0]["error_code"] == NONE
        assert manager.pending_txn_offsets("g") == {("in", 0)}
        clock.advance(1_001)
        with compactlog.open(str(tmp_path), clock=clock) as cleaner_store:  # a cleaner pass's expiry, elsewhere
            assert cleaner_store.abort_expired_transactions() == ["app"]
        pid, epoch = store.transactions.init_producer("app", 1_000)  # the producer starts over
        add_offsets.producer_id, add_offsets.producer_epoch = pid, epoch
        assert (await handle_add_offsets_to_txn(context, add_offsets, 3, "PLAINTEXT"))["error_code"] == NONE
        store.transactions.add_to_transaction("app", pid, epoch, [("out", 0)])
        store.append("out", 0, ROWS, producer_id=pid, producer_epoch=epoch, transactional=True)
        store.transactions.end_ongoing_transaction("app", pid, epoch, commit=True)

    try:
        asyncio.run(scenario())
        assert manager.committed("g") == {}  # the aborted transaction's offset stays uncommitted
    finally:
        context.close()


def test_only_a_partition_new_to_the_id_and_the_markers_are_fsynced(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    store = open_store(tmp_path, FakeClock())
    coordinator = store.transactions
    pid, epoch = coordinator.init_producer("app", 60_000)
    store.log("out", 0)  # opened before counting: opening a partition writes files of its own
    synced: list[int] = []
    real_fsync, real_sync_data = os.fsync, active_segment.sync_data  # a segment's appends: fdatasync
    real_fdatasync = os.fdatasync  # the coordinator's state log
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd))[1])
    monkeypatch.setattr(os, "fdatasync", lambda fd: (synced.append(fd), real_fdatasync(fd))[1])
    monkeypatch.setattr(active_segment, "sync_data", lambda fd: (synced.append(fd), real_sync_data(fd))[1])

    def one_transaction(sequence: int) -> int:
        synced.clear()
        coordinator.add_to_transaction("app", pid, epoch, [("out", 0)])
        store.append("out", 0, ROWS, producer_id=pid, producer_epoch=epoch, base_sequence=sequence,
                     transactional=True, flush=False)
        coordinator.end_ongoing_transaction("app", pid, epoch, commit=True)
        return len(synced)

    first, second = one_transaction(0), one_transaction(1)
    assert first == second + 1  # the id's first transaction there records the partition durably (its state log)
    assert second == 1  # then only the COMMIT marker (which also makes the transaction's rows durable)


def test_end_txn_fsyncs_its_markers_together_and_answers_once_all_are_durable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = compactlog.open(str(tmp_path), clock=FakeClock())
    store.create_topic("out", 4, {"cleanup.policy": "delete"})
    coordinator = store.transactions
    pid, epoch = coordinator.init_producer("app", 60_000)
    partitions = [("out", p) for p in range(4)]
    coordinator.add_to_transaction("app", pid, epoch, partitions)
    for _, partition in partitions:
        store.append("out", partition, ROWS, producer_id=pid, producer_epoch=epoch, transactional=True)
    events: list[tuple[str, int]] = []
    barrier = threading.Barrier(4, timeout=10)  # broken (an error) unless the four fsyncs overlap
    append_marker, flush = Log.append_marker_if_open, Log.flush

    def recorded_marker(log: Log, *args: Any, **kwargs: Any) -> bool:
        events.append(("marker", log.partition))
        return append_marker(log, *args, **kwargs)

    def recorded_flush(log: Log) -> None:
        barrier.wait()
        flush(log)
        events.append(("fsynced", log.partition))

    monkeypatch.setattr(Log, "append_marker_if_open", recorded_marker)
    monkeypatch.setattr(Log, "flush", recorded_flush)
    coordinator.end_ongoing_transaction("app", pid, epoch, commit=True)
    # every marker appended first, then each partition fsynced once after its marker, before the answer
    assert sorted(events[:4]) == [("marker", p) for p in range(4)]
    assert sorted(events[4:]) == [("fsynced", p) for p in range(4)]
    assert all(values(store, p, "read_committed") == [b"v"] for p in range(4))


def test_a_wire_commit_cut_short_between_markers_is_completed_by_the_next_expiry_pass(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = open_store(tmp_path, FakeClock())
    coordinator = store.transactions
    pid, epoch = coordinator.init_producer("app", 60_000)
    coordinator.add_to_transaction("app", pid, epoch, [("out", 0), ("out", 1)])
    for partition in (0, 1):
        store.append("out", partition, ROWS, producer_id=pid, producer_epoch=epoch, transactional=True)
    append_marker = Log.append_marker_if_open

    def crash_after_the_first(log: Log, *args: Any, **kwargs: Any) -> bool:
        if log.partition == 1:
            raise OSError("the process died here")
        return append_marker(log, *args, **kwargs)

    monkeypatch.setattr(Log, "append_marker_if_open", crash_after_the_first)
    with pytest.raises(OSError):
        coordinator.end_ongoing_transaction("app", pid, epoch, commit=True)
    monkeypatch.setattr(Log, "append_marker_if_open", append_marker)
    assert values(store, 0, "read_committed") == [b"v"] and values(store, 1, "read_committed") == []
    with pytest.raises(ConcurrentTransactionsError):  # the client retries until the commit is completed
        coordinator.end_ongoing_transaction("app", pid, epoch, commit=True)
    assert store.abort_expired_transactions() == []  # completes the commit (never aborts it)
    assert values(store, 1, "read_committed") == [b"v"]
    coordinator.end_ongoing_transaction("app", pid, epoch, commit=True)  # the retried EndTxn: done already
    (state,) = coordinator.states()
    assert (state.state, state.ongoing, state.prepared) == ("CompleteCommit", [], [])
