"""Consumer group lag gauges (:mod:`compactlog.gauges`): the lag of each committed offset against its
partition's log end, and the cache that reads ``__consumer_offsets`` again only when it changed."""

from __future__ import annotations

from typing import Any

import pytest

from compactlog import gauges
from compactlog.gauges import CommittedOffsetsCache, GroupLagGauges, PartitionGauges, group_lag_gauges


def partition(topic: str, number: int, log_end: int, log_start: int = 0) -> PartitionGauges:
    return PartitionGauges(topic, number, 0, log_start, log_end, 1, 0.0, 0)


PARTITIONS = [partition("users", 0, 10), partition("users", 1, -1), partition("__consumer_offsets", 0, 7)]


def test_lag_is_the_log_end_minus_the_committed_offset_and_unknown_without_a_readable_partition() -> None:
    committed = {"b": {("users", 0): 4, ("gone", 0): 3}, "a": {("users", 1): 2, ("users", 0): 10}}

    assert group_lag_gauges(committed, PARTITIONS) == [
        GroupLagGauges("a", "users", 0, 10, 0),
        GroupLagGauges("a", "users", 1, 2, None),  # log end -1: the log cannot be opened
        GroupLagGauges("b", "gone", 0, 3, None),  # no such partition
        GroupLagGauges("b", "users", 0, 4, 6),
    ]


def test_the_committed_offsets_are_read_again_only_when_consumer_offsets_changed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[int] = []

    def committed_offsets(store: Any) -> dict[str, dict[tuple[str, int], int]]:
        reads.append(1)
        return {"g": {("users", 0): len(reads)}}

    monkeypatch.setattr(gauges, "committed_offsets", committed_offsets)
    cache = CommittedOffsetsCache()

    assert cache.get(None, PARTITIONS) == {"g": {("users", 0): 1}}  # type: ignore[arg-type]
    assert cache.get(None, PARTITIONS) == {"g": {("users", 0): 1}}  # type: ignore[arg-type]
    assert len(reads) == 1
    appended = [*PARTITIONS[:2], partition("__consumer_offsets", 0, 8)]
    assert cache.get(None, appended) == {"g": {("users", 0): 2}}  # type: ignore[arg-type]
    moved_start = [*PARTITIONS[:2], partition("__consumer_offsets", 0, 8, log_start=3)]
    assert cache.get(None, moved_start) == {"g": {("users", 0): 3}}  # type: ignore[arg-type]
    assert cache.get(None, PARTITIONS[:2]) == {}  # type: ignore[arg-type]  # no __consumer_offsets: no groups
    assert len(reads) == 3
