"""The broker's transaction expiry: a thread that aborts, every
``transaction.abort.timed.out.transaction.cleanup.interval.ms``, the transactions open longer than their
``transaction.timeout.ms`` (Kafka's ``TransactionCoordinator.abortTimedOutTransactions``, scheduled at that
interval), whether or not the cleaner has anything to do.

The decision is the store's (:meth:`compactlog.transactions.TransactionCoordinator.abort_expired`: on the
store's clock, ABORT markers carrying a bumped epoch, which fences the stalled producer). A pass that fails
with a CompactLogError or an OSError is logged and retried at the next interval, as the cleaner's are.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from ..errors import CompactLogError
from ..store import Store

__all__ = ["TransactionExpiry"]

_log = logging.getLogger("compactlog.broker")


class TransactionExpiry:
    """Started and stopped with the Kafka listener; ``wait(seconds)`` returns True once shut down (tests
    pass one that never sleeps)."""

    name = "transaction expiry"

    def __init__(self, store: Store, interval_ms: int, wait: Callable[[float], bool] | None = None) -> None:
        self.store = store
        self.interval_ms = interval_ms
        self.passes = 0
        self._stop = threading.Event()
        self._wait = wait if wait is not None else self._stop.wait
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name="compactlog-transaction-expiry", daemon=True)
        self._thread.start()

    def run(self) -> None:
        while not self._wait(self.interval_ms / 1000):
            self.run_pass()

    def run_pass(self) -> list[str]:
        """One pass: the transactional ids whose transaction it aborted."""
        self.passes += 1
        try:
            aborted = self.store.abort_expired_transactions()
        except (CompactLogError, OSError) as e:
            _log.error("aborting expired transactions failed, retried in %d ms: %s", self.interval_ms, e)
            return []
        for transactional_id in aborted:
            _log.info("transaction of %r aborted: open longer than its transaction.timeout.ms", transactional_id)
        return aborted

    def shutdown(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
