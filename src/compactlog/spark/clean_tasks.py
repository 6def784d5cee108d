"""The executor side of the cleaner on Spark: the work items a Spark task runs, what they send back, and
how keys and offsets travel (Arrow IPC bytes).

No pyspark here (a broadcast variable is only read through its ``.value``), so every item runs, and is
tested, without a JVM. The driver side, and the rules the two sides keep, are in
:mod:`compactlog.spark.executor`.
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import socket
import traceback
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from ..cleaner.executor import run_in_process
from ..cleaner.kernel import (
    CleanTask,
    GroupResult,
    MapResult,
    SegmentFile,
    build_offset_map,
    lookup_batches,
    map_entries,
)
from ..cleaner.offset_map import OffsetMap
from ..cleaner.rewrite import clean_group
from ..cleaner.swap import discard
from ..errors import ExecutorError
from .partial_map import PartialMap, partial_map

if TYPE_CHECKING:
    from pyspark.broadcast import Broadcast


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


def keys_to_ipc(keys: pa.Array, offsets: np.ndarray) -> bytes:
    """Distinct keys and their newest offsets, as Arrow IPC bytes."""
    return table_to_ipc(pa.table({"key": keys, "latest": pa.array(offsets, pa.int64())}))


def keys_from_ipc(data: bytes) -> tuple[pa.Array, np.ndarray]:
    table = ipc_to_table(data)
    if not table.num_rows:
        return pa.array([], pa.binary()), np.empty(0, dtype=np.int64)
    return table.column("key").combine_chunks(), table.column("latest").to_numpy()


def partial_map_to_ipc(part: PartialMap) -> bytes:
    """A segment's partial map, keys and newest offsets only, as Arrow IPC bytes."""
    return keys_to_ipc(part.keys, part.latest)


def partial_map_from_ipc(base_offset: int, data: bytes, records_read: int, bytes_read: int) -> PartialMap:
    keys, latest = keys_from_ipc(data)
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


def map_summary(offset_map: OffsetMap) -> OffsetMap:
    """An offset map's size without its keys: what the driver needs of a map built on an executor."""
    summary = OffsetMap(offset_map.capacity_bytes, offset_map.buffer_bytes)
    summary.used_bytes = offset_map.used_bytes
    summary.latest_offset = offset_map.latest_offset
    return summary


@dataclass(frozen=True)
class TaskFailure:
    """A task's exception, sent back as a value (see the module docstring: all or nothing per partition)."""

    task_index: int  # which CleanTask of the job
    host: str
    what: str  # "segment 42", "segments 40..59", "the round"
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


def _span(segments: Sequence[SegmentFile]) -> str:
    if len(segments) == 1:
        return f"segment {segments[0].base_offset}"
    return f"segments {segments[0].base_offset}..{segments[-1].next_offset - 1}"


# -- work items: each runs on an executor and returns an output or a TaskFailure ---------------------------


@dataclass(frozen=True)
class RoundOutput:
    task_index: int
    mapped: MapResult  # its offset map reduced to a summary: the keys stay on the executor
    results: list[GroupResult]


@dataclass(frozen=True)
class BinMapOutput:
    task_index: int
    first_base: int
    end_offset: int  # one past the bin's mapped range
    complete: bool  # the bin's keys fit in the dedupe buffer on their own
    keys_ipc: bytes
    records_read: int
    bytes_read: int


@dataclass(frozen=True)
class SegmentMapOutput:
    task_index: int
    base_offset: int
    partial_ipc: bytes
    records_read: int
    bytes_read: int


@dataclass(frozen=True)
class RewriteOutput:
    task_index: int
    results: list[GroupResult]


Output = RoundOutput | BinMapOutput | SegmentMapOutput | RewriteOutput


@dataclass(frozen=True)
class RoundItem:
    """A whole round of one partition: the in-process cleaner's kernel run, on an executor."""

    task_index: int
    task: CleanTask
    one_core: bool = False  # one step at a time (roundThreads=one, and a round for every task slot)

    def run(self, maps: Mapping[int, Broadcast[BroadcastMap]]) -> Output | TaskFailure:
        task = self.task
        missing = _not_visible(self.task_index, task.directory, "the round")
        if missing is not None:
            return missing
        try:
            mapped, results = run_in_process(task, self.one_core)  # the very function of the in-process cleaner
        except Exception as e:  # run_in_process has removed the groups it wrote
            return _failure(self.task_index, "the round", e)
        summary = MapResult(map_summary(mapped.offset_map), mapped.end_offset, mapped.records_read,
                            mapped.bytes_read)
        return RoundOutput(self.task_index, summary, results)


@dataclass(frozen=True)
class BinMapItem:
    """The offset map of consecutive dirty segments of a split partition, bounded by the dedupe buffer."""

    task_index: int
    task: CleanTask
    segments: tuple[SegmentFile, ...]

    def run(self, maps: Mapping[int, Broadcast[BroadcastMap]]) -> Output | TaskFailure:
        what = _span(self.segments)
        missing = _not_visible(self.task_index, self.task.directory, what)
        if missing is not None:
            return missing
        try:
            # The kernel's own map build, on this bin's segments only: it stops where the dedupe buffer
            # fills, and then the bin is incomplete (the driver finds the exact cut another way).
            bin_task = dataclasses.replace(self.task, segments=self.segments)
            mapped = build_offset_map(bin_task, keep_entries=False)
            end = min(self.segments[-1].next_offset, self.task.first_uncleanable_offset)
            complete = mapped.end_offset >= end
            keys = keys_to_ipc(mapped.offset_map.keys, mapped.offset_map.offsets) if complete else b""
            return BinMapOutput(self.task_index, self.segments[0].base_offset, end, complete, keys,
                                mapped.records_read, mapped.bytes_read)
        except Exception as e:
            return _failure(self.task_index, what, e)


@dataclass(frozen=True)
class SegmentMapItem:
    """One dirty segment's partial map (the exact path, used when the dedupe buffer fills)."""

    task_index: int
    task: CleanTask
    segment: SegmentFile

    def run(self, maps: Mapping[int, Broadcast[BroadcastMap]]) -> Output | TaskFailure:
        what = _span([self.segment])
        missing = _not_visible(self.task_index, self.task.directory, what)
        if missing is not None:
            return missing
        try:
            part = partial_map(self.task, self.segment)
            return SegmentMapOutput(self.task_index, part.base_offset, partial_map_to_ipc(part),
                                    part.records_read, part.bytes_read)
        except Exception as e:
            return _failure(self.task_index, what, e)


@dataclass(frozen=True)
class RewriteItem:
    """Consecutive groups of a split partition, cleaned against the partition's broadcast offset map."""

    task_index: int
    task: CleanTask
    groups: tuple[tuple[SegmentFile, ...], ...]

    def run(self, maps: Mapping[int, Broadcast[BroadcastMap]]) -> Output | TaskFailure:
        segments = [s for group in self.groups for s in group]
        what = _span(segments)
        missing = _not_visible(self.task_index, self.task.directory, what)
        if missing is not None:
            return missing
        results: list[GroupResult] = []
        try:
            offset_map = maps[self.task_index].value.offset_map()
            for batch in lookup_batches(self.groups):
                entries = map_entries(offset_map, [s for group in batch for s in group])
                for group in batch:
                    results.append(clean_group(self.task, group, offset_map, entries))
        except Exception as e:
            discard(results)
            return _failure(self.task_index, what, e)
        return RewriteOutput(self.task_index, results)


Item = RoundItem | BinMapItem | SegmentMapItem | RewriteItem


def run_items(maps: Mapping[int, Broadcast[BroadcastMap]],
              bins: Iterable[Sequence[Item]]) -> Iterator[Output | TaskFailure]:
    """A Spark task: run each work item of its bin(s)."""
    for items in bins:
        for item in items:
            yield item.run(maps)


def probe_task(bins: Iterable[Sequence[Sequence[tuple[str, str]]]]) -> Iterator[tuple[str, str, str]]:
    """For each ``(directory, segment path)`` to check: ``(host, directory, problem)`` for every miss."""
    host = socket.gethostname()
    for checks in (item for items in bins for item in items):
        for directory, path in checks:
            if not os.path.isdir(directory):
                yield host, directory, "directory"
            elif path and not os.path.exists(path):
                yield host, directory, f"segment file {path}"
