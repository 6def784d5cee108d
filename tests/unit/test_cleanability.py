"""Tests for compactlog.cleaner.cleanability: each reason a partition is or is not compacted now, the times
it names, its byte sections, and its agreement with the cleaner's selection; then describe() carrying it."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_plan import FOUR, make_state, partition_states

import compactlog
from compactlog.cleaner import cleanability as c
from compactlog.cleaner.cleanability import cleanability, format_time_ms, state_after_idle_roll, state_after_roll
from compactlog.cleaner.plan import PartitionState, select_logs
from compactlog.limits import LONG_MAX
from support import FakeClock

# FOUR: sealed segments 0, 10, 20 (100 bytes each; newest records at 100, 200, 300, first at 50, 150, 250)
# and the active segment 30 (50 bytes, first record at 350); log end 35.
CLEANED_TO_20 = dict(checkpoint=20)  # segments 0 and 10 clean, 20 dirty: ratio 100 / 300


def selected(state: PartitionState, now: int, force: bool = False) -> bool:
    return state.key in {ltc.key for ltc in select_logs([state], now, force=force).to_clean}


def test_a_dirty_ratio_above_the_threshold_is_cleanable_with_its_sections() -> None:
    answer = cleanability(make_state(FOUR, 35), now_ms=1000)
    assert (answer.cleanable, answer.reason) == (True, c.REASON_RATIO_ABOVE)
    assert answer.detail == "dirty ratio 1.00 > min.cleanable.dirty.ratio 0.50"
    assert (answer.clean_bytes, answer.dirty_bytes, answer.uncleanable_bytes) == (0, 300, 50)
    assert (answer.first_dirty_offset, answer.first_uncleanable_offset, answer.until_ms) == (0, 30, None)


def test_a_ratio_below_the_threshold_waits_and_is_due_by_max_lag_at_the_time_it_names() -> None:
    state = make_state(FOUR, 35, **CLEANED_TO_20)
    answer = cleanability(state, now_ms=1000)
    assert (answer.cleanable, answer.reason, answer.until_ms) == (False, c.REASON_RATIO_BELOW, None)
    assert (answer.clean_bytes, answer.dirty_bytes, answer.uncleanable_bytes) == (200, 100, 50)
    assert answer.dirty_ratio == pytest.approx(1 / 3)

    lagged = make_state(FOUR, 35, max_compaction_lag_ms=1000, **CLEANED_TO_20)
    answer = cleanability(lagged, now_ms=1000)
    assert (answer.reason, answer.until_ms) == (c.REASON_RATIO_BELOW, 250 + 1000 + 1)  # the dirty segment's first
    assert answer.detail.endswith(f"due by max.compaction.lag.ms at {format_time_ms(1251)}")
    assert not cleanability(lagged, now_ms=1250).cleanable and not selected(lagged, 1250)
    due = cleanability(lagged, now_ms=1251)
    assert (due.cleanable, due.reason, due.max_compaction_delay_ms) == (True, c.REASON_MAX_LAG_DUE, 1)
    assert selected(lagged, 1251)


def test_force_waives_the_ratio_only() -> None:
    answer = cleanability(make_state(FOUR, 35, **CLEANED_TO_20), now_ms=1000, force=True)
    assert (answer.cleanable, answer.reason) == (True, c.REASON_FORCED)
    held = cleanability(make_state(FOUR, 35, min_compaction_lag_ms=1000), now_ms=1050, force=True)
    assert (held.cleanable, held.reason) == (False, c.REASON_MIN_LAG)


def test_min_compaction_lag_holds_the_first_dirty_segment_back_until_the_time_it_names() -> None:
    state = make_state(FOUR, 35, min_compaction_lag_ms=1000)
    answer = cleanability(state, now_ms=1050)
    assert (answer.cleanable, answer.reason, answer.until_ms) == (False, c.REASON_MIN_LAG, 100 + 1000)
    assert answer.detail == (f"min.compaction.lag.ms (1000 ms) holds segment 0 back until {format_time_ms(1100)}")
    assert (answer.clean_bytes, answer.dirty_bytes, answer.uncleanable_bytes) == (0, 0, 350)
    assert cleanability(state, now_ms=1099).reason == c.REASON_MIN_LAG and not selected(state, 1099)
    assert cleanability(state, now_ms=1100).cleanable and selected(state, 1100)


def test_an_open_transaction_in_the_first_dirty_segment_holds_it_back() -> None:
    answer = cleanability(make_state(FOUR, 35, lso=5), now_ms=1000)
    assert (answer.cleanable, answer.reason) == (False, c.REASON_OPEN_TRANSACTION)
    assert "last stable offset 5" in answer.detail


def test_dirty_records_only_in_the_active_segment() -> None:
    state = make_state([(0, 50, 400, 350)], 5)
    answer = cleanability(state, now_ms=1000)
    assert (answer.cleanable, answer.reason, answer.until_ms) == (False, c.REASON_ACTIVE_SEGMENT, None)
    assert answer.detail.startswith("active segment only: the dirty records 0..4 are all in the active segment")
    assert (answer.clean_bytes, answer.dirty_bytes, answer.uncleanable_bytes) == (0, 0, 50)
    # With a finite max.compaction.lag.ms a cleaner pass rolls it once its first record is older than the lag.
    lagged = make_state([(0, 50, 400, 350)], 5, max_compaction_lag_ms=1000)
    answer = cleanability(lagged, now_ms=1000)
    assert answer.until_ms == 350 + 1000 + 1 and format_time_ms(1351) in answer.detail
    assert cleanability(lagged, now_ms=1350).reason == c.REASON_ACTIVE_SEGMENT
    # Then the pass rolls it first, and the sealed segment is overdue: cleanable whatever its ratio.
    assert state_after_idle_roll(lagged, 1351) == state_after_roll(lagged)
    rolled = cleanability(lagged, now_ms=1351)
    assert (rolled.cleanable, rolled.reason) == (True, c.REASON_MAX_LAG_DUE)
    assert rolled.detail.endswith("(the pass first seals the active segment: its first record is older than "
                                  "max.compaction.lag.ms)")
    assert (rolled.first_dirty_offset, rolled.first_uncleanable_offset, rolled.dirty_bytes) == (0, 5, 50)


def test_a_log_clean_up_to_an_empty_active_segment_has_nothing_dirty() -> None:
    specs = [*FOUR[:3], (30, 0, -1, -1)]
    answer = cleanability(make_state(specs, 30, checkpoint=30), now_ms=1000)
    assert (answer.cleanable, answer.reason) == (False, c.REASON_NOTHING_DIRTY)
    assert (answer.clean_bytes, answer.dirty_bytes, answer.uncleanable_bytes) == (300, 0, 0)


def test_an_empty_log() -> None:
    answer = cleanability(make_state([(0, 0, -1, -1)], 0), now_ms=1000)
    assert (answer.cleanable, answer.reason, answer.detail) == (False, c.REASON_EMPTY, "empty log")


def test_a_topic_without_compact_in_its_policy() -> None:
    answer = cleanability(make_state(FOUR, 35, compact=False, delete=True), now_ms=1000)
    assert (answer.cleanable, answer.reason) == (False, c.REASON_NOT_COMPACTED)
    assert answer.detail == "cleanup.policy=delete has no compact"
    assert (answer.first_dirty_offset, answer.dirty_bytes, answer.dirty_ratio) == (None, 0, 0.0)


def test_a_disabled_cleaner() -> None:
    answer = cleanability(make_state(FOUR, 35), now_ms=1000, cleaner_enabled=False)
    assert (answer.cleanable, answer.reason) == (False, c.REASON_CLEANER_DISABLED)
    assert answer.dirty_bytes == 300


def test_an_uncleanable_partition_names_its_error_and_its_dirty_bytes_are_stuck() -> None:
    answer = cleanability(make_state(FOUR, 35, uncleanable="segment 0: bad footer"), now_ms=1000)
    assert (answer.cleanable, answer.reason) == (False, c.REASON_UNCLEANABLE)
    assert answer.detail == "uncleanable: segment 0: bad footer"
    assert (answer.clean_bytes, answer.dirty_bytes, answer.uncleanable_bytes) == (0, 0, 350)


def test_times_are_iso_utc() -> None:
    assert format_time_ms(1_700_000_000_123) == "2023-11-14T22:13:20.123Z"


CLEANABLE = {c.REASON_MAX_LAG_DUE, c.REASON_RATIO_ABOVE, c.REASON_FORCED}


@settings(max_examples=300)
@given(partition_states(), st.integers(0, 3000), st.booleans(), st.booleans())
def test_prop_the_answer_is_the_cleaners_selection(state: PartitionState, now: int, force: bool,
                                                  failed: bool) -> None:
    if failed:
        state = dataclasses.replace(state, uncleanable_reason="boom")
    answer = cleanability(state, now, force=force)
    assert answer.cleanable == selected(state_after_idle_roll(state, now), now, force)
    assert (answer.reason in CLEANABLE) == answer.cleanable
    assert min(answer.clean_bytes, answer.dirty_bytes, answer.uncleanable_bytes) >= 0
    if answer.first_dirty_offset in {s.base_offset for s in state.segments}:  # else a segment is in two sections
        assert answer.clean_bytes + answer.dirty_bytes + answer.uncleanable_bytes == sum(
            s.size_bytes for s in state.segments)
    if answer.until_ms is not None:
        assert answer.until_ms > now and answer.until_ms <= LONG_MAX


# --- through the store: describe() carries the answer ------------------------------------------------------


def test_describe_carries_the_answer_of_each_partition(tmp_path: Path) -> None:
    clock = FakeClock()
    store = compactlog.open(str(tmp_path), clock=clock)
    store.create_topic("t", 2, {"cleanup.policy": "compact", "min.compaction.lag.ms": 60_000})
    store.append("t", 0, pa.table({"key": [b"a", b"a"], "value": [b"1", b"2"]}))
    p0, p1 = (info.cleanability for info in store.describe("t"))
    assert p0 is not None and p1 is not None
    assert (p0.reason, p1.reason) == (c.REASON_ACTIVE_SEGMENT, c.REASON_EMPTY)
    store.roll("t", 0)
    p0 = store.describe("t")[0].cleanability
    assert p0 is not None and (p0.reason, p0.until_ms) == (c.REASON_MIN_LAG, clock.now + 60_000)
    clock.advance(60_000)
    p0 = store.describe("t")[0].cleanability
    assert p0 is not None and (p0.cleanable, p0.reason) == (True, c.REASON_RATIO_ABOVE)
    store.cleaner_state.mark_uncleanable(("t", 0), "boom", 0)
    info = store.describe("t")[0]
    assert info.uncleanable_reason == "boom"
    assert info.cleanability is not None and info.cleanability.reason == c.REASON_UNCLEANABLE
    store.close()


def test_describe_honours_a_disabled_cleaner(tmp_path: Path) -> None:
    with compactlog.open(str(tmp_path)) as store:
        store.create_topic("t", 1, {"cleanup.policy": "compact"})
    with open(os.path.join(tmp_path, "server.properties"), "w") as f:
        f.write("log.cleaner.enable=false\n")
    with compactlog.open(str(tmp_path)) as store:
        answer = store.describe("t")[0].cleanability
        assert answer is not None and answer.reason == c.REASON_CLEANER_DISABLED


def test_an_active_segment_past_max_lag_is_cleanable_as_the_next_pass_rolls_and_cleans_it(tmp_path: Path) -> None:
    clock = FakeClock()
    with compactlog.open(str(tmp_path), clock=clock) as store:
        store.create_topic("t", 1, {"cleanup.policy": "compact", "max.compaction.lag.ms": 60_000})
        store.append("t", 0, pa.table({"key": [b"a", b"a"], "value": [b"1", b"2"]}))
        answer = store.describe("t")[0].cleanability
        assert answer is not None and (answer.reason, answer.until_ms) == (c.REASON_ACTIVE_SEGMENT,
                                                                           clock.now + 60_001)
        clock.advance(60_001)
        answer = store.describe("t")[0].cleanability
        assert answer is not None and (answer.cleanable, answer.reason) == (True, c.REASON_MAX_LAG_DUE)
        report = store.clean()
        assert [(p.topic, p.partition) for p in report.partitions] == [("t", 0)]
        answer = store.describe("t")[0].cleanability
        assert answer is not None and answer.reason == c.REASON_NOTHING_DIRTY
