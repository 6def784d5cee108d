"""The log cleaner: one pass of Kafka's key-based retention over a store.

A pass (:func:`clean`):

1. rolls every compacted partition's idle active segment whose first record is older than
   ``max.compaction.lag.ms`` (beyond Kafka, which rolls only on append: without it a quiet topic keeps
   superseded values forever) and removes replaced files whose ``file.delete.delay.ms`` has passed;
2. plans (:func:`.plan.select_logs`): the cleanable range of every compacted partition, its dirty ratio and
   compaction delay, and which are eligible, filthiest first, with the reason for every other one;
3. cleans each eligible partition: the kernel builds the offset map and writes cleaned groups (in one
   read, newest first, when the dirty section's keys fit the map, :mod:`.single_pass`; else in two,
   :mod:`.kernel` and :mod:`.rewrite`), each round's map in ``log.cleaner.dedupe.buffer.size /
   log.cleaner.threads``, on the pass's executor (:mod:`.executor`: in process ``log.cleaner.threads``
   partitions at a time, or another engine's); the swap installs them (:mod:`.swap`), and only then the
   checkpoint advances to the round's end offset;
4. applies retention to compacted partitions (segments below the log start; and ``retention.ms`` /
   ``retention.bytes`` when the policy is ``compact,delete``), as Kafka's cleaner thread does.

The executor is a :class:`~.executor.CleanerExecutor` (None: in process); ``Store.clean`` makes one of
what its caller gives (:func:`.executor.cleaner_executor`), and an :class:`~.executor.OnDemandExecutor` starts
its engine only when step 3 has a round to run.

With ``log.cleaner.enable=false`` (``server.properties``) a pass does none of this: it reports every
compacted partition as skipped and changes nothing, as a Kafka broker with no cleaner; retention of
``delete``-only topics (:meth:`~compactlog.store.Store.enforce_retention`, Kafka's LogManager) still runs.

A partition whose round fails is marked uncleanable with the reason; the other partitions go on, and the
next pass retries it. At most one process cleans a partition at a time (``.cleaner.lock``). Every pass
ends by writing the cleaner's state (:mod:`.state`) to the data directory.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from ..errors import CleanerError, CleaningAbortedError, CompactLogError
from ..faults import fault_point
from ..partition_view import partition_bytes, planner_state
from ..retention import apply_retention
from .executor import CleanerExecutor, InProcessExecutor, RoundResult
from .kernel import CleanTask, SegmentFile
from .metrics import CleanerStats
from .metrics import cleaner_metrics as metrics_from_stats
from .plan import LogToClean, PartitionState, select_logs
from .rewrite import transaction_facts
from .state import write_cleaner_state
from .swap import SwapHook, discard

if TYPE_CHECKING:
    from ..checkpoint import CheckpointFile
    from ..config import BrokerConfig, TopicConfig
    from ..log import Log
    from .state import CleanerState

TopicPartition = tuple[str, int]
CLEANER_DISABLED = "log.cleaner.enable=false: the cleaner is off for this data directory"


class LogDirectory(Protocol):
    """What a pass uses of the data directory it cleans (:class:`compactlog.store.Store` is one): the cleaner
    depends on this, never on the store, so that the store can own the cleaner."""

    clock: Callable[[], int]
    data_dir: str
    broker: BrokerConfig
    checkpoint: CheckpointFile
    cleaner_state: CleanerState

    def topics(self) -> list[str]: ...

    def topic_config(self, topic: str) -> TopicConfig: ...

    def partitions(self, topic: str) -> int: ...

    def log(self, topic: str, partition: int) -> Log: ...

    def partition_logs(self, topic: str | None = None) -> Iterator[Log]: ...


@dataclass(frozen=True)
class PartitionCleanReport:
    """One cleaned partition."""

    topic: str
    partition: int
    first_dirty_offset: int
    end_offset: int  # the new checkpoint
    records_read: int
    records_written: int
    bytes_read: int
    bytes_written: int
    map_utilization: float
    duration_ms: int
    invalid_records: int = 0
    tombstones_stamped: int = 0
    groups: int = 0


@dataclass
class CleanReport:
    """What one cleaner pass did: cleaned partitions in the order cleaned, and why the others were not."""

    partitions: list[PartitionCleanReport] = field(default_factory=list)
    skipped: dict[TopicPartition, str] = field(default_factory=dict)
    rolled: list[TopicPartition] = field(default_factory=list)
    failed_topics: dict[str, str] = field(default_factory=dict)  # topic -> why its metadata cannot be read
    failed_transactions: dict[str, str] = field(default_factory=dict)  # unreadable transaction state file -> why
    retention_bytes_removed: dict[TopicPartition, int] = field(default_factory=dict)

    def partition(self, topic: str, partition: int) -> PartitionCleanReport | None:
        return next((p for p in self.partitions if (p.topic, p.partition) == (topic, partition)), None)


def partition_state(store: LogDirectory, log: Log, checkpoints: dict[TopicPartition, int]) -> PartitionState:
    """The planner's view of ``log`` with its cleaner checkpoint (:func:`compactlog.partition_view.planner_state`)."""
    return planner_state(log, store.topic_config(log.topic), checkpoints.get((log.topic, log.partition)))


def failure_reason(error: Exception) -> str:
    """The reason a partition or topic is reported uncleanable: a CompactLogError's message (it names the
    file), else the exception's type and message."""
    return str(error) if isinstance(error, CompactLogError) else f"{type(error).__name__}: {error}"


def _compacted_logs(store: LogDirectory, topic: str | None, partition: int | None,
                    report: CleanReport) -> Iterator[Log]:
    """The logs a pass covers. On a pass over every topic, a topic whose metadata cannot be read is reported
    in ``report.failed_topics`` and a partition whose log cannot be opened is marked uncleanable; the other
    topics and partitions go on. A topic or partition the caller named raises instead."""
    state = store.cleaner_state
    for name in [topic] if topic is not None else store.topics():
        try:
            if not store.topic_config(name).compact and topic is None:
                continue
            partitions = [partition] if partition is not None else list(range(store.partitions(name)))
        except Exception as e:
            if topic is not None:
                raise
            report.failed_topics[name] = failure_reason(e)
            continue
        for number in partitions:
            try:
                log = store.log(name, number)
            except Exception as e:
                if partition is not None:
                    raise
                reason = failure_reason(e)
                state.mark_uncleanable((name, number), reason,
                                       partition_bytes(os.path.join(store.data_dir, f"{name}-{number}")))
                report.skipped[(name, number)] = f"uncleanable: {reason}"
                continue
            yield log


@contextlib.contextmanager
def cleaner_lock(log: Log) -> Iterator[bool]:
    """Hold ``.cleaner.lock`` for the round if no other process does; yields whether it was acquired."""
    fd = os.open(os.path.join(log.directory, ".cleaner.lock"), os.O_CREAT | os.O_RDWR, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


def clean(store: LogDirectory, force: bool = False, topic: str | None = None, partition: int | None = None,
          executor: CleanerExecutor | None = None, hook: SwapHook | None = None) -> CleanReport:
    """One cleaner pass (see the module docstring)."""
    if executor is None:
        executor = InProcessExecutor(store.broker.log_cleaner_threads)
    report = CleanReport()
    state = store.cleaner_state
    now = store.clock()
    if not store.broker.log_cleaner_enable:
        # Kafka then starts no LogCleaner: compacted logs are neither rolled for max.compaction.lag.ms,
        # compacted nor retention-cleaned, forced or not (force waives the dirty ratio, not the setting).
        logs = list(_compacted_logs(store, topic, partition, CleanReport()))
        report.skipped.update({(log.topic, log.partition): CLEANER_DISABLED for log in logs})
        return report
    opened = list(_compacted_logs(store, topic, partition, report))
    checkpoints = store.checkpoint.read()
    logs, states = [], []
    for log in opened:  # one partition's damaged file fails that partition only (see failed_round)
        try:
            log.delete_expired_files()
            config = store.topic_config(log.topic)
            if config.compact and log.maybe_roll_idle(now, config.max_compaction_lag_ms):
                report.rolled.append((log.topic, log.partition))
            states.append(partition_state(store, log, checkpoints))
        except Exception as e:
            if partition is not None:
                raise
            failed_round(store, report, (log.topic, log.partition), e, 0)
            continue
        logs.append(log)
    selection = select_logs(states, now, force=force)
    if selection.checkpoint_resets:
        store.checkpoint.update(add=selection.checkpoint_resets)
    report.skipped.update(selection.skipped)
    state.last_run_ms = now
    state.max_dirty_ratio = selection.max_dirty_ratio
    state.max_compaction_delay_ms = selection.max_compaction_delay_ms
    by_tp = {(log.topic, log.partition): log for log in logs}
    stats: list[CleanerStats] = []
    with contextlib.ExitStack() as locks:
        # Every selected partition's cleaner lock is held for the whole pass (an executor may run its rounds
        # together).
        chosen: list[tuple[LogToClean, Log]] = []
        for ltc in selection.to_clean:
            tp = (ltc.topic, ltc.partition)
            if locks.enter_context(cleaner_lock(by_tp[tp])):
                chosen.append((ltc, by_tp[tp]))
            else:
                report.skipped[tp] = "being cleaned by another process"
        for ltc, outcome in run_rounds(store, chosen, now, executor, hook):
            tp = (ltc.topic, ltc.partition)
            if isinstance(outcome, CleaningAbortedError):  # a shutdown, not the partition's fault
                report.skipped[tp] = f"not cleaned: {outcome}"
                continue
            if isinstance(outcome, Exception):
                failed_round(store, report, tp, outcome, ltc.cleanable_bytes)
                continue
            result = outcome
            state.clear_uncleanable(tp)
            report.partitions.append(result)
            stats.append(CleanerStats(result.records_read, result.records_written, result.bytes_read,
                                      result.bytes_written, result.invalid_records, result.map_utilization,
                                      now, now + result.duration_ms))
    if stats:
        state.last_stats = stats
    for log in logs:
        tp = (log.topic, log.partition)
        if store.topic_config(log.topic).compact and tp not in state.uncleanable:
            try:
                freed = apply_retention(log, store.topic_config(log.topic), store.clock())
            except Exception as e:
                failed_round(store, report, tp, e, 0)
                continue
            if freed:
                report.retention_bytes_removed[tp] = freed
    write_cleaner_state(store.data_dir, state)  # a fresh process's gauges and describe show this pass
    return report


def failed_round(store: LogDirectory, report: CleanReport, tp: TopicPartition, error: Exception,
                 stuck_bytes: int) -> None:
    """Kafka marks a partition uncleanable on any failure and goes on with the others; the next pass retries
    it (:class:`.state.CleanerState`)."""
    reason = failure_reason(error)
    store.cleaner_state.mark_uncleanable(tp, reason, stuck_bytes)
    report.skipped[tp] = f"uncleanable: {reason}"


def dedupe_buffer_share(dedupe_buffer_size: int, threads: int) -> int:
    """The dedupe buffer of one round: Kafka's per-thread share, ``log.cleaner.dedupe.buffer.size /
    log.cleaner.threads``, so that the rounds running at once in process hold at most the whole buffer."""
    return dedupe_buffer_size // threads


def make_task(store: LogDirectory, log: Log, ltc: LogToClean, now: int) -> tuple[CleanTask, dict[int, int]]:
    config = store.topic_config(log.topic)
    broker = store.broker
    sealed = [s for s in log.sealed_segments() if s.base_offset < ltc.first_uncleanable_offset]
    files = tuple(SegmentFile(s.path, s.base_offset, s.next_offset, s.meta.size_bytes, s.meta.record_count,
                              s.meta.max_timestamp, s.meta.first_timestamp, s.aborted, s.meta.control_count)
                  for s in sealed)
    buffer_bytes = dedupe_buffer_share(broker.log_cleaner_dedupe_buffer_size, broker.log_cleaner_threads)
    aborted = tuple(log.aborted_transactions(0, ltc.first_uncleanable_offset))
    # Markers and emptied batches are control rows: without any, there is no transaction state to keep.
    markers = transaction_facts(files) if any(s.meta.control_count for s in sealed) else frozenset()
    log.expire_producers(now, broker.producer_id_expiration_ms)
    last_offsets = frozenset(log.producer_last_offsets(now, broker.producer_id_expiration_ms))
    task = CleanTask(
        topic=log.topic, partition=log.partition, directory=log.directory, segments=files,
        first_dirty_offset=ltc.first_dirty_offset, first_uncleanable_offset=ltc.first_uncleanable_offset,
        now_ms=now, delete_retention_ms=config.delete_retention_ms, segment_bytes=config.segment_bytes,
        compression=config.parquet_compression,
        map_capacity_bytes=int(buffer_bytes * broker.log_cleaner_io_buffer_load_factor),
        dedupe_buffer_bytes=buffer_bytes, aborted=aborted, markers_with_data=markers,
        producer_last_offsets=last_offsets)
    return task, {s.base_offset: s.inode for s in sealed}


def run_rounds(store: LogDirectory, chosen: list[tuple[LogToClean, Log]], now: int, executor: CleanerExecutor,
               hook: SwapHook | None) -> Iterator[tuple[LogToClean, PartitionCleanReport | Exception]]:
    """The rounds of the chosen partitions (their cleaner locks held), on the executor; each is then swapped
    in and checkpointed on its own, so one partition's failure never costs another its round."""
    prepared: list[tuple[LogToClean, Log, CleanTask, dict[int, int]]] = []
    for ltc, log in chosen:
        try:
            prepared.append((ltc, log, *make_task(store, log, ltc, now)))
        except Exception as e:
            yield ltc, e
    outcomes = executor.run_rounds([task for _, _, task, _ in prepared])
    for (ltc, log, _, inodes), outcome in zip(prepared, outcomes, strict=True):
        if isinstance(outcome, Exception):
            yield ltc, outcome
            continue
        try:
            committed: PartitionCleanReport | Exception = commit_round(store, log, ltc, outcome, inodes, hook)
        except Exception as e:
            discard(outcome.groups)
            committed = e
        yield ltc, committed


def commit_round(store: LogDirectory, log: Log, ltc: LogToClean, outcome: RoundResult, inodes: dict[int, int],
                 hook: SwapHook | None) -> PartitionCleanReport:
    """Install a round's cleaned groups (the swap), then advance the checkpoint."""
    mapped, results = outcome.mapped, outcome.groups
    if mapped.end_offset <= ltc.first_dirty_offset and not results:
        raise CleanerError(f"{log.topic}-{log.partition}: offset map made no progress")
    config = store.topic_config(log.topic)
    log.swap_cleaned(results, inodes, config.file_delete_delay_ms, hook)
    if hook is not None:
        hook("before-checkpoint")
    fault_point("cleaner.before-checkpoint")
    store.checkpoint.update(add={(log.topic, log.partition): mapped.end_offset})
    fault_point("cleaner.after-checkpoint")
    return PartitionCleanReport(
        topic=log.topic, partition=log.partition, first_dirty_offset=ltc.first_dirty_offset,
        end_offset=mapped.end_offset,
        records_read=sum(r.records_read for r in results),
        records_written=sum(r.records_written for r in results),
        bytes_read=sum(r.bytes_read for r in results) + mapped.bytes_read,
        bytes_written=sum(r.bytes_written for r in results),
        map_utilization=mapped.offset_map.utilization,
        duration_ms=int((time.monotonic() - outcome.started) * 1000),
        invalid_records=sum(r.invalid_records for r in results),
        tombstones_stamped=sum(r.tombstones_stamped for r in results),
        groups=len(results))


def cleaner_metrics(store: LogDirectory) -> dict[str, int | float | None]:
    state = store.cleaner_state
    return metrics_from_stats(state.last_stats, state.max_dirty_ratio, state.max_compaction_delay_ms,
                              state.uncleanable_bytes, store.clock(), state.last_run_ms)
