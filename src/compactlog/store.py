"""The data directory: topics, their partitions' logs, and the store-wide files.

Layout of ``<data-dir>``:

* ``meta.properties``: marks the directory as a store, with its id (:mod:`compactlog.data_dir`);
* ``<topic>-<partition>/``: one partition's log (:mod:`compactlog.log`);
* ``.topics/<topic>.json``: a topic's metadata (:mod:`compactlog.topic_metadata`): creating this file is
  the moment a topic exists (:mod:`compactlog.topic_creation`), removing it the moment it is deleted
  (:mod:`compactlog.topic_deletion`);
* ``cleaner-offset-checkpoint``: the cleaner's next dirty offset per partition, in Kafka's text format;
* ``cleaner-state.json``: the last cleaner pass's gauges and uncleanable partitions (:mod:`.cleaner.state`);
* ``server.properties`` (optional): data-directory defaults under Kafka's broker names.

A :class:`Store` is what :func:`compactlog.open` returns. Several stores (in several processes) may share
one data directory; each partition's appends are serialised by the partition lock. A store whose
directory cannot be written opens read-only: it writes nothing, and its writes raise ReadOnlyStoreError.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from .checkpoint import CheckpointFile
from .columns import from_numpy, to_numpy
from .config import BrokerConfig, TopicConfig, alter, load_broker_config, producer_config, topic_config
from .data_dir import TOPICS_DIR, open_data_dir, read_only_error
from .errors import (
    CompactLogError,
    InvalidTopicError,
    StoreClosedError,
    UnknownTopicOrPartitionError,
    storage_errors,
)
from .log import Log
from .log.reads import check_isolation_level
from .partition_view import PartitionInfo, SegmentInfo, describe_partition, unreadable_partition
from .producer_state import aborted_mask, check_batch_fields
from .record import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    CONTROL_NONE,
    READ_COLUMNS,
    AppendResult,
    Record,
    check_rows,
    read_columns,
    records_of,
    to_rows,
)
from .retention import apply_retention
from .topic_creation import create_topic_files, finish_pending_creations
from .topic_deletion import delete_topic_files, finish_pending_deletions, is_being_deleted
from .topic_metadata import (
    TopicMetadata,
    check_partition_count,
    is_internal,
    read_topic_metadata,
    remove_stale_tmp,
    validate_topic_name,
    write_topic_metadata,
)
from .transactions import TransactionCoordinator

if TYPE_CHECKING:
    from .cleaner.cleaner import CleanReport
    from .producer import Producer

__all__ = ["TOPICS_DIR", "AppendResult", "PartitionInfo", "SegmentInfo", "Store", "open_store",
           "validate_topic_name"]

CHECKPOINT_FILE = "cleaner-offset-checkpoint"


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class Store:
    """A data directory of topics. Use :func:`compactlog.open`."""

    def __init__(self, data_dir: str | os.PathLike[str], clock: Callable[[], int] | None = None) -> None:
        directory = open_data_dir(os.path.abspath(os.fspath(data_dir)))  # creates, upgrades or refuses
        self.data_dir = directory.path
        self.directory_id: str | None = directory.directory_id  # meta.properties' directory.id
        self.read_only = directory.read_only
        self.clock: Callable[[], int] = clock if clock is not None else wall_clock_ms
        self.broker: BrokerConfig = load_broker_config(self.data_dir)
        self.checkpoint = CheckpointFile(os.path.join(self.data_dir, CHECKPOINT_FILE))
        self._topics_dir = os.path.join(self.data_dir, TOPICS_DIR)
        if not self.read_only:
            if not os.path.exists(self.checkpoint.path):
                self.checkpoint.write({})
            self.checkpoint.remove_stale_tmp()
            remove_stale_tmp(self._topics_dir)
            finish_pending_creations(self.data_dir, self._topics_dir)
            finish_pending_deletions(self.data_dir, self._topics_dir, self.checkpoint)
        self._topics: dict[str, TopicMetadata] = {}
        self._logs: dict[tuple[str, int], Log] = {}
        self._log_topic_ids: dict[tuple[str, int], str | None] = {}
        # Threads share a store (serve's broker threads and cleaner): one Log per partition, opened under
        # this lock, so that every thread appends, swaps and rolls through the same Log and its thread lock.
        self._opening = threading.Lock()
        self._closed = False
        # Writable: made now, as its opening removes what a killed state write left (.transactions/*.tmp).
        self._coordinator: TransactionCoordinator | None = None if self.read_only else TransactionCoordinator(self)
        from .cleaner.state import load_cleaner_state  # the last pass's figures, of whichever process

        self.cleaner_state = load_cleaner_state(self.data_dir, remove_tmp=not self.read_only)

    # -- lifecycle ---------------------------------------------------------------------------------

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for log in self._logs.values():
            log.close()
        self._logs.clear()

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError(f"store {self.data_dir} is closed")

    def check_writable(self, doing: str) -> None:
        """Raise ReadOnlyStoreError (naming ``doing``) if this store was opened read-only."""
        self._check_open()
        if self.read_only:
            raise read_only_error(self.data_dir, doing)

    # -- topics ------------------------------------------------------------------------------------------

    def _meta_path(self, topic: str) -> str:
        # A checked topic name (validate_topic_name) needs none of os.path.join's handling, which costs more
        # than the stat that follows on every metadata look.
        return f"{self._topics_dir}{os.sep}{topic}.json"

    def _meta(self, topic: str) -> TopicMetadata:
        self._check_open()
        cached = self._topics.get(topic) if type(topic) is str else None
        if cached is None:  # a cached topic's name was checked when it was read
            validate_topic_name(topic)
        path = self._meta_path(topic)
        try:
            stat = os.stat(path)
        except FileNotFoundError:
            self._topics.pop(topic, None)
            raise UnknownTopicOrPartitionError(f"unknown topic {topic!r} in {self.data_dir}") from None
        stamp = (stat.st_mtime_ns, stat.st_ino)
        if cached is not None and cached.stamp == stamp:
            return cached
        try:
            meta = read_topic_metadata(path, topic, self.broker, stamp)
        except FileNotFoundError:  # deleted since the stat
            return self._meta(topic)
        self._topics[topic] = meta
        return meta

    @storage_errors("creating a topic")
    def create_topic(self, name: str, partitions: int = 1, config: Mapping[str, Any] | None = None,
                     validate_only: bool = False) -> None:
        """Create a topic with ``partitions`` partitions and topic-config overrides (Kafka names), in the
        crash-safe order of :mod:`compactlog.topic_creation`; ``validate_only`` checks all (the name, the count
        and ``max.broker.partitions``, the configs, that the name is free and collides with no topic) and
        creates nothing. Nothing is written before the checks pass."""
        self.check_writable(f"create topic {name!r}")
        validate_topic_name(name)
        check_partition_count(name, partitions)
        overrides = dict(config or {})
        parsed = topic_config(overrides, self.broker)  # raises ConfigError before anything is written
        create_topic_files(self.data_dir, self._topics_dir, self.checkpoint, name, partitions,
                           {k: parsed.get(k) for k in overrides}, self.partitions, self.broker.max_broker_partitions,
                           validate_only)

    def topics(self) -> list[str]:
        self._check_open()
        names = os.listdir(self._topics_dir)
        return sorted(n[: -len(".json")] for n in names if n.endswith(".json"))

    def topic_config(self, topic: str) -> TopicConfig:
        return self._meta(topic).config

    def partitions(self, topic: str) -> int:
        return self._meta(topic).partitions

    def topic_overrides(self, topic: str) -> dict[str, Any]:
        """The configs set on the topic itself (created or altered), also those equal to the default."""
        return dict(self._meta(topic).overrides)

    def alter_topic_config(self, topic: str, changes: Mapping[str, Any]) -> TopicConfig:
        """Change topic-config overrides; a value of None resets a key to the data-directory default."""
        self.check_writable(f"alter topic {topic!r}")
        meta = self._meta(topic)
        new_config = alter(meta.config, changes, self.broker)
        overrides = dict(meta.overrides)
        for key, value in changes.items():
            if value is None:
                overrides.pop(key, None)
            else:
                overrides[key] = new_config.get(key)
        write_topic_metadata(self._meta_path(topic), topic, meta.partitions, overrides, meta.topic_id)
        return self._meta(topic).config

    def delete_topic(self, topic: str) -> None:
        """Delete a topic and its data, in the crash-safe order of :mod:`compactlog.topic_deletion` (a
        crash part-way is finished by the next writable open). An internal topic is never deleted."""
        self.check_writable(f"delete topic {topic!r}")
        meta = self._meta(topic)
        if is_internal(topic):  # Kafka's TopicCommand: "... is not allowed to be marked for deletion"
            raise InvalidTopicError(f"Topic {topic} is a kafka internal topic and is not allowed to be marked for "
                                    "deletion: it holds the consumer groups' committed offsets")
        for partition in range(meta.partitions):
            log = self._logs.pop((topic, partition), None)
            if log is not None:
                log.close()
        delete_topic_files(self.data_dir, self._topics_dir, topic, meta.partitions,
                           meta.topic_id, self.checkpoint)
        self._topics.pop(topic, None)

    # -- partitions --------------------------------------------------------------------------------------

    def _partition_dir(self, topic: str, partition: int) -> str:
        return os.path.join(self.data_dir, f"{topic}-{partition}")

    def log(self, topic: str, partition: int) -> Log:
        """The log of one partition, opened (and recovered) on first use."""
        meta = self._meta(topic)
        is_int = isinstance(partition, int) and not isinstance(partition, bool)
        if not is_int or not 0 <= partition < meta.partitions:
            raise UnknownTopicOrPartitionError(f"topic {topic!r} has partitions 0..{meta.partitions - 1}; "
                                               f"there is no partition {partition!r}")
        key = (topic, partition)
        log = self._logs.get(key)
        if log is not None and self._log_topic_ids.get(key) == meta.topic_id:
            return log
        stale = None
        with self._opening:  # again under the lock: another thread may have opened it meanwhile
            log = self._logs.get(key)
            if log is not None and self._log_topic_ids.get(key) != meta.topic_id:
                stale, log = log, None  # the topic was deleted and created again (by another store): a new log
            if log is None:
                if is_being_deleted(self._topics_dir, topic, meta.topic_id):
                    raise UnknownTopicOrPartitionError(f"topic {topic!r} is being deleted")
                log = Log(self._partition_dir(topic, partition), topic, partition,
                          lambda: self._meta(topic).config, self.clock, self.read_only)
                self._logs[key] = log
                self._log_topic_ids[key] = meta.topic_id
        if stale is not None:  # closed outside the lock: a thread holding the stale log may be waiting for it
            stale.close()
        return log

    def partition_logs(self, topic: str | None = None) -> Iterator[Log]:
        for name in [topic] if topic is not None else self.topics():
            for partition in range(self.partitions(name)):
                yield self.log(name, partition)

    # -- produce -----------------------------------------------------------------------------------------

    def producer(self, **configs: Any) -> Producer:
        """A batching producer. Keyword arguments are producer configs with dots as underscores
        (``batch_size``, ``linger_ms``, ``transactional_id``, ``transaction_timeout_ms``)."""
        from .producer import Producer

        self.check_writable("create a producer")
        return Producer(self, producer_config({k.replace("_", "."): v for k, v in configs.items()}))

    def append(self, topic: str, partition: int, table: pa.Table | pa.RecordBatch, *,
               producer_id: int | None = None, producer_epoch: int = 0, base_sequence: int = 0,
               transactional: bool = False, flush: bool = True) -> AppendResult:
        """Bulk append: a table with ``key``, ``value`` and optionally ``timestamp``, ``headers``.

        Invalid input appends nothing. The rows are durable when this returns (with ``flush=False``: once
        the partition's ``log(...).flush()`` returns; the broker shares one fsync among appends). A table
        larger than one frame (65,536 rows) or than the room left in the active segment is written as
        several frames, so a crash before this returns may keep a prefix of it (as a Kafka produce request
        of several batches may); nothing is acknowledged before it returns.

        With ``producer_id`` the table is one idempotent batch of that producer (``producer_epoch``,
        sequences from ``base_sequence``): a retry of an appended batch is not appended again and returns
        the original offsets; an older epoch raises ProducerFencedError, a sequence gap
        OutOfOrderSequenceError."""
        self.check_writable(f"append to {topic}-{partition}")
        log = self.log(topic, partition)
        config = self.topic_config(topic)
        rows = to_rows(table, self.clock())
        check_rows(rows, compacted=config.compact, max_message_bytes=config.max_message_bytes, topic=topic)
        if rows.num_rows == 0:
            end = log.log_end_offset
            return AppendResult(topic, partition, end, end - 1, 0)
        if producer_id is None:
            first, _ = log.append(rows, flush=flush)
        else:
            check_batch_fields(producer_id, producer_epoch, base_sequence)
            first, _, _ = log.append_producer_batch(rows, producer_id, producer_epoch, base_sequence,
                                                    transactional, flush=flush)
        return AppendResult(topic, partition, first, first + rows.num_rows - 1, rows.num_rows)

    # -- transactions ------------------------------------------------------------------------------------

    @property
    def transactions(self) -> TransactionCoordinator:
        if self._coordinator is None:
            self._coordinator = TransactionCoordinator(self)
        return self._coordinator

    def write_marker(self, topic: str, partition: int, producer_id: int, epoch: int, commit: bool,
                     flush: bool = True) -> int:
        """Append a COMMIT or ABORT marker for a producer's transaction (fsynced; with ``flush=False`` once
        the partition's ``log(...).flush()`` returns); returns its offset."""
        self.check_writable(f"write a transaction marker to {topic}-{partition}")
        return self.log(topic, partition).append_marker(producer_id, epoch,
                                                        CONTROL_COMMIT if commit else CONTROL_ABORT, flush=flush)

    def last_stable_offset(self, topic: str, partition: int) -> int:
        """The first offset of the oldest open transaction in the partition, else its log end offset:
        read_committed readers and the cleaner stop there."""
        return self.log(topic, partition).last_stable_offset

    def abort_expired_transactions(self) -> list[str]:
        """Abort (with ABORT markers, fencing their producers) the transactions open longer than their
        ``transaction.timeout.ms``; returns their transactional ids."""
        self.check_writable("abort expired transactions")
        return self.transactions.abort_expired()

    # -- consume -----------------------------------------------------------------------------------------

    def read_arrow(self, topic: str, partition: int, start_offset: int = 0, end_offset: int | None = None,
                   columns: list[str] | None = None, isolation_level: str = "read_uncommitted") -> pa.Table:
        """Records of ``[start_offset, end_offset)`` as one table (columns offset, timestamp, key, value,
        headers by default). Transaction markers are never returned; ``read_committed`` stops at the last
        stable offset and skips data of aborted transactions."""
        log = self.log(topic, partition)
        log.check_offset(start_offset, end_offset)
        wanted = read_columns(columns)
        tables = list(self._read_tables(log, start_offset, end_offset, wanted, isolation_level))
        if not tables:
            from .record import SCHEMA

            return SCHEMA.empty_table().select(wanted)
        return pa.concat_tables(tables) if len(tables) > 1 else tables[0]

    def read(self, topic: str, partition: int, start_offset: int = 0, end_offset: int | None = None,
             isolation_level: str = "read_uncommitted") -> Iterator[Record]:
        """Records of ``[start_offset, end_offset)`` in offset order. Offset gaps left by compaction are
        skipped: a start offset inside a gap starts at the next record. Raises OffsetOutOfRangeError below
        the log start or past the log end. ``read_committed`` stops at the last stable offset and skips
        the data of aborted transactions (found through the segments' transaction indexes)."""
        log = self.log(topic, partition)
        log.check_offset(start_offset, end_offset)
        check_isolation_level(isolation_level)  # now, not when the first record is asked for
        return records_of(self._read_tables(log, start_offset, end_offset, list(READ_COLUMNS), isolation_level))

    def read_tables(self, topic: str, partition: int, start_offset: int = 0, end_offset: int | None = None,
                    columns: list[str] | None = None, isolation_level: str = "read_uncommitted",
                    ) -> Iterator[pa.Table]:
        """:meth:`read_arrow` one table at a time (one or more per segment), in offset order, for reads
        larger than memory (the Spark data source reads this way). The offsets are checked now."""
        log = self.log(topic, partition)
        log.check_offset(start_offset, end_offset)
        check_isolation_level(isolation_level)
        wanted = read_columns(columns)
        return self._read_tables(log, start_offset, end_offset, wanted, isolation_level)

    def _read_tables(self, log: Log, start_offset: int, end_offset: int | None, columns: list[str],
                     isolation_level: str) -> Iterator[pa.Table]:
        check_isolation_level(isolation_level)
        if isolation_level == "read_uncommitted":
            yield from log.read_tables(start_offset, end_offset, columns=columns)
            return
        stable = log.last_stable_offset
        end = stable if end_offset is None else min(end_offset, stable)
        if end <= start_offset:
            return
        aborted = log.aborted_transactions(start_offset, end)
        if not aborted:
            yield from log.read_tables(start_offset, end, columns=columns)
            return
        extra = [c for c in ("offset", "producer_id", "is_transactional", "control_type") if c not in columns]
        for table in log.read_tables(start_offset, end, columns=[*columns, *extra], include_control=True):
            control = to_numpy(table.column("control_type")) != CONTROL_NONE
            dropped = control | aborted_mask(
                to_numpy(table.column("offset")), to_numpy(table.column("producer_id")),
                to_numpy(table.column("is_transactional")), control, aborted)
            kept = table.filter(from_numpy(~dropped)) if dropped.any() else table
            if kept.num_rows:
                yield kept.select(columns)

    def log_start_offset(self, topic: str, partition: int) -> int:
        return self.log(topic, partition).log_start_offset

    def log_end_offset(self, topic: str, partition: int) -> int:
        return self.log(topic, partition).log_end_offset

    def offset_for_time(self, topic: str, partition: int, timestamp_ms: int) -> int | None:
        """The first offset whose timestamp is >= ``timestamp_ms`` (None if there is none), as Kafka's
        offsetsForTimes."""
        return self.log(topic, partition).offset_for_time(timestamp_ms)

    def roll(self, topic: str, partition: int) -> bool:
        """Seal the active segment now (no-op when it is empty)."""
        self.check_writable(f"roll {topic}-{partition}")
        return self.log(topic, partition).roll()

    def describe(self, topic: str) -> list[PartitionInfo]:
        """Every partition of ``topic``; one whose log cannot be opened (a damaged file) is described by
        :func:`~compactlog.partition_view.unreadable_partition`, with the error as its uncleanable reason."""
        described, checkpoints = [], self.checkpoint.read()
        for partition in range(self.partitions(topic)):
            try:
                log = self.log(topic, partition)
            except CompactLogError as e:
                described.append(unreadable_partition(partition, str(e), self._partition_dir(topic, partition)))
                continue
            described.append(describe_partition(log, self.topic_config(topic), checkpoints.get((topic, partition)),
                                                self.clock(), self.cleaner_state.uncleanable.get((topic, partition)),
                                                self.broker.log_cleaner_enable))
        return described

    # -- retention and cleaning --------------------------------------------------------------------------

    def enforce_retention(self, topics: list[str] | None = None) -> dict[tuple[str, int], int]:
        """Time and size retention of ``topics`` (default: all) whose cleanup.policy has delete (compact,delete
        ones also get it after each cleaning, and never with log.cleaner.enable=false, as in Kafka), and removal
        of ``.deleted`` files whose ``file.delete.delay.ms`` has passed. Returns bytes removed per partition."""
        self.check_writable("enforce retention")
        removed: dict[tuple[str, int], int] = {}
        for log in list(self._logs.values()):  # files renamed .deleted earlier whose delay has passed
            log.delete_expired_files()
        for topic in self.topics() if topics is None else topics:
            if (config := self.topic_config(topic)).delete and (self.broker.log_cleaner_enable or not config.compact):
                for log in self.partition_logs(topic):
                    freed = apply_retention(log, config, self.clock())
                    if freed:
                        removed[(topic, log.partition)] = freed
        return removed

    def clean(self, force: bool = False, topic: str | None = None, partition: int | None = None,
              executor: Any = None) -> CleanReport:
        """One cleaner pass over eligible partitions, filthiest first (see :mod:`compactlog.cleaner`);
        ``executor`` is None (in process), a SparkSession (see :mod:`compactlog.spark`), or an
        ``OnDemandExecutor`` (see :mod:`compactlog.executors`).

        ``force`` waives ``min.cleanable.dirty.ratio``, never ``min.compaction.lag.ms``, and rolls nothing:
        this is the cleaner's pass, which (as Kafka's) cleans sealed segments only and leaves the segment
        layout the caller made (a roll is :meth:`roll`'s, or ``max.compaction.lag.ms``'s for an idle
        segment), which callers that compact an exact set of segments rely on. The CLI's ``clean --force``
        ("compact now") is :func:`compactlog.maintenance.run_pass` with ``force=True``: it first rolls the
        non-empty active segment of every compacted partition, then runs this pass."""
        from .cleaner.cleaner import clean
        from .cleaner.executor import cleaner_executor

        self.check_writable("clean")
        self.abort_expired_transactions()  # maintenance: no open transaction outlives its timeout
        report = clean(self, force=force, topic=topic, partition=partition,
                       executor=cleaner_executor(executor, self.broker.log_cleaner_threads))
        report.failed_transactions.update(self.transactions.unreadable)
        return report

    def cleaner_metrics(self) -> dict[str, int | float | None]:
        from .cleaner.cleaner import cleaner_metrics

        return cleaner_metrics(self)


def open_store(data_dir: str | os.PathLike[str], clock: Callable[[], int] | None = None) -> Store:
    """Open a data directory, creating a store in a missing or empty one (see :mod:`.data_dir`); a read-only
    directory opens read-only. ``clock`` returns epoch milliseconds."""
    return Store(data_dir, clock)

