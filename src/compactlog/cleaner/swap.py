"""Installing a round's cleaned segments: Kafka's ``.cleaned`` -> ``.swap`` -> live protocol.

Under the partition lock, for one round's groups:

1. check that every source segment is still the file the round read (another cleaner or retention may
   have replaced it); if not, the round is abandoned and its ``.cleaned`` files removed;
2. rename every new file ``.cleaned`` -> ``.swap``, highest base offset first;
3. rename every old segment to ``.deleted`` (removed after ``file.delete.delay.ms``), lowest first;
4. rename every new file ``.swap`` -> ``<base>.parquet``, lowest first, and fsync the directory.

Recovery (in :mod:`compactlog.log`) finishes or undoes a crash at any point: a ``.cleaned`` file left
means step 2 had not finished, so ``.swap`` files at or above it and all ``.cleaned`` files are deleted
and the old segments stay; with only ``.swap`` files left, the old segments in their range are deleted and
the swaps completed. Either all of a round's groups in one call are installed or none.

``hook`` (tests only) is called with the name of each step just after it happens, so a test can stop
the protocol there as a crash would; each step is also a named :mod:`compactlog.faults` point, where a
crash test kills the process for real.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence

from ..errors import CleanerError
from ..faults import fault_point
from ..log import Log, fsync_dir
from ..sealed_segment import SealedSegment
from ..segment import CLEANED_SUFFIX, SWAP_SUFFIX
from .kernel import GroupResult

SwapHook = Callable[[str], None]


def _no_hook(step: str) -> None:
    return None


def discard(results: Sequence[GroupResult]) -> None:
    for result in results:
        if os.path.exists(result.cleaned_path):
            os.unlink(result.cleaned_path)


def replace_segments(log: Log, results: Sequence[GroupResult], source_inodes: Mapping[int, int],
                     delay_ms: int, hook: SwapHook | None = None) -> list[SealedSegment]:
    """Swap cleaned groups in for their source segments (crash-safe; see the module docstring)."""
    hook = hook or _no_hook
    if not results:
        return []
    with log.locked():
        live = {s.base_offset: s for s in log.sealed_segments()}
        for result in results:
            for base in result.source_bases:
                segment = live.get(base)
                if segment is None or segment.inode != source_inodes.get(base):
                    discard(results)
                    raise CleanerError(
                        f"{log.directory}: segment {base} changed while it was being cleaned; round abandoned")
        hook("cleaned-written")
        fault_point("cleaner.cleaned-written")
        ordered = sorted(results, key=lambda r: r.base_offset)
        for result in reversed(ordered):
            os.replace(result.cleaned_path, result.cleaned_path[: -len(CLEANED_SUFFIX)] + SWAP_SUFFIX)
            hook(f"swap-renamed:{result.base_offset}")
            fault_point("cleaner.swap-renamed")
        fsync_dir(log.directory)
        replaced = {base for result in ordered for base in result.source_bases}
        for base in sorted(replaced):
            log.schedule_delete(live[base].path, delay_ms)
            hook(f"old-deleted:{base}")
            fault_point("cleaner.old-deleted")
        installed = []
        for result in ordered:
            final = result.cleaned_path[: -len(CLEANED_SUFFIX)]
            os.replace(final + SWAP_SUFFIX, final)
            hook(f"swap-installed:{result.base_offset}")
            fault_point("cleaner.swap-installed")
            installed.append(SealedSegment.open(final, result.base_offset))
        fsync_dir(log.directory)
        keep = [s for base, s in live.items() if base not in replaced]
        log.replace_sealed(keep + installed)
        return installed
