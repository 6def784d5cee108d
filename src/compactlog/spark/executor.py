"""The cleaner's Spark executor: the kernel of one cleaning round run as Spark tasks.

The driver plans (:mod:`compactlog.cleaner.plan`, done by the caller), Spark executors run the same kernel
functions the in-process cleaner runs (:mod:`compactlog.cleaner.kernel`), and the driver swaps and
checkpoints (the caller again): the PySpark data source writer's ``write`` -> ``commit`` / ``abort``.

A round on Spark is two jobs:

1. **map**: a task per dirty segment runs :func:`~compactlog.cleaner.kernel.partial_map` and sends back
   only that segment's distinct keys and their newest offsets, as Arrow IPC bytes; the driver merges them
   in offset order with :func:`~compactlog.cleaner.kernel.merge_partial_maps`, which applies the
   dedupe-buffer bound exactly as the in-process map build does;
2. **rewrite**: the merged offset map is broadcast (Arrow IPC bytes, its latest offset and capacity), and
   a task per group of :func:`~compactlog.cleaner.kernel.groups_to_clean` runs
   :func:`~compactlog.cleaner.kernel.clean_group`, which writes ``<base>.parquet.cleaned`` in the partition
   directory and returns a :class:`~compactlog.cleaner.kernel.GroupResult`.

Segments or groups smaller than :data:`MIN_TASK_BYTES` share a task (:func:`pack`): a Spark task costs
tens of milliseconds however little it does, and a topic of small segments would otherwise spend its time
scheduling. One huge partition still uses every core: its segments are spread over all task slots.

Rules:

* Whole records never cross the network: no shuffle, no collect of rows; only keys, offsets and small
  result objects travel (tasks read and write the segment files where they lie).
* Every executor sees the data directory at the driver's path (local disk in local mode, a shared
  filesystem on a cluster). A probe job checks it before the first round of a session, and every task
  checks it again (executors join and leave); a miss is an :class:`ExecutorError` naming the host.
* All or nothing per partition (commit / abort): if any task of a partition fails, every ``.cleaned``
  file of that partition's round is deleted and the partition's result is an :class:`ExecutorError` with
  the task's exception as its cause. Tasks catch their own exceptions and return them, so one partition's
  failure never fails another partition's tasks in a shared job, and the driver knows exactly which files
  were written. A failure of Spark itself (a lost executor, a killed job) aborts every partition of the
  job and deletes every ``.cleaned`` file the job may have written.
* ``spark.speculation`` must be off: a rewrite task writes a fixed file name, and two attempts of one task
  running at once would write the same file.

:func:`run_on_spark` runs one partition's round (what ``cleaner.clean_partition`` calls);
:func:`run_many_on_spark` runs several partitions' rounds in one map job and one rewrite job, for throughput
when many partitions are cleaned in one pass.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import socket
import traceback
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from ..cleaner.kernel import (
    CleanTask,
    GroupResult,
    MapResult,
    PartialMap,
    SegmentFile,
    clean_group,
    groups_to_clean,
    merge_partial_maps,
    partial_map,
)
from ..cleaner.offset_map import OffsetMap
from ..cleaner.swap import discard
from ..errors import ExecutorError
from ..segment import CLEANED_SUFFIX, SEALED_SUFFIX, segment_name

if TYPE_CHECKING:
    from pyspark import SparkContext
    from pyspark.broadcast import Broadcast
    from pyspark.sql import SparkSession

# What one partition's round on Spark yields: the offset map and the cleaned groups, ready to swap.
SparkRound = tuple[MapResult, list[GroupResult]]

# Work items: (index of the CleanTask in the job, the task, a dirty segment / a group of segments).
MapItem = tuple[int, CleanTask, SegmentFile]
RewriteItem = tuple[int, CleanTask, list[SegmentFile]]

# A Spark task costs tens of milliseconds to schedule and start however little it does, so segments (or
# groups) smaller than this share a task; bigger ones get a task each. Meanwhile every task slot gets work
# when there are at least as many items as slots.
MIN_TASK_BYTES = 16 * 1024 * 1024

# (application id, data directory) pairs whose visibility a probe job has confirmed in this process.
_VISIBLE: set[tuple[str, str]] = set()


def not_visible_message(host: str, directory: str) -> str:
    return (f"executor on host {host} cannot see {directory}: the data directory must be at the same path on "
            "every executor (local disk in local mode, a shared filesystem on a cluster)")


# -- what crosses the network ------------------------------------------------------------------------------


def table_to_ipc(table: pa.Table) -> bytes:
    """A table as Arrow IPC stream bytes (how keys and offsets travel between driver and executors)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def ipc_to_table(data: bytes) -> pa.Table:
    with pa.ipc.open_stream(pa.py_buffer(data)) as reader:
        return reader.read_all()


def partial_map_to_ipc(part: PartialMap) -> bytes:
    """A segment's partial map, keys and newest offsets only, as Arrow IPC bytes."""
    return table_to_ipc(pa.table({"key": part.keys, "latest": pa.array(part.latest, pa.int64())}))


def partial_map_from_ipc(base_offset: int, data: bytes, records_read: int, bytes_read: int) -> PartialMap:
    table = ipc_to_table(data)
    keys = table.column("key").combine_chunks() if table.num_rows else pa.array([], pa.binary())
    latest = table.column("latest").to_numpy() if table.num_rows else np.empty(0, dtype=np.int64)
    return PartialMap(base_offset, keys, latest, records_read, bytes_read)


@dataclass(frozen=True)
class BroadcastMap:
    """The offset map as it is broadcast to rewrite tasks."""

    table_ipc: bytes  # OffsetMap.to_table(): key, offset
    latest_offset: int
    capacity_bytes: int
    buffer_bytes: int

    @classmethod
    def of(cls, offset_map: OffsetMap) -> BroadcastMap:
        return cls(table_to_ipc(offset_map.to_table()), offset_map.latest_offset, offset_map.capacity_bytes,
                   offset_map.buffer_bytes)

    def offset_map(self) -> OffsetMap:
        return OffsetMap.from_table(ipc_to_table(self.table_ipc), self.capacity_bytes, self.latest_offset,
                                    self.buffer_bytes)


@dataclass(frozen=True)
class TaskFailure:
    """A task's exception, sent back as a value (see the module docstring: all or nothing per partition)."""

    task_index: int  # which CleanTask of the job
    host: str
    what: str  # "segment 42" or "group 40..59"
    message: str  # "TypeName: message", or the visibility message
    traceback: str
    error: BaseException | None  # the exception itself when it pickles
    not_visible: bool = False

    def to_error(self, task: CleanTask) -> ExecutorError:
        if self.not_visible:
            return ExecutorError(self.message)
        message = f"{task.topic}-{task.partition}: Spark task for {self.what} failed on host {self.host}: " \
                  f"{self.message}"
        cause = self.error
        if cause is None:  # it did not pickle: the remote traceback is all there is
            return ExecutorError(f"{message}\n{self.traceback}".rstrip())
        if hasattr(cause, "add_note"):  # Python 3.11+: the traceback shows under the cause
            cause.add_note(f"Traceback on the executor (host {self.host}):\n{self.traceback}".rstrip())
        error = ExecutorError(message)
        error.__cause__ = cause
        return error


@dataclass(frozen=True)
class MapOutput:
    task_index: int
    base_offset: int
    partial_ipc: bytes
    records_read: int
    bytes_read: int


@dataclass(frozen=True)
class RewriteOutput:
    task_index: int
    result: GroupResult


# -- what runs on executors (module-level functions: Spark pickles them by reference) -------------------------


def _failure(index: int, what: str, error: BaseException) -> TaskFailure:
    try:
        pickle.dumps(error)
        kept: BaseException | None = error
    except Exception:  # an exception that does not pickle still reaches the driver as text
        kept = None
    return TaskFailure(index, socket.gethostname(), what, f"{type(error).__name__}: {error}",
                       traceback.format_exc(), kept)


def _not_visible(index: int, directory: str, what: str) -> TaskFailure | None:
    if os.path.isdir(directory):
        return None
    host = socket.gethostname()
    return TaskFailure(index, host, what, not_visible_message(host, directory), "", None, not_visible=True)


def probe_task(bins: Iterable[Sequence[Sequence[tuple[str, str]]]]) -> Iterator[tuple[str, str, str]]:
    """For each ``(directory, segment path)`` to check: ``(host, directory, problem)`` for every miss."""
    host = socket.gethostname()
    for checks in (item for items in bins for item in items):
        for directory, path in checks:
            if not os.path.isdir(directory):
                yield host, directory, "directory"
            elif path and not os.path.exists(path):
                yield host, directory, f"segment file {path}"


def map_task(bins: Iterable[Sequence[MapItem]]) -> Iterator[MapOutput | TaskFailure]:
    """Map phase: the partial map of each dirty segment given, keys and offsets only."""
    for index, task, segment in (item for items in bins for item in items):
        what = f"segment {segment.base_offset}"
        missing = _not_visible(index, task.directory, what)
        if missing is not None:
            yield missing
            continue
        try:
            part = partial_map(task, segment)
            yield MapOutput(index, part.base_offset, partial_map_to_ipc(part), part.records_read, part.bytes_read)
        except Exception as e:
            yield _failure(index, what, e)


def rewrite_task(maps: Mapping[int, Broadcast[BroadcastMap]],
                 bins: Iterable[Sequence[RewriteItem]]) -> Iterator[RewriteOutput | TaskFailure]:
    """Rewrite phase: clean each group given against its partition's broadcast offset map."""
    for index, task, group in (item for items in bins for item in items):
        what = f"group {group[0].base_offset}..{group[-1].next_offset - 1}"
        missing = _not_visible(index, task.directory, what)
        if missing is not None:
            yield missing
            continue
        try:
            offset_map = maps[index].value.offset_map()
            yield RewriteOutput(index, clean_group(task, group, offset_map))
        except Exception as e:
            yield _failure(index, what, e)


# -- the driver ------------------------------------------------------------------------------------------------


def spark_context(spark: Any) -> SparkContext:
    """The SparkContext of a (classic) SparkSession; a clear error for anything else."""
    from pyspark import SparkContext

    if isinstance(spark, SparkContext):
        return spark
    try:
        context = spark.sparkContext
    except Exception as e:  # Spark Connect sessions have no SparkContext
        raise ExecutorError(f"the cleaner needs a classic SparkSession with a SparkContext, not {spark!r}; "
                            "Spark Connect cannot run it") from e
    if not isinstance(context, SparkContext):
        raise ExecutorError(f"executor must be None (in process) or a SparkSession, not {spark!r}")
    return context


def check_spark_conf(sc: SparkContext) -> None:
    if sc.getConf().get("spark.speculation", "false").strip().lower() == "true":
        raise ExecutorError("the cleaner cannot run with spark.speculation=true: two attempts of one rewrite "
                            "task would write the same .cleaned file; set spark.speculation=false")


@contextlib.contextmanager
def job_description(sc: SparkContext, text: str) -> Iterator[None]:
    """Name the jobs started inside (Spark's UI and logs show it); restores the previous description."""
    previous = sc.getLocalProperty("spark.job.description")
    sc.setJobDescription(text)
    try:
        yield
    finally:
        sc.setLocalProperty("spark.job.description", previous)  # type: ignore[arg-type]


def _short(error: BaseException) -> str:
    """The first line of a Spark error (a Py4J error carries the whole JVM stack trace)."""
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}"


def pack(items: Sequence[Any], sizes: Sequence[int], slots: int,
         min_task_bytes: int = MIN_TASK_BYTES) -> list[list[Any]]:
    """Consecutive items in bins, one bin per Spark task: a bin closes before it would pass
    ``min(min_task_bytes, total / slots)`` bytes, so an item at least that big is alone in its bin, and
    small items share a bin without leaving task slots idle."""
    total = sum(sizes)
    limit = max(1, min(min_task_bytes, -(-total // max(slots, 1))))
    bins: list[list[Any]] = []
    filled = 0
    for item, size in zip(items, sizes):
        if not bins or filled + size > limit:
            bins.append([])
            filled = 0
        bins[-1].append(item)
        filled += size
    return bins


def _run_job(sc: SparkContext, bins: list[list[Any]], function: Any, description: str) -> list[Any]:
    """One Spark job, one task per bin; Spark's own failures become ExecutorError."""
    if not bins:
        return []
    with job_description(sc, description):
        try:
            return sc.parallelize(bins, numSlices=len(bins)).mapPartitions(function).collect()
        except ExecutorError:
            raise
        except Exception as e:
            raise ExecutorError(f"Spark job '{description}' failed: {_short(e)}") from e


def check_visible(sc: SparkContext, tasks: Sequence[CleanTask]) -> None:
    """Probe that executors see every task's partition directory and a segment file in it (once per data
    directory and application; every task checks its directory again)."""
    checks = [(task.directory, task.segments[0].path if task.segments else "") for task in tasks]
    roots = {(sc.applicationId, os.path.dirname(directory)) for directory, _ in checks}
    if roots <= _VISIBLE:
        return
    slots = max(int(sc.defaultParallelism), 1)
    misses = _run_job(sc, [[checks]] * slots, probe_task, "compactlog cleaner: check the data directory")
    if misses:
        host, directory, _ = misses[0]
        raise ExecutorError(not_visible_message(host, directory))
    _VISIBLE.update(roots)


def expected_cleaned_paths(task: CleanTask, groups: Sequence[Sequence[SegmentFile]]) -> list[str]:
    """The ``.cleaned`` files a round's rewrite tasks write (:func:`~compactlog.cleaner.kernel.clean_group`
    names them after the group's first base offset)."""
    return [os.path.join(task.directory, segment_name(group[0].base_offset, SEALED_SUFFIX) + CLEANED_SUFFIX)
            for group in groups]


def _remove(paths: Iterable[str]) -> None:
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


def _label(tasks: Sequence[CleanTask]) -> str:
    names = [f"{t.topic}-{t.partition}" for t in tasks]
    return ", ".join(names) if len(names) <= 4 else f"{', '.join(names[:4])} and {len(names) - 4} more"


def run_many_on_spark(spark: SparkSession | SparkContext,
                      tasks: Sequence[CleanTask]) -> list[SparkRound | ExecutorError]:
    """The rounds of several partitions in one map job and one rewrite job.

    Returns, per task in order, either ``(map result, group results)`` whose ``.cleaned`` files the caller
    swaps in (or discards with :func:`~compactlog.cleaner.swap.discard`), or the :class:`ExecutorError`
    that failed that partition (its ``.cleaned`` files already deleted). Raises ExecutorError itself only
    when nothing can run (no Spark, a data directory the executors cannot see, speculation on).
    """
    sc = spark_context(spark)
    check_spark_conf(sc)
    if not tasks:
        return []
    check_visible(sc, tasks)
    errors: dict[int, ExecutorError] = {}
    label = _label(tasks)

    # Map phase: keys and newest offsets per dirty segment.
    slots = max(int(sc.defaultParallelism), 1)
    map_items = [(i, task, segment) for i, task in enumerate(tasks) for segment in task.dirty_segments()]
    map_bins = pack(map_items, [item[2].size_bytes for item in map_items], slots)
    outputs = _run_job(sc, map_bins, map_task, f"compactlog cleaner: offset maps of {label}")
    partials: dict[int, list[PartialMap]] = {i: [] for i in range(len(tasks))}
    for output in outputs:
        if isinstance(output, TaskFailure):
            errors.setdefault(output.task_index, output.to_error(tasks[output.task_index]))
        else:
            partials[output.task_index].append(partial_map_from_ipc(
                output.base_offset, output.partial_ipc, output.records_read, output.bytes_read))
    mapped: dict[int, MapResult] = {}
    for i, task in enumerate(tasks):
        if i in errors:
            continue
        try:
            mapped[i] = merge_partial_maps(task, partials[i])
        except Exception as e:  # the merge re-reads the segment where the map fills
            errors[i] = ExecutorError(f"{task.topic}-{task.partition}: merging the offset maps failed: {e}")
            errors[i].__cause__ = e

    # Rewrite phase: every group against its partition's broadcast map.
    groups = {i: groups_to_clean(tasks[i], result.end_offset) for i, result in mapped.items()}
    broadcasts = {i: sc.broadcast(BroadcastMap.of(mapped[i].offset_map)) for i, g in groups.items() if g}
    results: dict[int, list[GroupResult]] = {i: [] for i in mapped}
    try:
        rewrite_items = [(i, tasks[i], group) for i, task_groups in groups.items() for group in task_groups]
        rewrite_bins = pack(rewrite_items, [sum(s.size_bytes for s in item[2]) for item in rewrite_items], slots)
        maps = dict(broadcasts)
        outputs = _run_job(sc, rewrite_bins, lambda bins: rewrite_task(maps, bins),
                           f"compactlog cleaner: rewrite {label}")
    except BaseException:
        # Spark failed (or we were interrupted): any task may have written its file.
        _remove(path for i, task_groups in groups.items() for path in expected_cleaned_paths(tasks[i], task_groups))
        raise
    finally:
        for broadcast in broadcasts.values():
            with contextlib.suppress(Exception):
                broadcast.destroy(blocking=False)
    for output in outputs:
        if isinstance(output, TaskFailure):
            errors.setdefault(output.task_index, output.to_error(tasks[output.task_index]))
        else:
            results[output.task_index].append(output.result)

    rounds: list[SparkRound | ExecutorError] = []
    for i, task in enumerate(tasks):
        if i in errors:
            # Abort: the files of the tasks that succeeded, and any a failed task left behind.
            discard(results.get(i, []))
            _remove(expected_cleaned_paths(task, groups.get(i, [])))
            rounds.append(errors[i])
        else:
            rounds.append((mapped[i], sorted(results[i], key=lambda r: r.base_offset)))
    return rounds


def run_on_spark(spark: SparkSession | SparkContext, task: CleanTask) -> SparkRound:
    """One partition's round on Spark (map job, driver merge, rewrite job); raises ExecutorError on failure
    with every ``.cleaned`` file of the round deleted."""
    (outcome,) = run_many_on_spark(spark, [task])
    if isinstance(outcome, ExecutorError):
        raise outcome
    return outcome
