"""The metrics endpoint: prometheus_client's HTTP server answering ``GET /metrics`` with a data directory's
gauges (:class:`compactlog.gauges.DataDirectoryCollector`), a :class:`~compactlog.server.Component` of
``serve``. It listens where it is told, 127.0.0.1:9404 by default (the Prometheus JMX exporter's usual
port), loopback unless told otherwise: the gauges name topics.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from .errors import ConfigError, EndpointError

if TYPE_CHECKING:
    from prometheus_client.registry import Collector

DEFAULT_ADDRESS = "127.0.0.1:9404"
_log = logging.getLogger("compactlog.server")


def parse_address(address: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6) -> (host, port); ConfigError naming the value otherwise."""
    host, sep, port = address.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"metrics address {address!r} is not HOST:PORT with a port in 0..65535")
    return host, int(port)


class MetricsEndpoint:
    name = "metrics endpoint"

    def __init__(self, collector: Collector, address: str = DEFAULT_ADDRESS) -> None:
        self.host, self.port = parse_address(address)
        self._collector = collector
        self._server: Any = None

    def start(self) -> None:
        from prometheus_client import start_http_server  # imported when used: every command imports the CLI

        from .gauges import registry_of

        try:
            self._server, _ = start_http_server(self.port, self.host, registry=registry_of(self._collector))
        except OSError as e:
            raise EndpointError(f"metrics address {self.host}:{self.port}: cannot listen: {e.strerror}") from e
        self.port = self._server.server_port  # the bound one, when asked for port 0
        _log.info("metrics on http://%s:%d/metrics", self.host, self.port)

    def shutdown(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
