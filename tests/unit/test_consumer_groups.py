"""The read view of ``__consumer_offsets``: groups, committed offsets and lag, read by a store of its own from
records the group metadata manager wrote."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import compactlog
from compactlog.consumer_groups import (
    GroupDescription,
    PartitionLag,
    committed_offsets,
    describe_group,
    list_groups,
)
from compactlog.coordinator.group_metadata_manager import (
    OFFSETS_TOPIC,
    GroupMetadataManager,
    GroupSnapshot,
    MemberSnapshot,
    OffsetAndMetadata,
)
from compactlog.errors import UnknownGroupError
from compactlog.server_config import server_config
from compactlog.store import Store
from support import FakeClock


def assignment(*partitions: tuple[str, list[int]]) -> bytes:
    """Kafka's ConsumerProtocolAssignment v0, by hand: version, (topic, [partition]) array, null user data."""
    body = b"".join(len(t).to_bytes(2, "big") + t.encode() + len(ps).to_bytes(4, "big")
                    + b"".join(p.to_bytes(4, "big") for p in ps) for t, ps in partitions)
    return b"\x00\x00" + len(partitions).to_bytes(4, "big") + body + b"\xff\xff\xff\xff"


def member(member_id: str, *partitions: tuple[str, list[int]]) -> MemberSnapshot:
    return MemberSnapshot(member_id, None, f"client-{member_id}", f"/10.0.0.{member_id[-1]}", 300_000, 45_000,
                          b"", assignment(*partitions))


@pytest.fixture
def written(tmp_path: Path, clock: FakeClock) -> Store:
    """A store where a manager wrote two groups, a transaction's offsets and a topic of 10 + 4 records."""
    store = compactlog.open(tmp_path / "data", clock=clock)
    store.create_topic("orders", 2)
    for partition, count in ((0, 10), (1, 4)):
        store.append("orders", partition, pa.table({"key": [b"k%d" % i for i in range(count)],
                                                    "value": [b"v"] * count}))
    m = GroupMetadataManager(store, server_config({"offsets.topic.num.partitions": "5"}))
    m.store_group(GroupSnapshot("live", "consumer", 4, "range", "m1", clock.now,
                                (member("m1", ("orders", [0])), member("m2", ("orders", [1])), member("m3"))))
    m.store_offsets("live", {("orders", 0): OffsetAndMetadata(7)})
    m.store_offsets("idle", {("orders", 0): OffsetAndMetadata(10), ("orders", 1): OffsetAndMetadata(1),
                             ("gone", 0): OffsetAndMetadata(3)})
    m.store_txn_offsets("live", 5, 0, {("orders", 1): OffsetAndMetadata(2)})  # open: not committed yet
    return store


def test_groups_are_listed_from_their_metadata_and_offsets(written: Store, tmp_path: Path) -> None:
    reader = compactlog.open(written.data_dir)
    assert list_groups(reader) == ["idle", "live"]
    assert list_groups(compactlog.open(tmp_path / "empty")) == []  # no __consumer_offsets: no groups


def test_a_group_with_members_is_described_with_lag_and_owners(written: Store) -> None:
    described = describe_group(compactlog.open(written.data_dir), "live")
    m1, m2, m3 = (member("m1", ("orders", [0])), member("m2", ("orders", [1])), member("m3"))
    assert described == GroupDescription("live", "Stable", "consumer", "range", 4, (m1, m2, m3), (
        PartitionLag("orders", 0, 7, 10, 3, "m1", "client-m1", "/10.0.0.1"),
        PartitionLag("orders", 1, None, 4, None, "m2", "client-m2", "/10.0.0.2"),  # its offset is still pending
    ))


def test_a_group_that_only_commits_is_empty_and_a_deleted_topic_is_left_out(written: Store) -> None:
    described = describe_group(compactlog.open(written.data_dir), "idle")
    assert (described.state, described.protocol_type, described.protocol, described.members) == ("Empty", "", None, ())
    assert described.partitions == (PartitionLag("orders", 0, 10, 10, 0, None, None, None),
                                    PartitionLag("orders", 1, 1, 4, 3, None, None, None))


def test_an_unknown_group_is_an_error(written: Store, tmp_path: Path) -> None:
    with pytest.raises(UnknownGroupError, match="consumer group 'nobody' does not exist"):
        describe_group(written, "nobody")
    with pytest.raises(UnknownGroupError, match="no __consumer_offsets"):
        describe_group(compactlog.open(tmp_path / "empty"), "live")


def test_committed_offsets_are_every_groups_and_a_transactions_once_committed(written: Store) -> None:
    expected = {"idle": {("gone", 0): 3, ("orders", 0): 10, ("orders", 1): 1}, "live": {("orders", 0): 7}}
    assert committed_offsets(compactlog.open(written.data_dir)) == expected
    partition = GroupMetadataManager(written, server_config({})).partition_for("live")
    written.write_marker(OFFSETS_TOPIC, partition, 5, 0, commit=True)
    expected["live"][("orders", 1)] = 2
    assert committed_offsets(compactlog.open(written.data_dir)) == expected
    assert describe_group(written, "live").partitions[1].lag == 2
