"""``__consumer_offsets`` is compacted by our own cleaner, as Kafka's is by Kafka's: after many commits and a
clean, one live record per group and partition (and per group's metadata) remains, and a manager loading the
cleaned topic sees exactly what the manager that wrote it saw."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import compactlog
from compactlog.coordinator.group_metadata_manager import (
    OFFSETS_TOPIC,
    GroupMetadataManager,
    GroupSnapshot,
    OffsetAndMetadata,
)
from compactlog.coordinator.offset_records import GroupKey, OffsetKey, decode_key
from compactlog.server_config import server_config
from compactlog.store import Store
from support import FakeClock

CONFIG = server_config({"offsets.topic.num.partitions": "4"})
DAY_MS = 86_400_000


def live_keys(store: Store) -> Counter[OffsetKey | GroupKey]:
    """How many records with a value each key of the topic still has."""
    counts: Counter[OffsetKey | GroupKey] = Counter()
    for partition in range(store.partitions(OFFSETS_TOPIC)):
        for record in store.read(OFFSETS_TOPIC, partition):
            if record.value is not None:
                assert record.key is not None
                counts[decode_key(record.key)] += 1
    return counts


def clean_all(store: Store) -> None:
    for partition in range(store.partitions(OFFSETS_TOPIC)):
        store.roll(OFFSETS_TOPIC, partition)
    store.clean(force=True, topic=OFFSETS_TOPIC)


def test_many_commits_and_a_clean_leave_one_record_per_group_and_partition(tmp_path: Path,
                                                                           clock: FakeClock) -> None:
    store = compactlog.open(tmp_path / "data", clock=clock)
    m = GroupMetadataManager(store, CONFIG)
    groups = [f"group-{g}" for g in range(6)]
    for generation in range(1, 4):
        for group in groups:
            m.store_group(GroupSnapshot(group, "consumer", generation, "range", None, clock.now, ()))
    for round_ in range(50):
        clock.advance(10)
        for group in groups:
            m.store_offsets(group, {("orders", p): OffsetAndMetadata(round_ * 10 + p) for p in range(3)})
    # Transactions: one committed, one aborted (its offsets must not come back), one offset deleted.
    partition = m.partition_for("group-0")
    m.store_txn_offsets("group-0", 42, 0, {("orders", 0): OffsetAndMetadata(1_000)})
    store.write_marker(OFFSETS_TOPIC, partition, 42, 0, commit=True)
    m.complete_txn(42, commit=True)
    m.store_txn_offsets("group-0", 42, 0, {("orders", 1): OffsetAndMetadata(2_000)})
    store.write_marker(OFFSETS_TOPIC, partition, 42, 0, commit=False)
    m.complete_txn(42, commit=False)
    m.delete_offsets("group-1", [("orders", 2)])
    m.delete_group("group-5")
    expected = {group: m.committed(group) for group in groups}
    assert sum(live_keys(store).values()) > 6 * 50 * 3

    clean_all(store)
    live = live_keys(store)
    assert set(live.values()) == {1}  # one record per key
    assert set(live) == ({OffsetKey(g, "orders", p) for g in groups[:5] for p in range(3)}
                         - {OffsetKey("group-1", "orders", 2)}) | {GroupKey(g) for g in groups[:5]}
    fresh = GroupMetadataManager(compactlog.open(store.data_dir, clock=clock), CONFIG)
    loaded = fresh.load()
    assert {group: loaded[group].offsets for group in loaded} == {g: o for g, o in expected.items() if o}
    assert loaded["group-0"].offsets[("orders", 0)].offset == 1_000
    assert loaded["group-0"].offsets[("orders", 1)].offset == 491  # the aborted 2,000 did not come back
    assert all(loaded[g].snapshot is not None and loaded[g].snapshot.generation == 3 for g in groups[:5])

    # Past delete.retention.ms, the next clean of each partition (one new commit makes each dirty again)
    # removes the tombstones too; what is loaded stays the same.
    clock.advance(DAY_MS + 1)
    probes = {m.partition_for(f"probe-{i}"): f"probe-{i}" for i in range(40)}
    assert sorted(probes) == [0, 1, 2, 3]
    for probe in probes.values():
        m.store_offsets(probe, {("orders", 0): OffsetAndMetadata(1)})
    clean_all(store)
    tombstones = sum(1 for p in range(4) for r in store.read(OFFSETS_TOPIC, p) if r.value is None)
    assert tombstones == 0
    again = GroupMetadataManager(compactlog.open(store.data_dir, clock=clock), CONFIG).load()
    assert {g: again[g] for g in groups if g in again} == loaded
    assert {g: again[g].offsets for g in probes.values()} == {g: m.committed(g) for g in probes.values()}
