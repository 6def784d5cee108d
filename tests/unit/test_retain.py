"""Unit and property tests for compactlog.cleaner.retain: Kafka's record-level retention rule."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from compactlog.cleaner.retain import (
    NO_DELETE_HORIZON,
    CleanedRecord,
    RetainDecision,
    clean_record,
    should_retain_record,
    stamp_delete_horizon,
)
from compactlog.record import CONTROL_ABORT, CONTROL_COMMIT, CONTROL_EMPTY_BATCH, CONTROL_NONE


def decide(**overrides: Any) -> RetainDecision:
    """A keyed value record at offset 5, newest for its key, inside a map that ends at offset 9."""
    args: dict[str, Any] = dict(
        offset=5,
        key=b"k",
        is_tombstone=False,
        control_type=CONTROL_NONE,
        map_latest_offset_for_key=5,
        map_latest_offset=9,
        delete_horizon_ms=NO_DELETE_HORIZON,
        now_ms=1000,
        batch_aborted=False,
    )
    args.update(overrides)
    return should_retain_record(**args)


def test_newest_value_for_key_is_kept() -> None:
    assert decide() is RetainDecision.RETAIN
    assert decide().retained


def test_superseded_record_is_dropped() -> None:
    assert decide(map_latest_offset_for_key=7) is RetainDecision.DROP_SUPERSEDED
    assert not RetainDecision.DROP_SUPERSEDED.retained


def test_key_absent_from_map_is_kept() -> None:
    # The key never appears in the mapped range (e.g. it is in the clean section only): found = -1.
    assert decide(map_latest_offset_for_key=-1) is RetainDecision.RETAIN


def test_record_beyond_map_is_kept_even_if_superseded_or_keyless() -> None:
    assert decide(offset=10, map_latest_offset_for_key=12) is RetainDecision.RETAIN
    assert decide(offset=10, key=None) is RetainDecision.RETAIN


def test_keyless_record_in_map_range_is_dropped() -> None:
    assert decide(key=None) is RetainDecision.DROP_KEYLESS


def test_aborted_data_is_dropped_regardless_of_key() -> None:
    assert decide(batch_aborted=True) is RetainDecision.DROP_ABORTED
    assert decide(batch_aborted=True, offset=10) is RetainDecision.DROP_ABORTED
    assert decide(batch_aborted=True, key=None) is RetainDecision.DROP_ABORTED


def test_control_record_is_kept_and_not_looked_up() -> None:
    assert decide(control_type=CONTROL_COMMIT, map_latest_offset_for_key=8, key=None) is RetainDecision.RETAIN
    assert decide(control_type=7, map_latest_offset_for_key=8, key=None) is RetainDecision.RETAIN


def test_marker_stays_while_its_transaction_has_data_or_its_horizon_is_ahead() -> None:
    for marker in (CONTROL_ABORT, CONTROL_COMMIT):
        assert decide(control_type=marker) is RetainDecision.RETAIN  # not stamped yet
        assert decide(control_type=marker, delete_horizon_ms=1001) is RetainDecision.RETAIN
        assert decide(control_type=marker, delete_horizon_ms=1000) is RetainDecision.DROP_MARKER_EXPIRED
        assert decide(control_type=marker, delete_horizon_ms=1000, marker_has_data=True) is RetainDecision.RETAIN
        assert decide(control_type=marker, delete_horizon_ms=1000, offset=10) is RetainDecision.RETAIN


def test_emptied_batch_stays_only_as_its_producers_last_record() -> None:
    assert decide(control_type=CONTROL_EMPTY_BATCH, key=None) is RetainDecision.DROP_EMPTY_BATCH
    assert decide(control_type=CONTROL_EMPTY_BATCH, key=None, is_producer_last=True) is RetainDecision.RETAIN
    assert decide(control_type=CONTROL_EMPTY_BATCH, key=None, offset=10) is RetainDecision.RETAIN


def test_clean_record_empties_a_live_producers_last_record_and_stamps_kept_tombstones_and_markers() -> None:
    base = dict(offset=5, key=b"k", value_is_null=False, control_type=CONTROL_NONE, map_latest_offset_for_key=5,
                map_latest_offset=9, delete_horizon_ms=NO_DELETE_HORIZON, now_ms=1000, delete_retention_ms=50,
                batch_aborted=False, marker_has_data=False, is_producer_last=False)
    assert clean_record(**base) == CleanedRecord(RetainDecision.RETAIN, False, NO_DELETE_HORIZON)
    superseded = {**base, "map_latest_offset_for_key": 7}
    assert clean_record(**superseded) == CleanedRecord(RetainDecision.DROP_SUPERSEDED, False, NO_DELETE_HORIZON)
    emptied = clean_record(**{**superseded, "is_producer_last": True})
    assert emptied == CleanedRecord(RetainDecision.DROP_SUPERSEDED, True, NO_DELETE_HORIZON) and emptied.written
    assert clean_record(**{**base, "value_is_null": True}).delete_horizon_ms == 1050
    assert clean_record(**{**base, "value_is_null": True, "delete_horizon_ms": 1020}).delete_horizon_ms == 1020
    marker = {**base, "key": None, "value_is_null": True, "control_type": CONTROL_COMMIT}
    assert clean_record(**marker).delete_horizon_ms == 1050
    assert clean_record(**{**marker, "marker_has_data": True}).delete_horizon_ms == NO_DELETE_HORIZON


def test_tombstone_two_phases() -> None:
    # Phase one: no horizon yet -> kept (the cleaner stamps one).
    assert decide(is_tombstone=True) is RetainDecision.RETAIN
    # Kept while now < horizon, dropped once now >= horizon.
    assert decide(is_tombstone=True, delete_horizon_ms=1001) is RetainDecision.RETAIN
    assert decide(is_tombstone=True, delete_horizon_ms=1000) is RetainDecision.DROP_TOMBSTONE_EXPIRED
    # A superseded tombstone goes as superseded; a value record ignores any horizon.
    assert decide(is_tombstone=True, map_latest_offset_for_key=6) is RetainDecision.DROP_SUPERSEDED
    assert decide(delete_horizon_ms=1) is RetainDecision.RETAIN
    # Beyond the map the horizon is not looked at.
    assert decide(is_tombstone=True, delete_horizon_ms=1, offset=10) is RetainDecision.RETAIN


def test_stamp_delete_horizon() -> None:
    assert stamp_delete_horizon(NO_DELETE_HORIZON, 1000, 86_400_000) == 86_401_000
    assert stamp_delete_horizon(5000, 1000, 86_400_000) == 5000
    assert stamp_delete_horizon(NO_DELETE_HORIZON, 1000, 2**63 - 1) == 2**63 - 1  # saturates, never wraps


@given(
    offset=st.integers(0, 50),
    key=st.none() | st.sampled_from([b"a", b"b"]),
    is_tombstone=st.booleans(),
    control_type=st.sampled_from([CONTROL_NONE, CONTROL_ABORT, CONTROL_COMMIT]),
    found=st.integers(-1, 50),
    latest=st.integers(-1, 50),
    horizon=st.integers(-1, 100),
    now=st.integers(0, 100),
    aborted=st.booleans(),
)
def test_prop_matches_kafka_rule(
    offset: int,
    key: bytes | None,
    is_tombstone: bool,
    control_type: int,
    found: int,
    latest: int,
    horizon: int,
    now: int,
    aborted: bool,
) -> None:
    d = should_retain_record(
        offset=offset,
        key=key,
        is_tombstone=is_tombstone,
        control_type=control_type,
        map_latest_offset_for_key=found,
        map_latest_offset=latest,
        delete_horizon_ms=horizon,
        now_ms=now,
        batch_aborted=aborted,
    )
    # Kafka's shouldRetainRecord written out as one boolean expression (a marker without data of its
    # transaction in the round goes at its horizon, as a tombstone does).
    retain_deletes = horizon == -1 or now < horizon
    is_control = control_type != CONTROL_NONE
    expected = not aborted and (
        offset > latest
        or (retain_deletes if is_control
            else key is not None and offset >= found and (not is_tombstone or retain_deletes))
    )
    assert d.retained == expected
    # Once stamped, a horizon never moves.
    stamped = stamp_delete_horizon(horizon, now, 10)
    assert stamp_delete_horizon(stamped, now + 5, 10) == stamped
