"""The memory pool a cleaning round allocates from.

Arrow's default pool in the wheels is mimalloc, which keeps memory freed by one thread out of the reach of
the others until its purge delay (a second) has passed. A round frees a row group's worth every few
milliseconds on one thread after another thread allocated it (reading, mapping, deciding and encoding run
on threads of their own), so under mimalloc its RSS carried 150-200 MB of freed memory beyond what was
live. Arrow's jemalloc pool reuses memory across threads: the same round ran as fast (measured, 5M records
/ 1M keys, warm, in a process holding 124 MiB before the round: peak RSS 490-540 -> 435-460 MiB).

So a round allocates from the jemalloc pool: it is Arrow's default pool while any round of this process
runs, and what it was before once none does. Buffers always go back to the pool they came from, so other
threads of the process allocating meanwhile lose nothing. Without a jemalloc build of Arrow the default pool
is left as it is.

Decay: the pool keeps what a round frees for the round to reuse (jemalloc's decay is turned off before its
arenas are made), and when the last round ends it hands everything unused back to the OS at once. Returning
memory while a round runs (jemalloc's time-based decay) costs a page fault for every page taken again, and
faults are dear on virtual machines (on this one, a nested VM, a one-core round of 2M records spent
0.12-0.31 s of its 0.8-0.9 s in the kernel with the decay, 0.10-0.16 s without). Measured, 8 partitions of
2M records cleaned one core each: one process 5.3-5.4 s against 5.8-6.1 s with the decay, two processes
side by side 1.74-1.80x one process against 1.41-1.73x; the peak RSS of a round is about the same either
way, since the memory is reused.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import pyarrow as pa

_lock = threading.Lock()
_rounds = 0  # rounds of this process running now
_before: pa.MemoryPool | None = None  # the default pool when the first of them started
_decay_off = False


def _no_decay() -> None:
    """Turn jemalloc's decay off, once per process (it applies to the arenas jemalloc makes from then on)."""
    global _decay_off
    if not _decay_off:
        pa.jemalloc_set_decay_ms(-1)
        _decay_off = True


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
            _no_decay()
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
                pool.release_unused()  # what the rounds freed goes back to the OS, once
