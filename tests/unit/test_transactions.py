"""Transactions and idempotent producers: markers, aborted data, the last stable offset, fencing,
timeouts, and what the cleaner keeps of them (Kafka's behaviour, scenario by scenario)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import compactlog
from compactlog.log import Log
from compactlog.record import CONTROL_EMPTY_BATCH
from support import FakeClock

DAY = 86_400_000


def open_store(path: Path, clock: FakeClock, partitions: int = 2, **config: object) -> compactlog.Store:
    store = compactlog.open(str(path), clock=clock)
    settings = {"cleanup.policy": "compact", "segment.bytes": 14, "min.cleanable.dirty.ratio": 0.01,
                "delete.retention.ms": DAY}
    settings.update({k.replace("_", "."): v for k, v in config.items()})
    store.create_topic("orders", partitions, settings)
    return store


def values(store: compactlog.Store, partition: int = 0, level: str = "read_uncommitted") -> list[bytes | None]:
    start = store.log_start_offset("orders", partition)
    return [r.value for r in store.read("orders", partition, start, isolation_level=level)]


def all_rows(store: compactlog.Store, partition: int = 0) -> pa.Table:
    log = store.log("orders", partition)
    return pa.concat_tables(list(log.read_tables(log.log_start_offset, include_control=True)))


def test_commit_is_atomic_across_partitions_for_read_committed(tmp_path: Path) -> None:
    clock = FakeClock()
    store = open_store(tmp_path, clock)
    producer = store.producer(transactional_id="orders-writer")
    producer.begin_transaction()
    producer.send("orders", key=b"o1", value=b"a", partition=0)
    producer.send("orders", key=b"o2", value=b"b", partition=1)
    producer.flush()
    assert values(store, 0) == [b"a"] and values(store, 1) == [b"b"]  # read_uncommitted sees it at once
    assert values(store, 0, "read_committed") == [] and values(store, 1, "read_committed") == []
    assert store.last_stable_offset("orders", 0) == 0
    producer.commit_transaction()
    assert values(store, 0, "read_committed") == [b"a"] and values(store, 1, "read_committed") == [b"b"]
    assert store.last_stable_offset("orders", 0) == store.log_end_offset("orders", 0) == 2  # data + marker
    producer.close()


def test_aborted_data_is_skipped_by_read_committed_and_markers_are_never_records(tmp_path: Path) -> None:
    clock = FakeClock()
    store = open_store(tmp_path, clock, partitions=1)
    with store.producer(transactional_id="w") as producer:
        producer.begin_transaction()
        producer.send("orders", key=b"o1", value=b"aborted")
        producer.flush()  # appended (read_uncommitted sees it) before the abort
        producer.abort_transaction()
        producer.begin_transaction()
        producer.send("orders", key=b"o1", value=b"committed")
        producer.commit_transaction()
    assert values(store, 0, "read_committed") == [b"committed"]
    assert values(store, 0) == [b"aborted", b"committed"]
    assert [r.offset for r in store.read("orders", 0)] == [0, 2]  # the markers at 1 and 3 are not records


def test_read_committed_stops_at_the_last_stable_offset(tmp_path: Path) -> None:
    clock = FakeClock()
    store = open_store(tmp_path, clock, partitions=1)
    txn = store.producer(transactional_id="w")
    txn.begin_transaction()
    txn.send("orders", key=b"t", value=b"open")
    txn.flush()
    with store.producer() as plain:
        plain.send("orders", key=b"p", value=b"after")
        plain.flush()
    assert store.last_stable_offset("orders", 0) == 0
    assert values(store, 0, "read_committed") == []
    assert values(store, 0) == [b"open", b"after"]
    txn.commit_transaction()
    assert values(store, 0, "read_committed") == [b"open", b"after"]
    txn.close()


def test_abort_marker_in_active_segment_still_drops_cleanable_aborted_data(tmp_path: Path) -> None:
    clock = FakeClock()
    store = open_store(tmp_path, clock, partitions=1, segment_bytes=1 << 20)
    txn = store.producer(transactional_id="w")
    txn.begin_transaction()
    txn.send("orders", key=b"o", value=b"doomed")
    txn.flush()
    store.roll("orders", 0)  # the aborted data is sealed; its marker will be in the active segment
    txn.abort_transaction()
    with store.producer() as plain:
        plain.send("orders", key=b"x", value=b"1")
        plain.flush()
    store.clean(force=True)
    assert b"doomed" not in values(store, 0)  # dropped although the ABORT marker is not cleanable yet
    txn.close()


def test_markers_go_only_after_their_data_and_the_delete_horizon(tmp_path: Path) -> None:
    clock = FakeClock()
    store = open_store(tmp_path, clock, partitions=1)
    with store.producer(transactional_id="w") as txn:
        txn.begin_transaction()
        txn.send("orders", key=b"o", value=b"aborted")
        txn.flush()
        txn.abort_transaction()
    plain = store.producer()

    def more(tag: bytes) -> None:
        plain.send("orders", key=b"filler-" + tag, value=tag)
        plain.send("orders", key=b"tail", value=tag)
        plain.flush()

    def marker_rows() -> pa.Table:
        rows = all_rows(store)
        return rows.filter(pa.compute.is_in(rows.column("control_type"), value_set=pa.array([0, 1], pa.int8())))

    more(b"1")
    store.clean(force=True)  # round 1: the aborted data is read (and dropped): its marker stays, unstamped
    assert values(store) .count(b"aborted") == 0
    assert marker_rows().num_rows == 1 and marker_rows().column("delete_horizon_ms")[0].as_py() == -1
    more(b"2")
    store.clean(force=True)  # round 2: the transaction is empty: the marker is stamped
    stamped = marker_rows().column("delete_horizon_ms")[0].as_py()
    assert stamped == clock() + DAY
    clock.advance(DAY)
    more(b"3")
    store.clean(force=True)  # round 3, at the horizon: gone
    assert marker_rows().num_rows == 0
    plain.close()


def test_idempotent_retry_is_appended_once_with_the_original_offsets(tmp_path: Path) -> None:
    clock = FakeClock()
    store = open_store(tmp_path, clock, partitions=1)
    batch = pa.table({"key": [b"a", b"b"], "value": [b"1", b"2"]})
    first = store.append("orders", 0, batch, producer_id=7, producer_epoch=0, base_sequence=0)
    retry = store.append("orders", 0, batch, producer_id=7, producer_epoch=0, base_sequence=0)
    assert (retry.base_offset, retry.last_offset) == (first.base_offset, first.last_offset) == (0, 1)
    assert store.log_end_offset("orders", 0) == 2
    with pytest.raises(compactlog.OutOfOrderSequenceError):
        store.append("orders", 0, batch, producer_id=7, producer_epoch=0, base_sequence=5)
    store.close()
    reopened = compactlog.open(str(tmp_path), clock=clock)  # after a restart
    again = reopened.append("orders", 0, batch, producer_id=7, producer_epoch=0, base_sequence=0)
    assert (again.base_offset, again.last_offset) == (0, 1)
    reopened.append("orders", 0, pa.table({"key": [b"a"], "value": [b"3"]}), producer_id=8, producer_epoch=0,
                    base_sequence=0)
    reopened.roll("orders", 0)
    reopened.clean(force=True)  # after cleaning (the record at 0 is superseded)
    again = reopened.append("orders", 0, batch, producer_id=7, producer_epoch=0, base_sequence=0)
    assert (again.base_offset, again.last_offset) == (0, 1)
    assert reopened.log_end_offset("orders", 0) == 3


def test_producer_last_batch_is_kept_empty_until_the_producer_expires(tmp_path: Path) -> None:
    clock = FakeClock()
    (tmp_path / "server.properties").write_text(f"producer.id.expiration.ms={DAY}\n")
    store = open_store(tmp_path, clock, partitions=1)
    store.append("orders", 0, pa.table({"key": [b"k"], "value": [b"old"]}), producer_id=1, producer_epoch=0,
                 base_sequence=0)
    store.append("orders", 0, pa.table({"key": [b"k"], "value": [b"new"]}))
    store.append("orders", 0, pa.table({"key": [b"tail"], "value": [b"t"]}))
    store.clean(force=True)
    rows = all_rows(store)
    assert values(store) == [b"new", b"t"]  # the old value is gone for readers...
    emptied = rows.filter(pa.compute.equal(rows.column("control_type"), CONTROL_EMPTY_BATCH))
    assert emptied.column("offset").to_pylist() == [0]  # ...but producer 1's last batch is kept, emptied
    assert emptied.column("value")[0].as_py() is None and emptied.column("sequence")[0].as_py() == 0
    clock.advance(DAY + 1)
    store.append("orders", 0, pa.table({"key": [b"tail"], "value": [b"t2"]}))
    store.clean(force=True)
    rows = all_rows(store)
    assert CONTROL_EMPTY_BATCH not in rows.column("control_type").to_pylist()  # expired: gone


def test_asking_for_producers_last_offsets_forgets_nobody_only_expiry_does(tmp_path: Path) -> None:
    clock = FakeClock()
    store = open_store(tmp_path, clock, partitions=1)
    batch = pa.table({"key": [b"a"], "value": [b"1"]})
    store.append("orders", 0, batch, producer_id=7, producer_epoch=0, base_sequence=0)
    log = store.log("orders", 0)
    later = clock.advance(DAY + 1)
    assert log.producer_last_offsets(later, DAY) == set()  # expired: its last record need not be kept
    retry = store.append("orders", 0, batch, producer_id=7, producer_epoch=0, base_sequence=0)
    assert retry.base_offset == 0  # the query forgot nothing: the retry is still known as a duplicate
    log.expire_producers(later, DAY)
    retry = store.append("orders", 0, batch, producer_id=7, producer_epoch=0, base_sequence=0)
    assert retry.base_offset == 1  # forgotten by the expiry: appended anew


def test_cleaning_a_partition_forgets_its_expired_producers(tmp_path: Path) -> None:
    clock = FakeClock()
    (tmp_path / "server.properties").write_text(f"producer.id.expiration.ms={DAY}\n")
    store = open_store(tmp_path, clock, partitions=1)
    batch = pa.table({"key": [b"a"], "value": [b"1"]})
    store.append("orders", 0, batch, producer_id=7, producer_epoch=0, base_sequence=0)
    store.append("orders", 0, pa.table({"key": [b"a"], "value": [b"2"]}))
    clock.advance(DAY + 1)
    assert store.append("orders", 0, batch, producer_id=7, producer_epoch=0, base_sequence=0).base_offset == 0
    assert store.clean(force=True).partition("orders", 0) is not None
    retry = store.append("orders", 0, batch, producer_id=7, producer_epoch=0, base_sequence=0)
    assert retry.base_offset == 2  # producer 7 expired with the pass: its retry is a new batch


def test_a_new_instance_fences_the_zombie(tmp_path: Path) -> None:
    clock = FakeClock()
    store = open_store(tmp_path, clock, partitions=1)
    zombie = store.producer(transactional_id="w")
    zombie.begin_transaction()
    zombie.send("orders", key=b"z", value=b"zombie")
    zombie.flush()
    successor = store.producer(transactional_id="w")  # aborts the zombie's open transaction
    with pytest.raises(compactlog.ProducerFencedError):
        zombie.commit_transaction()
    with pytest.raises(compactlog.ProducerFencedError):
        zombie.begin_transaction()
        zombie.send("orders", key=b"z", value=b"again")
        zombie.flush()
    successor.begin_transaction()
    successor.send("orders", key=b"s", value=b"ok")
    successor.commit_transaction()
    assert values(store, 0, "read_committed") == [b"ok"]
    assert isinstance(compactlog.ProducerFencedError("x"), compactlog.CompactLogError)


def test_transaction_of_a_dead_producer_is_aborted_after_its_timeout(tmp_path: Path) -> None:
    clock = FakeClock()
    store = open_store(tmp_path, clock, partitions=1)
    dead = store.producer(transactional_id="w", transaction_timeout_ms=60_000)
    dead.begin_transaction()
    dead.send("orders", key=b"d", value=b"never committed")
    dead.flush()
    with store.producer() as plain:
        plain.send("orders", key=b"p", value=b"later")
        plain.flush()
    assert store.last_stable_offset("orders", 0) == 0
    clock.advance(59_000)
    assert store.abort_expired_transactions() == []
    clock.advance(2_000)
    assert store.abort_expired_transactions() == ["w"]
    assert store.last_stable_offset("orders", 0) == store.log_end_offset("orders", 0)
    assert values(store, 0, "read_committed") == [b"later"]
    with pytest.raises(compactlog.ProducerFencedError):
        dead.commit_transaction()


def test_cleaner_pass_aborts_expired_transactions(tmp_path: Path) -> None:
    clock = FakeClock()
    store = open_store(tmp_path, clock, partitions=1)
    dead = store.producer(transactional_id="w", transaction_timeout_ms=1_000)
    dead.begin_transaction()
    dead.send("orders", key=b"d", value=b"x")
    dead.flush()
    clock.advance(1_001)
    store.clean()
    assert store.last_stable_offset("orders", 0) == store.log_end_offset("orders", 0)


def test_cleaner_never_cleans_at_or_past_the_last_stable_offset(tmp_path: Path) -> None:
    clock = FakeClock()
    store = open_store(tmp_path, clock, partitions=1)
    txn = store.producer(transactional_id="w")
    txn.begin_transaction()
    txn.send("orders", key=b"k", value=b"in-txn")
    txn.flush()
    store.append("orders", 0, pa.table({"key": [b"k", b"k", b"tail"], "value": [b"1", b"2", b"t"]}))
    report = store.clean(force=True)
    assert not report.partitions and "last stable offset" in report.skipped[("orders", 0)]
    assert values(store) == [b"in-txn", b"1", b"2", b"t"]
    txn.commit_transaction()
    store.append("orders", 0, pa.table({"key": [b"tail"], "value": [b"t2"]}))
    store.clean(force=True)
    assert b"1" not in values(store) and b"in-txn" not in values(store)


def test_transactional_api_errors(tmp_path: Path) -> None:
    clock = FakeClock()
    store = open_store(tmp_path, clock, partitions=1)
    producer = store.producer(transactional_id="w")
    with pytest.raises(compactlog.InvalidTxnStateError):
        producer.send("orders", key=b"k", value=b"v")  # outside a transaction
    with pytest.raises(compactlog.InvalidTxnStateError):
        producer.commit_transaction()
    producer.begin_transaction()
    with pytest.raises(compactlog.InvalidTxnStateError):
        producer.begin_transaction()
    producer.abort_transaction()
    with pytest.raises(compactlog.ConfigError):
        store.read("orders", 0, isolation_level="serializable")


class Crash(BaseException):
    """Stands for the process dying between two markers."""


def test_a_commit_cut_short_between_markers_is_completed_not_aborted(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()
    store = open_store(tmp_path, clock)
    producer = store.producer(transactional_id="w")
    producer.begin_transaction()
    producer.send("orders", key=b"a", value=b"1", partition=0)
    producer.send("orders", key=b"b", value=b"2", partition=1)
    producer.flush()
    written: list[int] = []
    real = Log.append_marker_if_open

    def dying(log: Log, *args: object, **kwargs: object) -> bool:
        if written:
            raise Crash()
        written.append(log.partition)
        return real(log, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Log, "append_marker_if_open", dying)
    with pytest.raises(Crash):
        producer.commit_transaction()
    monkeypatch.undo()
    restarted = compactlog.open(str(tmp_path), clock=clock)
    restarted.producer(transactional_id="w").close()  # the next instance finishes the commit
    assert values(restarted, 0, "read_committed") == [b"1"]
    assert values(restarted, 1, "read_committed") == [b"2"]
