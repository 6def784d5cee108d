"""For every I/O point of :data:`compactlog.faults.IO_FAULT_POINTS`, an operation of a store that meets it
(:data:`SCENARIOS`), run by ``test_io_errors.py``: under the injected error, then again once it is gone.

A :class:`Bench` is a store with acknowledged records (topics ``t`` and ``u``, compacted, small segments, a
committed transaction, a group's committed offset) and the model of what was acknowledged: each key's newest
acknowledged value at its offset, and the group's offset. :meth:`Bench.check` holds the store to it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import compactlog
from compactlog import sealed_segment, transaction_state_manager
from compactlog.cleaner.cleaner import CleanReport
from compactlog.coordinator.group_metadata_manager import GroupMetadataManager, OffsetAndMetadata
from compactlog.errors import CompactLogError, DataDirectoryError, KafkaStorageError, UnknownTopicOrPartitionError
from compactlog.segment import SEALED_SUFFIX, SWAP_SUFFIX
from compactlog.server_config import server_config
from support import FakeClock

COMPACTED = {"cleanup.policy": "compact", "segment.bytes": 3000, "min.cleanable.dirty.ratio": 0.01,
             "file.delete.delay.ms": 0}
GROUP = "g"


class Bench:
    """A store, what was acknowledged to it, and the operations the scenarios run."""

    def __init__(self, tmp_path: Path, clock: FakeClock) -> None:
        self.data_dir, self.clock = tmp_path / "data", clock
        self.store = compactlog.open(self.data_dir, clock=clock)
        self.newest: dict[tuple[str, int], dict[bytes, tuple[bytes | None, int]]] = {}
        self.group_offset: int | None = None
        self.store.create_topic("t", 1, COMPACTED)
        self.store.create_topic("u", 2, COMPACTED)
        self.store.create_topic("r", 1, {"cleanup.policy": "delete", "segment.bytes": 1000,
                                         "retention.bytes": 1500, "file.delete.delay.ms": 0})
        for n in range(3):
            self.append("t", 0, f"base{n}", 20)
            self.store.roll("t", 0)
        self.append("u", 1, "base", 10)
        self.transaction("tx", "committed", 5)
        self.commit_offset(7)

    # -- acknowledged writes -----------------------------------------------------------------------------

    def acknowledged(self, records: list[tuple[str, int, bytes, bytes]], offsets: list[int]) -> None:
        for (topic, partition, key, value), offset in zip(records, offsets, strict=True):
            self.newest.setdefault((topic, partition), {})[key] = (value, offset)

    @contextlib.contextmanager
    def sending(self, records: list[tuple[str, int, bytes, bytes]]) -> Iterator[None]:
        """Around a write of ``records`` (topic, partition, key, value): if it fails, what their keys read is
        unknown (the write may be stored, or be completed later)."""
        try:
            yield
        except BaseException:
            for topic, partition, key, _ in records:
                self.newest.get((topic, partition), {}).pop(key, None)
            raise

    def append(self, topic: str, partition: int, tag: str, n: int) -> None:
        records = [(topic, partition, f"k{i % 12:02d}".encode(), f"{tag}-{i}".encode()) for i in range(n)]
        with self.sending(records):
            table = pa.table({"key": [r[2] for r in records], "value": [r[3] for r in records]})
            base = self.store.append(topic, partition, table).base_offset
        self.acknowledged(records, list(range(base, base + n)))

    def produce(self, tag: str, n: int) -> None:
        """An idempotent producer's records to ``u-0``, flushed."""
        self.send(None, [("u", 0, f"k{i:02d}".encode(), f"{tag}-{i}".encode()) for i in range(n)])

    def transaction(self, transactional_id: str, tag: str, n: int, partitions: int = 1) -> None:
        """A transaction of ``n`` records to each of ``partitions`` partitions of ``u``, committed."""
        self.send(transactional_id, [("u", p, f"x{i:02d}".encode(), f"{tag}-{p}-{i}".encode())
                                     for p in range(2 - partitions, 2) for i in range(n)])

    def send(self, transactional_id: str | None, records: list[tuple[str, int, bytes, bytes]]) -> None:
        """A producer's records (idempotent, or a committed transaction); its instance closed after."""
        with self.sending(records):
            producer = self.store.producer(transactional_id=transactional_id)
            try:
                if transactional_id is not None:
                    producer.begin_transaction()
                futures = [producer.send(t, k, v, partition=p) for t, p, k, v in records]
                if transactional_id is not None:
                    producer.commit_transaction()
                else:
                    producer.flush()
            except BaseException:
                with contextlib.suppress(CompactLogError):  # the error already raised is the one to see
                    producer.close()
                raise
            producer.close()
        self.acknowledged(records, [f.result().offset for f in futures])

    def groups(self) -> GroupMetadataManager:
        manager = GroupMetadataManager(self.store, server_config({"offsets.topic.num.partitions": 1}))
        manager.load()
        return manager

    def commit_offset(self, offset: int) -> None:
        try:
            self.groups().store_offsets(GROUP, {("t", 0): OffsetAndMetadata(offset)})
        except BaseException:
            self.group_offset = None  # the commit may be stored
            raise
        self.group_offset = offset

    # -- the checks ----------------------------------------------------------------------------------------

    def check(self) -> None:
        """Every key's newest acknowledged value at its offset (compaction keeps it), read uncommitted and
        read_committed; the group's offset."""
        for (topic, partition), newest in self.newest.items():
            for isolation in ("read_uncommitted", "read_committed"):
                read = {r.key: (r.value, r.offset) for r in
                        self.store.read(topic, partition, self.store.log_start_offset(topic, partition),
                                        isolation_level=isolation)}
                lost = {key: (value, read.get(key)) for key, value in newest.items() if read.get(key) != value}
                assert lost == {}, f"{topic}-{partition} ({isolation}): acknowledged (value, offset), read: {lost}"
        committed = self.groups().committed(GROUP)
        if self.group_offset is not None:
            assert committed[("t", 0)].offset == self.group_offset

    def reopen(self) -> None:
        self.store.close()
        self.store = compactlog.open(self.data_dir, clock=self.clock)

    def close(self) -> None:
        self.store.close()

    # -- operations the scenarios share ----------------------------------------------------------------------

    def dirty(self) -> None:
        """Superseded records in sealed segments of ``t``, for a clean to remove."""
        for n in range(2):
            self.append("t", 0, f"dirty{n}", 20)
            self.store.roll("t", 0)

    def fill_r(self) -> None:
        """Segments of the delete topic ``r`` past its retention.bytes."""
        for _ in range(3):
            self.store.append("r", 0, pa.table({"key": [b"k"] * 60, "value": [b"v" * 50] * 60}))

    def clean(self) -> CleanReport:
        return self.store.clean(force=True, topic="t")

    def roll(self, attempt: int) -> bool:
        self.append("t", 0, f"roll{attempt}", 5)
        return self.store.roll("t", 0)

    def torn_tail(self) -> None:
        """Bytes of a frame cut short after the active segment of ``t-0``, found when the log is opened."""
        self.append("t", 0, "before-tear", 3)
        self.store.close()
        active = next(p for p in (self.data_dir / "t-0").iterdir() if p.suffix == ".log")
        with open(active, "ab") as f:
            f.write(b"\x00\x00\x01")
        self.store = compactlog.open(self.data_dir, clock=self.clock)

    def interrupted_swap(self) -> None:
        """A ``.swap`` file an interrupted cleaner swap left in ``t-0``, installed when the log is opened:
        the newest sealed segment renamed ``.swap`` (nothing else of its range is live)."""
        self.store.close()
        sealed = sorted(p for p in (self.data_dir / "t-0").iterdir() if p.name.endswith(SEALED_SUFFIX))
        sealed[-1].rename(str(sealed[-1]) + SWAP_SUFFIX)
        self.store = compactlog.open(self.data_dir, clock=self.clock)

    def delete(self, attempt: int) -> None:
        """Delete topic ``gone`` (made by the prepare step); again if a failed attempt left it."""
        if "gone" in self.store.topics():
            self.store.delete_topic("gone")

    def gone(self) -> None:
        self.store.create_topic("gone", 2, COMPACTED)
        self.store.append("gone", 1, pa.table({"key": [b"a"], "value": [b"1"]}))

    def check_whole(self) -> None:
        """A deletion that failed before its marker was durable: the topic is whole and takes appends."""
        self.store.append("gone", 0, pa.table({"key": [b"b"], "value": [b"2"]}))
        assert [r.value for p in (0, 1) for r in self.store.read("gone", p)] == [b"2", b"1"]

    def check_refused(self) -> None:
        """A deletion that failed past its marker is pending: the topic takes no append (it would be
        deleted), until a retry or the next open finishes the deletion."""
        with pytest.raises(UnknownTopicOrPartitionError):
            self.store.append("gone", 0, pa.table({"key": [b"b"], "value": [b"2"]}))

    def check_gone(self) -> None:
        """The topic is gone (its ``-delete`` directories may wait for the next open)."""
        assert "gone" not in self.store.topics()
        assert not [p for p in self.data_dir.iterdir() if p.name.startswith("gone-") and not p.name.endswith("-delete")]

    def create(self, attempt: int) -> None:
        self.store.create_topic(f"new{attempt}", 2, COMPACTED)

    def check_created(self) -> None:
        assert self.store.partitions("new1") == 2
        self.store.append("new1", 1, pa.table({"key": [b"a"], "value": [b"1"]}))
        assert [r.value for r in self.store.read("new1", 1)] == [b"1"]

    def open_new_store(self, attempt: int) -> None:
        compactlog.open(self.data_dir.parent / f"other{attempt}", clock=self.clock).close()

    def check_new_store(self) -> None:
        with compactlog.open(self.data_dir.parent / "other1", clock=self.clock) as other:
            assert other.directory_id is not None and (Path(other.data_dir) / "meta.properties").exists()


def cleaned(bench: Bench, report: CleanReport) -> None:
    """``t-0`` is clean below its checkpoint (by this pass, or by the failed one, whose checkpoint was written
    but its directory's fsync failed): no key twice."""
    assert report.partition("t", 0) is not None or "nothing cleanable" in report.skipped[("t", 0)], report.skipped
    checkpoint = bench.store.checkpoint.read()[("t", 0)]
    keys = [r.key for r in bench.store.read("t", 0) if r.offset < checkpoint]
    assert keys and len(keys) == len(set(keys))


@dataclass(frozen=True)
class Scenario:
    """An operation that meets ``point``: ``operation(bench, attempt)`` runs it (attempt 0 under the fault, 1
    once it is gone); ``check(bench, outcome)`` checks the second attempt's effect."""

    point: str
    label: str
    operation: Callable[[Bench, int], Any]
    error: type[CompactLogError] | None = KafkaStorageError  # None: reported in a CleanReport, not raised
    prepare: Callable[[Bench, pytest.MonkeyPatch], None] = lambda bench, monkeypatch: None
    check: Callable[[Bench, Any], None] = lambda bench, outcome: None
    nth: int = 1  # the first failing hit
    also: tuple[str, ...] = ()  # points armed beside it (the first failure it follows)
    pending: bool = False  # what the failed operation left in transit is finished by its retry or the next open
    after_failure: Callable[[Bench], None] = lambda bench: None  # checked once the fault is gone, before a retry

    @property
    def id(self) -> str:
        return f"{self.point}/{self.label}"


def _small_row_groups(bench: Bench, monkeypatch: pytest.MonkeyPatch) -> None:
    """Row groups of 4 rows: a cleaned file written newest first has several, so its footer is reversed."""
    monkeypatch.setattr(sealed_segment, "ROW_GROUP_ROWS", 4)
    bench.dirty()


def _compact_every_save(bench: Bench, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transaction_state_manager, "COMPACT_BYTES", 1)


CLEAN = dict(operation=lambda b, a: b.clean(), error=None, prepare=lambda b, m: b.dirty(),
             check=cleaned)
ROLL = dict(operation=lambda b, a: b.roll(a), check=lambda b, rolled: None if rolled else pytest.fail("no roll"))
CREATE = dict(operation=lambda b, a: b.create(a), check=lambda b, _: b.check_created())
DELETE = dict(operation=lambda b, a: b.delete(a), prepare=lambda b, m: b.gone(), check=lambda b, _: b.check_gone())
NEW_STORE = dict(operation=lambda b, a: b.open_new_store(a), error=DataDirectoryError,
                 check=lambda b, _: b.check_new_store())
TRANSACTION = dict(operation=lambda b, a: b.transaction("tx", f"tx{a}", 4))
PRODUCE = dict(operation=lambda b, a: b.produce(f"idempotent{a}", 4))

SCENARIOS = [
    Scenario("log.frame-write", "append", lambda b, a: b.append("t", 0, f"append{a}", 30)),
    Scenario("log.frame-write", "offset-commit", lambda b, a: b.commit_offset(10 + a)),
    Scenario("log.frame-write", "transaction", **TRANSACTION),
    Scenario("log.fsync", "append", lambda b, a: b.append("t", 0, f"append{a}", 30)),
    Scenario("log.fsync", "offset-commit", lambda b, a: b.commit_offset(10 + a)),
    Scenario("log.truncate", "failed-append", lambda b, a: b.append("t", 0, f"append{a}", 30), also=("log.fsync",)),
    Scenario("log.truncate", "torn-tail", lambda b, a: b.check(), prepare=lambda b, m: b.torn_tail(), pending=True),
    Scenario("log.segment-create", "roll", **ROLL),
    Scenario("log.segment-create", "new-topic", lambda b, a: b.append("u", 0, f"new{a}", 3)),
    Scenario("log.seal-rename", "roll", **ROLL),
    Scenario("log.delete-rename", "retention", lambda b, a: b.store.enforce_retention(["r"]),
             prepare=lambda b, m: b.fill_r(),
             check=lambda b, removed: None if removed else pytest.fail("nothing removed")),
    Scenario("log.delete-rename", "clean", **CLEAN),
    Scenario("log.dir-fsync", "roll", **ROLL),
    *[Scenario(f"topic-creation.{step}", "create-topic", **CREATE)
      for step in ("marker-write", "marker-fsync", "marker-dir-fsync", "partition-mkdir", "partition-dir-fsync",
                   "unmark-dir-fsync")],
    Scenario("topic-creation.partition-mkdir", "create-topic-second-partition", **CREATE, nth=2),
    Scenario("log.snapshot-write", "roll", **ROLL),
    Scenario("log.snapshot-fsync", "roll", **ROLL),
    Scenario("log.snapshot-rename", "roll", **ROLL),
    Scenario("segment.row-group-write", "roll", **ROLL),
    Scenario("segment.row-group-write", "clean", **CLEAN),
    Scenario("segment.footer-write", "roll", **ROLL),
    Scenario("segment.footer-write", "clean", **CLEAN),
    Scenario("segment.footer-reverse", "clean", **{**CLEAN, "prepare": _small_row_groups}),
    Scenario("segment.fsync", "roll", **ROLL),
    Scenario("segment.fsync", "clean", **CLEAN),
    Scenario("cleaner.swap-rename", "clean", **CLEAN),
    Scenario("cleaner.swap-rename", "clean-second-group", **CLEAN, nth=2),
    Scenario("cleaner.install-rename", "clean", **CLEAN),
    Scenario("cleaner.install-rename", "clean-second-group", **CLEAN, nth=2),
    Scenario("cleaner.recovery-rename", "open", lambda b, a: b.check(), prepare=lambda b, m: b.interrupted_swap(),
             pending=True),
    *[Scenario(f"checkpoint.{step}", "clean", **CLEAN) for step in ("write", "fsync", "rename", "dir-fsync")],
    Scenario("checkpoint.write", "create-store", **{**NEW_STORE, "error": KafkaStorageError}),
    *[Scenario(f"cleaner-state.{step}", "clean", lambda b, a: b.clean(), prepare=lambda b, m: b.dirty())
      for step in ("write", "fsync", "rename", "dir-fsync")],
    *[Scenario(f"topic-metadata.{step}", "create-topic", **CREATE)
      for step in ("write", "fsync", "rename", "dir-fsync")],
    Scenario("topic-metadata.rename", "alter-config",
             lambda b, a: b.store.alter_topic_config("t", {"retention.ms": 1000 + a}),
             check=lambda b, config: None if config.retention_ms == 1001 else pytest.fail("not altered")),
    # A marker not yet durable is removed (the topic stays whole); past it, the deletion is pending.
    *[Scenario(f"topic-deletion.{step}", "delete-topic", **DELETE, after_failure=lambda b: b.check_whole())
      for step in ("marker-write", "marker-fsync", "marker-dir-fsync")],
    *[Scenario(f"topic-deletion.{step}", "delete-topic", **DELETE, pending=True,
               after_failure=lambda b: b.check_refused())
      for step in ("partition-rename", "partition-dir-fsync", "metadata-dir-fsync", "unmark-dir-fsync")],
    Scenario("topic-deletion.partition-rename", "delete-topic-second-partition", **DELETE, nth=2, pending=True,
             after_failure=lambda b: b.check_refused()),
    Scenario("transaction-state.append", "transaction", **TRANSACTION),
    Scenario("transaction-state.append", "prepare-commit",
             lambda b, a: b.transaction("tx", f"tx{a}", 3, partitions=2), nth=3),
    Scenario("transaction-state.fdatasync", "transaction", **TRANSACTION),
    Scenario("transaction-state.dir-fsync", "new-transactional-id",
             lambda b, a: b.transaction(f"new{a}", f"new{a}", 3)),
    *[Scenario(f"transaction-state.{step}", "transaction", **TRANSACTION, prepare=_compact_every_save)
      for step in ("compact-write", "compact-rename", "compact-dir-fsync")],
    *[Scenario(f"producer-ids.{step}", "idempotent-producer", **PRODUCE)
      for step in ("write", "fsync", "rename", "dir-fsync")],
    *[Scenario(f"meta-properties.{step}", "create-store", **NEW_STORE)
      for step in ("write", "fsync", "link", "dir-fsync")],
]
