"""A maintenance pass over a data directory (``compactlog clean``; ``serve`` runs one every
``log.cleaner.backoff.ms``): what Kafka's log manager and cleaner threads do between them, and its dry run.

A pass (:func:`run_pass`) over the named topics (default: every topic), in this order:

1. rolls (:func:`roll_reason`): with ``force`` ("compact now") the active segment of every non-empty
   compacted partition (none with ``log.cleaner.enable=false``: nothing would compact it); else an idle
   active segment whose first record is older than the topic's effective roll time (``segment.ms``, or
   ``max.compaction.lag.ms`` when smaller on a compacted topic): Kafka rolls only on append, so a quiet
   partition would keep its records in the active segment forever;
2. transaction expiry and compaction (:meth:`compactlog.Store.clean`, with ``force`` waiving
   ``min.cleanable.dirty.ratio``; ``min.compaction.lag.ms`` always holds young segments back);
3. retention of ``delete`` topics (:meth:`compactlog.Store.enforce_retention`).

The dry run (:func:`plan_pass`, :func:`plan_transaction_expiry`) opens every partition read-only (nothing
on disk changes, not even a lock file), applies the same rules to the planner's values as the pass would (a
roll is simulated by :func:`rolled_state`) and estimates what each cleaning would free from key statistics
(:mod:`compactlog.cleaner.estimate`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from .cleaner.cleaner import CLEANER_DISABLED, CleanReport
from .cleaner.estimate import ESTIMATE_COLUMNS, FreedEstimate, estimate_freed
from .cleaner.plan import PartitionState, retention_deletable, select_logs
from .errors import CompactLogError
from .partition_view import planner_state, read_only_log
from .retention import retention_roll_due
from .segment import SegmentStats
from .transaction_transitions import ONGOING
from .transactions import transaction_expired

if TYPE_CHECKING:
    from .store import Store

TopicPartition = tuple[str, int]
Progress = Callable[[str], None]


def roll_reason(active: SegmentStats, now_ms: int, *, roll_ms: int, compact: bool, force: bool) -> str | None:
    """Why a pass rolls this active segment (None: it does not); ``roll_ms`` is the topic's effective roll
    time (:attr:`compactlog.config.TopicConfig.roll_ms`). An empty segment never rolls."""
    if active.is_empty:
        return None
    if force and compact:
        return "--force: compact now"
    age = now_ms - active.first_timestamp
    if active.first_timestamp >= 0 and age > roll_ms:
        return f"idle: first record {age} ms old > roll time {roll_ms} ms"
    return None


def rolled_state(state: PartitionState) -> PartitionState:
    """``state`` after its active segment is sealed: that segment becomes sealed and an empty active segment
    starts at the log end."""
    if state.active.is_empty:
        return state
    end = state.log_end_offset
    segments = (*state.segments[:-1], dataclasses.replace(state.active, active=False),
                SegmentStats(end, end, 0, 0, -1, -1, True))
    return dataclasses.replace(state, segments=segments)


@dataclass
class PassReport:
    """What a pass did: the cleaner's report (merged over the topics), the rolls and retention."""

    clean: CleanReport
    rolled: dict[TopicPartition, str] = field(default_factory=dict)  # -> why


def _topics(store: Store, topics: list[str] | None) -> list[str]:
    if not topics:
        return store.topics()
    for name in topics:
        store.partitions(name)  # an unknown topic is an error, not an empty pass
    return list(dict.fromkeys(topics))


def _merge(into: CleanReport, report: CleanReport) -> None:
    into.partitions.extend(report.partitions)
    into.skipped.update(report.skipped)
    into.rolled.extend(r for r in report.rolled if r not in into.rolled)
    into.failed_topics.update(report.failed_topics)
    into.failed_transactions.update(report.failed_transactions)
    into.retention_bytes_removed.update(report.retention_bytes_removed)


def run_pass(store: Store, topics: list[str] | None = None, *, force: bool = False, partition: int | None = None,
             executor: Any = None, progress: Progress | None = None) -> PassReport:
    """One maintenance pass (module docstring); ``partition`` only with a single topic."""
    step = progress or (lambda _: None)
    store.check_writable("clean")
    names = _topics(store, topics)
    report = PassReport(CleanReport())
    now = store.clock()
    for name in names:
        config = store.topic_config(name)
        numbers = [partition] if partition is not None else range(store.partitions(name))
        for number in numbers:
            try:
                log = store.log(name, number)
            except CompactLogError:  # a damaged partition: the cleaner reports it uncleanable
                continue
            why = roll_reason(SegmentStats.from_meta(log.active.meta()), now, roll_ms=config.roll_ms,
                              compact=config.compact and store.broker.log_cleaner_enable, force=force)
            if why is not None and log.roll():
                report.rolled[(name, number)] = why
    if topics:
        for name in names:
            step(f"cleaning {name}")
            _merge(report.clean, store.clean(force=force, topic=name, partition=partition, executor=executor))
    else:
        step("cleaning every compacted topic")
        _merge(report.clean, store.clean(force=force, executor=executor))
    step("retention")
    for tp, freed in store.enforce_retention(names).items():
        report.clean.retention_bytes_removed[tp] = report.clean.retention_bytes_removed.get(tp, 0) + freed
    return report


@dataclass(frozen=True)
class PartitionPlan:
    """What a pass would do to one partition, and why."""

    topic: str
    partition: int
    cleanup_policy: str
    roll: str | None = None  # why its active segment would roll
    clean: bool = False
    reason: str = ""  # why it would be cleaned, or why not
    first_dirty_offset: int | None = None
    first_uncleanable_offset: int | None = None
    dirty_ratio: float = 0.0
    estimate: FreedEstimate | None = None
    retention_segments: tuple[int, ...] = ()  # base offsets retention would delete
    retention_bytes: int = 0
    retention_reasons: tuple[str, ...] = ()
    error: str | None = None


def plan_pass(store: Store, topics: list[str] | None = None, *, force: bool = False,
              partition: int | None = None, progress: Progress | None = None) -> list[PartitionPlan]:
    """The dry run of :func:`run_pass` (module docstring): one plan per partition, nothing changed."""
    step = progress or (lambda _: None)
    names = _topics(store, topics)
    checkpoints = store.checkpoint.read()
    now = store.clock()
    plans = []
    for name in names:
        numbers = [partition] if partition is not None else range(store.partitions(name))
        for number in numbers:
            step(f"planning {name}-{number}")
            try:
                plans.append(_plan_partition(store, name, number, checkpoints.get((name, number)), now, force))
            except Exception as e:  # a damaged partition is reported; the others are planned
                config = store.topic_config(name)
                plans.append(PartitionPlan(name, number, ",".join(config.cleanup_policy), error=str(e)))
    return plans


def plan_transaction_expiry(store: Store) -> list[str]:
    """The transactional ids whose open transaction the pass would abort (open longer than its
    ``transaction.timeout.ms``: :func:`compactlog.transactions.transaction_expired`), read without writing."""
    now = store.clock()
    expired = []
    for meta in store.transactions.states():
        if meta.txn_start_ms is None or not transaction_expired(now, meta.txn_start_ms, meta.timeout_ms):
            continue  # (an id without a start time gets one from the pass, which then counts from there)
        if meta.state == ONGOING:  # a wire transaction: aborted even before any of its rows arrived
            expired.append(meta.transactional_id)
            continue
        for topic, partition in meta.partitions:
            try:
                with read_only_log(store, topic, partition) as log:
                    if log.open_transaction(meta.producer_id) is not None:
                        expired.append(meta.transactional_id)
                        break
            except CompactLogError:
                continue  # a deleted topic or damaged partition: the pass has nothing to mark there
    return expired


def _plan_partition(store: Store, topic: str, partition: int, checkpoint: int | None, now: int,
                    force: bool) -> PartitionPlan:
    config = store.topic_config(topic)
    with read_only_log(store, topic, partition) as log:
        state = planner_state(log, config, checkpoint)
        roll = roll_reason(state.active, now, roll_ms=config.roll_ms,
                           compact=config.compact and store.broker.log_cleaner_enable, force=force)
        planned = rolled_state(state) if roll else state
        plan = PartitionPlan(topic, partition, ",".join(config.cleanup_policy), roll=roll)
        if config.compact:
            plan = _plan_cleaning(plan, log, planned, now, force, store.broker.log_cleaner_enable)
        if config.delete and (store.broker.log_cleaner_enable or not config.compact):
            if retention_roll_due(planned.active, now, delete=True, retention_ms=config.retention_ms):
                planned = rolled_state(planned)
            retention = retention_deletable(planned, now)
            plan = dataclasses.replace(
                plan, retention_segments=tuple(s.base_offset for s in retention.segments),
                retention_bytes=sum(s.size_bytes for s in retention.segments),
                retention_reasons=tuple(retention.reason[s.base_offset] for s in retention.segments))
    return plan


def _plan_cleaning(plan: PartitionPlan, log: Any, state: PartitionState, now: int, force: bool,
                   cleaner_enabled: bool) -> PartitionPlan:
    if not cleaner_enabled:
        return dataclasses.replace(plan, reason=CLEANER_DISABLED)
    selection = select_logs([state], now, force=force)
    if not selection.to_clean:
        return dataclasses.replace(plan, reason=selection.skipped[state.key])
    ltc = selection.to_clean[0]
    why = ("--force: dirty ratio ignored" if force and ltc.cleanable_ratio <= state.policy.min_cleanable_dirty_ratio
           and not ltc.need_compaction_now else
           f"overdue by max.compaction.lag.ms ({ltc.max_compaction_delay_ms} ms)" if ltc.need_compaction_now else
           f"dirty ratio {ltc.cleanable_ratio:.2f} > min.cleanable.dirty.ratio "
           f"{state.policy.min_cleanable_dirty_ratio:.2f}")
    rows = pa.concat_tables(list(_rows(log, state.log_start_offset, ltc.first_uncleanable_offset)))
    range_bytes = sum(s.size_bytes for s in state.segments if s.base_offset < ltc.first_uncleanable_offset)
    estimate = estimate_freed(rows, ltc.first_dirty_offset, ltc.first_uncleanable_offset, now, range_bytes)
    return dataclasses.replace(plan, clean=True, reason=why, first_dirty_offset=ltc.first_dirty_offset,
                               first_uncleanable_offset=ltc.first_uncleanable_offset,
                               dirty_ratio=ltc.cleanable_ratio, estimate=estimate)


def _rows(log: Any, start: int, end: int) -> Iterator[pa.Table]:
    from .record import SCHEMA

    yield SCHEMA.empty_table().select(ESTIMATE_COLUMNS)
    if end > start:
        yield from log.read_tables(start, end, columns=ESTIMATE_COLUMNS, include_control=True)



def pass_summary(report: PassReport) -> str:
    """One log line (``serve``'s cleaner thread): what the pass did."""
    clean = report.clean
    uncleanable = sorted(f"{t}-{p}" for (t, p), why in clean.skipped.items() if why.startswith("uncleanable:"))
    abandoned = sum(why.startswith("not cleaned:") for why in clean.skipped.values())  # a shutdown's
    removed = sum(clean.retention_bytes_removed.values())
    cleaned = ", ".join(f"{p.topic}-{p.partition} ({p.records_read}->{p.records_written} records)"
                        for p in clean.partitions)
    return (f"cleaner pass: cleaned {len(clean.partitions)} partition(s){': ' + cleaned if cleaned else ''}; "
            f"rolled {len(report.rolled)}; retention removed {removed} bytes; "
            f"{len(clean.skipped)} skipped" + (f"; uncleanable: {', '.join(uncleanable)}" if uncleanable else "")
            + (f"; {abandoned} left for the next pass (shutting down)" if abandoned else ""))


def backoff_after_pass_ms(report: PassReport, backoff_ms: int) -> int:
    """How long the cleaner waits before its next pass: as Kafka's cleaner thread, not at all after a pass
    that cleaned a partition (more may be dirty enough now), else ``log.cleaner.backoff.ms``."""
    return 0 if report.clean.partitions else backoff_ms
