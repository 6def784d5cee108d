"""The cleaner's Spark executor: cleaning rounds run as Spark tasks.

:class:`SparkExecutor` is the cleaner's executor protocol (:class:`~compactlog.cleaner.executor.CleanerExecutor`)
on a SparkSession: the driver plans (:mod:`compactlog.cleaner.plan`, done by the cleaner pass), Spark
executors run the same kernel functions the in-process cleaner runs (:mod:`compactlog.cleaner.kernel`,
:mod:`compactlog.cleaner.rewrite`), and the driver swaps and checkpoints (the pass again): the PySpark data
source writer's ``write`` -> ``commit`` / ``abort``.

How the work is cut (:func:`run_many_on_spark`, for the partitions one cleaner pass cleans):

* **Whole rounds.** A partition no bigger than its fair share of the pass (``total / task slots``) runs
  its whole round in one task: the in-process kernel (offset map, then every group) on the executor.
  Nothing but the round's small result crosses the network, and partitions keep every slot busy.
* **Split rounds.** A bigger partition, when there are enough slots for it to pay (:data:`SPLIT_MIN_SLOTS`;
  ``spark.compactlog.cleaner.split`` = ``always`` / ``never`` overrides), is cut so that it uses every
  slot, in two jobs:

  1. *map*: its dirty segments in consecutive bins, one per slot; a task builds its bin's offset map
     (:func:`~compactlog.cleaner.kernel.build_offset_map` on the bin, bounded by the same dedupe buffer)
     and sends back only keys and newest offsets, as Arrow IPC bytes. The driver merges the bins in offset
     order (:meth:`~compactlog.cleaner.offset_map.OffsetMap.put_partial`). When all of them fit, that is
     exactly the map the in-process round builds (same keys in the same order, same offsets: the fit test
     is on the total, which is the same). When they do not, the round reaches the dedupe-buffer bound
     inside the dirty section, and the exact cut is found the reference way: a task per dirty segment
     runs :func:`~compactlog.spark.partial_map.partial_map` and the driver merges with
     :func:`~compactlog.spark.partial_map.merge_partial_maps`, which re-reads the segment where the map fills;
  2. *rewrite*: the merged map is broadcast (Arrow IPC bytes, latest offset, capacity); the groups of
     :func:`~compactlog.cleaner.kernel.groups_to_clean` go to consecutive bins, one per slot, and a task
     looks its segments' keys up in the map in batches of
     :data:`~compactlog.cleaner.kernel.LOOKUP_BATCH_SEGMENT_BYTES` (one hash of the map per batch, not per
     segment) and runs
     :func:`~compactlog.cleaner.rewrite.clean_group` on each group, which writes ``<base>.parquet.cleaned``.

Rules:

* Whole records never cross the network: no shuffle, no collect of rows; only keys, offsets and small
  result objects travel (tasks read and write the segment files where they lie).
* Every executor sees the data directory at the driver's path (local disk in local mode, a shared
  filesystem on a cluster). A probe job checks it before the first round of a session, and every task
  checks it again (executors join and leave); a miss is an :class:`ExecutorError` naming the host.
* All or nothing per partition (commit / abort): if any task of a partition fails, the partition's result
  is an :class:`ExecutorError` with the task's exception as its cause and every ``.cleaned`` file in its
  directory is deleted (the caller holds the partition's ``.cleaner.lock``, so they are this round's).
  Tasks catch their own exceptions and return them, so one partition's failure never fails another's
  tasks in a shared job. A failure of Spark itself (a lost executor, a killed job) aborts every partition
  of the job.
* ``spark.speculation`` must be off: a rewrite task writes a fixed file name, and two attempts of one task
  running at once would write the same file.

The work items themselves (what runs on executors) are in :mod:`compactlog.spark.clean_tasks`.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from ..cleaner.executor import RoundResult
from ..cleaner.kernel import CleanTask, GroupResult, MapResult, groups_to_clean
from ..cleaner.offset_map import OffsetMap
from ..cleaner.swap import discard
from ..errors import ExecutorError
from ..segment import CLEANED_SUFFIX
from .clean_tasks import (
    BinMapItem,
    BinMapOutput,
    BroadcastMap,
    Item,
    Output,
    RewriteItem,
    RewriteOutput,
    RoundItem,
    RoundOutput,
    SegmentMapItem,
    SegmentMapOutput,
    TaskFailure,
    keys_from_ipc,
    not_visible_message,
    partial_map_from_ipc,
    probe_task,
    run_items,
)
from .job_failure import describe, worker_python
from .partial_map import PartialMap, merge_partial_maps

if TYPE_CHECKING:
    from pyspark import SparkConf, SparkContext
    from pyspark.broadcast import Broadcast
    from pyspark.sql import SparkSession

# What one partition's round on Spark yields: the offset map and the cleaned groups, ready to swap.
SparkRound = tuple[MapResult, list[GroupResult]]

# A Spark task costs tens of milliseconds to schedule and start however little it does: work items smaller
# than this share a task (see pack), and a partition smaller than this is never split.
MIN_TASK_BYTES = 16 * 1024 * 1024
# Whether a partition's round is split over the task slots: "auto" (the default), "always" or "never"; the
# Spark setting spark.compactlog.cleaner.split overrides it for a session.
SPLIT_POLICY: Literal["auto", "always", "never"] = "auto"
SPLIT_CONF = "spark.compactlog.cleaner.split"
# "auto" splits a partition bigger than its fair share of the pass (and than MIN_TASK_BYTES) only with at
# least this many task slots: a split round hashes every key about twice (once for the bin maps, once to
# look rows up in the merged map) and merges the bins on the driver, somewhat over twice the work of a whole
# round, so it pays off from three slots on, not on two.
SPLIT_MIN_SLOTS = 3

# How a whole round uses its executor when every task slot has a round of its own: "all" (the default) lets
# each round spread its steps over threads as in process, since a round's threads fill the time the other
# rounds' threads wait (reading, fsync, their serial start and end); "one" keeps each round to one thread
# at a time (run_in_process(..., one_core=True)), for executors with many slots, where every round's
# threads would compete for the cores. The Spark setting spark.compactlog.cleaner.roundThreads overrides it.
ROUND_THREADS: Literal["all", "one"] = "all"
ROUND_THREADS_CONF = "spark.compactlog.cleaner.roundThreads"

# (application id, data directory) pairs whose visibility a probe job has confirmed in this process.
_VISIBLE: set[tuple[str, str]] = set()


def spark_context(spark: Any) -> SparkContext:
    """The SparkContext of a (classic) SparkSession; a clear error for anything else."""
    from pyspark import SparkContext

    if isinstance(spark, SparkContext):
        return spark
    if ".connect." in type(spark).__module__:
        raise ExecutorError(f"the cleaner needs a classic SparkSession with a SparkContext, not {spark!r}; "
                            "Spark Connect cannot run its tasks")
    context = getattr(spark, "sparkContext", None)
    if not isinstance(context, SparkContext):
        raise ExecutorError(f"executor must be None (in process) or a SparkSession, not {spark!r}")
    return context


def check_spark_conf(conf: SparkConf) -> None:
    if conf.get("spark.speculation", "false").strip().lower() == "true":
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


def pack(items: Sequence[Any], sizes: Sequence[int], slots: int,
         min_task_bytes: int = MIN_TASK_BYTES) -> list[list[Any]]:
    """Consecutive items in bins, one bin per Spark task: ``max(slots, total / min_task_bytes)`` bins (at
    most one per item) of about equal bytes, so every task slot gets work, small items share a task, and
    an item of ``min_task_bytes`` or more is alone or nearly so."""
    if not items:
        return []
    total = sum(sizes)
    count = min(len(items), max(slots, 1, -(-total // min_task_bytes)))
    bins: list[list[Any]] = [[] for _ in range(count)]
    start = 0
    for position, (item, size) in enumerate(zip(items, sizes, strict=True)):
        # The bin of an item is where its middle byte falls (its position when every size is 0): the
        # bin numbers never decrease along the items, so bins hold consecutive items.
        share = (start + size / 2) / total if total else (position + 0.5) / len(items)
        bins[min(count - 1, int(share * count))].append(item)
        start += size
    return [b for b in bins if b]


def split_evenly(items: Sequence[Any], sizes: Sequence[int], parts: int) -> list[list[Any]]:
    """Consecutive items in at most ``parts`` bins of about equal bytes."""
    return pack(items, sizes, parts, min_task_bytes=max(sum(sizes), 1))


def _run_job(sc: SparkContext, items: Sequence[Item], sizes: Sequence[int], description: str,
             maps: Mapping[int, Broadcast[BroadcastMap]] | None = None) -> list[Output | TaskFailure]:
    """One Spark job over work items (packed into tasks); Spark's own failures become ExecutorError."""
    if not items:
        return []
    bins = pack(items, sizes, max(int(sc.defaultParallelism), 1))
    broadcasts = dict(maps or {})
    with job_description(sc, description):
        try:
            return sc.parallelize(bins, numSlices=len(bins)).mapPartitions(
                lambda part: run_items(broadcasts, part)).collect()
        except Exception as e:
            raise ExecutorError(f"Spark job '{description}' failed: {describe(e, worker_python(sc))}") from e


def check_visible(sc: SparkContext, tasks: Sequence[CleanTask]) -> None:
    """Probe that executors see every task's partition directory and a segment file in it (once per data
    directory and application; every task checks its directory again)."""
    checks = [(task.directory, task.segments[0].path if task.segments else "") for task in tasks]
    roots = {(sc.applicationId, os.path.dirname(directory)) for directory, _ in checks}
    if roots <= _VISIBLE:
        return
    slots = max(int(sc.defaultParallelism), 1)
    with job_description(sc, "compactlog cleaner: check the data directory"):
        try:
            misses = sc.parallelize([[checks]] * slots, numSlices=slots).mapPartitions(probe_task).collect()
        except Exception as e:
            raise ExecutorError(
                f"Spark could not run the cleaner's probe task: {describe(e, worker_python(sc))}") from e
    if misses:
        host, directory, _ = misses[0]
        raise ExecutorError(not_visible_message(host, directory))
    _VISIBLE.update(roots)


def remove_cleaned_files(directory: str) -> None:
    """Abort: every ``.cleaned`` file of a partition (the caller holds its cleaner lock, so they are its
    round's, or left by a crash, which recovery would delete as well)."""
    with contextlib.suppress(FileNotFoundError):
        for name in os.listdir(directory):
            if name.endswith(CLEANED_SUFFIX):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(directory, name))


def round_bytes(task: CleanTask) -> int:
    """What a round reads and rewrites, at most: every sealed segment below the first uncleanable offset."""
    return sum(s.size_bytes for s in task.segments)


def _choice(conf: SparkConf, key: str, default: str, allowed: tuple[str, ...]) -> str:
    """A compactlog Spark setting that takes one of ``allowed`` (case and spaces ignored)."""
    value = conf.get(key, default).strip().lower()
    if value not in allowed:
        raise ExecutorError(f"{key}={value!r}; allowed: {', '.join(allowed)}")
    return value


def split_policy(conf: SparkConf) -> str:
    return _choice(conf, SPLIT_CONF, SPLIT_POLICY, ("auto", "always", "never"))


def round_threads(conf: SparkConf) -> str:
    return _choice(conf, ROUND_THREADS_CONF, ROUND_THREADS, ("all", "one"))


def should_split(policy: str, size: int, total: int, slots: int) -> bool:
    """Whether a partition of ``size`` bytes, in a pass of ``total`` bytes, is split over the slots."""
    if policy != "auto":
        return policy == "always"
    return slots >= SPLIT_MIN_SLOTS and size > MIN_TASK_BYTES and size * slots > total


def merge_bins(task: CleanTask, outputs: Sequence[BinMapOutput]) -> MapResult | None:
    """The driver's merge of a split partition's bin maps, in offset order; None when they do not all fit in
    the dedupe buffer (the exact per-segment path then finds the cut)."""
    offset_map = OffsetMap(task.map_capacity_bytes, task.dedupe_buffer_bytes)
    result = MapResult(offset_map, task.first_dirty_offset)
    for output in sorted(outputs, key=lambda o: o.first_base):
        if not output.complete:
            return None
        keys, latest = keys_from_ipc(output.keys_ipc)
        if not offset_map.put_partial(keys, latest):
            return None
        offset_map.update_latest_offset(output.end_offset - 1)
        result.records_read += output.records_read
        result.bytes_read += output.bytes_read
    result.end_offset = offset_map.latest_offset + 1 if task.dirty_segments() else task.first_dirty_offset
    return result


def _label(tasks: Sequence[CleanTask]) -> str:
    names = [f"{t.topic}-{t.partition}" for t in tasks]
    return ", ".join(names) if len(names) <= 4 else f"{', '.join(names[:4])} and {len(names) - 4} more"


class _Pass:
    """The bookkeeping of one run_many_on_spark call: per task, its outputs, failures and results."""

    def __init__(self, sc: SparkContext, conf: SparkConf, tasks: Sequence[CleanTask]) -> None:
        self.sc = sc
        self.conf = conf
        self.tasks = tasks
        self.slots = max(int(sc.defaultParallelism), 1)
        self.errors: dict[int, ExecutorError] = {}
        self.mapped: dict[int, MapResult] = {}
        self.results: dict[int, list[GroupResult]] = {i: [] for i in range(len(tasks))}

    def fail(self, index: int, error: ExecutorError) -> None:
        self.errors.setdefault(index, error)

    def collect(self, outputs: Sequence[Output | TaskFailure]) -> list[Output]:
        kept: list[Output] = []
        for output in outputs:
            if isinstance(output, TaskFailure):
                self.fail(output.task_index, output.to_error(self.tasks[output.task_index]))
            else:
                if isinstance(output, RoundOutput | RewriteOutput):
                    self.results[output.task_index].extend(output.results)
                kept.append(output)
        return kept

    def abort_all(self) -> None:
        for i, task in enumerate(self.tasks):
            discard(self.results[i])
            remove_cleaned_files(task.directory)

    def rounds(self) -> list[SparkRound | ExecutorError]:
        outcome: list[SparkRound | ExecutorError] = []
        for i, task in enumerate(self.tasks):
            if i in self.errors:
                discard(self.results[i])
                remove_cleaned_files(task.directory)
                outcome.append(self.errors[i])
            else:
                outcome.append((self.mapped[i], sorted(self.results[i], key=lambda r: r.base_offset)))
        return outcome


def run_many_on_spark(spark: SparkSession | SparkContext,
                      tasks: Sequence[CleanTask]) -> list[SparkRound | ExecutorError]:
    """The rounds of several partitions, whole or split (see the module docstring), in as few Spark jobs as
    the work allows: one when every partition runs whole, two or three otherwise.

    Returns, per task in order, either ``(map result, group results)`` whose ``.cleaned`` files the caller
    swaps in (or discards with :func:`~compactlog.cleaner.swap.discard`), or the :class:`ExecutorError`
    that failed that partition (its ``.cleaned`` files already deleted). The caller holds every task's
    partition ``.cleaner.lock`` throughout. Raises ExecutorError itself only when nothing can run (no Spark,
    a data directory the executors cannot see, speculation on) or Spark fails a whole job (every
    partition's ``.cleaned`` files deleted).
    """
    sc = spark_context(spark)
    conf = sc.getConf()  # a copy, entry by entry over Py4J (about 10 ms): read once per pass
    check_spark_conf(conf)
    if not tasks:
        return []
    check_visible(sc, tasks)
    state = _Pass(sc, conf, tasks)
    try:
        _run_pass(state)
    except BaseException:
        state.abort_all()
        raise
    return state.rounds()


def _run_pass(state: _Pass) -> None:
    sc, tasks, slots = state.sc, state.tasks, state.slots
    label = _label(tasks)
    sizes = [round_bytes(task) for task in tasks]
    total = sum(sizes)
    policy = split_policy(state.conf)
    split = [i for i, size in enumerate(sizes) if should_split(policy, size, total, slots)]

    # Job 1: whole rounds, and the bin maps of split partitions. A round's threads use the cores it shares
    # with other rounds, unless ROUND_THREADS says "one" and every task slot has a round of its own.
    first: list[Item] = []
    first_sizes: list[int] = []
    one_core = round_threads(state.conf) == "one" and len(tasks) - len(split) >= slots
    for i, task in enumerate(tasks):
        if i not in split:
            first.append(RoundItem(i, task, one_core))
            first_sizes.append(sizes[i])
            continue
        dirty = task.dirty_segments()
        for segments in split_evenly(dirty, [s.size_bytes for s in dirty], slots):
            first.append(BinMapItem(i, task, tuple(segments)))
            first_sizes.append(sum(s.size_bytes for s in segments))
    bin_outputs: dict[int, list[BinMapOutput]] = {i: [] for i in split}
    for output in state.collect(_run_job(sc, first, first_sizes, f"compactlog cleaner: {label}")):
        if isinstance(output, RoundOutput):
            state.mapped[output.task_index] = output.mapped
        elif isinstance(output, BinMapOutput):
            bin_outputs[output.task_index].append(output)

    # The driver merges the bin maps; a partition whose map fills takes the exact per-segment path.
    exact: list[int] = []
    for i in split:
        if i in state.errors:
            continue
        merged = merge_bins(tasks[i], bin_outputs[i])
        if merged is None:
            exact.append(i)
        else:
            state.mapped[i] = merged
    if exact:
        _exact_maps(state, exact)

    # Job 2: the rewrite of split partitions against their broadcast maps.
    rewrite: list[Item] = []
    rewrite_sizes: list[int] = []
    broadcasts: dict[int, Broadcast[BroadcastMap]] = {}
    try:
        for i in split:
            if i in state.errors:
                continue
            groups = groups_to_clean(tasks[i], state.mapped[i].end_offset)
            if not groups:
                continue
            broadcasts[i] = sc.broadcast(BroadcastMap.of(state.mapped[i].offset_map))
            group_sizes = [sum(s.size_bytes for s in group) for group in groups]
            for part in split_evenly(groups, group_sizes, slots):
                rewrite.append(RewriteItem(i, tasks[i], tuple(tuple(group) for group in part)))
                rewrite_sizes.append(sum(s.size_bytes for group in part for s in group))
        outputs = _run_job(sc, rewrite, rewrite_sizes, f"compactlog cleaner: rewrite {label}", broadcasts)
        state.collect(outputs)
    finally:
        for broadcast in broadcasts.values():
            with contextlib.suppress(Exception):
                broadcast.destroy(blocking=False)


def _exact_maps(state: _Pass, indices: Sequence[int]) -> None:
    """The reference map build for partitions whose map fills: a partial map per dirty segment, merged on
    the driver by the kernel (which re-reads the segment where the map fills, to cut at the exact record)."""
    tasks = state.tasks
    segments = [(i, s) for i in indices for s in tasks[i].dirty_segments()]
    items: list[Item] = [SegmentMapItem(i, tasks[i], s) for i, s in segments]
    outputs = _run_job(state.sc, items, [s.size_bytes for _, s in segments],
                       f"compactlog cleaner: exact offset maps of {_label([tasks[i] for i in indices])}")
    partials: dict[int, list[PartialMap]] = {i: [] for i in indices}
    for output in state.collect(outputs):
        if isinstance(output, SegmentMapOutput):
            partials[output.task_index].append(partial_map_from_ipc(
                output.base_offset, output.partial_ipc, output.records_read, output.bytes_read))
    for i in indices:
        if i in state.errors:
            continue
        try:
            state.mapped[i] = merge_partial_maps(tasks[i], partials[i])
        except Exception as e:  # the merge re-reads the segment where the map fills
            name = f"{tasks[i].topic}-{tasks[i].partition}"
            error = ExecutorError(f"{name}: merging the offset maps failed: {e}")
            error.__cause__ = e
            state.fail(i, error)


def run_on_spark(spark: SparkSession | SparkContext, task: CleanTask) -> SparkRound:
    """One partition's round on Spark; raises ExecutorError on failure, with every ``.cleaned`` file of the
    round deleted. (A single partition is split across the slots when that pays: see should_split.)"""
    (outcome,) = run_many_on_spark(spark, [task])
    if isinstance(outcome, ExecutorError):
        raise outcome
    return outcome


class SparkExecutor:
    """The cleaner's executor on Spark: a pass's rounds in as few Spark jobs as the work allows
    (:func:`run_many_on_spark`). ``spark`` is a classic SparkSession (or its SparkContext); anything else
    fails the pass with an :class:`ExecutorError`, as does a Spark that cannot run the rounds at all."""

    def __init__(self, spark: Any) -> None:
        self.spark = spark

    def run_rounds(self, tasks: Sequence[CleanTask]) -> Iterator[RoundResult | Exception]:
        # Every round runs before the first is handed back: they share the pass's jobs, so a round's
        # duration runs from the start of the pass's jobs.
        started = time.monotonic()
        outcomes = run_many_on_spark(self.spark, tasks)
        return iter([outcome if isinstance(outcome, ExecutorError) else RoundResult(*outcome, started)
                     for outcome in outcomes])
