"""Transaction timeouts by the coordinator's clock, the broker's transaction.max.timeout.ms, and a transaction
that sends nothing (Kafka's transaction coordinator)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import compactlog
from compactlog.transaction_state_manager import read_transaction_state
from support import FakeClock

DAY = 86_400_000


def open_store(path: Path, clock: FakeClock, server_properties: str = "") -> compactlog.Store:
    if server_properties:
        (path / "server.properties").write_text(server_properties)
    store = compactlog.open(str(path), clock=clock)
    store.create_topic("orders", 1, {"cleanup.policy": "compact"})
    return store


def coordinator_file(path: Path, transactional_id: str) -> dict[str, object]:
    return read_transaction_state(str(path / ".transactions" / f"{transactional_id}.state")).to_json()


@pytest.mark.parametrize("create_time", [1_000, FakeClock().now + 10 * DAY], ids=["old", "future"])
def test_timeout_counts_from_when_the_coordinator_saw_the_transaction_begin(tmp_path: Path,
                                                                            create_time: int) -> None:
    clock = FakeClock()
    store = open_store(tmp_path, clock)
    producer = store.producer(transactional_id="w", transaction_timeout_ms=60_000)
    clock.advance(5_000)  # registering the id is not the start of a transaction
    producer.begin_transaction()
    producer.send("orders", key=b"k", value=b"v", timestamp=create_time)
    producer.flush()
    assert coordinator_file(tmp_path, "w")["txn_start_ms"] == clock.now
    clock.advance(60_000)
    assert store.abort_expired_transactions() == []  # 60 s on the coordinator's clock: not yet
    assert store.last_stable_offset("orders", 0) == 0
    clock.advance(1)
    assert store.abort_expired_transactions() == ["w"]
    assert store.last_stable_offset("orders", 0) == store.log_end_offset("orders", 0)
    with pytest.raises(compactlog.ProducerFencedError):
        producer.commit_transaction()


def test_each_transaction_of_an_id_has_its_own_start(tmp_path: Path) -> None:
    clock = FakeClock()
    store = open_store(tmp_path, clock)
    producer = store.producer(transactional_id="w", transaction_timeout_ms=60_000)
    producer.begin_transaction()
    producer.send("orders", key=b"a", value=b"1")
    producer.commit_transaction()
    clock.advance(DAY)  # long after the first transaction began
    producer.begin_transaction()
    producer.send("orders", key=b"b", value=b"2")
    producer.flush()
    assert store.abort_expired_transactions() == []
    producer.commit_transaction()


def test_a_start_recorded_by_one_store_holds_in_a_restarted_one(tmp_path: Path) -> None:
    clock = FakeClock()
    store = open_store(tmp_path, clock)
    producer = store.producer(transactional_id="w", transaction_timeout_ms=60_000)
    producer.begin_transaction()
    producer.send("orders", key=b"a", value=b"1", timestamp=1_000)
    producer.flush()
    clock.advance(60_001)
    restarted = compactlog.open(str(tmp_path), clock=clock)
    assert restarted.abort_expired_transactions() == ["w"]


def test_a_timeout_above_the_broker_maximum_is_refused_at_producer_creation(tmp_path: Path) -> None:
    clock = FakeClock()
    store = open_store(tmp_path, clock)
    with pytest.raises(compactlog.InvalidTransactionTimeoutError, match=r"transaction\.max\.timeout\.ms=900000"):
        store.producer(transactional_id="w", transaction_timeout_ms=900_001)
    assert not (tmp_path / ".transactions" / "w.state").exists()  # nothing registered
    store.producer(transactional_id="w", transaction_timeout_ms=900_000).close()
    assert issubclass(compactlog.InvalidTransactionTimeoutError, compactlog.CompactLogError)
    # An idempotent producer has no transaction to time out: Kafka does not check its timeout either.
    store.producer(transaction_timeout_ms=900_001).close()


def test_the_broker_maximum_comes_from_server_properties(tmp_path: Path) -> None:
    clock = FakeClock()
    store = open_store(tmp_path, clock, "transaction.max.timeout.ms=1000\n")
    with pytest.raises(compactlog.InvalidTransactionTimeoutError):
        store.producer(transactional_id="w")  # the default transaction.timeout.ms is 60000
    store.producer(transactional_id="w", transaction_timeout_ms=1_000).close()


def test_a_transaction_that_sends_nothing_writes_no_marker_and_costs_no_coordinator_write(
        tmp_path: Path) -> None:
    clock = FakeClock()
    store = open_store(tmp_path, clock)
    producer = store.producer(transactional_id="w")
    state = tmp_path / ".transactions" / "w.state"
    written = os.stat(state).st_mtime_ns, os.stat(state).st_ino
    for finish in (producer.commit_transaction, producer.abort_transaction):
        producer.begin_transaction()
        finish()
    assert store.log_end_offset("orders", 0) == 0  # no marker: nothing to mark, as Kafka sends no EndTxn
    assert (os.stat(state).st_mtime_ns, os.stat(state).st_ino) == written
    assert coordinator_file(tmp_path, "w")["txn_start_ms"] is None
    clock.advance(DAY)
    assert store.abort_expired_transactions() == []
    producer.begin_transaction()  # and the next transaction works as ever
    producer.send("orders", key=b"k", value=b"v")
    producer.commit_transaction()
    assert [r.value for r in store.read("orders", 0, isolation_level="read_committed")] == [b"v"]
    assert store.log_end_offset("orders", 0) == 2  # the record and its one COMMIT marker


def test_an_empty_commit_by_a_fenced_producer_is_refused(tmp_path: Path) -> None:
    clock = FakeClock()
    store = open_store(tmp_path, clock)
    old = store.producer(transactional_id="w")
    store.producer(transactional_id="w").close()
    old.begin_transaction()
    with pytest.raises(compactlog.ProducerFencedError):
        old.commit_transaction()


def test_reaching_another_partition_later_does_not_restart_the_count(tmp_path: Path) -> None:
    clock = FakeClock()
    store = open_store(tmp_path, clock)
    store.create_topic("audit", 1)
    producer = store.producer(transactional_id="w", transaction_timeout_ms=60_000)
    producer.begin_transaction()
    producer.send("orders", key=b"k", value=b"v")
    producer.flush()
    clock.advance(30_000)
    producer.send("audit", key=b"k", value=b"v")
    producer.flush()
    clock.advance(30_001)
    assert store.abort_expired_transactions() == ["w"]
    assert store.last_stable_offset("audit", 0) == store.log_end_offset("audit", 0) == 2
