"""glibc's thresholds for the broker process's large allocations (request frames, fetch responses, the read
buffers behind them).

glibc maps an allocation of at least ``M_MMAP_THRESHOLD`` bytes with mmap and unmaps it when it is freed;
a smaller one comes from a heap (one per thread, nearly), whose top is given back to the system once more
than ``M_TRIM_THRESHOLD`` bytes of it are free. By default both thresholds move: a freed mapped block larger
than the mmap threshold raises it to that block's size (up to 32 MiB), and the trim threshold to twice that.
The broker's costs would then depend on the sizes it happened to free first: once a 1 MB request frame has
been freed the trim threshold is about 2 MB, and a storage thread that reads into a few buffers of about 1 MB
at once (a fetch's tables, its record batches, its frame) and frees them leaves more than that free at its
heap's top, which is given back, so that every read faults its pages in again (about 700 page faults a read);
after a burst of huge responses (up to ``fetch.max.bytes``), the mmap threshold sits at their size and their
memory is kept once freed.

So the thresholds are fixed: allocations of :data:`MMAP_THRESHOLD_BYTES` and more (large fetch responses,
large produce requests) are mapped and given back when freed; smaller ones, the buffers of the produce and
consume paths (about 1 MiB each), come from the heaps, which keep up to :data:`TRIM_THRESHOLD_BYTES` free at
their top for the next request. With another C library (musl, macOS) nothing is set.
"""

from __future__ import annotations

import ctypes
import logging
import sys

__all__ = ["MMAP_THRESHOLD_BYTES", "TRIM_THRESHOLD_BYTES", "fix_malloc_thresholds"]

log = logging.getLogger("compactlog.network")

MMAP_THRESHOLD_BYTES = 4 << 20
TRIM_THRESHOLD_BYTES = 2 * MMAP_THRESHOLD_BYTES
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h


def fix_malloc_thresholds() -> bool:
    """Set glibc's mmap and trim thresholds for this process; False (nothing set) under another C library."""
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None)  # the symbols of the process: its C library's among them
    if not hasattr(libc, "gnu_get_libc_version"):
        return False  # not glibc
    mallopt = libc.mallopt
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    fixed = mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) == 1 and mallopt(
        _M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES) == 1
    if not fixed:
        log.warning("glibc refused the malloc thresholds (mmap %d, trim %d bytes)", MMAP_THRESHOLD_BYTES,
                    TRIM_THRESHOLD_BYTES)
    return fixed
