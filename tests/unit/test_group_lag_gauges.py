"""Consumer group lag gauges (:mod:`compactlog.gauges`): the lag of each committed offset against its
partition's log end, and the cache that replays a ``__consumer_offsets`` partition again only when it moved."""

from __future__ import annotations

from typing import Any

import pytest

from compactlog import gauges
from compactlog.errors import CorruptOffsetsRecordError
from compactlog.gauges import CommittedOffsetsCache, GroupLagGauges, PartitionGauges, group_lag_gauges


def partition(topic: str, number: int, log_end: int, log_start: int = 0) -> PartitionGauges:
    return PartitionGauges(topic, number, 0, log_start, log_end, 1, 0.0, 0)


def test_lag_is_the_log_end_minus_the_committed_offset_and_unknown_without_a_readable_partition() -> None:
    partitions = [partition("users", 0, 10), partition("users", 1, -1)]
    committed = {"b": {("users", 0): 4, ("gone", 0): 3}, "a": {("users", 1): 2, ("users", 0): 10}}

    assert group_lag_gauges(committed, partitions) == [
        GroupLagGauges("a", "users", 0, 10, 0),
        GroupLagGauges("a", "users", 1, 2, None),  # log end -1: the log cannot be opened
        GroupLagGauges("b", "gone", 0, 3, None),  # no such partition
        GroupLagGauges("b", "users", 0, 4, 6),
    ]


def test_only_the_consumer_offsets_partitions_that_moved_are_replayed(monkeypatch: pytest.MonkeyPatch) -> None:
    replays: list[int] = []
    broken: set[int] = set()

    def replayed_offsets(store: Any, number: int) -> tuple[dict[str, dict[tuple[str, int], int]], int]:
        replays.append(number)
        if number in broken:
            raise CorruptOffsetsRecordError("unknown key version 9")
        return {f"g{number}": {("users", 0): replays.count(number)}}, number  # partition n: n undecodable

    monkeypatch.setattr(gauges, "replayed_offsets", replayed_offsets)
    cache = CommittedOffsetsCache()
    offsets = [partition("__consumer_offsets", 0, 7), partition("__consumer_offsets", 1, 3)]
    users = [partition("users", 0, 10)]

    assert cache.get(None, users + offsets) == {"g0": {("users", 0): 1}, "g1": {("users", 0): 1}}
    assert cache.get(None, users + offsets) == {"g0": {("users", 0): 1}, "g1": {("users", 0): 1}}
    assert replays == [0, 1]
    assert cache.skipped_records == 1  # partition 1's, kept with its groups
    appended = [offsets[0], partition("__consumer_offsets", 1, 4)]  # a commit to partition 1
    assert cache.get(None, appended) == {"g0": {("users", 0): 1}, "g1": {("users", 0): 2}}
    moved_start = [partition("__consumer_offsets", 0, 7, log_start=2), appended[1]]
    assert cache.get(None, moved_start) == {"g0": {("users", 0): 2}, "g1": {("users", 0): 2}}
    assert replays == [0, 1, 1, 0]

    broken.add(1)  # a damaged partition: its groups are left out, the others reported, until it is written
    damaged = [moved_start[0], partition("__consumer_offsets", 1, 5)]
    assert cache.get(None, damaged) == {"g0": {("users", 0): 2}}
    assert cache.get(None, damaged) == {"g0": {("users", 0): 2}}
    assert replays == [0, 1, 1, 0, 1]
    assert cache.get(None, users) == {}  # no __consumer_offsets: no groups
    assert cache.skipped_records == 0
