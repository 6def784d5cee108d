"""Idle connections (Kafka's ``Selector.IdleExpiryManager``): which connections have read or written nothing
for longer than ``connections.max.idle.ms``.

A connection is active when bytes arrive from it or a response is written to it; one that stays inactive
for more than the limit is expired (the socket server closes it), whether or not a request of it is still
being handled (a delayed fetch), as Kafka's selector has it: a client that neither sends nor reads holds
nothing for longer than the limit. The connections are kept in the order of their last activity, so that
finding the expired ones looks only at those that are.

Pure: the caller passes the time (milliseconds of a monotonic clock) and closes what is returned.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable

__all__ = ["IdleExpiry"]


class IdleExpiry:
    """Connections by their last activity, oldest first."""

    def __init__(self, max_idle_ms: int) -> None:
        self.max_idle_ms = max_idle_ms
        self._last_active: OrderedDict[Hashable, int] = OrderedDict()

    def __len__(self) -> int:
        return len(self._last_active)

    def update(self, connection: Hashable, now_ms: int) -> None:
        """``connection`` was active at ``now_ms``."""
        last_active = self._last_active
        last_active[connection] = now_ms
        last_active.move_to_end(connection)

    def remove(self, connection: Hashable) -> None:
        self._last_active.pop(connection, None)

    def expired(self, now_ms: int) -> list[Hashable]:
        """The connections inactive for more than ``max_idle_ms`` at ``now_ms``, oldest first; they are
        forgotten here."""
        last_active = self._last_active
        expired = []
        for connection, active_ms in last_active.items():
            if now_ms - active_ms <= self.max_idle_ms:
                break
            expired.append(connection)
        for connection in expired:
            del last_active[connection]
        return expired

    def next_expiry_ms(self) -> int | None:
        """When the oldest connection expires if it stays inactive (None: no connection)."""
        for active_ms in self._last_active.values():
            return active_ms + self.max_idle_ms + 1
        return None
