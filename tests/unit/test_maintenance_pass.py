"""The maintenance pass through the Python API (:mod:`compactlog.maintenance`), on a fake clock: "compact now"
keeps min.compaction.lag.ms, idle segments roll by segment.ms, and the dry run's estimate matches the pass."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa

import compactlog
from compactlog.maintenance import plan_pass, plan_transaction_expiry, run_pass
from support import FakeClock


def append(store: compactlog.Store, topic: str, keys: list[bytes]) -> None:
    store.append(topic, 0, pa.table({"key": keys, "value": [b"v%d" % i for i in range(len(keys))]}))


def test_force_rolls_but_keeps_min_compaction_lag(tmp_path: Path) -> None:
    clock = FakeClock()
    store = compactlog.open(tmp_path, clock=clock)
    store.create_topic("t", 1, {"cleanup.policy": "compact", "min.compaction.lag.ms": 60_000})
    append(store, "t", [b"a", b"a", b"b"])

    held = run_pass(store, force=True)
    clock.advance(60_001)
    due = run_pass(store, force=True)

    assert held.rolled == {("t", 0): "--force: compact now"} and not held.clean.partitions
    assert "min.compaction.lag.ms" in held.clean.skipped[("t", 0)]
    assert [p.records_written for p in due.clean.partitions] == [2]
    assert [r.offset for r in store.read("t", 0, 1)] == [1, 2]


def test_the_apis_force_rolls_nothing_and_run_pass_is_the_clis_compact_now(tmp_path: Path) -> None:
    """Store.clean's docstring: force waives the dirty ratio only; run_pass(force=True) rolls, then cleans."""
    store = compactlog.open(tmp_path, clock=FakeClock())
    store.create_topic("t", 1, {"cleanup.policy": "compact"})
    append(store, "t", [b"a", b"a", b"b"])  # all in the active segment

    forced = store.clean(force=True)
    kept = [r.offset for r in store.read("t", 0)]
    compact_now = run_pass(store, force=True)

    assert not forced.partitions and not forced.rolled and "active segment" in forced.skipped[("t", 0)]
    assert kept == [0, 1, 2]
    assert compact_now.rolled == {("t", 0): "--force: compact now"}
    assert [r.offset for r in store.read("t", 0)] == [1, 2]


def test_an_idle_active_segment_rolls_by_segment_ms(tmp_path: Path) -> None:
    clock = FakeClock()
    store = compactlog.open(tmp_path, clock=clock)
    store.create_topic("d", 1, {"cleanup.policy": "delete", "segment.ms": 1000})
    append(store, "d", [b"a"])

    clock.advance(1000)
    assert run_pass(store).rolled == {}
    clock.advance(1)
    assert run_pass(store).rolled == {("d", 0): "idle: first record 1001 ms old > roll time 1000 ms"}
    assert [s.active for s in store.describe("d")[0].segments] == [False, True]


def test_the_dry_run_estimate_matches_what_the_pass_frees(tmp_path: Path) -> None:
    store = compactlog.open(tmp_path, clock=FakeClock())
    store.create_topic("t", 1, {"cleanup.policy": "compact", "segment.bytes": 4000})
    for start in range(0, 200, 50):
        append(store, "t", [b"k%d" % (i % 37) for i in range(start, start + 50)])

    [plan] = plan_pass(store, force=True)
    [cleaned] = run_pass(store, force=True).clean.partitions

    assert plan.clean and plan.estimate is not None
    assert plan.estimate.records == cleaned.records_read - cleaned.records_written == 200 - 37


def test_the_dry_run_names_expired_transactions_and_the_pass_aborts_them(tmp_path: Path) -> None:
    clock = FakeClock()
    store = compactlog.open(tmp_path, clock=clock)
    store.create_topic("orders", 1, {"cleanup.policy": "compact"})
    producer = store.producer(transactional_id="w", transaction_timeout_ms=60_000)
    producer.begin_transaction()
    producer.send("orders", key=b"k", value=b"v")
    producer.flush()

    clock.advance(60_000)
    assert plan_transaction_expiry(store) == []
    clock.advance(1)
    assert plan_transaction_expiry(store) == ["w"]
    assert store.last_stable_offset("orders", 0) == 0  # the dry run aborted nothing
    run_pass(store)
    assert store.last_stable_offset("orders", 0) == store.log_end_offset("orders", 0)
    assert plan_transaction_expiry(store) == []


def test_force_rolls_nothing_when_the_cleaner_is_off(tmp_path: Path) -> None:
    (tmp_path / "server.properties").write_text("log.cleaner.enable=false\n")
    store = compactlog.open(tmp_path, clock=FakeClock())
    store.create_topic("t", 1, {"cleanup.policy": "compact"})
    append(store, "t", [b"a", b"a"])

    [plan] = plan_pass(store, force=True)
    report = run_pass(store, force=True)

    assert plan.roll is None and "log.cleaner.enable=false" in plan.reason
    assert report.rolled == {} and not report.clean.partitions
    assert [s.active for s in store.describe("t")[0].segments] == [True]
