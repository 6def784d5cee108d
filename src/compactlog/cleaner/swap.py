"""The cleaner's side of the swap: its cleaned groups are installed only through the log's one locked entry
point, :meth:`compactlog.log.Log.swap_cleaned`, which runs Kafka's ``.cleaned`` -> ``.swap`` -> live protocol
(:mod:`compactlog.log.swap`, where its crash recovery sits next to it). Output that is not installed (a round
that failed or was abandoned) is removed with :func:`discard`; ``SwapHook`` stops the protocol at a step in
tests.
"""

from __future__ import annotations

from ..log.swap import SwapHook, discard

__all__ = ["SwapHook", "discard"]
