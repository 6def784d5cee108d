"""Tests for compactlog.cleaner.plan: dirty range, selection, grouping, rolls, retention and metrics."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compactlog.cleaner.metrics import CleanerStats, cleaner_metrics
from compactlog.cleaner.plan import (
    LIMIT_ACTIVE,
    LIMIT_LSO,
    LIMIT_MIN_LAG,
    CleaningPolicy,
    PartitionState,
    cleanable_offsets,
    group_segments_by_size,
    log_to_clean,
    max_compaction_delay,
    retention_deletable,
    select_logs,
)
from compactlog.config import topic_config
from compactlog.limits import INT_MAX, LONG_MAX
from compactlog.segment import SegmentStats
from compactlog.segment_roll import idle_roll_due, should_roll

POLICY = CleaningPolicy(
    compact=True,
    delete=False,
    min_cleanable_dirty_ratio=0.5,
    min_compaction_lag_ms=0,
    max_compaction_lag_ms=LONG_MAX,
    delete_retention_ms=86_400_000,
    retention_ms=604_800_000,
    retention_bytes=-1,
    segment_bytes=1000,
)

# A segment spec: (base_offset, size_bytes, max_timestamp, first_timestamp); the last one is the active one.
Spec = tuple[int, int, int, int]


def make_segments(specs: Sequence[Spec], leo: int) -> tuple[SegmentStats, ...]:
    out = []
    for i, (base, size, max_ts, first_ts) in enumerate(specs):
        nxt = specs[i + 1][0] if i + 1 < len(specs) else leo
        out.append(SegmentStats(base, nxt, size, 1 if size else 0, max_ts, first_ts, i == len(specs) - 1))
    return tuple(out)


def make_state(
    specs: Sequence[Spec],
    leo: int,
    *,
    log_start: int | None = None,
    lso: int | None = None,
    checkpoint: int | None = None,
    topic: str = "t",
    partition: int = 0,
    uncleanable: str | None = None,
    **policy: object,
) -> PartitionState:
    return PartitionState(
        topic=topic,
        partition=partition,
        segments=make_segments(specs, leo),
        log_start_offset=specs[0][0] if log_start is None else log_start,
        log_end_offset=leo,
        last_stable_offset=leo if lso is None else lso,
        checkpoint=checkpoint,
        policy=dataclasses.replace(POLICY, **policy),  # type: ignore[arg-type]
        uncleanable_reason=uncleanable,
    )


# Four 100-byte segments at 0, 10, 20 and an active segment at 30 holding 50 bytes; LEO 35.
FOUR = [(0, 100, 100, 50), (10, 100, 200, 150), (20, 100, 300, 250), (30, 50, 400, 350)]


# --- CleaningPolicy -----------------------------------------------------------------------------------------


def test_policy_from_topic_config_is_duck_typed() -> None:
    class Cfg:
        compact = True
        delete = True
        min_cleanable_dirty_ratio = 0.25
        min_compaction_lag_ms = 7
        max_compaction_lag_ms = 9
        delete_retention_ms = 11
        retention_ms = 13
        retention_bytes = 15
        segment_bytes = 17

    p = CleaningPolicy.from_topic_config(Cfg())
    assert p == CleaningPolicy(True, True, 0.25, 7, 9, 11, 13, 15, 17)
    assert p.cleanup_policy == "compact,delete"


def test_partition_state_requires_active_last() -> None:
    segs = make_segments(FOUR, 35)
    with pytest.raises(ValueError):
        PartitionState("t", 0, segs[:-1], 0, 35, 35, None, POLICY)
    with pytest.raises(ValueError):
        PartitionState("t", 0, (segs[1], segs[0], segs[3]), 0, 35, 35, None, POLICY)


# --- cleanable_offsets --------------------------------------------------------------------------------------


def test_no_checkpoint_starts_at_log_start() -> None:
    co = cleanable_offsets(make_state(FOUR, 35, log_start=5), now_ms=1000)
    assert (co.first_dirty_offset, co.first_uncleanable_offset, co.force_update_checkpoint) == (5, 30, False)
    assert co.limited_by == LIMIT_ACTIVE


def test_checkpoint_below_log_start_is_reset() -> None:
    co = cleanable_offsets(make_state(FOUR, 35, log_start=12, checkpoint=5), now_ms=1000)
    assert (co.first_dirty_offset, co.force_update_checkpoint) == (12, True)


def test_checkpoint_above_log_end_is_reset_to_log_start() -> None:
    co = cleanable_offsets(make_state(FOUR, 35, log_start=3, checkpoint=36), now_ms=1000)
    assert (co.first_dirty_offset, co.force_update_checkpoint) == (3, True)


def test_checkpoint_at_log_end_is_valid() -> None:
    co = cleanable_offsets(make_state(FOUR, 35, checkpoint=35), now_ms=1000)
    assert (co.first_dirty_offset, co.first_uncleanable_offset, co.force_update_checkpoint) == (35, 35, False)


def test_min_lag_holds_back_first_recent_segment_and_everything_after() -> None:
    specs = [(0, 100, 100, 50), (10, 100, 900, 850), (20, 100, 200, 150), (30, 50, 950, 940)]
    co = cleanable_offsets(make_state(specs, 35, min_compaction_lag_ms=500), now_ms=1000)
    assert (co.first_uncleanable_offset, co.limited_by) == (10, LIMIT_MIN_LAG)
    # The boundary is strict: max_timestamp == now - lag is old enough.
    co = cleanable_offsets(make_state(specs, 35, min_compaction_lag_ms=100), now_ms=1000)
    assert (co.first_uncleanable_offset, co.limited_by) == (30, LIMIT_ACTIVE)


def test_min_lag_zero_ignores_timestamps() -> None:
    specs = [(0, 100, 999, 999), (10, 50, 999, 999)]
    assert cleanable_offsets(make_state(specs, 15), now_ms=1000).first_uncleanable_offset == 10


def test_min_lag_only_looks_at_dirty_segments() -> None:
    specs = [(0, 100, 990, 900), (10, 100, 100, 50), (20, 50, 990, 990)]
    # Checkpoint 10: the recent segment 0 is clean and does not count.
    co = cleanable_offsets(make_state(specs, 25, checkpoint=10, min_compaction_lag_ms=500), now_ms=1000)
    assert co.first_uncleanable_offset == 20
    # Checkpoint 5 lies in segment 0, which is therefore dirty and held back: nothing to clean.
    co = cleanable_offsets(make_state(specs, 25, checkpoint=5, min_compaction_lag_ms=500), now_ms=1000)
    assert (co.first_dirty_offset, co.first_uncleanable_offset, co.limited_by) == (5, 5, LIMIT_MIN_LAG)


def test_lso_bound_and_tie_with_active_segment() -> None:
    co = cleanable_offsets(make_state(FOUR, 35, lso=25), now_ms=1000)
    assert (co.first_uncleanable_offset, co.limited_by) == (25, LIMIT_LSO)
    co = cleanable_offsets(make_state(FOUR, 35, lso=30), now_ms=1000)
    assert (co.first_uncleanable_offset, co.limited_by) == (30, LIMIT_ACTIVE)


# --- log_to_clean -------------------------------------------------------------------------------------------


def test_lso_bound_is_rounded_down_to_segment_base() -> None:
    ltc = log_to_clean(make_state(FOUR, 35, lso=25), now_ms=1000)
    assert ltc.first_uncleanable_offset == 20
    assert (ltc.clean_bytes, ltc.cleanable_bytes, ltc.total_bytes) == (0, 200, 200)
    assert ltc.cleanable_ratio == 1.0


def test_mid_segment_checkpoint_counts_segment_as_clean_and_cleanable() -> None:
    ltc = log_to_clean(make_state(FOUR, 35, checkpoint=15), now_ms=1000)
    # clean = segments with base < 15 (0 and 10); cleanable = segments 10 and 20 (from the one containing 15).
    assert (ltc.clean_bytes, ltc.cleanable_bytes, ltc.total_bytes) == (200, 200, 400)
    assert ltc.cleanable_ratio == 0.5


def test_bound_rounded_below_first_dirty_leaves_nothing() -> None:
    ltc = log_to_clean(make_state(FOUR, 35, checkpoint=25, lso=22), now_ms=1000)
    assert (ltc.first_dirty_offset, ltc.first_uncleanable_offset, ltc.cleanable_bytes) == (25, 20, 0)


def test_empty_log_has_ratio_zero() -> None:
    ltc = log_to_clean(make_state([(0, 0, -1, -1)], 0), now_ms=1000)
    assert (ltc.total_bytes, ltc.cleanable_ratio, ltc.first_uncleanable_offset) == (0, 0.0, 0)


def test_max_compaction_delay() -> None:
    specs = [
        (0, 100, 1000, 1000),
        (10, 100, 5500, 5000),
        (20, 0, -1, -1),
        (30, 100, 6000, 0),
        (40, 50, 10, 10),
    ]
    # Checkpoint 10: segment 0 is clean; -1 and 0 first timestamps are ignored; the active segment too.
    ltc = log_to_clean(make_state(specs, 45, checkpoint=10, max_compaction_lag_ms=3000), now_ms=10_000)
    assert (ltc.max_compaction_delay_ms, ltc.need_compaction_now) == (2000, True)
    ltc = log_to_clean(make_state(specs, 45, checkpoint=10, max_compaction_lag_ms=5000), now_ms=10_000)
    assert (ltc.max_compaction_delay_ms, ltc.need_compaction_now) == (0, False)
    # Long.MAX_VALUE max lag: exact arithmetic, never due.
    assert max_compaction_delay(make_segments(specs, 45), 0, 10_000, LONG_MAX) == 0
    assert max_compaction_delay(make_segments(specs, 45), 0, 10_000, -5) == 10_000 - 1000


# --- select_logs --------------------------------------------------------------------------------------------


def test_ratio_must_be_strictly_greater() -> None:
    sel = select_logs([make_state(FOUR, 35, checkpoint=15)], now_ms=1000)  # ratio exactly 0.5
    assert sel.to_clean == ()
    assert sel.skipped[("t", 0)] == "dirty ratio 0.50 <= min.cleanable.dirty.ratio 0.50"
    sel = select_logs([make_state(FOUR, 35, checkpoint=15, min_cleanable_dirty_ratio=0.49)], now_ms=1000)
    assert [c.key for c in sel.to_clean] == [("t", 0)]


def test_ratio_one_only_via_max_lag() -> None:
    state = make_state(FOUR, 35, min_cleanable_dirty_ratio=1.0)  # all dirty: ratio 1.0, not > 1.0
    assert select_logs([state], now_ms=1000).to_clean == ()
    due = dataclasses.replace(state, policy=dataclasses.replace(state.policy, max_compaction_lag_ms=100))
    sel = select_logs([due], now_ms=1000)
    assert [c.key for c in sel.to_clean] == [("t", 0)]
    assert sel.max_compaction_delay_ms == 1000 - 100 - 50


def test_ratio_zero_selects_any_cleanable_byte() -> None:
    specs = [(0, 1000, 10, 10), (10, 1, 20, 20), (20, 5, 30, 30)]
    state = make_state(specs, 25, checkpoint=10, min_cleanable_dirty_ratio=0.0)
    sel = select_logs([state], now_ms=1000)
    assert [c.cleanable_bytes for c in sel.to_clean] == [1]


def test_max_lag_due_but_nothing_cleanable_is_skipped() -> None:
    state = make_state(FOUR, 35, checkpoint=20, lso=25, max_compaction_lag_ms=10)
    sel = select_logs([state], now_ms=1000)
    assert sel.to_clean == ()
    assert sel.max_compaction_delay_ms == 1000 - 10 - 250
    assert (
        sel.skipped[("t", 0)]
        == "nothing cleanable: last stable offset 25 lies in the first dirty segment (base 20)"
    )
    # All data held back and nothing clean: total bytes 0, skipped like an empty log but with the real reason.
    sel = select_logs([make_state(FOUR, 35, lso=0)], now_ms=1000)
    assert (
        sel.skipped[("t", 0)] == "nothing cleanable: last stable offset 0 is at or below first dirty offset 0"
    )


def test_force_ignores_ratio_but_not_active_segment_or_lso() -> None:
    low = make_state(FOUR, 35, checkpoint=20, topic="low", min_cleanable_dirty_ratio=0.99)
    active_only = make_state([(0, 100, 10, 10), (10, 50, 20, 20)], 15, checkpoint=10, topic="active")
    lso = make_state(FOUR, 35, checkpoint=20, lso=25, topic="lso")
    assert select_logs([low, active_only, lso], now_ms=1000).to_clean == ()
    sel = select_logs([low, active_only, lso], now_ms=1000, force=True)
    assert [c.topic for c in sel.to_clean] == ["low"]
    assert sel.skipped[("active", 0)] == (
        "nothing cleanable: first dirty offset 10 is at the active segment (base 10)"
    )
    assert sel.skipped[("lso", 0)] == (
        "nothing cleanable: last stable offset 25 lies in the first dirty segment (base 20)"
    )


def test_filthiest_first_with_deterministic_ties() -> None:
    states = [
        make_state(FOUR, 35, checkpoint=10, topic="b", min_cleanable_dirty_ratio=0.1),  # 200/300
        make_state(FOUR, 35, topic="c", partition=1),  # 300/300
        make_state(FOUR, 35, topic="a", partition=2, min_cleanable_dirty_ratio=0.1),  # 300/300
        make_state(FOUR, 35, checkpoint=20, topic="d", min_cleanable_dirty_ratio=0.1),  # 100/300
    ]
    sel = select_logs(states, now_ms=1000)
    assert [c.key for c in sel.to_clean] == [("a", 2), ("c", 1), ("b", 0), ("d", 0)]
    assert sel.max_dirty_ratio == 1.0


def test_skip_reasons() -> None:
    states = [
        make_state(FOUR, 35, topic="del", compact=False, delete=True),
        make_state(FOUR, 35, topic="bad", uncleanable="disk on fire"),
        make_state([(0, 0, -1, -1)], 0, topic="empty"),
        make_state(FOUR, 35, checkpoint=30, topic="done"),
        make_state(FOUR, 35, checkpoint=10, topic="lag", min_compaction_lag_ms=10_000),
        make_state([(0, 100, 10, 10), (10, 0, -1, -1), (20, 5, 30, 30)], 25, checkpoint=10, topic="hollow"),
        make_state(FOUR, 35, checkpoint=20, topic="low"),
    ]
    assert select_logs(states, now_ms=1000).skipped == {
        ("del", 0): "not compacted (cleanup.policy=delete)",
        ("bad", 0): "uncleanable: disk on fire",
        ("empty", 0): "empty log",
        ("done", 0): "nothing cleanable: first dirty offset 30 is at the active segment (base 30)",
        ("lag", 0): "nothing cleanable: min.compaction.lag.ms holds segment 10 back",
        ("hollow", 0): "nothing cleanable: dirty segments in [10, 20) are empty",
        ("low", 0): "dirty ratio 0.33 <= min.cleanable.dirty.ratio 0.50",
    }


def test_checkpoint_resets_and_gauge_sources_cover_unselected_logs() -> None:
    states = [
        make_state(
            FOUR, 35, log_start=12, checkpoint=5, topic="reset", min_cleanable_dirty_ratio=0.4
        ),  # 200/400
        make_state(FOUR, 35, checkpoint=99, topic="low", log_start=30),  # reset to 30, ratio 0
        make_state([(0, 0, -1, -1)], 0, checkpoint=7, topic="empty"),  # reset too, then skipped as empty
        make_state(FOUR, 35, topic="bad", checkpoint=99, uncleanable="x"),  # not a candidate: no reset
    ]
    sel = select_logs(states, now_ms=1000)
    assert sel.checkpoint_resets == {("reset", 0): 12, ("low", 0): 30, ("empty", 0): 0}
    assert [c.key for c in sel.to_clean] == [("reset", 0)]
    assert sel.to_clean[0].force_update_checkpoint
    assert sel.max_dirty_ratio == 0.5


# --- group_segments_by_size ---------------------------------------------------------------------------------


def test_grouping_by_size_with_empty_segments() -> None:
    segs = make_segments(
        [(0, 400, 1, 1), (10, 400, 1, 1), (20, 400, 1, 1), (30, 0, -1, -1), (40, 300, 1, 1), (50, 1, 1, 1)],
        60,
    )[:-1]
    groups = group_segments_by_size(segs, 1000, 50)
    assert [[s.base_offset for s in g] for g in groups] == [[0, 10], [20, 30, 40]]


def test_oversized_segment_forms_its_own_group() -> None:
    segs = make_segments([(0, 10, 1, 1), (10, 2000, 1, 1), (20, 10, 1, 1), (30, 0, -1, -1)], 30)[:-1]
    groups = group_segments_by_size(segs, 1000, 30)
    assert [[s.base_offset for s in g] for g in groups] == [[0], [10], [20]]
    assert group_segments_by_size([], 1000, 0) == []


def test_grouping_offset_range_is_relative_to_group_base() -> None:
    far = INT_MAX - 50
    segs = make_segments([(0, 10, 1, 1), (100, 10, 1, 1), (far, 10, 1, 1), (far + 300, 1, 1, 1)], far + 301)[
        :-1
    ]
    # Segment `far` is estimated to end at first_uncleanable - 1 = far + 299: beyond Int.MaxValue from base 0.
    groups = group_segments_by_size(segs, 1000, far + 300)
    assert [[s.base_offset for s in g] for g in groups] == [[0, 100], [far]]
    # Within range when the estimate fits.
    groups = group_segments_by_size(segs, 1000, INT_MAX + 1)
    assert [[s.base_offset for s in g] for g in groups] == [[0, 100, far]]
    # An empty segment joins whatever its offsets.
    empty = dataclasses.replace(segs[2], size_bytes=0, record_count=0)
    groups = group_segments_by_size([segs[0], segs[1], empty], 1000, far + 300)
    assert len(groups) == 1


# --- rolls --------------------------------------------------------------------------------------------------


def test_should_roll_by_size_and_time() -> None:
    active = SegmentStats(30, 35, 900, 5, 5000, 1000, True)
    assert should_roll(active, 100, 2000, segment_bytes=1000, roll_ms=5000) is None
    assert (
        should_roll(active, 101, 2000, segment_bytes=1000, roll_ms=5000)
        == "segment.bytes: 900 + 101 bytes > 1000"
    )
    assert should_roll(active, 1, 6000, segment_bytes=1000, roll_ms=5000) is None  # exactly roll_ms old
    assert should_roll(active, 1, 6001, segment_bytes=1000, roll_ms=5000) == (
        "segment.ms: first record is 5001 ms old > 5000 ms"
    )
    empty = SegmentStats(30, 30, 0, 0, -1, -1, True)
    assert should_roll(empty, 5000, 10**9, segment_bytes=1000, roll_ms=1) is None
    # A non-empty segment's first timestamp is its first record's, whatever it is (the log's rule).
    negative = dataclasses.replace(active, first_timestamp=-1)
    assert should_roll(negative, 1, 0, segment_bytes=1000, roll_ms=1) is None
    assert should_roll(negative, 1, 1, segment_bytes=1000, roll_ms=1) == "segment.ms: first record is 2 ms old > 1 ms"


def test_roll_ms_and_idle_roll() -> None:
    def roll_ms(policy: str, max_lag: int) -> int:
        return topic_config({"cleanup.policy": policy, "segment.ms": 7000, "max.compaction.lag.ms": max_lag}).roll_ms

    assert roll_ms("compact", 3000) == 3000
    assert roll_ms("compact", LONG_MAX) == 7000
    assert roll_ms("delete", 3000) == 7000
    active = SegmentStats(30, 35, 900, 5, 5000, 1000, True)
    assert not idle_roll_due(active, 4000, 3000)
    assert idle_roll_due(active, 4001, 3000)
    assert not idle_roll_due(SegmentStats(30, 30, 0, 0, -1, -1, True), 10**9, 1)
    assert not idle_roll_due(active, 10**12, LONG_MAX)


# --- retention ----------------------------------------------------------------------------------------------


def bases(plan_segments: Sequence[SegmentStats]) -> list[int]:
    return [s.base_offset for s in plan_segments]


def test_retention_below_log_start_only_for_compact() -> None:
    plan = retention_deletable(make_state(FOUR, 35, log_start=15, retention_ms=0, retention_bytes=0), 10**9)
    assert (bases(plan.segments), plan.new_log_start_offset) == ([0], 15)
    assert plan.reason == {0: "below log start offset 15"}
    plan = retention_deletable(make_state(FOUR, 35, log_start=20), 0)
    assert (bases(plan.segments), plan.new_log_start_offset) == ([0, 10], 20)


def test_retention_never_deletes_active_segment_or_past_lso() -> None:
    plan = retention_deletable(make_state(FOUR, 35, log_start=35), 0)
    assert (bases(plan.segments), plan.new_log_start_offset) == ([0, 10, 20], 35)
    plan = retention_deletable(make_state(FOUR, 35, log_start=35, lso=25), 0)
    assert bases(plan.segments) == [0, 10]


def test_retention_by_time() -> None:
    specs = [(0, 100, 100, 50), (10, 100, 200, 150), (20, 100, 900, 850), (30, 100, 100, 50), (40, 5, 1, 1)]
    state = make_state(specs, 45, delete=True, retention_ms=500)
    plan = retention_deletable(state, 1000)
    # Segment 20 is recent: the walk stops there although segment 30 is old.
    assert (bases(plan.segments), plan.new_log_start_offset) == ([0, 10], 20)
    assert plan.reason[0].startswith("retention.ms 500 exceeded")
    assert retention_deletable(dataclasses.replace(state, policy=POLICY), 1000).segments == ()
    unlimited = dataclasses.replace(state, policy=dataclasses.replace(state.policy, retention_ms=-1))
    assert retention_deletable(unlimited, 10**12).segments == ()
    empty_first = make_state([(0, 0, -1, -1), (10, 5, 1, 1)], 15, delete=True, retention_ms=0)
    assert retention_deletable(empty_first, 10**12).segments == ()  # no timestamp: not expired


def test_retention_by_bytes() -> None:
    # Total 350: limit 200 -> diff 150 -> delete segment 0 (diff 50), segment 10 would overshoot.
    plan = retention_deletable(make_state(FOUR, 35, delete=True, retention_bytes=200), 0)
    assert (bases(plan.segments), plan.new_log_start_offset) == ([0], 10)
    assert plan.reason == {0: "retention.bytes 200 exceeded by 150 bytes"}
    assert bases(retention_deletable(make_state(FOUR, 35, delete=True, retention_bytes=50), 0).segments) == [
        0,
        10,
        20,
    ]
    assert retention_deletable(make_state(FOUR, 35, delete=True, retention_bytes=400), 0).segments == ()
    # size == limit: diff 0 still lets an empty segment go (diff - 0 >= 0).
    specs = [(0, 0, -1, -1), (10, 100, 1, 1), (20, 5, 1, 1)]
    assert bases(
        retention_deletable(make_state(specs, 25, delete=True, retention_bytes=105), 0).segments
    ) == [0]


def test_retention_rules_combine_in_one_walk() -> None:
    # Log start removes segment 0 (reducing diff by 100); then bytes removes segment 10; then time removes 20.
    specs = [(0, 100, 10, 10), (10, 100, 950, 950), (20, 100, 10, 10), (30, 100, 990, 990), (40, 5, 1, 1)]
    state = make_state(specs, 45, log_start=10, delete=True, retention_bytes=205, retention_ms=500)
    plan = retention_deletable(state, 1000)
    assert bases(plan.segments) == [0, 10, 20]
    assert [plan.reason[b].split()[0] for b in (0, 10, 20)] == ["below", "retention.bytes", "retention.ms"]
    assert plan.new_log_start_offset == 30


# --- metrics ------------------------------------------------------------------------------------------------


def test_metrics_without_history() -> None:
    assert cleaner_metrics([], 0.0, 0, {}, now_ms=5000, last_run_ms=None) == {
        "max-dirty-percent": 0,
        "max-compaction-delay-secs": 0,
        "cleaner-recopy-percent": 0,
        "max-buffer-utilization-percent": 0,
        "max-clean-time-secs": 0,
        "time-since-last-run-ms": None,  # never ran: not "ran just now"
        "uncleanable-partitions-count": 0,
        "uncleanable-bytes": 0,
    }


def test_metrics_values() -> None:
    stats = [
        CleanerStats(bytes_read=600, bytes_written=100, map_utilization=0.42, start_ms=1000, end_ms=6500),
        CleanerStats(bytes_read=400, bytes_written=150, map_utilization=0.1, start_ms=0, end_ms=999),
    ]
    m = cleaner_metrics(stats, 0.756, 2999, {("a", 0): 100, ("b", 3): 23}, now_ms=9000, last_run_ms=8000)
    assert m == {
        "max-dirty-percent": 75,
        "max-compaction-delay-secs": 2,
        "cleaner-recopy-percent": 25,
        "max-buffer-utilization-percent": 42,  # the real value, not KAFKA-18597's truncated 0
        "max-clean-time-secs": 5,
        "time-since-last-run-ms": 1000,
        "uncleanable-partitions-count": 2,
        "uncleanable-bytes": 123,
    }
    assert (
        cleaner_metrics([CleanerStats(map_utilization=1.0)], 0, 0, {}, 0, None)[
            "max-buffer-utilization-percent"
        ]
        == 100
    )


# --- properties ---------------------------------------------------------------------------------------------


@st.composite
def partition_states(draw: st.DrawFn, topic: str = "t", partition: int = 0) -> PartitionState:
    n = draw(st.integers(1, 7))
    gaps = draw(st.lists(st.integers(1, 20), min_size=n, max_size=n))
    first = draw(st.integers(0, 30))
    base_list = [first + sum(gaps[:i]) for i in range(n)]
    leo = base_list[-1] + draw(st.integers(0, 20))
    specs: list[Spec] = []
    for b in base_list:
        size = draw(st.sampled_from([0, 0, 1, 50, 100, 300, 700]))
        ts = draw(st.integers(0, 2000)) if size else -1
        first_ts = draw(st.integers(0, ts)) if size else -1
        specs.append((b, size, ts, first_ts))
    log_start = draw(st.integers(first, leo))
    lso = draw(st.integers(log_start, leo))
    checkpoint = draw(st.none() | st.integers(first - 5, leo + 5))
    return make_state(
        specs,
        leo,
        log_start=log_start,
        lso=lso,
        checkpoint=checkpoint,
        topic=topic,
        partition=partition,
        compact=draw(st.booleans()) or draw(st.booleans()),
        delete=draw(st.booleans()),
        min_cleanable_dirty_ratio=draw(st.sampled_from([0.0, 0.3, 0.5, 1.0])),
        min_compaction_lag_ms=draw(st.sampled_from([0, 100, 1000])),
        max_compaction_lag_ms=draw(st.sampled_from([1, 500, LONG_MAX])),
        retention_ms=draw(st.sampled_from([-1, 0, 500])),
        retention_bytes=draw(st.sampled_from([-1, 0, 400])),
        segment_bytes=draw(st.sampled_from([1, 100, 1000])),
    )


NOW = st.integers(0, 3000)


@settings(max_examples=300)
@given(partition_states(), NOW)
def test_prop_dirty_range_bounds(state: PartitionState, now: int) -> None:
    co = cleanable_offsets(state, now)
    active_base = state.active.base_offset
    assert state.log_start_offset <= co.first_dirty_offset <= state.log_end_offset
    assert co.first_dirty_offset <= co.first_uncleanable_offset
    assert co.first_uncleanable_offset <= max(co.first_dirty_offset, active_base)
    assert co.first_uncleanable_offset <= max(co.first_dirty_offset, state.last_stable_offset)
    ltc = log_to_clean(state, now)
    seg_bases = [s.base_offset for s in state.segments]
    assert ltc.first_uncleanable_offset in seg_bases and ltc.first_uncleanable_offset <= active_base
    assert ltc.total_bytes == ltc.clean_bytes + ltc.cleanable_bytes
    assert 0.0 <= ltc.cleanable_ratio <= 1.0
    if ltc.cleanable_bytes > 0:
        dirty = [
            s
            for s in state.segments
            if s.next_offset > ltc.first_dirty_offset and s.base_offset < ltc.first_uncleanable_offset
        ]
        assert dirty and all(not s.active and s.next_offset <= state.last_stable_offset for s in dirty)
        lag = state.policy.min_compaction_lag_ms
        if lag > 0:
            assert all(s.max_timestamp <= now - lag for s in dirty)


@settings(max_examples=200)
@given(
    st.lists(
        st.tuples(st.text("abc", min_size=1, max_size=2), st.integers(0, 3)), unique=True, max_size=6
    ).flatmap(lambda keys: st.tuples(*[partition_states(t, p) for t, p in keys])),
    NOW,
)
def test_prop_selection_is_total_ordered_and_force_is_a_superset(
    states: tuple[PartitionState, ...], now: int
) -> None:
    sel = select_logs(states, now)
    chosen = [c.key for c in sel.to_clean]
    assert sorted(chosen + list(sel.skipped)) == sorted(s.key for s in states)
    ratios = [c.cleanable_ratio for c in sel.to_clean]
    assert ratios == sorted(ratios, reverse=True)
    assert all(c.cleanable_bytes > 0 for c in sel.to_clean)
    forced = select_logs(states, now, force=True)
    assert set(chosen) <= {c.key for c in forced.to_clean}
    assert forced.checkpoint_resets == sel.checkpoint_resets


@settings(max_examples=300)
@given(partition_states(), st.integers(1, 1500))
def test_prop_groups_partition_input_in_order(state: PartitionState, max_size: int) -> None:
    segs = list(state.segments[:-1])
    fuo = state.active.base_offset
    groups = group_segments_by_size(segs, max_size, fuo)
    assert [s for g in groups for s in g] == segs
    assert all(g for g in groups)
    for g in groups:
        assert len(g) == 1 or sum(s.size_bytes for s in g) <= max_size
        assert g[-1].next_offset - 1 - g[0].base_offset <= INT_MAX or g[-1].size_bytes == 0


@settings(max_examples=300)
@given(partition_states(), NOW)
def test_prop_retention_deletes_a_prefix_of_closed_segments(state: PartitionState, now: int) -> None:
    plan = retention_deletable(state, now)
    assert list(plan.segments) == list(state.segments[: len(plan.segments)])
    assert all(not s.active and s.next_offset <= state.last_stable_offset for s in plan.segments)
    assert set(plan.reason) == {s.base_offset for s in plan.segments}
    assert plan.new_log_start_offset >= state.log_start_offset
    if not state.policy.delete:
        assert all(s.next_offset <= state.log_start_offset for s in plan.segments)
