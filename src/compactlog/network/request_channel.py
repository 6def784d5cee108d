"""What passes between the socket server and the request handler (Kafka's ``RequestChannel``): the handler's
signature, a response that is not ready yet, and what a handler may know of the connection its request
came on (the client's host; a future done once the connection has closed).

The connection's values are context variables, set by the task that serves the connection, so that the
handlers (and what they call) read them without a parameter through every layer."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Callable

__all__ = ["CLIENT_HOST", "CONNECTION_CLOSED", "PendingResponse", "RequestHandler"]


class PendingResponse:
    """A response that is not ready yet: the future of its frame (with size prefix; None: no response)."""

    __slots__ = ("frame",)

    def __init__(self, frame: asyncio.Future[bytes | bytearray | None]) -> None:
        self.frame = frame


# (frame without its size prefix, listener name) -> a response frame with its size prefix, None, or pending.
RequestHandler = Callable[[bytes | bytearray, str], Awaitable["bytes | bytearray | PendingResponse | None"]]
# The host of the connection whose request is being handled, as Kafka writes a client's host ("/" + its IP):
# read by handlers that record it (a group member's host).
CLIENT_HOST: contextvars.ContextVar[str] = contextvars.ContextVar("client_host", default="")
# Done once the connection whose request is being handled has closed (None outside a connection): a handler
# that waits (a delayed fetch) stops waiting then, and its response, which nobody would read, is dropped.
CONNECTION_CLOSED: contextvars.ContextVar[asyncio.Future[None] | None] = contextvars.ContextVar(
    "connection_closed", default=None)
