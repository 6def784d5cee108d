"""Unit and property tests for compactlog.cleaner.retain: Kafka's record-level retention rule."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from compactlog.cleaner.retain import (
    NO_DELETE_HORIZON,
    RetainDecision,
    should_retain_record,
    stamp_delete_horizon,
)


def decide(**overrides: Any) -> RetainDecision:
    """A keyed value record at offset 5, newest for its key, inside a map that ends at offset 9."""
    args: dict[str, Any] = dict(
        offset=5,
        key=b"k",
        is_tombstone=False,
        is_control=False,
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
    assert decide(is_control=True, map_latest_offset_for_key=8, key=None) is RetainDecision.RETAIN


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
    is_control=st.booleans(),
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
    is_control: bool,
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
        is_control=is_control,
        map_latest_offset_for_key=found,
        map_latest_offset=latest,
        delete_horizon_ms=horizon,
        now_ms=now,
        batch_aborted=aborted,
    )
    # Kafka's shouldRetainRecord written out as one boolean expression.
    retain_deletes = horizon == -1 or now < horizon
    expected = not aborted and (
        is_control
        or offset > latest
        or (key is not None and offset >= found and (not is_tombstone or retain_deletes))
    )
    assert d.retained == expected
    # Once stamped, a horizon never moves.
    stamped = stamp_delete_horizon(horizon, now, 10)
    assert stamp_delete_horizon(stamped, now + 5, 10) == stamped
