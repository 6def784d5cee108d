"""One connection of the socket server (Kafka's ``KafkaChannel``, with the rules its ``Processor`` applies to
it): the frames read from it, its requests handled in order, its responses written in order, when it stops
reading (muting) and when it closes.

Frames. A request and a response are each a frame: a big-endian int32 size, then that many bytes. A size
larger than ``socket.request.max.bytes``, or negative, closes the connection as soon as its four bytes
arrive. Frames are read into a scratch buffer (one for the connections of an event loop) and copied out
whole; a frame larger than it is read straight into a buffer of its own (no copy). An idle connection holds
no buffer.

Requests in order. The connection's task takes one frame at a time, hands it to the request handler with the
name of the listener it arrived on, and takes the next once the handler returns: the requests of one
connection take effect in their order. The handler answers a response frame (None: no response, as for
``acks=0``) or a :class:`~.request_channel.PendingResponse`: the request has taken effect but its response
waits for something (a Produce for the fsync its records share with others); the connection then handles its
next requests meanwhile, so that the appends of a client's pipelined Produce requests overlap the fsyncs of
the earlier ones. The responses are written in the order of the requests, each once it and those before it
are ready (by the callback of the one that completes last: no Task or queue per response).

Muting (Kafka mutes a channel while its response is in flight). The next request is handled only while
fewer than :data:`MAX_PENDING_RESPONSES` requests wait for their responses and the responses not yet sent (in
the transport's buffer, and ready ones queued behind a pending one) hold at most
:data:`RESPONSE_BUFFER_BYTES`. A client that does not read its responses therefore gets no further request
handled, and a connection holds at most: what it has read (twice :data:`READ_BUFFER_BYTES` of frames read
ahead, and one frame being read: up to ``socket.request.max.bytes``),
:data:`RESPONSE_BUFFER_BYTES` of unsent responses plus the one that crossed it (a Fetch response is at most
``fetch.max.bytes``, or one record larger), and its pending Produce responses.

Reading. The connection reads from its socket while its request is being handled, so that a client's going
away is seen at once; it stops reading (the transport pauses) once the frames read and not yet handled hold
twice :data:`READ_BUFFER_BYTES`, and starts again once they hold at most that, or none is left.

Closing.

* The client closes its side (end of stream) or the connection breaks: it closes at once (no socket left in
  CLOSE-WAIT), its unsent responses and unhandled requests are dropped, and :data:`CONNECTION_CLOSED` is done:
  a handler still running finishes (a request that took effect stays so) but a delayed fetch stops waiting.
* A malformed request (:class:`~compactlog.errors.MalformedRequestError`: Kafka's ``InvalidRequestException``)
  or a handler's bug: the responses of the earlier requests are written, then it closes, with one log line.
* The socket server closes it (idle expiry, shutdown): at once.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections import deque
from collections.abc import Callable
from typing import cast

from ..errors import MalformedRequestError
from .request_channel import CLIENT_HOST, CONNECTION_CLOSED, PendingResponse, RequestHandler

__all__ = ["MAX_PENDING_RESPONSES", "READ_BUFFER_BYTES", "RESPONSE_BUFFER_BYTES", "KafkaChannel", "scratch_buffer"]

log = logging.getLogger("compactlog.network")

_SIZE = struct.Struct(">i")
# Requests of one connection handled but not yet answered, at most (librdkafka sends up to 5 at a time).
MAX_PENDING_RESPONSES = 8
# Frames read ahead of the request being handled: reading stops once they hold twice this much, and starts
# again once they hold at most this much (as asyncio's StreamReader with this limit): a client pipelining
# 1 MB Produce requests does not have the socket's reading stopped and restarted at every request.
READ_BUFFER_BYTES = 1 << 20
# Unsent response bytes that mute a connection: the transport's high-water mark, and the bound on responses
# queued behind a pending one. A Fetch response larger than this is written whole, and mutes the connection
# until most of it has gone.
RESPONSE_BUFFER_BYTES = 1 << 20

# A socket read hands over at most 256 KiB (uvloop's, asyncio's): frames up to this size are read into a
# scratch buffer and copied out; a larger one is read into a buffer of its own, with no copy.
_SCRATCH_BYTES = 256 << 10

_Response = bytes | bytearray | PendingResponse | None


def scratch_buffer() -> memoryview:
    """A scratch buffer for the connections of one event loop (they read one at a time)."""
    return memoryview(bytearray(_SCRATCH_BYTES))


class KafkaChannel(asyncio.BufferedProtocol):
    """A connection: an asyncio protocol whose task handles its requests (:meth:`serve`)."""

    def __init__(self, handler: RequestHandler, listener_name: str, address: str, max_request_bytes: int,
                 on_active: Callable[[KafkaChannel], None], on_closed: Callable[[KafkaChannel], None],
                 scratch: memoryview | None = None) -> None:
        self.handler = handler
        self.listener_name = listener_name
        self.address = address  # the client's IP address
        self.max_request_bytes = max_request_bytes
        self._on_active = on_active  # told when bytes arrive or a response is written (idle expiry)
        self._on_closed = on_closed  # told once, when the connection is lost
        self.transport: asyncio.Transport | None = None
        self.peer: object = None  # as the transport names it: (host, port) for TCP
        self.closed: asyncio.Future[None] | None = None  # done once the connection has closed
        self.task: asyncio.Task[None] | None = None
        # Bytes read land in the scratch buffer (frames up to its size, copied out whole), or, for a frame larger
        # than it, straight in that frame's own buffer once its size is known. The scratch buffer is shared by
        # the connections of an event loop (see :func:`scratch_buffer`); what a read leaves of a frame not yet
        # whole is kept apart (``_partial``) and put back in front of the next read.
        self._scratch = scratch_buffer() if scratch is None else scratch
        self._partial = b""
        self._end = 0  # the scratch buffer's bytes of this connection, while a read is under way
        self._large: bytearray | None = None  # a large frame being read
        self._large_read = 0
        self._frames: deque[bytes | bytearray] = deque()  # whole frames read and not yet handled
        self._frames_bytes = 0
        self._reading_paused = False
        self._writing_paused = False
        self._waiter: asyncio.Future[None] | None = None  # the task's wait for a frame or for unmuting
        self._responses: deque[_Response] = deque()  # from the first pending response on, in request order
        self._queued_bytes = 0  # of the ready responses queued behind a pending one
        self._failed = False

    # -- asyncio's protocol callbacks --------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport = cast(asyncio.Transport, transport)
        self.peer = transport.get_extra_info("peername")
        transport.set_write_buffer_limits(high=RESPONSE_BUFFER_BYTES)
        loop = asyncio.get_running_loop()
        self.closed = loop.create_future()
        self.task = loop.create_task(self.serve())

    def get_buffer(self, sizehint: int) -> memoryview:
        """Where the transport reads next: the rest of a large frame's own buffer, else the scratch buffer
        after what the last read left of a frame. (The transport reads right after this and calls
        :meth:`buffer_updated` before any other connection's callback: the scratch buffer is this
        connection's until then.)"""
        large = self._large
        if large is not None:
            return memoryview(large)[self._large_read:]
        partial = self._partial
        self._scratch[:len(partial)] = partial
        self._end = len(partial)
        return self._scratch[len(partial):]

    def buffer_updated(self, nbytes: int) -> None:
        self._on_active(self)
        large = self._large
        if large is not None:
            self._large_read += nbytes
            if self._large_read == len(large):
                self._large = None
                self._frames.append(large)
                self._frames_bytes += len(large)
                self._frame_read()
            return
        scratch, frames = self._scratch, self._frames
        start, end = 0, self._end + nbytes
        read = False
        while end - start >= _SIZE.size:
            size = _SIZE.unpack_from(scratch, start)[0]
            if not 0 <= size <= self.max_request_bytes:
                log.warning("closing connection from %s: a frame of %d bytes; allowed: 0..%d "
                            "(socket.request.max.bytes)", self.peer, size, self.max_request_bytes)
                self._partial = b""
                self.abort()
                return
            body = start + _SIZE.size
            if end - body >= size:  # a whole frame
                frames.append(bytes(scratch[body:body + size]))
                self._frames_bytes += size
                start = body + size
                read = True
            elif _SIZE.size + size > len(scratch):  # larger than the scratch buffer: read into its own
                self._large = large = bytearray(size)
                large[:end - body] = scratch[body:end]
                self._large_read = end - body
                start = end
                break
            else:
                break
        self._partial = bytes(scratch[start:end]) if start < end else b""
        if read:
            self._frame_read()

    def eof_received(self) -> bool:
        partial = self._partial
        if self._large is not None:
            log.warning("closing connection from %s: a frame of %d bytes cut short at %d", self.peer,
                        len(self._large), self._large_read)
        elif len(partial) >= _SIZE.size:
            log.warning("closing connection from %s: a frame of %d bytes cut short at %d", self.peer,
                        _SIZE.unpack_from(partial)[0], len(partial) - _SIZE.size)
        elif partial:
            log.warning("closing connection from %s: a size prefix cut short (%d bytes)", self.peer, len(partial))
        self.abort()  # the client has gone: what it has not read yet, it will never read
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._failed = True
        self._set_closed()
        self._on_closed(self)

    def pause_writing(self) -> None:
        self._writing_paused = True

    def resume_writing(self) -> None:
        self._writing_paused = False
        self._on_active(self)  # the client reads
        self._wake()

    # -- closing -----------------------------------------------------------------------------------------

    def abort(self) -> None:
        """Close at once, dropping the responses not yet sent."""
        self._failed = True
        if self.transport is not None:
            self.transport.abort()
        self._set_closed()

    def _close(self) -> None:
        """Close once the responses written so far are sent."""
        self._failed = True
        if self.transport is not None:
            self.transport.close()

    def _set_closed(self) -> None:
        if self.closed is not None and not self.closed.done():
            self.closed.set_result(None)
        self._wake()

    # -- the requests ------------------------------------------------------------------------------------

    async def serve(self) -> None:
        """Handle the connection's requests in order until it closes (the connection's task)."""
        CLIENT_HOST.set(f"/{self.address}" if self.address else "")
        CONNECTION_CLOSED.set(self.closed)
        shutting_down = False
        try:
            while not self._failed:
                frame = await self._next_frame()
                if frame is None:
                    return
                try:
                    response = await self.handler(frame, self.listener_name)
                except MalformedRequestError as e:
                    log.warning("closing connection from %s: %s", self.peer, e)
                    return
                self._add(response)
                if self._muted():
                    await self._unmuted()
        except asyncio.CancelledError:  # the server shuts down: unanswered requests stay unanswered
            shutting_down = True
            raise
        except Exception:  # a handler's bug: this connection ends, the server goes on
            log.exception("closing connection from %s after an internal error", self.peer)
        finally:
            try:
                while self._responses and not self._failed and not shutting_down:
                    await self._wait()  # the responses of the requests so far go out
            finally:
                if shutting_down:
                    self.abort()
                else:
                    self._close()

    async def _next_frame(self) -> bytes | bytearray | None:
        """The next frame read; None once the connection has closed."""
        frames = self._frames
        while not frames:
            if self._failed:
                return None
            await self._wait()
        if self._failed:
            return None
        frame = frames.popleft()
        self._frames_bytes -= len(frame)
        if self._reading_paused and (not frames or self._frames_bytes <= READ_BUFFER_BYTES):
            self._reading_paused = False
            assert self.transport is not None
            self.transport.resume_reading()
        return frame

    def _frame_read(self) -> None:
        if self._frames_bytes >= 2 * READ_BUFFER_BYTES and not self._reading_paused:
            self._reading_paused = True
            assert self.transport is not None
            self.transport.pause_reading()
        self._wake()

    def _muted(self) -> bool:
        return (self._writing_paused or len(self._responses) >= MAX_PENDING_RESPONSES
                or self._queued_bytes > RESPONSE_BUFFER_BYTES)

    async def _unmuted(self) -> None:
        while self._muted() and not self._failed:
            await self._wait()

    def _wait(self) -> asyncio.Future[None]:
        """A future done at the next event: a frame read, a response written or sent, the connection closed."""
        waiter = self._waiter
        if waiter is None or waiter.done():
            waiter = self._waiter = asyncio.get_running_loop().create_future()
        return waiter

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # -- the responses -----------------------------------------------------------------------------------

    def _add(self, response: _Response) -> None:
        if isinstance(response, PendingResponse):
            self._responses.append(response)
            response.frame.add_done_callback(self._ready)
        elif self._responses:  # behind a pending response
            self._responses.append(response)
            if response is not None:
                self._queued_bytes += len(response)
        else:
            self._write(response)

    def _ready(self, _: object) -> None:
        """A pending response is done: write the responses at the head of the queue that are ready."""
        queue = self._responses
        while queue:
            head = queue[0]
            if isinstance(head, PendingResponse):
                if not head.frame.done():
                    break
                queue.popleft()
                self._write(self._frame(head.frame))
            else:
                queue.popleft()
                if head is not None:
                    self._queued_bytes -= len(head)
                self._write(head)
        self._wake()

    def _frame(self, frame: asyncio.Future[bytes | bytearray | None]) -> bytes | bytearray | None:
        if frame.cancelled():  # the server shuts down
            self._close()
            return None
        error = frame.exception()
        if error is None:
            return frame.result()
        if not self._failed:  # a handler's bug in the pending part: this connection ends
            log.error("closing connection from %s after an internal error", self.peer, exc_info=error)
            self._close()
        return None

    def _write(self, response: bytes | bytearray | None) -> None:
        if response is None or self._failed:
            return
        transport = self.transport
        assert transport is not None
        if transport.is_closing():  # the client went away
            self._failed = True
            return
        transport.write(response)
        self._on_active(self)
