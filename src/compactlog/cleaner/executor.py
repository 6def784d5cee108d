"""How a cleaner pass runs its rounds: the executor protocol, and the in-process executor.

A pass (:mod:`.cleaner`) plans, makes one :class:`~.kernel.CleanTask` per partition to clean, hands them
all to a :class:`CleanerExecutor`, and swaps in and checkpoints each :class:`RoundResult` as it comes
back. An executor only runs rounds: it never touches the live segment set, the checkpoint or a lock (the
pass holds every partition's ``.cleaner.lock`` throughout).

* :class:`InProcessExecutor`: the rounds in this process, ``log.cleaner.threads`` at a time (Kafka's
  cleaner threads), each with :func:`run_in_process`;
* :class:`OnDemandExecutor`: an executor started only when a pass has a round to run;
* Spark's executor is ``compactlog.spark.executor.SparkExecutor``, which :func:`cleaner_executor` loads by
  its name (:data:`ENGINE_EXECUTOR`) when it is given a SparkSession, as Kafka loads a plugin by its class
  name: ``cleaner/`` never imports an engine, and ``import compactlog`` or an in-process pass never loads
  ``compactlog.spark`` (nor PySpark).

:func:`run_in_process` is one round in the calling process (the single pass, else Kafka's two); a Spark
task runs the very same function.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol

import pyarrow as pa

from .kernel import CleanTask, GroupResult, MapResult, build_offset_map, groups_to_clean, lookup_batches, map_entries
from .memory_pool import round_memory_pool
from .rewrite import clean_group
from .single_pass import clean_newest_first
from .swap import discard


@dataclass(frozen=True)
class RoundResult:
    """A round run by an executor, ready to swap in: its offset map (or a summary of it: what the report
    and the checkpoint need), its cleaned groups, and when it started (``time.monotonic()``; the report's
    duration runs from there to the checkpoint)."""

    mapped: MapResult
    groups: list[GroupResult]
    started: float


class CleanerExecutor(Protocol):
    """Runs a pass's rounds."""

    def run_rounds(self, tasks: Sequence[CleanTask]) -> Iterator[RoundResult | Exception]:
        """One outcome per task, in the tasks' order: the round, or the exception that failed it (its
        ``.cleaned`` files removed). A failed round never fails another. The caller swaps each round in
        (or discards its groups) as it comes; an executor may run later rounds meanwhile. Raises only when
        no round can run at all."""
        ...


def run_in_process(task: CleanTask, one_core: bool = False) -> tuple[MapResult, list[GroupResult]]:
    """One round in this process: in one read when the dirty section's keys fit the offset map
    (:mod:`.single_pass`), else map, then every group, one after another. Between the two-pass kernel's
    steps the memory pool is asked to release what it no longer uses (jemalloc may keep some of it for its
    decay: see :mod:`.memory_pool`).

    By default a round spreads its steps over threads (reading, mapping, deciding, encoding), which uses
    the cores of the machine, also when rounds run side by side: a round's threads fill the time another
    round's thread waits. ``one_core`` runs one step at a time instead, for executors with many task
    slots, whose rounds' threads would only compete for the cores and their caches (Spark's
    ``spark.compactlog.cleaner.roundThreads=one``)."""
    with round_memory_pool():
        pool = pa.default_memory_pool()
        one_read = clean_newest_first(task, one_core)
        if one_read is not None:
            return one_read
        mapped = build_offset_map(task, one_core=one_core)
        pool.release_unused()
        results: list[GroupResult] = []
        try:
            for batch in lookup_batches(groups_to_clean(task, mapped.end_offset)):
                # Segments the map phase did not number (the clean section) are looked up a batch at a time.
                unmapped = [s for group in batch for s in group if s.base_offset not in mapped.entries]
                entries = ({**mapped.entries, **map_entries(mapped.offset_map, unmapped)} if unmapped
                           else mapped.entries)
                for group in batch:
                    results.append(clean_group(task, group, mapped.offset_map, entries, one_core))
                    pool.release_unused()
        except BaseException:
            discard(results)
            raise
        return mapped, results


def _timed_round(task: CleanTask) -> RoundResult:
    started = time.monotonic()
    mapped, groups = run_in_process(task)
    return RoundResult(mapped, groups, started)


@dataclass(frozen=True)
class InProcessExecutor:
    """The rounds in this process, ``threads`` at a time (``log.cleaner.threads``; each round's map has its
    share of the dedupe buffer, set when its task was made). With one thread a round runs only when the
    caller asks for its outcome, after the previous one is swapped in; with more, the rounds run on a
    thread pool while the caller swaps in the finished ones in order, and rounds not started when the
    caller stops are cancelled."""

    threads: int = 1

    def run_rounds(self, tasks: Sequence[CleanTask]) -> Iterator[RoundResult | Exception]:
        if self.threads > 1:
            return self._side_by_side(tasks)
        return self._one_at_a_time(tasks)

    @staticmethod
    def _one_at_a_time(tasks: Sequence[CleanTask]) -> Iterator[RoundResult | Exception]:
        for task in tasks:
            try:
                outcome: RoundResult | Exception = _timed_round(task)
            except Exception as e:
                outcome = e
            yield outcome

    def _side_by_side(self, tasks: Sequence[CleanTask]) -> Iterator[RoundResult | Exception]:
        pool = ThreadPoolExecutor(self.threads, thread_name_prefix="compactlog-cleaner")
        handed_over = 0
        futures = []
        try:
            futures = [pool.submit(_timed_round, task) for task in tasks]
            for future in futures:
                try:
                    outcome: RoundResult | Exception = future.result()
                except Exception as e:
                    outcome = e
                handed_over += 1
                yield outcome
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
            # Rounds that ran but whose outcome the caller never took (it stopped early: a shutdown) are
            # never swapped in: their .cleaned files go now, not at the partition's next open.
            for future in futures[handed_over:]:
                if not future.cancelled() and future.exception() is None:
                    discard(future.result().groups)


@dataclass(frozen=True)
class OnDemandExecutor:
    """An executor made by ``start()`` when a pass first has a round to run, so that a pass with nothing
    to clean never pays for the start (a Spark session takes seconds). ``start`` returns a
    :class:`CleanerExecutor`; given to ``Store.clean``, it may return anything the store accepts as its
    executor (a SparkSession, say), which the store then resolves as it resolves its own argument
    (:func:`cleaner_executor`)."""

    start: Callable[[], Any]

    def run_rounds(self, tasks: Sequence[CleanTask]) -> Iterator[RoundResult | Exception]:
        if not tasks:
            return iter(())
        executor: CleanerExecutor = self.start()
        return executor.run_rounds(tasks)


# The executor of what a user passes that is neither None nor an executor (a SparkSession), by its
# "module:class" name: loaded only then, so that no module of the cleaner imports an engine.
ENGINE_EXECUTOR = "compactlog.spark.executor:SparkExecutor"


def cleaner_executor(executor: Any, threads: int) -> CleanerExecutor:
    """What ``Store.clean(executor=...)`` and the cleaner service were given, made into an executor: None is
    the in-process executor (``threads``: ``log.cleaner.threads`` rounds at a time); an
    :class:`OnDemandExecutor` stays one, what its ``start()`` returns resolved in turn; an object with a
    ``run_rounds`` method is an executor already; anything else goes to :data:`ENGINE_EXECUTOR` (Spark's,
    which checks that it was given a SparkSession)."""
    if executor is None:
        return InProcessExecutor(threads)
    if isinstance(executor, OnDemandExecutor):
        start = executor.start
        return OnDemandExecutor(lambda: cleaner_executor(start(), threads))
    if callable(getattr(executor, "run_rounds", None)):
        return executor
    module, _, name = ENGINE_EXECUTOR.partition(":")
    engine: Callable[[Any], CleanerExecutor] = getattr(importlib.import_module(module), name)
    return engine(executor)
