"""The socket server's connection rules with real sockets and a stand-in request handler: a connection whose
responses are not read is muted (by the bytes of its unsent responses, and by its requests pending), a
client's close closes the connection at once and tells the handler (CONNECTION_CLOSED), idle connections
are closed (clock injected), ``max.connections`` holds new connections back until one closes and
``max.connections.per.ip`` closes those past it."""

from __future__ import annotations

import asyncio
import random
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psutil
import pytest

from compactlog.network.channel import MAX_PENDING_RESPONSES, RESPONSE_BUFFER_BYTES
from compactlog.network.request_channel import CONNECTION_CLOSED, PendingResponse
from compactlog.network.socket_server import ConnectionLimits, SocketServer, new_event_loop
from compactlog.server_config import Listener

DEADLINE_S = 10


def _frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


class _Handler:
    """``big:N`` answers N bytes; ``hold`` answers a pending response (completed by :meth:`release`);
    ``closed?`` waits until its connection has closed and answers nothing; anything else answers at once."""

    def __init__(self) -> None:
        self.handled: list[bytes] = []
        self.held: list[asyncio.Future[bytes | None]] = []
        self.saw_close = threading.Event()
        self.loop: asyncio.AbstractEventLoop | None = None

    async def __call__(self, frame: bytes, listener: str) -> bytes | PendingResponse | None:
        self.handled.append(frame)
        self.loop = asyncio.get_running_loop()
        if frame.startswith(b"big:"):
            return _frame(b"b" * int(frame[4:]))
        if frame == b"hold":
            held: asyncio.Future[bytes | None] = self.loop.create_future()
            self.held.append(held)
            return PendingResponse(held)
        if frame == b"closed?":
            closed = CONNECTION_CLOSED.get()
            assert closed is not None
            await closed
            self.saw_close.set()
            return _frame(b"nobody reads this")
        return _frame(b"answer to " + frame)

    def release(self) -> None:
        """Complete the held responses (from the test's thread)."""
        assert self.loop is not None
        for held in self.held:
            self.loop.call_soon_threadsafe(held.set_result, _frame(b"held"))


def _serve(loop_factory: Callable[[], asyncio.AbstractEventLoop], limits: ConnectionLimits | None = None,
           clock: Callable[[], int] | None = None) -> tuple[_Handler, SocketServer]:
    handler = _Handler()
    kwargs: dict[str, Any] = {} if clock is None else {"clock": clock}
    server = SocketServer([Listener("PLAINTEXT", "127.0.0.1", 0)], 64 << 20, handler, loop_factory=loop_factory,
                          limits=limits, **kwargs)
    server.start()
    return handler, server


@pytest.fixture(params=["uvloop", "asyncio"])
def loop_factory(request: pytest.FixtureRequest) -> Callable[[], asyncio.AbstractEventLoop]:
    return new_event_loop if request.param == "uvloop" else asyncio.new_event_loop


@pytest.fixture
def served(loop_factory) -> Iterator[tuple[_Handler, SocketServer]]:
    handler, server = _serve(loop_factory)
    try:
        yield handler, server
    finally:
        server.shutdown()


def _connect(port: int, source: str = "127.0.0.1", receive_buffer: int = 0) -> socket.socket:
    sock = socket.socket()
    if receive_buffer:  # before connecting: the window the client offers
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    sock.bind((source, 0))
    sock.settimeout(DEADLINE_S)
    sock.connect(("127.0.0.1", port))
    return sock


def _read_frame(sock: socket.socket) -> bytes:
    def exactly(n: int) -> bytes:
        data = bytearray()
        while len(data) < n:
            chunk = sock.recv(min(n - len(data), 1 << 20))
            if not chunk:
                raise ConnectionError("closed by the server")
            data += chunk
        return bytes(data)
    return exactly(struct.unpack(">i", exactly(4))[0])


def _closed_by_server(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def _until(condition: Callable[[], bool]) -> bool:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)  # the server runs on its own thread: polled, with a deadline
    return True


def _stays(condition: Callable[[], bool], seconds: float = 0.5) -> bool:
    """Whether ``condition`` holds throughout ``seconds`` (what the server does not do cannot be awaited)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not condition():
            return False
        time.sleep(0.01)
    return True


def test_a_client_that_does_not_read_gets_no_further_request_handled(served) -> None:
    handler, server = served
    big = 8 * RESPONSE_BUFFER_BYTES  # more than the kernel's buffers take on loopback: the rest stays queued
    with _connect(server.bound[0].port, receive_buffer=4096) as conn:
        conn.sendall(b"".join(_frame(b"big:%d" % big) for _ in range(3)) + _frame(b"probe"))
        assert _until(lambda: len(handler.handled) >= 1)
        assert _stays(lambda: len(handler.handled) == 1), handler.handled  # muted by its unsent response
        answers = [_read_frame(conn) for _ in range(4)]  # reading unmutes it: every request is answered
    assert [len(a) for a in answers[:3]] == [big] * 3 and answers[3] == b"answer to probe"


def test_responses_queued_behind_a_pending_one_mute_the_connection_by_their_bytes(served) -> None:
    handler, server = served
    with _connect(server.bound[0].port) as conn:
        conn.sendall(_frame(b"hold") + _frame(b"big:%d" % (2 * RESPONSE_BUFFER_BYTES)) + _frame(b"probe"))
        assert _until(lambda: len(handler.handled) >= 2)
        assert _stays(lambda: len(handler.handled) == 2), handler.handled  # 2 MiB wait behind the held one
        handler.release()
        answers = [_read_frame(conn) for _ in range(3)]
    assert answers[0] == b"held" and len(answers[1]) == 2 * RESPONSE_BUFFER_BYTES and answers[2] == b"answer to probe"


def test_a_connection_with_as_many_pending_responses_as_allowed_is_muted(served) -> None:
    handler, server = served
    with _connect(server.bound[0].port) as conn:
        conn.sendall(_frame(b"hold") * MAX_PENDING_RESPONSES + _frame(b"probe"))
        assert _until(lambda: len(handler.handled) >= MAX_PENDING_RESPONSES)
        assert _stays(lambda: len(handler.handled) == MAX_PENDING_RESPONSES)
        handler.release()
        assert [_read_frame(conn) for _ in range(MAX_PENDING_RESPONSES + 1)] == [
            b"held"] * MAX_PENDING_RESPONSES + [b"answer to probe"]


def _close_wait(port: int) -> int:
    """Sockets of this process (the server runs in it) on ``port`` left in CLOSE-WAIT."""
    return sum(1 for c in psutil.Process().net_connections(kind="tcp")
               if c.status == psutil.CONN_CLOSE_WAIT and c.laddr and c.laddr.port == port)


def test_a_client_closing_while_its_request_waits_closes_the_connection_and_ends_the_wait(served) -> None:
    handler, server = served
    port = server.bound[0].port
    clients = [_connect(port) for _ in range(20)]
    for conn in clients:
        conn.sendall(_frame(b"closed?"))
    assert _until(lambda: len(handler.handled) == 20)
    for conn in clients:
        conn.close()
    assert _until(lambda: not server.channels and _close_wait(port) == 0), (len(server.channels), _close_wait(port))
    assert handler.saw_close.wait(DEADLINE_S)


class _Clock:
    def __init__(self) -> None:
        self.now_ms = 0

    def __call__(self) -> int:
        return self.now_ms


def test_a_connection_idle_for_longer_than_connections_max_idle_ms_is_closed(loop_factory) -> None:
    clock = _Clock()
    handler, server = _serve(loop_factory, ConnectionLimits(connections_max_idle_ms=200), clock)
    try:
        port = server.bound[0].port
        with _connect(port) as silent, _connect(port) as waiting, _connect(port) as active:
            waiting.sendall(_frame(b"hold"))  # a request in flight does not keep a connection open
            assert _until(lambda: len(handler.handled) == 1 and len(server.channels) == 3)
            clock.now_ms = 150
            active.sendall(_frame(b"ping"))
            assert _read_frame(active) == b"answer to ping"
            clock.now_ms = 250  # silent and waiting were last active at 0, active at 150
            assert _closed_by_server(silent) and _closed_by_server(waiting)
            active.sendall(_frame(b"ping"))
            assert _read_frame(active) == b"answer to ping"
    finally:
        server.shutdown()


def test_at_max_connections_a_new_connection_waits_until_one_closes(loop_factory) -> None:
    _, server = _serve(loop_factory, ConnectionLimits(max_connections=2))
    try:
        port = server.bound[0].port
        first, second = _connect(port), _connect(port)
        for conn in (first, second):
            conn.sendall(_frame(b"hello"))
            assert _read_frame(conn) == b"answer to hello"
        with _connect(port) as third:  # the kernel completes its handshake; the server does not accept it
            third.sendall(_frame(b"hello"))
            third.settimeout(0.5)
            with pytest.raises(TimeoutError):
                third.recv(1)
            assert len(server.channels) == 2
            first.close()
            third.settimeout(DEADLINE_S)
            assert _read_frame(third) == b"answer to hello"
        second.close()
    finally:
        server.shutdown()


def test_past_max_connections_per_ip_a_new_connection_is_closed_and_a_close_frees_a_slot(loop_factory) -> None:
    limits = ConnectionLimits(max_connections_per_ip=2,
                              max_connections_per_ip_overrides=(("127.0.0.2", 3), ("127.0.0.3", 0)))
    _, server = _serve(loop_factory, limits)
    try:
        port = server.bound[0].port
        kept = [_connect(port) for _ in range(2)] + [_connect(port, "127.0.0.2") for _ in range(3)]
        for conn in kept:
            conn.sendall(_frame(b"hello"))
            assert _read_frame(conn) == b"answer to hello"
        for source in ("127.0.0.1", "127.0.0.2", "127.0.0.3"):
            with _connect(port, source) as refused:
                assert _closed_by_server(refused), source
        kept[0].close()
        assert _until(lambda: server.quotas.count("127.0.0.1") == 1)
        with _connect(port) as admitted:
            admitted.sendall(_frame(b"hello"))
            assert _read_frame(admitted) == b"answer to hello"
        for conn in kept[1:]:
            conn.close()
    finally:
        server.shutdown()


class _Transport(asyncio.Transport):
    """What a channel needs of a transport, in memory: records what it is told."""

    def __init__(self) -> None:
        super().__init__()
        self.written: list[bytes] = []
        self.reading = True
        self.aborted = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 1) if name == "peername" else default

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def write(self, data: Any) -> None:
        self.written.append(bytes(data))

    def is_closing(self) -> bool:
        return self.aborted

    def abort(self) -> None:
        self.aborted = True

    def close(self) -> None:
        self.aborted = True


@pytest.mark.parametrize("seed", range(5))
def test_frames_of_every_size_arrive_whole_however_the_bytes_are_split(seed: int) -> None:
    """Frames from empty to larger than the scratch buffer (and those at its edge), in reads of random sizes
    (one byte to a few times the largest frame), on two connections that share the scratch buffer and read
    in turns, are each handled once, whole and in order."""
    from compactlog.network.channel import _SCRATCH_BYTES, KafkaChannel, scratch_buffer
    rng = random.Random(seed)
    scratch = scratch_buffer()
    edges = [0, 1, _SCRATCH_BYTES - 5, _SCRATCH_BYTES - 4, _SCRATCH_BYTES - 3, 3 * _SCRATCH_BYTES]

    def payloads() -> list[bytes]:
        chosen = [rng.randbytes(size) for size in edges + [rng.choice([rng.randrange(100), rng.randrange(
            2 * _SCRATCH_BYTES)]) for _ in range(30)]]
        rng.shuffle(chosen)
        return chosen

    sent = [payloads(), payloads()]
    streams = [b"".join(_frame(p) for p in frames) for frames in sent]
    handled: list[list[bytes]] = [[], []]

    def handler(index: int) -> Any:
        async def handle(frame: bytes | bytearray, listener: str) -> bytes:
            handled[index].append(bytes(frame))
            return _frame(b"ok")
        return handle

    async def scenario() -> list[_Transport]:
        channels = [KafkaChannel(handler(i), "PLAINTEXT", "127.0.0.1", 8 * _SCRATCH_BYTES, lambda c: None,
                                 lambda c: None, scratch) for i in range(2)]
        transports = [_Transport(), _Transport()]
        for channel, transport in zip(channels, transports, strict=True):
            channel.connection_made(transport)
        at = [0, 0]
        for _ in range(100_000):
            ready = [i for i in range(2) if at[i] < len(streams[i]) and transports[i].reading
                     and not transports[i].aborted]
            if not ready:
                if all(at[i] == len(streams[i]) or transports[i].aborted for i in range(2)):
                    break
                await asyncio.sleep(0)  # the channels' tasks take frames, and reading resumes
                continue
            i = rng.choice(ready)
            buffer = channels[i].get_buffer(-1)
            assert len(buffer) > 0  # as asyncio's transports require
            n = min(len(buffer), len(streams[i]) - at[i], rng.choice([1, 3, 4, 100, 70_000, 1 << 20]))
            buffer[:n] = streams[i][at[i]:at[i] + n]
            channels[i].buffer_updated(n)
            at[i] += n
            if rng.random() < 0.3:
                await asyncio.sleep(0)
        for _ in range(1000):
            if all(len(handled[i]) == len(sent[i]) or transports[i].aborted for i in range(2)):
                break
            await asyncio.sleep(0)
        for channel in channels:
            channel.abort()
        return transports

    transports = asyncio.run(scenario())
    assert handled == sent
    assert [t.written for t in transports] == [[_frame(b"ok")] * len(frames) for frames in sent]
