"""The memory pool a cleaning round allocates from.

Arrow's default pool in the wheels is mimalloc, which keeps memory freed by one thread out of the reach of
the others until its purge delay (a second) has passed. A round frees a row group's worth every few
milliseconds on one thread after another thread allocated it (reading, mapping, deciding and encoding run
on threads of their own), so under mimalloc its RSS carried 150-200 MB of freed memory beyond what was
live. Arrow's jemalloc pool, with its default decay, reuses memory across threads and ran the same round
as fast (measured, 5M records / 1M keys, warm, in a process holding 124 MiB before the round: peak RSS
490-540 -> 435-460 MiB, 0.9-1.2 s either way). A shorter decay saves a little more and costs time (200 ms:
425-435 MiB, 5% slower; none: 350-360 MiB, 70% slower, every row group faulting its pages in again).

So a round allocates from the jemalloc pool: it is Arrow's default pool while any round of this process
runs, and what it was before once none does. Buffers always go back to the pool they came from, so other
threads of the process allocating meanwhile lose nothing. Without a jemalloc build of Arrow the default pool
is left as it is.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import pyarrow as pa

_lock = threading.Lock()
_rounds = 0  # rounds of this process running now
_before: pa.MemoryPool | None = None  # the default pool when the first of them started


@contextlib.contextmanager
def round_memory_pool() -> Iterator[None]:
    """Arrow's default pool is jemalloc while the block runs (and while any other round does)."""
    global _rounds, _before
    try:
        pool = pa.jemalloc_memory_pool()
    except NotImplementedError:
        yield
        return
    with _lock:
        if _rounds == 0:
            _before = pa.default_memory_pool()
            pa.set_memory_pool(pool)
        _rounds += 1
    try:
        yield
    finally:
        with _lock:
            _rounds -= 1
            if _rounds == 0 and _before is not None:
                pa.set_memory_pool(_before)
                _before = None
