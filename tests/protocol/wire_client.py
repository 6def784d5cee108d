"""A raw Kafka-protocol client connection for the protocol tests: size-prefixed frames of kafka-python's
message classes, one request at a time or pipelined (send, then receive)."""

from __future__ import annotations

import socket
import struct
from typing import Any

TIMEOUT_S = 30


class Connection:
    """One client connection speaking size-prefixed frames."""

    def __init__(self, broker: str) -> None:
        host, port = broker.split(":")
        self.sock = socket.create_connection((host, int(port)), timeout=TIMEOUT_S)
        self.correlation_id = 0

    def send(self, request: Any) -> int:
        self.correlation_id += 1
        request.with_header(correlation_id=self.correlation_id, client_id="test")
        self.sock.sendall(bytes(request.encode(header=True, framed=True)))
        return self.correlation_id

    def receive(self, response_class: Any, version: int) -> Any:
        (size,) = struct.unpack(">i", self.recv_exactly(4))
        return response_class.decode(self.recv_exactly(size), version=version, header=True)

    def call(self, request: Any, response_class: Any) -> Any:
        correlation_id = self.send(request)
        response = self.receive(response_class, request.API_VERSION)
        assert response.header.correlation_id == correlation_id
        return response

    def recv_exactly(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("closed by the broker")
            data += chunk
        return data

    def closed_by_peer(self) -> bool:
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    def close(self) -> None:
        self.sock.close()
