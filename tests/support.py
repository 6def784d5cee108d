"""Helpers shared by tests: a fake clock, so nothing time-dependent ever sleeps."""

from __future__ import annotations


class FakeClock:
    """A clock for ``compactlog.open(..., clock=...)``: epoch milliseconds that move only when told."""

    def __init__(self, now: int = 1_700_000_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return int(self.now)

    def advance(self, ms: int) -> int:
        """Move the clock forward by ``ms`` milliseconds; returns the new time."""
        self.now += ms
        return int(self.now)
