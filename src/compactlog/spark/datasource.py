"""The ``compactlog`` PySpark Python data source: batch reads, streaming reads and writes of one topic.

Spark users work with it as with Spark's Kafka source::

    compactlog.spark.register(spark)            # compactlog.spark.session() does it for you
    spark.read.format("compactlog").option("path", data_dir).option("topic", "users").load()
    spark.readStream.format("compactlog").option("path", data_dir).option("topic", "users").load()
    df.write.format("compactlog").option("path", data_dir).option("topic", "users").mode("append").save()

Columns (every one nullable, as in Spark's Kafka source): ``topic`` string, ``partition`` int, ``offset``
long, ``timestamp`` timestamp (the record's epoch milliseconds as a Spark timestamp, like the Kafka source;
``timestamp`` long milliseconds are accepted on write), ``key`` binary, ``value`` binary (null = tombstone),
``headers`` array<struct<key: string, value: binary>>.

Options (names are case-insensitive; an unknown option is an error that lists the allowed ones):

=====================  ==========  =====================================================================
option                 used by     meaning
=====================  ==========  =====================================================================
path                   all         the data directory (required). Relative paths are resolved on the driver.
topic                  all         the topic (required); it must exist.
mode                   read,       ``log`` (default): every record. ``latest`` (batch reads only): the
                       stream      newest record of every live key in the offset range (tombstoned and
                                   keyless records absent).
startingOffsets        read,       ``earliest`` (default), ``latest`` (streams only), or JSON
                       stream      ``{"<topic>": {"0": 23, "1": -2}}`` (-2 earliest, -1 latest; partitions
                                   left out start at the earliest offset).
endingOffsets          read        ``latest`` (default) or JSON as above (-1 latest; -2 is not allowed).
isolationLevel         read,       ``read_uncommitted`` (default): every data record up to the log end.
                       stream      ``read_committed``: "latest" is the last stable offset (the first
                                   offset of the oldest open transaction), nothing at or past it is
                                   read, and aborted transactions' records are skipped (Kafka's rule).
minPartitions          read        at least this many Spark tasks for a ``log`` read when segments allow:
                                   a partition's range is split only at segment boundaries.
maxOffsetsPerTrigger   stream      at most this many offsets per micro-batch, spread over the partitions
                                   in proportion to their backlog (Kafka's rule). Offsets, not records:
                                   compaction gaps count.
keyColumn, valueColumn write       the key and value columns (default ``key``/``value``); binary or
                                   string (UTF-8). Optional columns ``timestamp`` (timestamp or long ms)
                                   and ``headers``; other columns (``topic``, ``partition``, ``offset``,
                                   ...) are ignored, as by Spark's Kafka sink: the partition is always the
                                   one Kafka's default partitioner picks for the key. A streaming write
                                   also takes Spark's ``checkpointLocation``.
=====================  ==========  =====================================================================

Offsets and gaps: compaction leaves offset gaps, which readers skip; they are never an error (unlike
Spark's Kafka source before SPARK-17147). A start offset below the log start (retention deleted those
records) is moved up to the log start without a warning: nothing below it exists any more. A start or end
offset past the log end is an :class:`OffsetOutOfRangeError`.

Streams: offsets are JSON ``{"<partition>": <next offset>}``; a micro-batch reads ``[start, end)`` of every
partition with new records, one Spark task per partition, so each partition's records arrive in offset
order. Trigger.AvailableNow stops at the log ends seen when the query starts.

Writes append on the executors (:func:`compactlog.spark.tasks.append_batches`); each task's commit message
lists its appends. ``commit`` records nothing more, because every append is already durable. ``abort``
cannot take back appends that other tasks already made: they stay, as with Kafka's non-transactional
producer (transactional writes are a later issue). A retried task appends its rows again (at least once).
Only ``mode("append")`` is supported: a log is append-only.

The executors need the data directory at the same path as the driver (local disk in local mode, a shared
filesystem on a cluster); a task that cannot see it fails with :class:`ExecutorError`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from ..errors import ConfigError, OffsetOutOfRangeError
from ..record import AppendResult
from ..segment import SegmentMeta
from ..store import Store
from . import tasks
from .options import (
    EARLIEST,
    LATEST,
    SPLIT_BYTES,
    SourceOptions,
    rate_limit,
    resolve_offset,
    split_range,
)

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession

__all__ = ["NAME", "SPARK_SCHEMA", "CompactLogDataSource", "register"]

NAME = "compactlog"

SPARK_SCHEMA = StructType([
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("offset", LongType()),
    StructField("timestamp", TimestampType()),
    StructField("key", BinaryType()),
    StructField("value", BinaryType()),
    StructField("headers", ArrayType(StructType([StructField("key", StringType()),
                                                 StructField("value", BinaryType())]))),
])


# -- reading ---------------------------------------------------------------------------------------------


@dataclass
class OffsetRange(InputPartition):
    """One Spark task's share of a read: offsets ``[start_offset, end_offset)`` of one partition."""

    partition: int
    start_offset: int
    end_offset: int


@dataclass
class _Bounds:
    """A partition's offsets as a read sees them. ``latest`` is where "latest" points: the log end, or for
    ``read_committed`` the last stable offset (as Kafka's endOffsets for a read_committed consumer)."""

    log_start: int
    log_end: int
    latest: int
    segments: list[SegmentMeta] = field(default_factory=list)


def _bounds(store: Store, options: SourceOptions, with_segments: bool = False) -> dict[int, _Bounds]:
    bounds = {}
    committed = options.isolation_level == "read_committed"
    for partition in range(store.partitions(options.topic)):
        log = store.log(options.topic, partition)
        segments = log.segments_meta() if with_segments else []
        end = log.log_end_offset
        latest = min(log.last_stable_offset, end) if committed else end
        bounds[partition] = _Bounds(log.log_start_offset, end, latest, segments)
    return bounds


def _read(options: SourceOptions, part: InputPartition) -> Iterator[pa.RecordBatch]:
    if not isinstance(part, OffsetRange):  # Spark's placeholder partition when a read plans none
        return iter(())
    reader = tasks.read_latest if options.mode == "latest" else tasks.read_range
    return reader(options.path, options.topic, part.partition, part.start_offset, part.end_offset,
                  options.isolation_level)


class CompactLogReader(DataSourceReader):
    """Batch reads: offsets are resolved when Spark plans the query (the driver must see the data directory
    too); ``log`` reads are cut into segment ranges, ``latest`` reads take one task per partition (the
    newest record of a key may be in any segment, and records never cross the network to be compared)."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def plan(self) -> list[OffsetRange]:
        options = self.options
        with options.open() as store:
            bounds = _bounds(store, options, with_segments=options.mode == "log")
        starts = options.offsets("startingOffsets", len(bounds), default=EARLIEST)
        ends = options.offsets("endingOffsets", len(bounds), default=LATEST)
        if LATEST in starts.values():
            raise ConfigError("startingOffsets 'latest' (-1) is not allowed in a batch read "
                              "(it would read nothing)")
        if EARLIEST in ends.values():
            raise ConfigError("endingOffsets 'earliest' (-2) is not allowed in a batch read")
        ranges: list[tuple[int, int, int]] = []
        for partition, bound in bounds.items():
            start = resolve_offset(starts[partition], bound.log_start, bound.latest)
            end = resolve_offset(ends[partition], bound.log_start, bound.latest)
            for offset in (start, end):
                if offset > bound.log_end:
                    raise OffsetOutOfRangeError(f"offset {offset} is out of range for {options.topic}-"
                                                f"{partition}: log end {bound.log_end}")
            if start > end and ends[partition] != LATEST:
                raise ConfigError(f"startingOffsets {start} is after endingOffsets {end} "
                                  f"for partition {partition}")
            start = max(start, bound.log_start)  # retention removed what is below the log start
            end = min(end, bound.latest)  # read_committed: nothing at or past the last stable offset
            if start < end:
                ranges.append((partition, start, end))
        if options.mode == "latest":
            return [OffsetRange(p, s, e) for p, s, e in ranges]
        target = SPLIT_BYTES
        if options.min_partitions:
            total = sum(seg.size_bytes for p, s, e in ranges for seg in bounds[p].segments
                        if seg.base_offset < e and seg.next_offset > s)
            target = max(1, min(target, math.ceil(total / options.min_partitions)))
        return [OffsetRange(p, piece_start, piece_end)
                for p, s, e in ranges
                for piece_start, piece_end in split_range(bounds[p].segments, s, e, target)]

    def partitions(self) -> Sequence[InputPartition]:
        return self.plan()

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.options, partition)


class CompactLogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches by offset range per partition; offsets are ``{"<partition>": <next offset>}``."""

    def __init__(self, options: SourceOptions) -> None:
        if options.mode != "log":
            raise ConfigError("a compactlog stream reads mode 'log' (every record); "
                              "mode 'latest' is for batch reads")
        self.options = options
        self._available_now: dict[int, int] | None = None
        # The driver-side store, kept open between triggers (re-opening every log each trigger costs a
        # directory scan and a footer read per segment); never pickled to the executors.
        self._store: Store | None = None

    def __getstate__(self) -> dict[str, object]:
        return {**self.__dict__, "_store": None}

    def _log_ends(self) -> dict[int, _Bounds]:
        if self._store is None:
            self._store = self.options.open()
        return _bounds(self._store, self.options)

    def initialOffset(self) -> dict:
        options = self.options
        bounds = self._log_ends()
        starts = options.offsets("startingOffsets", len(bounds), default=EARLIEST)
        offsets = {}
        for partition, bound in bounds.items():
            start = resolve_offset(starts[partition], bound.log_start, bound.latest)
            if start > bound.log_end:
                raise OffsetOutOfRangeError(f"startingOffsets {start} is out of range for {options.topic}-"
                                            f"{partition}: log end {bound.log_end}")
            offsets[str(partition)] = max(start, bound.log_start)
        return offsets

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now = {p: b.latest for p, b in self._log_ends().items()}

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict | None = None, limit: ReadLimit | None = None) -> dict:
        bounds = self._log_ends()
        ends = self._available_now or {p: b.latest for p, b in bounds.items()}
        begin = {p: int((start or {}).get(str(p), b.log_start)) for p, b in bounds.items()}
        for partition, offset in begin.items():
            if offset > bounds[partition].log_end:
                raise OffsetOutOfRangeError(
                    f"the query is at offset {offset} of {self.options.topic}-{partition}, past its log end "
                    f"{bounds[partition].log_end}: was the topic deleted and created again?")
        ends = {p: max(ends[p], begin[p]) for p in bounds}
        if isinstance(limit, ReadMaxRows):
            ends = rate_limit(begin, ends, limit.max_rows)
        elif isinstance(limit, ReadMinRows) and sum(ends[p] - begin[p] for p in ends) < limit.min_rows:
            ends = begin
        return {str(p): ends[p] for p in sorted(ends)}

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        ranges = []
        for key, end_offset in end.items():
            start_offset = int(start.get(key, end_offset))
            if int(end_offset) > start_offset:
                ranges.append(OffsetRange(int(key), start_offset, int(end_offset)))
        return ranges

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(self.options, partition)

    def commit(self, end: dict) -> None:
        """Nothing to release: the log keeps records until retention or the cleaner removes them."""

    def stop(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None


# -- writing ---------------------------------------------------------------------------------------------


@dataclass
class AppendCommitMessage(WriterCommitMessage):
    """What one write task appended."""

    appends: list[AppendResult]


def _check_write_columns(options: SourceOptions, schema: StructType) -> tuple[str | None, str | None]:
    names = schema.fieldNames()
    for option, column in (("keyColumn", options.key_column), ("valueColumn", options.value_column)):
        if column not in names:
            raise ConfigError(f"the DataFrame has no column {column!r} ({option}); its columns: {names}")
    return ("timestamp" if "timestamp" in names else None), ("headers" if "headers" in names else None)


def _append(options: SourceOptions, columns: tuple[str | None, str | None],
            iterator: Iterator[pa.RecordBatch]) -> AppendCommitMessage:
    timestamp_column, headers_column = columns
    appends = tasks.append_batches(options.path, options.topic, iterator, key_column=options.key_column,
                                   value_column=options.value_column, timestamp_column=timestamp_column,
                                   headers_column=headers_column)
    return AppendCommitMessage(appends)


class CompactLogWriter(DataSourceArrowWriter):
    """``df.write.format("compactlog")``: every task appends its rows (see the module docstring)."""

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self.options = options
        self.columns = _check_write_columns(options, schema)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> AppendCommitMessage:
        return _append(self.options, self.columns, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Nothing to do: each append was durable when its task returned."""

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Nothing can be undone: appends made by tasks that succeeded stay (non-transactional producer)."""


class CompactLogStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("compactlog")``: each micro-batch appends as a batch write does (at least
    once: a micro-batch run again after a failure appends its rows again)."""

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self.options = options
        self.columns = _check_write_columns(options, schema)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> AppendCommitMessage:
        return _append(self.options, self.columns, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to do: each append was durable when its task returned."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing can be undone (see :meth:`CompactLogWriter.abort`)."""


# -- the data source -------------------------------------------------------------------------------------


class CompactLogDataSource(DataSource):
    """The ``compactlog`` format (see the module docstring for options and semantics)."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        return SPARK_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return CompactLogReader(self._checked("read"))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return CompactLogStreamReader(self._checked("stream"))

    def writer(self, schema: StructType, overwrite: bool) -> CompactLogWriter:
        return CompactLogWriter(self._checked("write", overwrite), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> CompactLogStreamWriter:
        return CompactLogStreamWriter(self._checked("stream write", overwrite), schema)

    def _checked(self, use: str, overwrite: bool = False) -> SourceOptions:
        if overwrite:
            raise ConfigError("a compactlog topic is append-only: write with mode('append') (or outputMode "
                              "'append'), not overwrite")
        options = SourceOptions.parse(self.options, use)
        with options.open():  # fail on the driver, before any task, when the topic does not exist
            pass
        return options


def register(spark: SparkSession) -> None:
    """Register the ``compactlog`` format with ``spark``; a no-op when it is registered already (Spark
    warns on every re-registration)."""
    try:
        if spark._jsparkSession.sessionState().dataSourceManager().dataSourceExists(NAME):
            return
    except Exception:
        pass
    spark.dataSource.register(CompactLogDataSource)
