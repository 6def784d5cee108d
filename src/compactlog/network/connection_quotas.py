"""Connection limits (Kafka's ``ConnectionQuotas``): ``max.connections`` for the broker and
``max.connections.per.ip`` (with ``max.connections.per.ip.overrides``) for each client address.

Rules, as Kafka's:

* the broker-wide limit counts the connections of every listener; at the limit the socket server accepts
  no new connection until one closes (they wait in the listen backlog; Kafka's acceptor blocks the same
  way in ``waitForConnectionSlot``);
* the per-address limit is the address's override if it has one, else ``max.connections.per.ip``; a new
  connection from an address that already has that many is accepted and closed at once (Kafka's
  ``TooManyConnectionsException``, logged as "Rejected connection from ...").

Pure counting: the socket server asks before it serves a connection and tells when one closes.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["ConnectionQuotas"]


class ConnectionQuotas:
    """The connections open, in all and per client address."""

    def __init__(self, max_connections: int, max_connections_per_ip: int,
                 max_connections_per_ip_overrides: Mapping[str, int] | None = None) -> None:
        self.max_connections = max_connections
        self.max_connections_per_ip = max_connections_per_ip
        self.overrides = dict(max_connections_per_ip_overrides or {})  # address -> its limit
        self.total = 0
        self._counts: dict[str, int] = {}

    def slot_available(self) -> bool:
        """Whether the broker-wide limit lets one more connection in."""
        return self.total < self.max_connections

    def limit(self, address: str) -> int:
        return self.overrides.get(address, self.max_connections_per_ip)

    def admit(self, address: str) -> int | None:
        """Count a new connection from ``address`` and return None; or, if ``address`` already has its
        maximum of connections, count nothing and return that maximum (the caller closes the connection)."""
        count = self._counts.get(address, 0)
        limit = self.limit(address)
        if count >= limit:
            return limit
        self._counts[address] = count + 1
        self.total += 1
        return None

    def release(self, address: str) -> None:
        """A connection from ``address`` that :meth:`admit` counted has closed."""
        count = self._counts.get(address, 0)
        if count <= 0:
            raise ValueError(f"no connection from {address} is counted")
        if count == 1:
            del self._counts[address]
        else:
            self._counts[address] = count - 1
        self.total -= 1

    def count(self, address: str) -> int:
        return self._counts.get(address, 0)
