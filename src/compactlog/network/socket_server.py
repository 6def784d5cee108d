"""The socket server: listens on the configured listeners and frames bytes (Kafka's ``SocketServer``).

Each listener has an acceptor: it takes the next connection once the broker-wide limit lets one more in, and
closes at once one from an address that already has its limit (:mod:`.connection_quotas`: ``max.connections``,
``max.connections.per.ip``, ``max.connections.per.ip.overrides``). Each accepted connection is a
:class:`~.channel.KafkaChannel`, which reads its frames, hands them to the request handler in order, writes
the responses in order and mutes itself while its client does not read them (see there). A connection that
reads and writes nothing for longer than ``connections.max.idle.ms`` is closed (:mod:`.idle_expiry`).

Why asyncio: every connection is a protocol and a task on one event loop, so a thousand idle or slow clients
cost a thousand small objects, not threads, and a long-polling Fetch is a timer. Handlers run their
blocking store calls (fsyncs, Parquet reads) in a thread pool (see :mod:`compactlog.broker.kafka_apis`), so
the loop keeps serving the other connections meanwhile. The loop is uvloop's where it is installed
(:func:`new_event_loop`).

The server is a component: :meth:`SocketServer.start` binds every listener and returns once they listen,
with a thread of its own that runs the event loop; :meth:`SocketServer.shutdown` closes them and stops it.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..errors import ConfigError
from ..limits import INT_MAX
from ..server_config import Listener, ServerConfig
from .channel import MAX_PENDING_RESPONSES, KafkaChannel, scratch_buffer
from .connection_quotas import ConnectionQuotas
from .idle_expiry import IdleExpiry
from .request_channel import CLIENT_HOST, CONNECTION_CLOSED, PendingResponse, RequestHandler

__all__ = ["CLIENT_HOST", "CONNECTION_CLOSED", "MAX_PENDING_RESPONSES", "ConnectionLimits", "PendingResponse",
           "RequestHandler", "SocketServer", "monotonic_ms", "new_event_loop"]

log = logging.getLogger("compactlog.network")

LISTEN_BACKLOG = 100  # asyncio's default for start_server
# After an accept fails (out of file descriptors: EMFILE), the acceptor waits this long before the next, as
# asyncio's own accept loop does.
ACCEPT_RETRY_DELAY_S = 1.0
# The longest wait between two looks for idle connections (a look that finds none expired looks again later).
IDLE_CHECK_MAX_MS = 3_600_000


def new_event_loop() -> asyncio.AbstractEventLoop:
    """The socket server's event loop: uvloop's (libuv) where it is installed, as it spends less CPU per
    request on its transports, callbacks and executor handoffs than asyncio's; else asyncio's."""
    try:
        import uvloop  # imported by serve only: ``import compactlog`` does not load it
    except ImportError:
        log.info("uvloop is not installed: the socket server runs on asyncio's event loop")
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def monotonic_ms() -> int:
    """The socket server's default clock: milliseconds of a monotonic clock."""
    return time.monotonic_ns() // 1_000_000


@dataclass(frozen=True)
class ConnectionLimits:
    """``max.connections``, ``max.connections.per.ip`` (with its overrides: host name or address -> limit)
    and ``connections.max.idle.ms`` (negative: no idle expiry), Kafka's defaults."""

    max_connections: int = INT_MAX
    max_connections_per_ip: int = INT_MAX
    max_connections_per_ip_overrides: tuple[tuple[str, int], ...] = ()
    connections_max_idle_ms: int = 600_000

    @classmethod
    def of(cls, config: ServerConfig) -> ConnectionLimits:
        return cls(config.max_connections, config.max_connections_per_ip, config.max_connections_per_ip_overrides,
                   config.connections_max_idle_ms)

    def quotas(self) -> ConnectionQuotas:
        """The quotas, with every override's host name resolved to its addresses (as Kafka resolves them
        at start); a name that does not resolve is a ConfigError."""
        overrides: dict[str, int] = {}
        for host, limit in self.max_connections_per_ip_overrides:
            try:
                infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
            except OSError as e:
                raise ConfigError(f"max.connections.per.ip.overrides: host {host!r} cannot be resolved: {e}") from e
            for info in infos:
                overrides[str(info[4][0])] = limit
        return ConnectionQuotas(self.max_connections, self.max_connections_per_ip, overrides)


class SocketServer:
    """Listeners speaking size-prefixed frames to a :data:`RequestHandler`."""

    def __init__(self, listeners: Sequence[Listener], max_request_bytes: int, handler: RequestHandler,
                 on_bound: Callable[[tuple[Listener, ...]], None] | None = None,
                 loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = None,
                 limits: ConnectionLimits | None = None, clock: Callable[[], int] = monotonic_ms) -> None:
        self.loop_factory = loop_factory or new_event_loop
        self.on_bound = on_bound  # told the bound listeners before the first connection is accepted
        self.listeners = tuple(listeners)
        self.max_request_bytes = max_request_bytes
        self.handler = handler
        self.limits = limits or ConnectionLimits()
        self.clock = clock  # milliseconds, for idle expiry
        self.bound: tuple[Listener, ...] = ()  # the listeners as bound (port 0 replaced), once started
        self.loop: asyncio.AbstractEventLoop | None = None
        self.quotas = ConnectionQuotas(0, 0)
        max_idle_ms = self.limits.connections_max_idle_ms
        self._idle = IdleExpiry(max_idle_ms) if max_idle_ms >= 0 else None
        self._idle_check: asyncio.TimerHandle | None = None
        self._sockets: list[tuple[socket.socket, str]] = []  # listening sockets, with their listener's name
        self._acceptors: list[asyncio.Task[None]] = []
        self._slot_waiters: list[asyncio.Future[None]] = []
        self.channels: set[KafkaChannel] = set()
        self._scratch = scratch_buffer()  # shared by the channels: they read one at a time, on the loop's thread
        self._thread: threading.Thread | None = None
        self._started = threading.Event()

    # -- the component's life -------------------------------------------------------------------------

    def start(self) -> None:
        """Bind every listener and serve in a thread of its own; returns once all listen. A listener that
        cannot be bound (the port is taken) raises OSError and nothing stays bound."""
        self.quotas = self.limits.quotas()
        try:
            bound = [self._bind(listener) for listener in self.listeners]
        except BaseException:
            self._close_sockets()
            raise
        self.bound = tuple(bound)
        if self.on_bound is not None:
            self.on_bound(self.bound)
        self.loop = self.loop_factory()
        self._thread = threading.Thread(target=self._run, name="compactlog-socket-server", daemon=True)
        self._thread.start()
        self._started.wait()

    def shutdown(self) -> None:
        """Stop listening, close every connection, stop the event loop and its thread."""
        loop, thread = self.loop, self._thread
        if loop is None or thread is None:
            self._close_sockets()
            return
        if loop.is_running():
            asyncio.run_coroutine_threadsafe(self._close(), loop).result()
            loop.call_soon_threadsafe(loop.stop)
        thread.join()
        self.loop = None

    def _bind(self, listener: Listener) -> Listener:
        """Listen on ``listener``'s address (every interface's, IPv4 and IPv6, for an empty host); the
        listener as bound (the port of its first socket)."""
        infos = socket.getaddrinfo(listener.host or None, listener.port, type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE)
        port = None
        for family, kind, proto, _, address in dict.fromkeys(infos):
            if port is not None and listener.port == 0:  # every socket of a listener on the same free port
                address = (address[0], port, *address[2:])
            try:
                sock = socket.socket(family, kind, proto)
            except OSError:  # an address family this host lacks (IPv6): skipped, as asyncio's create_server does
                continue
            self._sockets.append((sock, listener.name))
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen(LISTEN_BACKLOG)
            sock.setblocking(False)
            port = sock.getsockname()[1] if port is None else port
        if port is None:
            raise OSError(f"no address of {listener} can be listened on")
        bound = Listener(listener.name, listener.host, port)
        log.info("listening on %s", bound)
        return bound

    def _close_sockets(self) -> None:
        for sock, _ in self._sockets:
            sock.close()
        self._sockets.clear()

    def _run(self) -> None:
        loop = self.loop
        assert loop is not None
        asyncio.set_event_loop(loop)
        for sock, listener_name in self._sockets:
            self._acceptors.append(loop.create_task(self._accept(sock, listener_name)))
        self._schedule_idle_check()
        loop.call_soon(self._started.set)
        try:
            loop.run_forever()
        finally:
            loop.close()

    async def _close(self) -> None:
        for acceptor in self._acceptors:
            acceptor.cancel()
        await asyncio.gather(*self._acceptors, return_exceptions=True)
        self._acceptors.clear()
        self._close_sockets()
        if self._idle_check is not None:
            self._idle_check.cancel()
        tasks = [channel.task for channel in self.channels if channel.task is not None]
        for channel in list(self.channels):
            channel.abort()
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    # -- accepting ------------------------------------------------------------------------------------------

    async def _accept(self, sock: socket.socket, listener_name: str) -> None:
        """The acceptor of one listening socket (Kafka's ``Acceptor``)."""
        loop = asyncio.get_running_loop()
        while True:
            while not self.quotas.slot_available():  # max.connections: wait, leaving connections unaccepted
                waiter = loop.create_future()
                self._slot_waiters.append(waiter)
                await waiter
            try:
                conn, address = await loop.sock_accept(sock)
            except OSError as e:  # out of file descriptors, say: the connections wait in the backlog meanwhile
                log.error("accepting a connection on %s failed: %s", listener_name, e)
                await asyncio.sleep(ACCEPT_RETRY_DELAY_S)
                continue
            ip = str(address[0]) if isinstance(address, tuple) else ""
            limit = self.quotas.admit(ip)
            if limit is not None:
                log.info("Rejected connection from %s, address already has the configured maximum of %d "
                         "connections (max.connections.per.ip)", ip, limit)
                conn.close()
                continue
            made: list[KafkaChannel] = []
            try:
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                await loop.connect_accepted_socket(functools.partial(self._channel, listener_name, ip, made), conn)
            except OSError as e:  # the client went away meanwhile
                log.info("a connection from %s closed before it was served: %s", ip, e)
                conn.close()
                if not made or made[0].transport is None:  # else connection_lost releases it
                    if made:
                        self._forget(made[0])
                    self._release(ip)

    def _channel(self, listener_name: str, ip: str, made: list[KafkaChannel]) -> KafkaChannel:
        channel = KafkaChannel(self.handler, listener_name, ip, self.max_request_bytes, self._active, self._closed,
                               self._scratch)
        made.append(channel)
        self.channels.add(channel)
        self._active(channel)
        return channel

    def _release(self, ip: str) -> None:
        self.quotas.release(ip)
        waiters, self._slot_waiters = self._slot_waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def _closed(self, channel: KafkaChannel) -> None:
        self._forget(channel)
        self._release(channel.address)

    def _forget(self, channel: KafkaChannel) -> None:
        self.channels.discard(channel)
        if self._idle is not None:
            self._idle.remove(channel)

    # -- idle connections -----------------------------------------------------------------------------------

    def _active(self, channel: KafkaChannel) -> None:
        if self._idle is not None:
            self._idle.update(channel, self.clock())

    def _schedule_idle_check(self) -> None:
        idle = self._idle
        if idle is None or self.loop is None:
            return
        next_ms = idle.next_expiry_ms()
        delay_ms = idle.max_idle_ms + 1 if next_ms is None else max(0, next_ms - self.clock())
        self._idle_check = self.loop.call_later(min(delay_ms, IDLE_CHECK_MAX_MS) / 1000, self._close_idle)

    def _close_idle(self) -> None:
        """Close the connections idle for longer than ``connections.max.idle.ms``, and look again when the
        oldest of the others would be."""
        assert self._idle is not None
        for channel in self._idle.expired(self.clock()):
            assert isinstance(channel, KafkaChannel)
            log.debug("closing connection from %s: idle for longer than %d ms (connections.max.idle.ms)",
                      channel.peer, self._idle.max_idle_ms)
            channel.abort()
        self._schedule_idle_check()
