"""The Kafka-protocol listener of a data directory as a component of ``compactlog serve``: the store, the
request dispatch, the socket server and the transaction expiry (:mod:`.transaction_expiry`), started and
stopped together.

Nothing of the data directory is opened or written before :meth:`KafkaListener.start`: ``serve`` takes the
data-directory lock (:class:`compactlog.server.DataDirectoryLock`) before anything else, and building the
broker's context creates ``__consumer_offsets`` when it is missing and reads the groups back, which only the
process holding the lock may do. The constructor only reads and checks the server configs,
so that a bad one fails before anything starts.

The store is the one ``serve`` opened under its lock and shares with its cleaner service when given (its
opener closes it, after every component has stopped); else the listener opens one at start and closes it."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import pyarrow as pa

from ..network.malloc_thresholds import fix_malloc_thresholds
from ..network.socket_server import ConnectionLimits, SocketServer
from ..server_config import Listener, load_server_config
from ..store import Store, open_store
from . import txn_apis
from .context import BrokerContext
from .kafka_apis import KafkaApis
from .transaction_expiry import TransactionExpiry

__all__ = ["KafkaListener"]


class KafkaListener:
    """The Kafka-protocol listener of a store as a component: :meth:`start` opens the store (unless given
    one), binds and serves, :meth:`shutdown` stops."""

    name = "kafka listener"

    def __init__(self, data_dir: str, overrides: Mapping[str, object] | None = None,
                 store: Store | None = None) -> None:
        self.data_dir = data_dir
        self.config = load_server_config(data_dir, overrides)
        self._given = store  # used, never closed, by the listener
        self.store: Store | None = None
        self.context: BrokerContext | None = None
        self.server: SocketServer | None = None
        self.expiry: TransactionExpiry | None = None

    @property
    def bound(self) -> tuple[Listener, ...]:
        """The listeners as bound (port 0 replaced), once started."""
        return self.server.bound if self.server is not None else ()

    def start(self) -> None:
        try:
            self._start()
        except BaseException:
            self.shutdown()  # what was built before the failure: the server shuts down only started components
            raise

    def _start(self) -> None:
        config = self.config
        fix_malloc_thresholds()  # the process's large buffers: see there
        self.store = self._given if self._given is not None else open_store(self.data_dir)
        self.context = context = BrokerContext(self.store, config)  # creates __consumer_offsets if missing
        self.server = SocketServer(config.listeners, config.socket_request_max_bytes, KafkaApis(context).handle,
                                   on_bound=context.set_bound, limits=ConnectionLimits.of(config))
        txn_apis.attach(context)
        self.expiry = TransactionExpiry(self.store, config.transaction_abort_timed_out_transaction_cleanup_interval_ms)
        # pyarrow imports pandas (about a second) the first time it converts a Python value to Arrow, as the
        # appends and reads of requests do: done here, so that the first request does not wait for it.
        pa.scalar(0, pa.int64())
        context.groups.load()  # before the first request: a group is answered only once loaded
        self.server.start()
        assert self.server.loop is not None
        asyncio.run_coroutine_threadsafe(context.groups.start(), self.server.loop).result()
        self.expiry.start()

    def shutdown(self) -> None:
        if self.expiry is not None:
            self.expiry.shutdown()
        if self.server is not None:
            loop = self.server.loop
            if loop is not None and loop.is_running() and self.context is not None:
                asyncio.run_coroutine_threadsafe(self.context.groups.stop(), loop).result()
            self.server.shutdown()
        if self.context is not None:
            self.context.close()
        if self.store is not None and self.store is not self._given:
            self.store.close()
        self.store = self.context = self.server = self.expiry = None
