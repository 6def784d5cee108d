"""offsets.retention.minutes: which offsets expire (Kafka 2.1+'s rules, the pure function) and the manager's
tombstones for them, on a fake clock."""

from __future__ import annotations

from pathlib import Path

import compactlog
from compactlog.coordinator.group_metadata_manager import (
    OFFSETS_TOPIC,
    GroupMetadataManager,
    GroupSnapshot,
    MemberSnapshot,
    OffsetAndMetadata,
)
from compactlog.coordinator.offset_expiry import expired_offsets, subscribed_topics
from compactlog.server_config import server_config
from support import FakeClock

RETENTION = 60_000
T0 = 1_000_000


def subscription(*topics: str) -> bytes:
    """Kafka's ConsumerProtocolSubscription v0, by hand: version, topics (int32 count, int16-length strings),
    null user data."""
    body = len(topics).to_bytes(4, "big") + b"".join(len(t).to_bytes(2, "big") + t.encode() for t in topics)
    return b"\x00\x00" + body + b"\xff\xff\xff\xff"


def group(protocol_type: str = "consumer", members: tuple[bytes, ...] = (), state_ms: int = -1) -> GroupSnapshot:
    return GroupSnapshot("g", protocol_type, 1, "range" if members else None, "m0" if members else None, state_ms,
                         tuple(MemberSnapshot(f"m{i}", None, "c", "/h", 1, 1, s, b"") for i, s in enumerate(members)))


def test_a_groups_without_metadata_offsets_expire_retention_after_their_commit() -> None:
    offsets = {("t", 0): OffsetAndMetadata(1, commit_timestamp=T0),
               ("t", 1): OffsetAndMetadata(1, commit_timestamp=T0 + 1)}
    assert expired_offsets(offsets, None, True, set(), T0 + RETENTION - 1, RETENTION) == []
    assert expired_offsets(offsets, None, True, set(), T0 + RETENTION, RETENTION) == [("t", 0)]
    # A simple consumer (offsets only, empty protocol type) is counted the same way, members or not.
    assert expired_offsets(offsets, group(""), False, set(), T0 + RETENTION + 1, RETENTION) == [("t", 0), ("t", 1)]


def test_an_empty_groups_offsets_count_from_the_later_of_commit_and_becoming_empty() -> None:
    offsets = {("t", 0): OffsetAndMetadata(1, commit_timestamp=T0)}
    became_empty = group(state_ms=T0 + 30_000)
    assert expired_offsets(offsets, became_empty, True, set(), T0 + RETENTION, RETENTION) == []
    assert expired_offsets(offsets, became_empty, True, set(), T0 + 30_000 + RETENTION, RETENTION) == [("t", 0)]
    # Committed after the group became empty (an admin client): counted from the commit.
    empty_before = group(state_ms=T0 - 50_000)
    assert expired_offsets(offsets, empty_before, True, set(), T0 - 50_000 + RETENTION, RETENTION) == []
    assert expired_offsets(offsets, empty_before, True, set(), T0 + RETENTION, RETENTION) == [("t", 0)]


def test_a_consumer_group_with_members_keeps_its_subscribed_topics_offsets() -> None:
    offsets = {("a", 0): OffsetAndMetadata(1, commit_timestamp=T0), ("b", 0): OffsetAndMetadata(1, commit_timestamp=T0),
               ("old", 0): OffsetAndMetadata(1, commit_timestamp=T0)}
    members = group(members=(subscription("a"), subscription("a", "b")), state_ms=T0)
    assert subscribed_topics(members) == {"a", "b"}
    later = T0 + 100 * RETENTION
    assert expired_offsets(offsets, members, False, set(), later, RETENTION) == [("old", 0)]
    # A subscription that cannot be read keeps every offset; so does a group of another protocol type.
    assert expired_offsets(offsets, group(members=(b"\x00",)), False, set(), later, RETENTION) == []
    assert expired_offsets(offsets, group("connect", members=(b"x",)), False, set(), later, RETENTION) == []


def test_pending_transactional_offsets_never_expire_and_an_expire_timestamp_decides_alone() -> None:
    offsets = {("t", 0): OffsetAndMetadata(1, commit_timestamp=T0),
               ("t", 1): OffsetAndMetadata(1, commit_timestamp=T0, expire_timestamp=T0 + 10),
               ("t", 2): OffsetAndMetadata(1, commit_timestamp=T0, expire_timestamp=T0 + 10 * RETENTION)}
    assert expired_offsets(offsets, None, True, set(), T0 + 10, RETENTION) == [("t", 1)]
    assert expired_offsets(offsets, None, True, {("t", 0)}, T0 + RETENTION, RETENTION) == [("t", 1)]
    assert expired_offsets(offsets, None, True, set(), T0 + 10 * RETENTION, RETENTION) == [("t", 0), ("t", 1), ("t", 2)]


def test_the_manager_writes_tombstones_for_what_offsets_retention_minutes_expires(tmp_path: Path,
                                                                                    clock: FakeClock) -> None:
    store = compactlog.open(tmp_path / "data", clock=clock)
    config = server_config({"offsets.topic.num.partitions": "2", "offsets.retention.minutes": "1"})
    m = GroupMetadataManager(store, config)
    m.store_group(GroupSnapshot("busy", "consumer", 1, "range", "m0", clock.now,
                                (MemberSnapshot("m0", None, "c", "/h", 1, 1, subscription("a"), b""),)))
    m.store_offsets("busy", {("a", 0): OffsetAndMetadata(1), ("b", 0): OffsetAndMetadata(2)})
    m.store_offsets("idle", {("a", 0): OffsetAndMetadata(3)})
    m.store_txn_offsets("idle", 9, 0, {("a", 1): OffsetAndMetadata(4)})
    clock.advance(59_999)
    assert m.expire_offsets(clock.now, lambda g: g != "busy") == 0
    m.store_offsets("idle", {("a", 2): OffsetAndMetadata(5)})  # committed later: not yet expired
    clock.advance(1)
    assert m.expire_offsets(clock.now, lambda g: g != "busy") == 2  # busy's b-0 and idle's a-0
    assert m.committed("busy") == {("a", 0): OffsetAndMetadata(1, commit_timestamp=clock.now - 60_000)}
    assert set(m.committed("idle")) == {("a", 2)}
    fresh = GroupMetadataManager(compactlog.open(store.data_dir, clock=clock), config)
    fresh.load()
    assert fresh.committed("busy") == m.committed("busy") and fresh.committed("idle") == m.committed("idle")
    tombstones = [r for p in range(2) for r in store.read(OFFSETS_TOPIC, p) if r.value is None]
    assert len(tombstones) == 2
