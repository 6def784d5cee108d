"""The socket server's pending responses: a connection handles its next requests while an earlier response
waits, the responses go out in the order of the requests, and shutdown does not wait for a pending one."""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
import sys
import threading
from collections.abc import Iterator
from typing import BinaryIO

import pytest

from compactlog.network.socket_server import PendingResponse, SocketServer, new_event_loop
from compactlog.server_config import Listener


def _frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


class _Handler:
    """``wait`` answers with a pending response that the next ``go`` request completes; ``go`` answers at once;
    ``fail`` answers with a pending response that fails."""

    def __init__(self) -> None:
        self.waiting: asyncio.Future[bytes | None] | None = None
        self.handled: list[bytes] = []
        self.received_wait = threading.Event()  # set once a "wait" request is handled
        self.held: list[tuple[bytes, asyncio.Future[bytes | None]]] = []

    async def __call__(self, frame: bytes, listener: str) -> bytes | PendingResponse | None:
        self.handled.append(frame)
        loop = asyncio.get_running_loop()
        if frame.startswith(b"wait"):
            self.waiting = loop.create_future()
            self.received_wait.set()
            return PendingResponse(self.waiting)
        if frame == b"fail":
            failed: asyncio.Future[bytes | None] = loop.create_future()
            failed.set_exception(RuntimeError("a bug in a pending response"))
            return PendingResponse(failed)
        if frame.startswith(b"hold"):
            held: asyncio.Future[bytes | None] = loop.create_future()
            self.held.append((frame, held))
            return PendingResponse(held)
        if frame == b"release":  # the held responses complete in the reverse order of their requests, each at
            for turn, (request, held) in enumerate(reversed(self.held)):  # a later turn of the loop
                loop.call_later(0.01 * turn, held.set_result, _frame(b"answer to " + request))
        if self.waiting is not None and not self.waiting.done():
            self.waiting.set_result(_frame(b"answer to wait"))
        return _frame(b"answer to " + frame)


@pytest.fixture(params=["uvloop", "asyncio"])
def served(request: pytest.FixtureRequest) -> Iterator[tuple[_Handler, int]]:
    handler = _Handler()
    loop_factory = new_event_loop if request.param == "uvloop" else asyncio.new_event_loop
    server = SocketServer([Listener("PLAINTEXT", "127.0.0.1", 0)], 1 << 20, handler, loop_factory=loop_factory)
    server.start()
    try:
        yield handler, server.bound[0].port
    finally:
        server.shutdown()


def _read_frame(stream: BinaryIO) -> bytes:
    prefix = stream.read(4)
    payload = stream.read(struct.unpack(">i", prefix)[0]) if len(prefix) == 4 else b""
    if not payload:
        raise ConnectionError("the server closed the connection")
    return payload


def test_a_pending_response_lets_the_next_request_run_and_responses_keep_the_request_order(served) -> None:
    handler, port = served
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        # "go" completes the pending response of "wait": only if the server handles it before answering "wait".
        conn.sendall(_frame(b"wait") + _frame(b"go"))
        stream = conn.makefile("rb")
        assert _read_frame(stream) == b"answer to wait"
        assert _read_frame(stream) == b"answer to go"
    assert handler.handled == [b"wait", b"go"]


def test_responses_completing_in_reverse_order_go_out_in_the_order_of_the_requests(served) -> None:
    _, port = served
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(b"".join(_frame(b"hold%d" % i) for i in range(5)) + _frame(b"release") + _frame(b"after"))
        stream = conn.makefile("rb")
        assert [_read_frame(stream) for _ in range(7)] == [
            *(b"answer to hold%d" % i for i in range(5)), b"answer to release", b"answer to after"]


def test_a_failed_pending_response_closes_its_connection_after_the_earlier_responses(served) -> None:
    _, port = served
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(_frame(b"first") + _frame(b"fail") + _frame(b"after"))
        stream = conn.makefile("rb")
        assert _read_frame(stream) == b"answer to first"
        with pytest.raises(ConnectionError):
            _read_frame(stream)


def test_shutdown_does_not_wait_for_a_response_still_pending() -> None:
    handler = _Handler()
    server = SocketServer([Listener("PLAINTEXT", "127.0.0.1", 0)], 1 << 20, handler)
    server.start()
    stopper = threading.Thread(target=server.shutdown, daemon=True)
    with socket.create_connection(("127.0.0.1", server.bound[0].port), timeout=10) as conn:
        conn.sendall(_frame(b"wait"))  # its response stays pending: no "go" follows
        assert handler.received_wait.wait(10)
        stopper.start()
        stopper.join(10)
    assert not stopper.is_alive(), "shutdown hung on a pending response"


def test_without_uvloop_the_server_runs_on_asyncios_loop_and_says_so(monkeypatch: pytest.MonkeyPatch,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # as where it is not installed: its import fails
    with caplog.at_level(logging.INFO, logger="compactlog.network"):
        loop = new_event_loop()
    try:
        assert isinstance(loop, asyncio.BaseEventLoop)  # asyncio's own (uvloop's Loop is not one)
    finally:
        loop.close()
    assert [r.getMessage() for r in caplog.records] == [
        "uvloop is not installed: the socket server runs on asyncio's event loop"]
