"""The cleaner's contract, run on every executor: in process (the reference) and on Spark.

``CleanerContract`` holds the tests; each subclass supplies ``executor`` (what ``store.clean(executor=...)``
receives). A behaviour is part of the contract when a user could observe it: the records a read returns,
their offsets, the tombstone horizons, and how many passes a small dedupe buffer takes.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

import compactlog
from compactlog.record import NO_DELETE_HORIZON, SCHEMA
from support import FakeClock

COMPACT = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": 0.01}
ALL_COLUMNS = list(SCHEMA.names)


def append(store: compactlog.Store, topic: str, pairs: list[tuple[str, str | None]],
           partition: int = 0) -> None:
    """Append ``(key, value)`` pairs as one batch; a None value is a tombstone."""
    store.append(topic, partition, pa.table({
        "key": pa.array([k.encode() for k, _ in pairs], pa.binary()),
        "value": pa.array([None if v is None else v.encode() for _, v in pairs], pa.binary())}))


def records(store: compactlog.Store, topic: str,
            partition: int = 0) -> list[tuple[int, str | None, str | None]]:
    """``(offset, key, value)`` of every record from the log start, as text."""
    def text(b: bytes | None) -> str | None:
        return None if b is None else b.decode()

    start = store.log_start_offset(topic, partition)
    return [(r.offset, text(r.key), text(r.value)) for r in store.read(topic, partition, start)]


def full_table(store: compactlog.Store, topic: str, partition: int = 0) -> pa.Table:
    """Every column of every row (transaction markers included) from the log start."""
    log = store.log(topic, partition)
    tables = list(log.read_tables(log.log_start_offset, include_control=True))
    return pa.concat_tables(tables) if tables else SCHEMA.empty_table()


def horizons(store: compactlog.Store, topic: str, partition: int = 0) -> dict[int, int]:
    """Offset -> delete horizon of every record that has one."""
    table = store.read_arrow(topic, partition, store.log_start_offset(topic, partition),
                             columns=["offset", "delete_horizon_ms"])
    offsets, stamps = table.column("offset").to_pylist(), table.column("delete_horizon_ms").to_pylist()
    return {o: h for o, h in zip(offsets, stamps, strict=True) if h != NO_DELETE_HORIZON}


class CleanerContract:
    """The contract; subclasses provide the ``executor`` fixture."""

    @pytest.fixture
    def executor(self) -> Any:
        raise NotImplementedError("a contract subclass provides the executor")

    @pytest.fixture
    def store(self, tmp_path: Any, clock: FakeClock) -> Iterator[compactlog.Store]:
        with compactlog.open(tmp_path / "data", clock=clock) as store:
            yield store

    # -- the records a clean keeps ----------------------------------------------------------------------

    def test_medium_example_keeps_the_latest_value_per_key_and_the_active_segment(
            self, store: compactlog.Store, executor: Any) -> None:
        # segment.bytes=14: every record rolls into its own segment; p5:17 stays in the active segment.
        store.create_topic("prices", 1, {**COMPACT, "segment.bytes": 14})
        keys, values = ["p3", "p5", "p3", "p6", "p6", "p5", "p5"], ["10", "7", "11", "25", "12", "14", "17"]
        for key, value in zip(keys, values, strict=True):
            append(store, "prices", [(key, value)])

        report = store.clean(executor=executor)

        assert [(p.topic, p.partition) for p in report.partitions] == [("prices", 0)]
        assert records(store, "prices") == [(2, "p3", "11"), (4, "p6", "12"), (5, "p5", "14"),
                                            (6, "p5", "17")]
        assert report.partitions[0].end_offset == 6
        assert report.partitions[0].records_written == 3

    def test_offsets_are_preserved_and_gaps_are_skipped_by_reads(self, store: compactlog.Store,
                                                                executor: Any) -> None:
        store.create_topic("t", 1, COMPACT)
        append(store, "t", [(f"k{i % 5}", f"v{i}") for i in range(20)])
        store.roll("t", 0)
        append(store, "t", [("k0", "active")])

        store.clean(executor=executor)

        assert records(store, "t") == [(15, "k0", "v15"), (16, "k1", "v16"), (17, "k2", "v17"),
                                       (18, "k3", "v18"), (19, "k4", "v19"), (20, "k0", "active")]
        assert store.log_start_offset("t", 0) == 0
        assert store.log_end_offset("t", 0) == 21
        # A read from inside the gap starts at the next record, as a Kafka consumer does.
        assert [r.offset for r in store.read("t", 0, 3)][:2] == [15, 16]

    def test_tombstones_are_removed_in_two_phases(self, store: compactlog.Store, clock: FakeClock,
                                                  executor: Any) -> None:
        store.create_topic("users", 1, {**COMPACT, "delete.retention.ms": 1000})
        append(store, "users", [("alice", "v1"), ("bob", "v1"), ("alice", None)])
        store.roll("users", 0)

        # Phase 1: the tombstone is kept and stamped with clean time + delete.retention.ms.
        first_clean = clock.now
        store.clean(executor=executor)
        assert records(store, "users") == [(1, "bob", "v1"), (2, "alice", None)]
        assert horizons(store, "users") == {2: first_clean + 1000}

        # Before the horizon a later clean keeps it (and keeps its stamp).
        clock.advance(999)
        append(store, "users", [("bob", "v2")])
        store.roll("users", 0)
        store.clean(executor=executor, force=True)
        assert records(store, "users") == [(2, "alice", None), (3, "bob", "v2")]
        assert horizons(store, "users") == {2: first_clean + 1000}

        # Phase 2: a clean after the horizon removes it.
        clock.advance(2)
        append(store, "users", [("carol", "v1")])
        store.roll("users", 0)
        store.clean(executor=executor, force=True)
        assert records(store, "users") == [(3, "bob", "v2"), (4, "carol", "v1")]
        assert horizons(store, "users") == {}

    def test_min_compaction_lag_holds_young_segments_back(self, store: compactlog.Store, clock: FakeClock,
                                                           executor: Any) -> None:
        store.create_topic("t", 1, {**COMPACT, "min.compaction.lag.ms": 10_000})
        append(store, "t", [("a", "old"), ("b", "old")])
        store.roll("t", 0)
        clock.advance(20_000)
        append(store, "t", [("a", "young")])
        store.roll("t", 0)

        # The young segment (offset 2) is dirty but too young: it is neither mapped nor does it
        # supersede "a" in the older segment.
        report = store.clean(executor=executor)
        assert records(store, "t") == [(0, "a", "old"), (1, "b", "old"), (2, "a", "young")]
        assert all(p.end_offset <= 2 for p in report.partitions)

        clock.advance(10_001)
        store.clean(executor=executor)
        assert records(store, "t") == [(1, "b", "old"), (2, "a", "young")]

    def test_force_ignores_the_dirty_ratio_but_never_cleans_the_active_segment(
            self, store: compactlog.Store, executor: Any) -> None:
        store.create_topic("t", 1, {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": 0.9})
        append(store, "t", [(f"k{i}", "v1") for i in range(50)])
        store.roll("t", 0)
        store.clean(executor=executor, force=True)  # everything dirty -> clean
        append(store, "t", [("k0", "v2")])
        store.roll("t", 0)
        append(store, "t", [("k1", "v2")])  # active segment: supersedes k1, but is never cleaned

        skipped = store.clean(executor=executor)
        assert ("t", 0) in skipped.skipped and "dirty ratio" in skipped.skipped[("t", 0)]
        assert len(records(store, "t")) == 52

        report = store.clean(executor=executor, force=True)
        assert report.partitions[0].end_offset == 51
        kept = records(store, "t")
        assert (0, "k0", "v1") not in kept
        assert (1, "k1", "v1") in kept and (51, "k1", "v2") in kept
        assert kept[-2:] == [(50, "k0", "v2"), (51, "k1", "v2")]

    def test_keyless_records_from_before_compaction_are_dropped(self, store: compactlog.Store,
                                                                executor: Any) -> None:
        store.create_topic("t", 1, {"cleanup.policy": "delete"})
        store.append("t", 0, pa.table({"key": pa.array([b"k", None, b"k", None], pa.binary()),
                                       "value": [b"1", b"no key", b"2", b"no key either"]}))
        store.roll("t", 0)
        store.alter_topic_config("t", COMPACT)

        report = store.clean(executor=executor)

        assert records(store, "t") == [(2, "k", "2")]
        assert report.partitions[0].invalid_records == 2

    # -- the dedupe buffer bound --------------------------------------------------------------------------

    def test_a_small_dedupe_buffer_cleans_over_several_passes(self, tmp_path: Any, clock: FakeClock,
                                                              executor: Any) -> None:
        data = tmp_path / "data"
        os.makedirs(data)
        (data / "server.properties").write_text("log.cleaner.dedupe.buffer.size=1024\n")
        rng = random.Random(7)
        with compactlog.open(data, clock=clock) as store:
            store.create_topic("t", 1, {**COMPACT, "segment.bytes": 2000})
            latest: dict[str, tuple[int, str]] = {}
            pairs = [(f"key-{rng.randrange(60):04d}", f"v{i}") for i in range(200)]
            for start in range(0, len(pairs), 25):
                append(store, "t", pairs[start:start + 25])
            store.roll("t", 0)
            for offset, (key, value) in enumerate(pairs):
                latest[key] = (offset, value)

            passes = 0
            for _ in range(20):
                report = store.clean(executor=executor)
                if not report.partitions:
                    break
                passes += 1
                assert report.partitions[0].map_utilization <= 0.9 + 1e-9

            # 60 keys of 8 bytes need 60 * 32 bytes; a map of 921 bytes holds 28 of them.
            assert passes >= 3
            expected = sorted((offset, key, value) for key, (offset, value) in latest.items())
            assert records(store, "t") == expected

    # -- identical to the in-process reference ------------------------------------------------------------

    def test_a_random_workload_gives_the_records_of_the_in_process_reference(
            self, tmp_path: Any, executor: Any) -> None:
        clock = FakeClock()
        rng = random.Random(1)
        dirs = [tmp_path / "reference", tmp_path / "subject"]
        for directory in dirs:
            os.makedirs(directory)
            (directory / "server.properties").write_text("log.cleaner.dedupe.buffer.size=4096\n")
        reference, subject = (compactlog.open(d, clock=clock) for d in dirs)
        try:
            config = {**COMPACT, "segment.bytes": 4000, "delete.retention.ms": 5_000}
            for store in (reference, subject):
                store.create_topic("t", 2, config)
            for _ in range(5):
                for partition in range(2):
                    pairs = [(f"k{rng.randrange(60):03d}",
                              None if rng.random() < 0.15 else f"v{rng.random():.6f}")
                             for _ in range(rng.randrange(20, 120))]
                    for store in (reference, subject):
                        append(store, "t", pairs, partition)
                clock.advance(rng.choice([0, 1_000, 4_000]))
                if rng.random() < 0.5:
                    rolled = rng.randrange(2)
                    for store in (reference, subject):
                        store.roll("t", rolled)
                force = rng.random() < 0.3
                expected = reference.clean(force=force)
                actual = subject.clean(force=force, executor=executor)
                assert actual.skipped == expected.skipped
                assert [(p.partition, p.end_offset, p.records_read, p.records_written, p.tombstones_stamped)
                        for p in actual.partitions] == [
                    (p.partition, p.end_offset, p.records_read, p.records_written, p.tombstones_stamped)
                    for p in expected.partitions]
                for partition in range(2):
                    assert full_table(subject, "t", partition).equals(full_table(reference, "t", partition))
                    assert ([(m.base_offset, m.next_offset, m.record_count) for m in
                             subject.log("t", partition).segments_meta()] ==
                            [(m.base_offset, m.next_offset, m.record_count) for m in
                             reference.log("t", partition).segments_meta()])
        finally:
            reference.close()
            subject.close()


class TestInProcess(CleanerContract):
    @pytest.fixture
    def executor(self) -> Any:
        return None


@pytest.mark.spark
class TestSpark(CleanerContract):
    """Spark as a pass uses it: these small partitions each run their whole round in one task."""

    @pytest.fixture
    def executor(self, spark: Any) -> Any:
        return spark


@pytest.mark.spark
class TestSparkSplit(CleanerContract):
    """Spark with every partition split over the task slots: bin maps merged on the driver, the exact
    per-segment path when the dedupe buffer fills, rewrites against a broadcast map."""

    @pytest.fixture
    def executor(self, spark: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
        from compactlog.spark import executor

        monkeypatch.setattr(executor, "SPLIT_POLICY", "always")
        return spark
