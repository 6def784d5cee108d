"""The cleaner service: ``serve``'s thread that runs a maintenance pass (:mod:`compactlog.maintenance`), then
waits :func:`~compactlog.maintenance.backoff_after_pass_ms` (``log.cleaner.backoff.ms`` after a pass that
cleaned nothing), until shut down. A shutdown during a pass lets the round under way finish and starts no
other (:class:`ShutdownAwareExecutor`).

Rules, as Kafka's ``CleanerThread``: a pass that fails with a CompactLogError or an OSError (a topic deleted
under it, a full disk) is logged and retried after the backoff; any other error kills the thread, logged
with its traceback and counted by ``dead-thread-count``. The wait is on an Event, so that a shutdown wakes
it at once; a shutdown during a round lets it finish for up to ``grace_s`` seconds, then abandons it
(the process exits; the swap protocol is crash safe, and the next open of each partition finishes or rolls
back what was in transit, see :mod:`compactlog.log.swap`). ``log.cleaner.enable=false`` is honoured by the
pass itself: compacted topics are left alone, retention of ``delete`` topics still runs.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from .cleaner.executor import RoundResult, cleaner_executor
from .cleaner.swap import discard
from .errors import CleaningAbortedError, CompactLogError
from .maintenance import backoff_after_pass_ms, pass_summary, run_pass

if TYPE_CHECKING:
    from .cleaner.executor import CleanerExecutor
    from .cleaner.kernel import CleanTask
    from .store import Store

_log = logging.getLogger("compactlog.cleaner")


class ShutdownAwareExecutor:
    """The pass's executor, made to run no further round once ``stopping`` is set: each round not yet
    started is answered with a CleaningAbortedError, so that a shutdown waits for one round at most, not
    the whole pass (an in-process executor runs a round only when its outcome is asked for; a pool's
    rounds not yet started are cancelled when the outcomes are closed, and the output of those that ran
    removed; outcomes computed all at once, as Spark's, have the output of those not handed over removed
    here)."""

    def __init__(self, inner: CleanerExecutor, stopping: threading.Event) -> None:
        self.inner = inner
        self.stopping = stopping

    def run_rounds(self, tasks: Sequence[CleanTask]) -> Iterator[RoundResult | Exception]:
        outcomes: Iterator[RoundResult | Exception] | None = None  # made at the first round run (a start)
        try:
            for task in tasks:
                if self.stopping.is_set():
                    yield CleaningAbortedError(f"{task.topic}-{task.partition}: the cleaner is shutting down")
                    continue
                if outcomes is None:
                    outcomes = iter(self.inner.run_rounds(tasks))
                yield next(outcomes)
        finally:
            close = getattr(outcomes, "close", None)
            if close is not None:  # a generator: it cleans up after the rounds it ran and did not hand over
                close()
            else:  # outcomes computed before the first was handed over (Spark's): discard the rest
                for outcome in outcomes or ():
                    if isinstance(outcome, RoundResult):
                        discard(outcome.groups)


class CleanerService:
    """A :class:`~compactlog.server.Component`: the cleaner thread of one store."""

    name = "cleaner"

    def __init__(self, store: Store, executor: Any = None, wait: Callable[[float], bool] | None = None) -> None:
        """``executor`` as :meth:`Store.clean` takes it; ``wait(seconds)`` returns True when shut down (the
        default waits on the service's stop Event; tests give one that never sleeps)."""
        self.store = store
        self.executor = executor
        self.passes = 0
        self._stop = threading.Event()
        self._wait = wait if wait is not None else self._stop.wait
        self._thread: threading.Thread | None = None
        self._dead = False

    def start(self) -> None:
        enabled = self.store.broker.log_cleaner_enable
        _log.info("cleaner service started: a pass every log.cleaner.backoff.ms=%d ms%s",
                  self.store.broker.log_cleaner_backoff_ms,
                  "" if enabled else " (log.cleaner.enable=false: retention of delete topics only)")
        self._thread = threading.Thread(target=self.run, name="compactlog-cleaner", daemon=True)
        self._thread.start()

    def run(self) -> None:
        """The loop (the thread's target)."""
        try:
            while not self._stop.is_set():
                delay_ms = self.run_pass()
                if self._wait(delay_ms / 1000):
                    break
        except Exception:
            self._dead = True
            _log.exception("cleaner thread died")

    def run_pass(self) -> int:
        """One pass, logged; returns how long to wait before the next (ms)."""
        backoff_ms = self.store.broker.log_cleaner_backoff_ms
        try:
            executor = cleaner_executor(self.executor, self.store.broker.log_cleaner_threads)
            report = run_pass(self.store, executor=ShutdownAwareExecutor(executor, self._stop))
        except (CompactLogError, OSError) as e:
            _log.error("cleaner pass failed, retried in %d ms: %s", backoff_ms, e)
            return backoff_ms
        finally:
            self.passes += 1
        _log.info(pass_summary(report))
        return backoff_after_pass_ms(report, backoff_ms)

    def dead_thread_count(self) -> int:
        return 1 if self._dead else 0

    def shutdown(self, grace_s: float = 8.0) -> None:
        self._stop.set()
        if self._thread is None:
            return
        self._thread.join(grace_s)
        if self._thread.is_alive():
            _log.warning("cleaner pass still running after %.0f s: abandoned (its files in transit are "
                         "recovered when the partitions are next opened)", grace_s)
