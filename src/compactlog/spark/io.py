"""DataFrame in and out of a topic: :func:`write` appends a DataFrame, :func:`read` returns a topic as one.

:func:`write` runs one Spark job: every task computes the Kafka partition of each of its rows with the
vectorised murmur2 partitioner and appends them to those partitions itself
(:func:`compactlog.spark.tasks.append_batches`); only the per-append offsets come back to the driver. Each
partition's lock makes appends from many executors at once safe. Within one Spark partition, each topic
partition receives its rows in DataFrame order; rows of different Spark partitions interleave.

:func:`read` is the ``compactlog`` data source (:mod:`compactlog.spark.datasource`): ``log`` mode returns
every record, ``latest`` mode the newest record of every live key, computed inside the task that reads the
partition (no shuffle of records).

The executors need the data directory at the same path as the driver: local disk in local mode, a shared
filesystem on a cluster. A relative ``data_dir`` is resolved on the driver.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, NoReturn

import pyarrow as pa

from .. import errors
from ..errors import CompactLogError, ConfigError, ExecutorError, InvalidRecordError
from ..record import AppendResult
from . import tasks
from .datasource import NAME, register
from .job_failure import describe, worker_python
from .options import MODES, check_isolation_level, open_existing

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["WriteResult", "read", "write"]

# What a write task sends back to the driver: one row per append it made.
_APPEND_SCHEMA = pa.schema([
    pa.field("partition", pa.int32()),
    pa.field("base_offset", pa.int64()),
    pa.field("last_offset", pa.int64()),
    pa.field("record_count", pa.int64()),
])
_APPEND_DDL = "partition int, base_offset long, last_offset long, record_count long"

# The last line of a Python traceback a task failed with, when the error was one of compactlog's own.
_TASK_ERROR = re.compile(r"compactlog\.errors\.(\w+): (.*)")


@dataclass(frozen=True)
class WriteResult:
    """What :func:`write` appended: every append, in no particular order across tasks."""

    topic: str
    appends: tuple[AppendResult, ...]

    @property
    def record_count(self) -> int:
        return sum(a.record_count for a in self.appends)

    @property
    def offsets(self) -> dict[int, tuple[int, int]]:
        """Partition -> (first offset, last offset) this write appended. Other writers' records may lie in
        between when several jobs or producers wrote to the topic at the same time."""
        spans: dict[int, tuple[int, int]] = {}
        for a in self.appends:
            if a.record_count:
                first, last = spans.get(a.partition, (a.base_offset, a.last_offset))
                spans[a.partition] = (min(first, a.base_offset), max(last, a.last_offset))
        return dict(sorted(spans.items()))

    @property
    def record_counts(self) -> dict[int, int]:
        """Partition -> records this write appended to it."""
        counts: dict[int, int] = {}
        for a in self.appends:
            if a.record_count:
                counts[a.partition] = counts.get(a.partition, 0) + a.record_count
        return dict(sorted(counts.items()))


def _raise_task_error(error: Exception, spark: SparkSession, what: str) -> NoReturn:
    """Re-raise a failed task's compactlog error as that error on the driver (from the Spark error), so
    callers can catch ``InvalidRecordError`` or ``ExecutorError`` rather than parse Java traces; any other
    failure is an ``ExecutorError`` naming its Python cause (:mod:`compactlog.spark.job_failure`)."""
    matches = list(_TASK_ERROR.finditer(str(error)))
    match = matches[-1] if matches else None  # the innermost error is the last one in the trace
    cls = getattr(errors, match.group(1), None) if match else None
    if match and isinstance(cls, type) and issubclass(cls, CompactLogError):
        raise cls(f"{match.group(2)} (in a Spark task)") from error
    raise ExecutorError(f"Spark failed {what}: {describe(error, worker_python(spark))}") from error


def write(df: DataFrame, data_dir: str | os.PathLike[str], topic: str, key: str = "key", value: str = "value",
          timestamp: str | None = None, headers: str | None = None) -> WriteResult:
    """Append the rows of ``df`` to ``topic`` (which must exist), partitioned as Kafka's default partitioner.

    ``key`` and ``value`` name binary or string columns (default ``key`` and ``value``, as the data
    source's ``keyColumn`` / ``valueColumn``; strings are written as UTF-8); a null value is a tombstone.
    ``timestamp`` names an optional timestamp or long (epoch ms) column (default: append time),
    ``headers`` an optional ``array<struct<key: string, value: binary>>`` column. Other columns are not
    written. Keyless rows are refused by compacted topics and take Kafka's sticky partitioner otherwise.

    Each append is atomic and durable; the write as a whole is not. If a task fails, the job fails with its
    error (a compactlog error is re-raised as itself), and what other tasks appended stays, as with Kafka's
    non-transactional producer; Spark's task retries append again (at least once).
    """
    path = os.path.abspath(os.fspath(data_dir))
    with open_existing(path, topic) as store:  # UnknownTopicOrPartitionError here, before any task runs
        store.check_writable(f"write to topic {topic!r}")
    columns = {"key": key, "value": value}
    if timestamp is not None:
        columns["timestamp"] = timestamp
    if headers is not None:
        columns["headers"] = headers
    missing = [name for name in columns.values() if name not in df.columns]
    if missing:
        raise InvalidRecordError(f"the DataFrame has no column(s) {missing}; its columns: {df.columns}")
    selected = df.select(*[df[source].alias(target) for target, source in columns.items()])
    has_timestamp, has_headers = timestamp is not None, headers is not None

    def append_task(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        appends = tasks.append_batches(path, topic, batches,
                                       timestamp_column="timestamp" if has_timestamp else None,
                                       headers_column="headers" if has_headers else None)
        yield pa.RecordBatch.from_pydict({
            "partition": [a.partition for a in appends],
            "base_offset": [a.base_offset for a in appends],
            "last_offset": [a.last_offset for a in appends],
            "record_count": [a.record_count for a in appends],
        }, schema=_APPEND_SCHEMA)

    try:
        rows = selected.mapInArrow(append_task, _APPEND_DDL).collect()
    except Exception as e:  # a Spark/Py4J error wrapping the task's traceback
        _raise_task_error(e, df.sparkSession, f"writing to topic {topic!r}")
    appends = (AppendResult(topic, row.partition, row.base_offset, row.last_offset, row.record_count)
               for row in rows)
    return WriteResult(topic, tuple(appends))


def read(spark: SparkSession, data_dir: str | os.PathLike[str], topic: str, mode: str = "log",
         start_offsets: Mapping[int, int] | None = None, isolation_level: str = "read_uncommitted",
         end_offsets: Mapping[int, int] | None = None) -> DataFrame:
    """``topic`` as a DataFrame with columns topic, partition, offset, timestamp, key, value, headers.

    ``mode="log"`` (the default, as the data source's): every record (transaction markers never).
    ``mode="latest"``: the newest record of every live key (tombstoned keys and keyless records absent).
    ``start_offsets`` / ``end_offsets`` map partition -> offset (default: log start / log end, as of when
    Spark plans the query); offsets below the log start begin at the log start. ``isolation_level`` is
    ``read_uncommitted`` (every data record) or ``read_committed`` (up to the last stable offset, without
    aborted transactions' records).
    """
    if mode not in MODES:
        raise ConfigError(f"mode is {mode!r}; allowed: {', '.join(MODES)}")
    check_isolation_level(isolation_level)
    register(spark)
    reader = (spark.read.format(NAME).option("path", os.path.abspath(os.fspath(data_dir)))
              .option("topic", topic).option("mode", mode).option("isolationLevel", isolation_level))
    for option, offsets in (("startingOffsets", start_offsets), ("endingOffsets", end_offsets)):
        if offsets is not None:
            by_partition = {str(int(p)): int(o) for p, o in offsets.items()}
            reader = reader.option(option, json.dumps({topic: by_partition}))
    try:
        return reader.load()  # the JVM runs the data source's planning in a Python worker
    except Exception as e:
        _raise_task_error(e, spark, f"reading topic {topic!r}")
