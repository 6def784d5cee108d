"""Injected I/O errors (ENOSPC, EIO; ``faults.io_fault``). At every I/O point of
:data:`compactlog.faults.IO_FAULT_POINTS` (the operations of :mod:`io_scenarios`): the operation fails with
its CompactLogError (a clean reports it), nothing acknowledged is lost, no file in transit is left, the store
works again and a reopen recovers. And in detail at the log's frame write and fsync: a failed append is not
acknowledged, leaves nothing of itself in the active segment, and every acknowledgement after it is true (the
records are at the offsets returned); a roll or clean failing on a full disk, and a kill mid-snapshot, leave
no temporary file behind."""

from __future__ import annotations

import errno
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from io_scenarios import SCENARIOS, Bench, Scenario

import compactlog
from compactlog import InvalidTxnStateError, KafkaStorageError, faults, sealed_segment
from compactlog.active_segment import ActiveSegment
from compactlog.log.producers import SNAPSHOT_SUFFIX
from compactlog.segment import segment_name
from support import FakeClock
from support import leftovers as leftovers_under

FRAME_ROWS = 65_536  # the most rows of one frame of the active segment


@pytest.fixture(autouse=True)
def disarm() -> Iterator[None]:
    yield
    faults.arm_io_fault(None)


@pytest.fixture
def store(tmp_path: Path, clock: FakeClock) -> Iterator[compactlog.Store]:
    with compactlog.open(tmp_path / "data", clock=clock) as store:
        store.create_topic("t", partitions=1, config={"cleanup.policy": "compact"})
        # Small segments: a batch of a few hundred records rolls between its frames.
        store.create_topic("small", partitions=1, config={"cleanup.policy": "compact", "segment.bytes": 4096})
        yield store


def values(store: compactlog.Store, topic: str) -> dict[int, bytes | None]:
    return {r.offset: r.value for r in store.read(topic, 0)}


def send_all(producer: compactlog.Producer, topic: str, tag: str, n: int) -> list[compactlog.RecordFuture]:
    return [producer.send(topic, key=f"{tag}{i}".encode(), value=f"{tag}-{i}".encode()) for i in range(n)]


@pytest.mark.parametrize("code", ["ENOSPC", "EIO"])
def test_a_batch_failing_after_its_first_frame_leaves_nothing_and_the_next_batch_is_acknowledged_truly(
        store: compactlog.Store, code: str) -> None:
    producer = store.producer(linger_ms=0, batch_size=1 << 30)
    send_all(producer, "t", "old", FRAME_ROWS + 10)  # two frames
    faults.arm_io_fault("log.frame-write", nth=2, code=code)
    with pytest.raises(KafkaStorageError, match="not acknowledged") as failure:
        producer.flush()
    assert isinstance(failure.value.__cause__, OSError)
    faults.arm_io_fault(None)
    assert store.log_end_offset("t", 0) == 0  # the first frame was cut: nothing of the batch is kept
    futures = send_all(producer, "t", "new", 10)
    producer.flush()
    offsets = [f.result().offset for f in futures]
    assert offsets == list(range(10))
    assert values(store, "t") == {i: f"new-{i}".encode() for i in range(10)}
    producer.close()


def test_after_a_batch_fails_across_a_roll_the_next_batch_is_not_taken_for_its_retry(
        store: compactlog.Store) -> None:
    # The batch rolls the segment between frames: its first frames are sealed and stay (as after a crash),
    # so the log's producer state holds them; the producer must not send the next batch as their retry.
    producer = store.producer(linger_ms=0, batch_size=1 << 30)
    send_all(producer, "small", "old", 400)
    faults.arm_io_fault("log.frame-write", nth=3)
    with pytest.raises(KafkaStorageError):
        producer.flush()
    faults.arm_io_fault(None)
    kept = store.log_end_offset("small", 0)
    assert 0 < kept < 400
    futures = send_all(producer, "small", "new", 10)
    producer.flush()
    stored = values(store, "small")
    for i, future in enumerate(futures):
        assert stored[future.result().offset] == f"new-{i}".encode()
    producer.close()


def test_a_failed_fsync_of_a_bulk_append_keeps_nothing_and_a_retry_appends_once(store: compactlog.Store) -> None:
    table = pa.table({"key": [b"a", b"b"], "value": [b"1", b"2"]})
    faults.arm_io_fault("log.fsync", code="EIO")
    with pytest.raises(KafkaStorageError, match="Input/output error"):
        store.append("t", 0, table)
    faults.arm_io_fault(None)
    assert store.log_end_offset("t", 0) == 0
    assert store.append("t", 0, table).base_offset == 0
    assert values(store, "t") == {0: b"1", 1: b"2"}


def test_a_transaction_whose_batch_failed_must_abort_and_the_next_one_is_acknowledged_truly(
        store: compactlog.Store) -> None:
    producer = store.producer(linger_ms=0, batch_size=1 << 30, transactional_id="tx")
    producer.begin_transaction()
    send_all(producer, "small", "old", 400)
    faults.arm_io_fault("log.frame-write", nth=3)
    with pytest.raises(KafkaStorageError):
        producer.commit_transaction()
    faults.arm_io_fault(None)
    with pytest.raises(InvalidTxnStateError, match="abort_transaction"):
        producer.send("small", key=b"k", value=b"v")
    with pytest.raises(InvalidTxnStateError, match="abort_transaction"):
        producer.commit_transaction()
    producer.abort_transaction()
    producer.begin_transaction()
    futures = send_all(producer, "small", "new", 10)
    producer.commit_transaction()
    committed = {r.offset: r.value for r in store.read("small", 0, isolation_level="read_committed")}
    assert [committed[f.result().offset] for f in futures] == [f"new-{i}".encode() for i in range(10)]
    assert not any(v is not None and v.startswith(b"old") for v in committed.values())
    producer.close()


def full_disk_on_create(monkeypatch: pytest.MonkeyPatch) -> None:
    """Parquet writers fail as on a full disk: the file is created, writing its first bytes fails."""
    def create_then_fail(path: str, *args: object, **kwargs: object) -> None:
        open(path, "wb").close()
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(sealed_segment.pq, "ParquetWriter", create_then_fail)


def leftovers(store: compactlog.Store, topic: str) -> list[str]:
    directory = Path(store.data_dir) / f"{topic}-0"
    return sorted(p.name for p in directory.iterdir() if p.name.endswith((".cleaned", ".sealing", ".tmp")))


def test_a_roll_and_a_clean_failing_on_a_full_disk_leave_no_empty_file(
        store: compactlog.Store, monkeypatch: pytest.MonkeyPatch) -> None:
    store.alter_topic_config("t", {"min.cleanable.dirty.ratio": "0.01"})
    for _ in range(3):
        store.append("t", 0, pa.table({"key": [b"a", b"b"], "value": [b"1", b"2"]}))
        store.roll("t", 0)
    store.append("t", 0, pa.table({"key": [b"a"], "value": [b"3"]}))
    full_disk_on_create(monkeypatch)
    with pytest.raises(KafkaStorageError, match="roll failed"):
        store.roll("t", 0)
    assert leftovers(store, "t") == []
    report = store.clean()
    assert "No space left" in report.skipped[("t", 0)]
    assert leftovers(store, "t") == []
    monkeypatch.undo()
    assert store.roll("t", 0)
    assert [r.value for r in store.read("t", 0)][-1] == b"3"


@pytest.mark.parametrize("code", ["ENOSPC", "EIO"])
def test_a_snapshot_write_failing_removes_its_tmp_at_once(store: compactlog.Store, code: str) -> None:
    store.append("t", 0, pa.table({"key": [b"a"], "value": [b"1"]}))
    faults.arm_io_fault("log.snapshot-write", code=code)
    with pytest.raises(KafkaStorageError, match="roll failed"):
        store.roll("t", 0)
    assert leftovers(store, "t") == []  # before any reopen
    faults.arm_io_fault(None)
    store.append("t", 0, pa.table({"key": [b"b"], "value": [b"2"]}))
    assert store.roll("t", 0)
    assert values(store, "t") == {0: b"1", 1: b"2"}


def test_a_snapshot_tmp_left_by_a_kill_is_removed_on_open(tmp_path: Path, clock: FakeClock) -> None:
    with compactlog.open(tmp_path / "data", clock=clock) as store:
        store.create_topic("t", partitions=1)
        store.append("t", 0, pa.table({"key": [b"a"], "value": [b"1"]}))
        store.roll("t", 0)
        tmp = Path(store.data_dir) / "t-0" / (segment_name(1, SNAPSHOT_SUFFIX) + ".tmp")
        tmp.write_bytes(b'{"half": ')  # what a kill at log.snapshot-tmp-written leaves
    with compactlog.open(tmp_path / "data", clock=clock) as store:
        assert [r.value for r in store.read("t", 0)] == [b"1"]
        assert not tmp.exists()


def test_a_frame_torn_by_an_io_error_is_cut_and_the_next_append_follows_it(
        store: compactlog.Store, monkeypatch: pytest.MonkeyPatch) -> None:
    store.append("t", 0, pa.table({"key": [b"a"], "value": [b"1"]}))
    path = Path(store.data_dir) / "t-0" / segment_name(0, ".log")
    size = path.stat().st_size

    def torn(self: ActiveSegment, header: bytes, payload: pa.Buffer, batch: pa.RecordBatch | None,
             controls: int | None = None) -> None:
        with open(self.path, "ab") as f:
            f.write(header)  # the header reaches the file, the payload does not
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(ActiveSegment, "append_encoded", torn)
    with pytest.raises(KafkaStorageError):
        store.append("t", 0, pa.table({"key": [b"b"], "value": [b"2"]}))
    monkeypatch.undo()
    assert path.stat().st_size == size
    assert store.append("t", 0, pa.table({"key": [b"c"], "value": [b"3"]})).base_offset == 1
    assert values(store, "t") == {0: b"1", 1: b"3"}


def test_a_failed_fsync_at_a_producer_flush_is_raised_and_later_acknowledgements_are_true(
        store: compactlog.Store) -> None:
    producer = store.producer(linger_ms=0)
    first = send_all(producer, "t", "a", 5)
    faults.arm_io_fault("log.fsync", code="EIO")
    with pytest.raises(KafkaStorageError, match="fsync failed"):
        producer.flush()
    faults.arm_io_fault(None)
    second = send_all(producer, "t", "b", 5)
    producer.flush()
    stored = values(store, "t")
    for tag, futures in (("a", first), ("b", second)):
        assert [stored[f.result().offset] for f in futures] == [f"{tag}-{i}".encode() for i in range(5)]
    producer.close()


# -- every I/O point (io_scenarios.SCENARIOS) -------------------------------------------------------------------


def test_every_io_point_has_a_scenario() -> None:
    assert sorted({s.point for s in SCENARIOS}) == sorted(faults.IO_FAULT_POINTS)


@pytest.mark.parametrize("code", ["ENOSPC", "EIO"])
@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.id)
def test_an_io_error_fails_its_operation_loses_nothing_and_leaves_nothing(
        scenario: Scenario, code: str, tmp_path: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    bench = Bench(tmp_path, clock)
    try:
        scenario.prepare(bench, monkeypatch)
        for point in scenario.also:
            faults.arm_io_fault(point, code=code, add=True)
        faults.arm_io_fault(scenario.point, scenario.nth, code, add=True)
        if scenario.error is None:  # a cleaner round: the failure is the partition's, reported
            report = scenario.operation(bench, 0)
            reason = report.skipped.get(("t", 0), "")
            assert f"at {scenario.point}" in reason or any(f"at {p}" in reason for p in scenario.also), report
        else:
            with pytest.raises(scenario.error) as raised:
                scenario.operation(bench, 0)
            assert faults.injected_point(raised.value) in (scenario.point, *scenario.also)
        assert faults.io_hits(scenario.point) >= scenario.nth, "the point was not met"
        faults.arm_io_fault(None)
        if not scenario.pending:
            assert leftovers_under(tmp_path) == []  # what the failed operation wrote is gone at once
        bench.check()
        scenario.after_failure(bench)
        scenario.check(bench, scenario.operation(bench, 1))  # the store works again
        bench.check()
        bench.reopen()
        assert leftovers_under(tmp_path) == [] and not list(tmp_path.glob("*/*-delete"))
        bench.check()
    finally:
        faults.arm_io_fault(None)
        bench.close()
