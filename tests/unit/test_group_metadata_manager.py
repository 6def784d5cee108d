"""The group metadata manager: ``__consumer_offsets`` created as Kafka creates it, commits durable and read
back at start (latest record per key, tombstones, transactional offsets only once their COMMIT marker is in
the log), groups placed by Java's ``String.hashCode``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import compactlog
from compactlog.broker.metadata import _describe_topic
from compactlog.coordinator.group_metadata_manager import (
    OFFSETS_TOPIC,
    GroupMetadataManager,
    GroupSnapshot,
    LoadedGroup,
    MemberSnapshot,
    OffsetAndMetadata,
    java_string_hash,
    partition_for,
)
from compactlog.server_config import server_config
from compactlog.store import Store
from support import FakeClock

PARTITIONS = 3


def manager(store: Store, **config: str) -> GroupMetadataManager:
    return GroupMetadataManager(store, server_config({"offsets.topic.num.partitions": str(PARTITIONS), **config}))


def reloaded(store: Store) -> GroupMetadataManager:
    """A manager of a fresh store over the same directory, as after a restart, loaded."""
    fresh = manager(compactlog.open(store.data_dir, clock=store.clock))
    fresh.load()
    return fresh


@pytest.fixture
def store(tmp_path: Path, clock: FakeClock) -> Store:
    return compactlog.open(tmp_path / "data", clock=clock)


def om(offset: int, commit_timestamp: int = 1_000) -> OffsetAndMetadata:
    return OffsetAndMetadata(offset, commit_timestamp=commit_timestamp)


def test_the_topic_is_created_compacted_with_kafkas_settings_and_marked_internal(store: Store) -> None:
    manager(store, **{"offsets.topic.segment.bytes": "1048576"})
    config = store.topic_config(OFFSETS_TOPIC)
    assert (store.partitions(OFFSETS_TOPIC), config.compact, config.segment_bytes) == (PARTITIONS, True, 1_048_576)
    assert not config.delete
    assert _describe_topic(store, OFFSETS_TOPIC, False, 1, 0)["is_internal"] is True
    store.create_topic("orders")
    assert _describe_topic(store, "orders", False, 1, 0)["is_internal"] is False


def test_defaults_are_kafkas(store: Store) -> None:
    config = server_config({})
    assert (config.offsets_topic_num_partitions, config.offsets_topic_segment_bytes,
            config.offsets_retention_minutes) == (50, 104_857_600, 10_080)
    GroupMetadataManager(store, config)
    assert store.partitions(OFFSETS_TOPIC) == 50


def test_an_existing_topics_partition_count_wins(store: Store) -> None:
    manager(store)
    again = GroupMetadataManager(store, server_config({"offsets.topic.num.partitions": "7"}))
    assert again.partitions == PARTITIONS


def test_groups_are_placed_by_javas_string_hash_code() -> None:
    # The hash codes as Java 17 prints them (String.hashCode).
    assert java_string_hash("") == 0
    assert java_string_hash("hello") == 99_162_322
    assert java_string_hash("a-much-longer-consumer-group-name") == 1_408_396_288
    assert java_string_hash("consumer-group-1") == 147_483_020
    assert java_string_hash("\U0001f600") == 1_772_899  # over UTF-16 code units: a surrogate pair
    assert java_string_hash("polygenelubricants") == -(2**31)  # Integer.MIN_VALUE, which Utils.abs makes 0
    assert partition_for("polygenelubricants", 50) == 0
    assert partition_for("consumer-group-1", 50) == 20
    assert partition_for("hello", 7) == 99_162_322 % 7


def test_offsets_and_metadata_are_written_to_the_groups_partition_and_read_back(store: Store,
                                                                                clock: FakeClock) -> None:
    m = manager(store)
    member = MemberSnapshot("m1", "static-1", "client", "/127.0.0.1", 30_000, 10_000, b"sub", b"assign")
    snapshot = GroupSnapshot("g", "consumer", 3, "range", "m1", 123, (member,))
    m.store_group(snapshot)
    m.store_offsets("g", {("t", 0): OffsetAndMetadata(5, leader_epoch=2, metadata="x"), ("t", 1): om(6)})
    m.store_offsets("g", {("t", 0): om(7)})
    assert m.committed("g") == {("t", 0): om(7), ("t", 1): om(6)}
    assert m.committed("other") == {}
    partition = m.partition_for("g")
    assert store.log_end_offset(OFFSETS_TOPIC, partition) == 4
    assert all(store.log_end_offset(OFFSETS_TOPIC, p) == 0 for p in range(PARTITIONS) if p != partition)
    # A commit timestamp of -1 takes the clock's now.
    m.store_offsets("h", {("t", 0): OffsetAndMetadata(1)})
    assert m.committed("h")[("t", 0)].commit_timestamp == clock.now
    assert reloaded(store).load() == {
        "g": LoadedGroup(snapshot, {("t", 0): om(7), ("t", 1): om(6)}),
        "h": LoadedGroup(None, {("t", 0): OffsetAndMetadata(1, commit_timestamp=clock.now)})}


def test_tombstones_delete_offsets_and_groups(store: Store) -> None:
    m = manager(store)
    m.store_group(GroupSnapshot("g", "consumer", 1, "range", "m1", 1, ()))
    m.store_offsets("g", {("t", 0): om(1), ("t", 1): om(2), ("u", 0): om(3)})
    m.store_offsets("h", {("t", 0): om(4)})
    m.delete_offsets("g", [("t", 1), ("t", 9)])  # (t, 9) has no offset: no tombstone for it
    assert m.committed("g") == {("t", 0): om(1), ("u", 0): om(3)}
    assert reloaded(store).committed("g") == {("t", 0): om(1), ("u", 0): om(3)}
    end = store.log_end_offset(OFFSETS_TOPIC, m.partition_for("g"))
    m.delete_group("g")
    assert m.committed("g") == {} and m.group("g") is None
    tombstones = list(store.read(OFFSETS_TOPIC, m.partition_for("g"), end))
    assert len(tombstones) == 3 and all(r.value is None for r in tombstones)  # two offsets and the metadata
    assert reloaded(store).load() == {"h": LoadedGroup(None, {("t", 0): om(4)})}


def test_transactional_offsets_count_once_their_commit_marker_is_written(store: Store) -> None:
    m = manager(store)
    partition = m.partition_for("g")
    m.store_offsets("g", {("t", 0): om(1)})
    m.store_txn_offsets("g", 100, 0, {("t", 0): om(10), ("t", 1): om(11)})
    m.store_txn_offsets("g", 200, 0, {("t", 2): om(20)})
    assert m.committed("g") == {("t", 0): om(1)}
    assert m.pending_txn_offsets("g") == {("t", 0), ("t", 1), ("t", 2)}
    assert store.last_stable_offset(OFFSETS_TOPIC, partition) == 1  # the open transactions hold it
    # A restart now: both transactions are still open, so their offsets stay pending.
    assert reloaded(store).committed("g") == {("t", 0): om(1)}
    store.write_marker(OFFSETS_TOPIC, partition, 100, 0, commit=True)
    store.write_marker(OFFSETS_TOPIC, partition, 200, 0, commit=False)
    m.complete_txn(100, commit=True)
    m.complete_txn(200, commit=False)
    expected = {("t", 0): om(10), ("t", 1): om(11)}
    assert m.committed("g") == expected and m.pending_txn_offsets("g") == set()
    after_restart = reloaded(store)
    assert after_restart.committed("g") == expected and after_restart.pending_txn_offsets("g") == set()


def test_a_restart_keeps_an_open_transactions_offsets_pending_for_complete_txn(store: Store) -> None:
    manager(store).store_txn_offsets("g", 100, 0, {("t", 0): om(10)})
    m = reloaded(store)
    assert m.pending_txn_offsets("g") == {("t", 0)}
    store.write_marker(OFFSETS_TOPIC, m.partition_for("g"), 100, 0, commit=True)
    m.complete_txn(100, commit=True)
    assert m.committed("g") == {("t", 0): om(10)}


def test_a_plain_commit_after_the_transactional_one_wins(store: Store) -> None:
    m = manager(store)
    m.store_txn_offsets("g", 100, 0, {("t", 0): om(10)})
    m.store_offsets("g", {("t", 0): om(20)})  # appended later, so newer: Kafka's olderThan
    store.write_marker(OFFSETS_TOPIC, m.partition_for("g"), 100, 0, commit=True)
    m.complete_txn(100, commit=True)
    assert m.committed("g") == {("t", 0): om(20)}
    assert reloaded(store).committed("g") == {("t", 0): om(20)}


def test_a_producers_transactions_continue_its_sequence_across_restarts_and_epochs(store: Store) -> None:
    m = manager(store)
    partition = m.partition_for("g")
    m.store_txn_offsets("g", 100, 0, {("t", 0): om(1), ("t", 1): om(1)})
    store.write_marker(OFFSETS_TOPIC, partition, 100, 0, commit=True)
    m.complete_txn(100, commit=True)
    m = reloaded(store)  # the next sequence (2) comes from the log, not from memory
    m.store_txn_offsets("g", 100, 0, {("t", 0): om(2)})
    store.write_marker(OFFSETS_TOPIC, partition, 100, 0, commit=True)
    m.complete_txn(100, commit=True)
    m.store_txn_offsets("g", 100, 1, {("t", 0): om(3)})  # a new epoch starts again at 0
    store.write_marker(OFFSETS_TOPIC, partition, 100, 1, commit=True)
    m.complete_txn(100, commit=True)
    assert m.committed("g") == {("t", 0): om(3), ("t", 1): om(1)}
    assert reloaded(store).committed("g") == {("t", 0): om(3), ("t", 1): om(1)}
    sequences = [r.as_py() for r in store.read_arrow(OFFSETS_TOPIC, partition, columns=["offset"]).column(0)]
    assert len(sequences) == 4  # every commit appended: none was taken for a retried batch


_CHILD = textwrap.dedent("""
    import sys
    import compactlog
    from compactlog.coordinator.group_metadata_manager import GroupMetadataManager, OffsetAndMetadata
    from compactlog.server_config import server_config
    m = GroupMetadataManager(compactlog.open(sys.argv[1]), server_config({"offsets.topic.num.partitions": "3"}))
    for i in range(20):
        m.store_offsets("g", {("t", i % 4): OffsetAndMetadata(i, commit_timestamp=5)})
        print(i, flush=True)  # acknowledged
    sys.stdin.readline()  # wait for the kill
""")


def test_an_acknowledged_commit_survives_a_kill_9(tmp_path: Path) -> None:
    data = tmp_path / "data"
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "VIRTUAL_ENV")}
    child = subprocess.Popen([sys.executable, "-c", _CHILD, str(data)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert child.stdout is not None
        acknowledged = [int(child.stdout.readline()) for _ in range(20)]  # then kill -9 it, still running
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    assert acknowledged == list(range(20))
    loaded = manager(compactlog.open(data)).load()
    assert loaded["g"].offsets == {("t", tp): OffsetAndMetadata(16 + tp, commit_timestamp=5) for tp in range(4)}


def test_a_tombstone_drops_the_keys_pending_transactional_offsets(store: Store) -> None:
    m = manager(store)
    partition = m.partition_for("g")
    m.store_offsets("g", {("t", 0): om(1)})
    m.store_txn_offsets("g", 100, 0, {("t", 0): om(10), ("t", 1): om(11)})
    m.delete_offsets("g", [("t", 0), ("t", 1)])  # (t, 1) has only a pending offset: no tombstone, it stays
    store.write_marker(OFFSETS_TOPIC, partition, 100, 0, commit=True)
    m.complete_txn(100, commit=True)
    # The tombstone is newer than the transactional (t, 0): as after a clean, which keeps only the tombstone.
    assert m.committed("g") == {("t", 1): om(11)}
    assert reloaded(store).committed("g") == {("t", 1): om(11)}
    for p in range(PARTITIONS):
        store.roll(OFFSETS_TOPIC, p)
    store.clean(force=True, topic=OFFSETS_TOPIC)
    assert reloaded(store).committed("g") == {("t", 1): om(11)}


def test_the_markers_in_the_log_settle_transactions_whoever_wrote_them(store: Store, clock: FakeClock) -> None:
    m = manager(store)
    partition = m.partition_for("g")
    m.store_txn_offsets("g", 100, 0, {("t", 0): om(10)})
    store.write_marker(OFFSETS_TOPIC, partition, 100, 0, commit=False)  # aborted unseen (a timeout, say)
    m.store_txn_offsets("g", 100, 0, {("t", 1): om(11)})
    store.write_marker(OFFSETS_TOPIC, partition, 100, 0, commit=True)
    m.complete_txn(100, commit=True)
    assert m.committed("g") == {("t", 1): om(11)}  # the aborted transaction's offset did not come with it
    # The log decides, whatever the caller says; with no marker yet, the offsets stay pending.
    m.store_txn_offsets("g", 100, 0, {("t", 2): om(12)})
    m.complete_txn(100, commit=False)
    assert m.pending_txn_offsets("g") == {("t", 2)}
    store.write_marker(OFFSETS_TOPIC, partition, 100, 0, commit=True)
    m.complete_txn(100, commit=False)
    assert m.committed("g") == {("t", 1): om(11), ("t", 2): om(12)}
    assert reloaded(store).committed("g") == m.committed("g")


def test_expiry_settles_a_transaction_ended_unseen(store: Store, clock: FakeClock) -> None:
    m = manager(store, **{"offsets.retention.minutes": "1"})
    m.store_offsets("g", {("t", 0): om(1, clock.now)})
    m.store_txn_offsets("g", 100, 0, {("t", 0): om(10)})
    store.write_marker(OFFSETS_TOPIC, m.partition_for("g"), 100, 0, commit=False)  # complete_txn never called
    clock.advance(60_000)
    assert m.expire_offsets(clock.now, lambda group: True) == 1  # no longer held back as pending
    assert m.committed("g") == {} and m.pending_txn_offsets("g") == set()
