"""The memory pool a cleaning round allocates from.

Arrow's default pool in the wheels is mimalloc, which keeps memory freed by one thread out of the reach of
the others until its purge delay (a second) has passed. A round frees a row group's worth every few
milliseconds on one thread after another thread allocated it (reading, mapping, deciding and encoding run
on threads of their own), so under mimalloc its RSS carries a great deal of freed memory beyond what is
live. Arrow's jemalloc pool reuses memory across threads, and the round runs as fast.

So a round allocates from the jemalloc pool: it is Arrow's default pool while any round of this process
runs, and what it was before once none does. Buffers always go back to the pool they came from, so other
threads of the process allocating meanwhile lose nothing. Without a jemalloc build of Arrow the default pool
is left as it is.

Decay: freed memory stays with the pool for ROUND_DECAY_MS (jemalloc's decay, set before jemalloc makes its
arenas), long enough for a round to reuse it, and goes back to the OS when rounds stop. Returning memory
while a round runs (the decay Arrow builds jemalloc with) costs a page fault for every page taken again, and
faults are dear on virtual machines, most of all with rounds side by side. Jemalloc's purge on demand
(``release_unused``) hands back little, so the decay is what returns memory. The peak RSS of a round is
about the same either way, since the memory is reused.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import pyarrow as pa

_lock = threading.Lock()
_rounds = 0  # rounds of this process running now
_before: pa.MemoryPool | None = None  # the default pool when the first of them started
_decay_set = False
ROUND_DECAY_MS = 10_000  # how long freed memory stays with the pool (see the module docstring)


def _set_decay() -> None:
    """Set jemalloc's decay, once per process (it applies to the arenas jemalloc makes from then on)."""
    global _decay_set
    if not _decay_set:
        pa.jemalloc_set_decay_ms(ROUND_DECAY_MS)
        _decay_set = True


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
            _set_decay()
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
