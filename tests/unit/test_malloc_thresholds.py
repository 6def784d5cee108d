"""The broker's fixed malloc thresholds (glibc): a thread that reads into three buffers of about 1 MB at once
and frees them, again and again, reuses its heap's pages, whatever sizes the process freed before; with
glibc's moving thresholds, once a 1 MB block was freed, its heap's top is given back after each round and
faulted in again."""

from __future__ import annotations

import ctypes
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux") or not hasattr(ctypes.CDLL(None),
                                                                                     "gnu_get_libc_version"),
                                reason="glibc's thresholds")

_FAULTS = """
import resource, sys, threading
from compactlog.network.malloc_thresholds import fix_malloc_thresholds
if sys.argv[1] == "fixed":
    assert fix_malloc_thresholds()
frame = bytes(1_000_000)  # a request frame, mapped then freed: the moving thresholds rise to about 1 and 2 MB
del frame

def reads():
    before = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
    for _ in range(100):
        buffers = [bytes(1_000_000) for _ in range(3)]  # as a fetch's read: tables, batches, frame
        del buffers
    print(resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - before)

storage_thread = threading.Thread(target=reads)
storage_thread.start()
storage_thread.join()
"""


def _page_faults(mode: str) -> int:
    done = subprocess.run([sys.executable, "-c", _FAULTS, mode], capture_output=True, text=True, check=True,
                          timeout=60)
    return int(done.stdout)


def test_a_threads_read_buffers_reuse_its_heap_instead_of_faulting_pages_in_every_round() -> None:
    moving, fixed = _page_faults("moving"), _page_faults("fixed")
    assert moving > 100 * 400, moving  # two of the three buffers' pages (about 245 each) faulted in a round
    assert fixed < 2_000, fixed  # the first round's pages only
