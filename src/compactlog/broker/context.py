"""What the broker's request handlers share: the store, the server configs, the listeners as advertised,
the fetch purgatory, the group commit, and the thread pool that runs blocking store calls (appends, fsyncs,
Parquet reads) off the event loop."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

from ..coordinator.group_coordinator import GroupCoordinator
from ..coordinator.group_metadata_manager import GroupMetadataManager
from ..log import Log
from ..server_config import Listener, ServerConfig
from ..store import Store
from .fetch_purgatory import FetchPurgatory
from .fetch_read_ahead import ReadAheads
from .group_commit import GroupCommit
from .storage_threads import StorageThreads

__all__ = ["STORAGE_THREADS", "BrokerContext", "open_log"]

_T = TypeVar("_T")
# Threads for blocking store calls: appends (fsync) and reads (Parquet) of several connections at once.
STORAGE_THREADS = 4


def open_log(store: Store, topic: str, partition: int) -> Log:
    """``store.log(topic, partition)`` (the store locks its cache of Logs: safe from the storage threads, the
    transaction-expiry thread and the cleaner service at once)."""
    return store.log(topic, partition)


class BrokerContext:
    """What handlers share: the store, the configs, the listeners as advertised, the fetch purgatory, the
    group commit and the thread pool for blocking store calls."""

    def __init__(self, store: Store, config: ServerConfig) -> None:
        self.store = store
        self.config = config
        self.node_id = config.node_id
        self.cluster_id = store.directory_id or "compactlog"
        self.advertised: dict[str, Listener] = {}
        self.purgatory = FetchPurgatory()
        self.read_aheads = ReadAheads()
        self.executor = StorageThreads(STORAGE_THREADS, "compactlog-storage")
        self.group_commit = GroupCommit(self.run)
        self.groups = GroupCoordinator(GroupMetadataManager(store, config), config, self.run, store.clock)

    def set_bound(self, bound: tuple[Listener, ...]) -> None:
        """Record the bound listeners; advertised.listeners, where set, replace them by name."""
        advertised = {listener.name: listener for listener in bound}
        for listener in self.config.advertised_listeners or ():
            advertised[listener.name] = listener
        self.advertised = advertised

    def run(self, fn: Callable[..., _T], *args: Any) -> asyncio.Future[_T]:
        """``fn(*args)`` in the storage thread pool: a future of the event loop (awaited, or given a callback;
        no coroutine or Task is made for it)."""
        return self.executor.run(fn, *args)

    def close(self) -> None:
        self.executor.shutdown(wait=True)
