"""The Kafka-protocol listener of a data directory as a component of ``compactlog serve``: the store, the
request dispatch, the socket server and the transaction expiry (:mod:`.transaction_expiry`), started and
stopped together."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import pyarrow as pa

from ..network.socket_server import SocketServer
from ..server_config import load_server_config
from ..store import open_store
from . import txn_apis
from .context import BrokerContext
from .kafka_apis import KafkaApis
from .transaction_expiry import TransactionExpiry

__all__ = ["KafkaListener"]


class KafkaListener:
    """The Kafka-protocol listener of a store as a component: :meth:`start` binds and serves,
    :meth:`shutdown` stops."""

    name = "kafka listener"

    def __init__(self, data_dir: str, overrides: Mapping[str, object] | None = None) -> None:
        self.store = open_store(data_dir)
        self.context = BrokerContext(self.store, load_server_config(data_dir, overrides))
        config = self.context.config
        self.server = SocketServer(config.listeners, config.socket_request_max_bytes, KafkaApis(self.context).handle,
                                   on_bound=self.context.set_bound)
        txn_apis.attach(self.context)
        self.expiry = TransactionExpiry(self.store, config.transaction_abort_timed_out_transaction_cleanup_interval_ms)

    def start(self) -> None:
        # pyarrow imports pandas (about a second) the first time it converts a Python value to Arrow, as the
        # appends and reads of requests do: done here, so that the first request does not wait for it.
        pa.scalar(0, pa.int64())
        self.context.groups.load()  # before the first request: a group is answered only once loaded
        self.server.start()
        assert self.server.loop is not None
        asyncio.run_coroutine_threadsafe(self.context.groups.start(), self.server.loop).result()
        self.expiry.start()

    def shutdown(self) -> None:
        self.expiry.shutdown()
        if self.server.loop is not None:
            asyncio.run_coroutine_threadsafe(self.context.groups.stop(), self.server.loop).result()
        self.server.shutdown()
        self.context.close()
        self.store.close()
