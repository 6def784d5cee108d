"""The consumer-aware tombstone horizon's rules (:mod:`compactlog.consumer_horizon`) on committed offsets as
values, and :func:`compactlog.partition_view.stored_tombstones` on a real log."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

import compactlog
from compactlog.consumer_horizon import (
    EXIT_ERASED,
    EXIT_GROUPS_BEHIND,
    EXIT_SURVIVES_ON_DISK,
    ConsumerPositions,
    PartitionTombstones,
    erasure_exit_code,
    groups_behind,
    has_read_past,
    partition_tombstones,
    topic_groups,
    worst_exit_code,
)
from compactlog.partition_view import StoredTombstones, stored_tombstones
from support import FakeClock

COMMITTED = ConsumerPositions({
    "billing": {("users", 0): 10, ("users", 1): 3},
    "audit": {("users", 0): 5},
    "search": {("orders", 0): 100},  # never consumed users
    "mirror": {("users", 0): 11, ("users", 1): 4},
})
# "fresh" joined, subscribed to users, and has not committed; "billing"'s members subscribe to users too.
SUBSCRIBED = ConsumerPositions(COMMITTED.committed, {"fresh": frozenset({"users"}), "billing": frozenset({"users"}),
                                                     "idle": frozenset()})


def test_a_group_has_read_past_an_offset_only_when_its_committed_offset_is_greater() -> None:
    assert has_read_past(COMMITTED, "billing", "users", 0, 9)
    assert not has_read_past(COMMITTED, "billing", "users", 0, 10)  # 10 is the next offset it reads
    assert not has_read_past(COMMITTED, "audit", "users", 1, 0)  # no offset for the partition
    assert not has_read_past(COMMITTED, "nobody", "users", 0, 0)


def test_the_groups_of_a_topic_commit_an_offset_for_one_of_its_partitions_or_subscribe_to_it() -> None:
    assert topic_groups(COMMITTED, "users") == ["audit", "billing", "mirror"]
    assert topic_groups(COMMITTED, "orders") == ["search"]
    assert topic_groups(COMMITTED, "other") == []
    assert topic_groups(SUBSCRIBED, "users") == ["audit", "billing", "fresh", "mirror"]
    assert topic_groups(SUBSCRIBED, "orders") == ["search"]


def test_groups_behind_a_tombstone_include_those_without_an_offset_for_its_partition() -> None:
    assert groups_behind(COMMITTED, "users", 0, 10) == ["audit", "billing"]
    assert groups_behind(COMMITTED, "users", 0, 4) == []
    assert groups_behind(COMMITTED, "users", 1, 3) == ["audit", "billing"]  # audit never committed users-1
    assert groups_behind(COMMITTED, "orders", 0, 3) == []
    assert groups_behind(SUBSCRIBED, "users", 0, 4) == ["fresh"]  # subscribed, nothing committed: behind


def test_a_partition_names_the_groups_behind_its_oldest_tombstone_and_none_without_one() -> None:
    assert partition_tombstones(COMMITTED, "users", 0, 7, 6) == PartitionTombstones(0, 7, 6, ("audit",))
    assert partition_tombstones(COMMITTED, "users", 1, 0, None) == PartitionTombstones(1, 0, None, ())


def test_verify_erasure_exit_code_puts_the_disk_first_then_the_consumers() -> None:
    assert erasure_exit_code(False, []) == EXIT_SURVIVES_ON_DISK == 1
    assert erasure_exit_code(False, ["audit"]) == EXIT_SURVIVES_ON_DISK
    assert erasure_exit_code(True, ["audit"]) == EXIT_GROUPS_BEHIND == 3
    assert erasure_exit_code(True, None) == EXIT_GROUPS_BEHIND  # the groups' offsets cannot be read
    assert erasure_exit_code(False, None) == EXIT_SURVIVES_ON_DISK
    assert erasure_exit_code(True, []) == EXIT_ERASED == 0


def test_the_worst_partitions_verdict_decides_a_keys_exit_code() -> None:
    assert worst_exit_code([EXIT_ERASED, EXIT_GROUPS_BEHIND, EXIT_SURVIVES_ON_DISK]) == EXIT_SURVIVES_ON_DISK
    assert worst_exit_code([EXIT_SURVIVES_ON_DISK, EXIT_GROUPS_BEHIND]) == EXIT_SURVIVES_ON_DISK
    assert worst_exit_code([EXIT_ERASED, EXIT_GROUPS_BEHIND, EXIT_ERASED]) == EXIT_GROUPS_BEHIND
    assert worst_exit_code([EXIT_ERASED, EXIT_ERASED]) == EXIT_ERASED
    assert worst_exit_code([]) == EXIT_ERASED  # nothing of the key in any partition: the disk proof holds


def test_stored_tombstones_counts_null_values_of_records_in_every_segment_and_the_oldest(tmp_path: Path) -> None:
    with compactlog.open(tmp_path, clock=FakeClock()) as store:
        store.create_topic("t", 1, {"cleanup.policy": "compact"})
        store.append("t", 0, pa.table({"key": [b"a", b"b", b"c"], "value": [b"1", b"2", b"3"]}),
                     producer_id=7, transactional=True)
        store.write_marker("t", 0, 7, 0, commit=True)  # a transaction marker: null value, but not a record
        store.roll("t", 0)
        store.append("t", 0, pa.table({"key": [b"a", b"b", b"c"], "value": [b"4", None, b"5"]}))
        store.roll("t", 0)
        store.append("t", 0, pa.table({"key": [b"c", b"d"], "value": [None, b"6"]}))  # the active segment
        assert stored_tombstones(store.log("t", 0)) == StoredTombstones(2, 5)
        store.create_topic("empty")
        assert stored_tombstones(store.log("empty", 0)) == StoredTombstones(0, None)
