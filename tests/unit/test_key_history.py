"""The pure decisions behind ``explain`` / ``verify-erasure`` (:mod:`compactlog.key_history`), the dry run's
estimate (:mod:`compactlog.cleaner.estimate`) and the maintenance pass's roll rule (:mod:`compactlog.maintenance`)."""

from __future__ import annotations

import dataclasses

import pyarrow as pa

from compactlog.cleaner.estimate import estimate_freed
from compactlog.cleaner.plan import CleaningPolicy, PartitionState
from compactlog.key_history import KeyRecord, explain_key
from compactlog.maintenance import roll_reason, rolled_state
from compactlog.record import CONTROL_COMMIT, CONTROL_NONE
from compactlog.retention import retention_roll_due
from compactlog.segment import SegmentStats

NOW = 1_700_000_000_000
HOUR = 3_600_000
POLICY = CleaningPolicy(compact=True, delete=False, min_cleanable_dirty_ratio=0.5, min_compaction_lag_ms=0,
                        max_compaction_lag_ms=2**63 - 1, delete_retention_ms=HOUR, retention_ms=-1,
                        retention_bytes=-1, segment_bytes=1 << 30)


def state(segments: list[SegmentStats], checkpoint: int | None = None, **policy: object) -> PartitionState:
    return PartitionState("t", 0, tuple(segments), segments[0].base_offset, segments[-1].next_offset,
                          segments[-1].next_offset, checkpoint, dataclasses.replace(POLICY, **policy))


def seg(base: int, end: int, size: int, ts: int, active: bool = False) -> SegmentStats:
    return SegmentStats(base, end, size, end - base, ts, ts, active)


def fates(records: list[KeyRecord], st: PartitionState, roll_ms: int = 7 * 24 * HOUR) -> list[tuple[str, int | None]]:
    return [(f.reason, f.removable_at_ms) for f in explain_key(records, st, NOW, roll_ms, HOUR)]


def test_a_value_superseded_in_the_active_segment_waits_for_its_roll() -> None:
    st = state([seg(0, 3, 300, NOW - HOUR, active=True)])
    records = [KeyRecord(0, NOW - HOUR, "0.log", False), KeyRecord(2, NOW - HOUR, "0.log", False)]
    (older, at), (newest, none) = fates(records, st, roll_ms=2 * HOUR)
    assert older.startswith("superseded by offset 2, which is not cleanable yet: active segment: rolls at")
    assert at == NOW - HOUR + 2 * HOUR + 1
    assert newest.startswith("newest record of a live key") and none is None


def test_a_value_superseded_in_a_segment_younger_than_min_lag_waits_for_the_lag() -> None:
    st = state([seg(0, 2, 100, NOW - 3 * HOUR), seg(2, 4, 100, NOW - 10), seg(4, 4, 0, -1, active=True)],
               min_compaction_lag_ms=HOUR)
    records = [KeyRecord(0, NOW - 3 * HOUR, "0", False), KeyRecord(3, NOW - 10, "2", False)]
    (reason, at), _ = fates(records, st)
    assert "min lag until" in reason and at == NOW - 10 + HOUR + 1


def test_a_value_whose_partition_is_below_the_dirty_ratio_says_so() -> None:
    st = state([seg(0, 10, 900, NOW - HOUR), seg(10, 12, 100, NOW - HOUR), seg(12, 12, 0, -1, active=True)],
               checkpoint=10)
    records = [KeyRecord(1, NOW - HOUR, "0", False), KeyRecord(11, NOW - HOUR, "10", False)]
    (reason, at), _ = fates(records, st)
    assert reason.startswith("superseded by offset 11; ratio below threshold: dirty ratio 0.10")
    assert at is None  # no max.compaction.lag.ms: no time makes it due


def test_a_value_in_a_selected_partition_goes_in_the_next_pass() -> None:
    st = state([seg(0, 4, 400, NOW - HOUR), seg(4, 4, 0, -1, active=True)])
    records = [KeyRecord(0, NOW - HOUR, "0", False), KeyRecord(3, NOW - HOUR, "0", False)]
    (reason, at), _ = fates(records, st)
    assert reason == "superseded by offset 3; not cleaned since: the next cleaner pass covers it" and at == NOW


def test_a_stamped_tombstone_waits_for_its_horizon_and_an_unstamped_one_for_a_round() -> None:
    st = state([seg(0, 4, 400, NOW - HOUR), seg(4, 4, 0, -1, active=True)], checkpoint=4)
    stamped = [KeyRecord(3, NOW - HOUR, "0", True, NOW + 5)]
    [(reason, at)] = fates(stamped, st)
    assert reason.startswith("delete horizon at 2023-11-14T22:13:20.005Z") and at == NOW + 5
    st = state([seg(0, 4, 400, NOW - HOUR), seg(4, 4, 0, -1, active=True)])
    [(reason, at)] = fates([KeyRecord(3, NOW - HOUR, "0", True)], st)
    assert reason.startswith("not yet stamped") and at == NOW + HOUR


def test_an_uncleanable_partition_is_named_as_the_reason() -> None:
    st = dataclasses.replace(state([seg(0, 4, 400, NOW - HOUR), seg(4, 4, 0, -1, active=True)]),
                             uncleanable_reason="damaged file")
    records = [KeyRecord(0, NOW, "0", False), KeyRecord(1, NOW, "0", False)]
    assert fates(records, st)[0] == ("partition uncleanable: damaged file", None)


def test_the_estimate_counts_superseded_expired_and_keyless_rows_and_prorates_bytes() -> None:
    rows = pa.table({
        "offset": pa.array([0, 1, 2, 3, 4, 5, 6, 7], pa.int64()),
        "key": pa.array([b"a", b"b", b"a", b"c", None, b"d", b"b", b"e"], pa.binary()),
        "value": pa.array([b"1", b"1", b"2", None, b"x", None, b"2", None], pa.binary()),
        "control_type": pa.array([CONTROL_NONE] * 8, pa.int8()),
        "delete_horizon_ms": pa.array([-1, -1, -1, NOW - 1, -1, -1, -1, NOW + 1], pa.int64()),
    })
    # Dirty section [2, 8): a (2), c (3), d (5), b (6), e (7) are mapped; offset 0 (a) and 1 (b) are
    # superseded, c's stamped tombstone is past its horizon, 4 has no key; d's unstamped tombstone and e's,
    # whose horizon is still ahead, are kept.
    estimate = estimate_freed(rows, 2, 8, NOW, range_bytes=8000)
    assert (estimate.records, estimate.superseded, estimate.expired_tombstones, estimate.keyless) == (4, 2, 1, 1)
    assert estimate.records_read == 8
    sizes = [72, 72, 72, 71, 71, 71, 72, 71]  # key + value + 70 bytes of overhead per row
    assert estimate.bytes == 8000 * (72 + 72 + 71 + 71) // sum(sizes)


def test_the_estimate_keeps_markers_and_rows_past_the_range() -> None:
    rows = pa.table({
        "offset": pa.array([0, 1, 2], pa.int64()), "key": pa.array([b"a", None, b"a"], pa.binary()),
        "value": pa.array([b"1", None, b"2"], pa.binary()),
        "control_type": pa.array([CONTROL_NONE, CONTROL_COMMIT, CONTROL_NONE], pa.int8()),
        "delete_horizon_ms": pa.array([-1, -1, -1], pa.int64())})
    assert estimate_freed(rows, 0, 2, NOW, range_bytes=100).records == 0  # a at 2 is past the range


def test_rolls_force_compacted_topics_and_idle_segments_only() -> None:
    active = SegmentStats(5, 7, 100, 2, NOW - 10, NOW - 20, True)
    assert roll_reason(active, NOW, roll_ms=HOUR, compact=True, force=True) == "--force: compact now"
    assert roll_reason(active, NOW, roll_ms=HOUR, compact=False, force=True) is None
    assert roll_reason(active, NOW, roll_ms=19, compact=False, force=False) == \
        "idle: first record 20 ms old > roll time 19 ms"
    assert roll_reason(active, NOW, roll_ms=20, compact=False, force=False) is None
    st = rolled_state(state([seg(0, 5, 10, NOW), active]))
    assert [(s.base_offset, s.next_offset, s.active) for s in st.segments] == [(0, 5, False), (5, 7, False),
                                                                               (7, 7, True)]


def test_retention_rolls_an_active_segment_only_once_it_has_expired_whole() -> None:
    active = SegmentStats(5, 7, 100, 2, NOW - HOUR - 1, NOW - 2 * HOUR, True)
    assert retention_roll_due(active, NOW, delete=True, retention_ms=HOUR)
    assert not retention_roll_due(active, NOW, delete=True, retention_ms=HOUR + 1)
    assert not retention_roll_due(active, NOW, delete=False, retention_ms=HOUR)
    assert not retention_roll_due(active, NOW, delete=True, retention_ms=-1)
