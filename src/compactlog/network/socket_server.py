"""The socket server: listens on the configured listeners and frames bytes (Kafka's ``SocketServer``).

A request and a response are each a frame: a big-endian int32 size, then that many bytes. The server reads
one frame from a connection, hands it to the request handler with the name of the listener it arrived on,
and reads the next once the handler returns: so the requests of one connection take effect in their order,
as Kafka's muted channels have it. The handler answers a response frame (None: no response, as for
``acks=0``) or a :class:`PendingResponse`: the request has taken effect but its response waits for
something (a Produce for the fsync its records share with others). The connection then reads and handles
its next requests meanwhile, up to :data:`MAX_PENDING_RESPONSES` unanswered, so the appends of a client's
pipelined Produce requests overlap the fsyncs of the earlier ones; the responses are written in the order
of the requests, each once it and those before it are ready (by the callback of the one that completes
last: no Task or queue per response).

A frame larger than ``socket.request.max.bytes`` (or of negative size), one cut short by a closed
connection, or one the handler refuses as malformed (:class:`~compactlog.errors.MalformedRequestError`)
closes that connection with one log line; the other connections are not affected.

Why asyncio: every connection is a coroutine on one event loop, so a thousand idle or slow clients cost a
thousand small objects, not threads, and a long-polling Fetch is a timer. Handlers run their blocking store
calls (fsyncs, Parquet reads) in a thread pool (see :mod:`compactlog.broker.kafka_apis`), so the loop keeps
serving the other connections meanwhile; a client that does not read its responses blocks only its own
coroutine (``drain``: its requests are no longer read). The loop is uvloop's where it is installed
(:func:`new_event_loop`).

The server is a component: :meth:`SocketServer.start` binds every listener and returns once they listen,
in a thread of its own that runs the event loop; :meth:`SocketServer.shutdown` closes them and stops it.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import threading
from collections import deque
from collections.abc import Awaitable, Callable, Sequence

from ..errors import MalformedRequestError
from ..server_config import Listener

__all__ = ["CLIENT_HOST", "MAX_PENDING_RESPONSES", "PendingResponse", "RequestHandler", "SocketServer",
           "new_event_loop"]

log = logging.getLogger("compactlog.network")



def new_event_loop() -> asyncio.AbstractEventLoop:
    """The socket server's event loop: uvloop's (libuv) where it is installed, as it spends less CPU per
    request on its transports, callbacks and executor handoffs than asyncio's; else asyncio's."""
    try:
        import uvloop  # imported by serve only: ``import compactlog`` does not load it
    except ImportError:
        log.info("uvloop is not installed: the socket server runs on asyncio's event loop")
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


class PendingResponse:
    """A response that is not ready yet: the future of its frame (with size prefix; None: no response)."""

    __slots__ = ("frame",)

    def __init__(self, frame: asyncio.Future[bytes | bytearray | None]) -> None:
        self.frame = frame


# (frame without its size prefix, listener name) -> a response frame with its size prefix, None, or pending.
RequestHandler = Callable[[bytes, str], Awaitable["bytes | bytearray | PendingResponse | None"]]
SIZE_BYTES = 4
# The host of the connection whose request is being handled, as Kafka writes a client's host ("/" + its IP):
# set by each connection's task, read by handlers that record it (a group member's host).
CLIENT_HOST: contextvars.ContextVar[str] = contextvars.ContextVar("client_host", default="")
# Requests of one connection handled but not yet answered, at most (librdkafka sends up to 5 at a time).
MAX_PENDING_RESPONSES = 8
# A connection's stream buffer: reading stops while it holds twice this much. At asyncio's default (64 KiB)
# a 1 MB produce request paused and resumed the socket's reading at every 256 KiB read on its way in.
READ_BUFFER_BYTES = 1 << 20


class SocketServer:
    """Listeners speaking size-prefixed frames to a :data:`RequestHandler`."""

    def __init__(self, listeners: Sequence[Listener], max_request_bytes: int, handler: RequestHandler,
                 on_bound: Callable[[tuple[Listener, ...]], None] | None = None,
                 loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = None) -> None:
        self.loop_factory = loop_factory or new_event_loop
        self.on_bound = on_bound  # told the bound listeners before the first connection is accepted
        self.listeners = tuple(listeners)
        self.max_request_bytes = max_request_bytes
        self.handler = handler
        self.bound: tuple[Listener, ...] = ()  # the listeners as bound (port 0 replaced), once started
        self.loop: asyncio.AbstractEventLoop | None = None
        self._servers: list[asyncio.Server] = []
        self._connections: set[asyncio.Task[None]] = set()
        self._thread: threading.Thread | None = None
        self._started = threading.Event()
        self._start_error: BaseException | None = None

    # -- the component's life -------------------------------------------------------------------------

    def start(self) -> None:
        """Bind every listener and serve in a thread of its own; returns once all listen. A listener that
        cannot be bound (the port is taken) raises OSError and nothing stays bound."""
        self._thread = threading.Thread(target=self._run, name="compactlog-socket-server", daemon=True)
        self._thread.start()
        self._started.wait()
        if self._start_error is not None:
            self._thread.join()
            raise self._start_error

    def shutdown(self) -> None:
        """Stop listening, close every connection, stop the event loop and its thread."""
        loop, thread = self.loop, self._thread
        if loop is None or thread is None:
            return
        if loop.is_running():
            asyncio.run_coroutine_threadsafe(self._close(), loop).result()
            loop.call_soon_threadsafe(loop.stop)
        thread.join()
        self.loop = None

    def _run(self) -> None:
        self.loop = loop = self.loop_factory()
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._bind())
        except BaseException as e:  # handed to start(), which raises it in the caller's thread
            self._start_error = e
            loop.run_until_complete(self._close())
            loop.close()
            self._started.set()
            return
        self._started.set()
        try:
            loop.run_forever()
        finally:
            loop.close()

    async def _bind(self) -> None:
        bound = []
        for listener in self.listeners:
            server = await asyncio.start_server(functools.partial(self._accept, listener_name=listener.name),
                                                listener.host or None, listener.port, reuse_address=True,
                                                start_serving=False, limit=READ_BUFFER_BYTES)
            self._servers.append(server)
            port = server.sockets[0].getsockname()[1]
            bound.append(Listener(listener.name, listener.host, port))
            log.info("listening on %s", bound[-1])
        self.bound = tuple(bound)
        if self.on_bound is not None:
            self.on_bound(self.bound)
        for server in self._servers:
            await server.start_serving()

    async def _close(self) -> None:
        for server in self._servers:
            server.close()
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.gather(*self._connections, return_exceptions=True)
        for server in self._servers:
            await server.wait_closed()
        self._servers.clear()

    # -- connections ----------------------------------------------------------------------------------------

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, listener_name: str) -> None:
        task = asyncio.get_running_loop().create_task(self._serve(reader, writer, listener_name))
        self._connections.add(task)
        task.add_done_callback(self._connections.discard)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, listener_name: str) -> None:
        peer = writer.get_extra_info("peername")
        CLIENT_HOST.set(f"/{peer[0]}" if isinstance(peer, tuple) else "")
        responses = _Responses(writer, peer)
        shutting_down = False
        try:
            while not responses.failed:
                frame = await self._read_frame(reader, peer)
                if frame is None:
                    return
                try:
                    response = await self.handler(frame, listener_name)
                except MalformedRequestError as e:
                    log.warning("closing connection from %s: %s", peer, e)
                    return
                responses.add(response)
                while len(responses) >= MAX_PENDING_RESPONSES and not responses.failed:
                    await responses.progress()
                await writer.drain()  # a client that does not read its responses is no longer read either
        except (ConnectionError, asyncio.IncompleteReadError):
            return  # the client went away; nothing to answer
        except asyncio.CancelledError:  # the server shuts down: unanswered requests stay unanswered
            shutting_down = True
            raise
        except Exception:  # a handler's bug: this connection ends, the server goes on
            log.exception("closing connection from %s after an internal error", peer)
        finally:
            try:
                while len(responses) and not responses.failed and not shutting_down:
                    await responses.progress()  # the responses of the requests so far go out
            finally:
                writer.close()  # after the buffered responses are written

    async def _read_frame(self, reader: asyncio.StreamReader, peer: object) -> bytes | None:
        """The next frame's bytes; None (after a log line if the frame was bad) when the connection ends."""
        try:
            prefix = await reader.readexactly(SIZE_BYTES)
        except asyncio.IncompleteReadError as e:
            if e.partial:
                log.warning("closing connection from %s: a size prefix cut short (%d bytes)", peer, len(e.partial))
            return None
        size = int.from_bytes(prefix, "big", signed=True)
        if not 0 <= size <= self.max_request_bytes:
            log.warning("closing connection from %s: a frame of %d bytes; allowed: 0..%d "
                        "(socket.request.max.bytes)", peer, size, self.max_request_bytes)
            return None
        try:
            return await reader.readexactly(size)
        except asyncio.IncompleteReadError as e:
            log.warning("closing connection from %s: a frame of %d bytes cut short at %d", peer, size, len(e.partial))
            return None


class _Responses:
    """A connection's responses in the order of its requests: each is written as soon as it and every one
    before it are ready, by the callback of the pending response that completes (no Task, no queue per
    connection). After a failure (a pending response's error) the connection is closed and later responses
    are not written."""

    __slots__ = ("_peer", "_queue", "_waiter", "_writer", "failed")

    def __init__(self, writer: asyncio.StreamWriter, peer: object) -> None:
        self._writer = writer
        self._peer = peer
        self._queue: deque[bytes | bytearray | PendingResponse | None] = deque()
        self._waiter: asyncio.Future[None] | None = None  # the reading coroutine's wait for progress
        self.failed = False

    def __len__(self) -> int:
        return len(self._queue)

    def add(self, response: bytes | bytearray | PendingResponse | None) -> None:
        if isinstance(response, PendingResponse):
            self._queue.append(response)
            response.frame.add_done_callback(self._ready)
        elif self._queue:  # behind a pending response
            self._queue.append(response)
        else:
            self._write(response)

    def progress(self) -> asyncio.Future[None]:
        """A future done when a response has left the queue or the connection failed."""
        if self._waiter is None or self._waiter.done():
            self._waiter = asyncio.get_running_loop().create_future()
        return self._waiter

    def _ready(self, _: object) -> None:
        queue = self._queue
        while queue:
            head = queue[0]
            if isinstance(head, PendingResponse):
                if not head.frame.done():
                    break
                queue.popleft()
                self._write(self._frame(head.frame))
            else:
                queue.popleft()
                self._write(head)
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _frame(self, frame: asyncio.Future[bytes | bytearray | None]) -> bytes | bytearray | None:
        if frame.cancelled():  # the server shuts down
            self._fail()
            return None
        error = frame.exception()
        if error is None:
            return frame.result()
        if not self.failed:  # a handler's bug in the pending part: this connection ends
            log.error("closing connection from %s after an internal error", self._peer, exc_info=error)
            self._fail()
        return None

    def _fail(self) -> None:
        self.failed = True
        self._writer.close()

    def _write(self, response: bytes | bytearray | None) -> None:
        if response is None or self.failed:
            return
        if self._writer.is_closing():  # the client went away
            self._fail()
            return
        self._writer.write(response)

