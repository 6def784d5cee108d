"""A partition directory: which of its files are live segments, and making its changes durable.

``<data-dir>/<topic>-<partition>/`` holds files named by a base offset (:mod:`compactlog.segment`). A live
segment is ``<base>.parquet`` (sealed) or ``<base>.log`` (active) with nothing after the suffix; any
other suffix marks a file in transit, which only the loader (:mod:`.loader`) and the swap (:mod:`.swap`)
act on. Renames and creations in the directory are made durable by fsyncing the directory itself.
"""

from __future__ import annotations

import os

from ..segment import ACTIVE_SUFFIX, SEALED_SUFFIX, fsync_path, is_segment_name, offset_from_name


def fsync_dir(path: str) -> None:
    """Make a directory's renames and creations durable (a directory fsyncs like a file)."""
    fsync_path(path)


def segment_names(directory: str) -> list[str]:
    """Every file of ``directory`` named by a base offset, live or in transit."""
    return [n for n in os.listdir(directory) if is_segment_name(n)]


def is_live_sealed(name: str) -> bool:
    """``<base>.parquet`` itself, not a file in transit such as ``<base>.parquet.swap``."""
    return name.endswith(SEALED_SUFFIX) and name.count(".") == 1


def live_segments(directory: str) -> tuple[dict[int, str], dict[int, str]]:
    """The live sealed and active segment files of ``directory``, each by base offset."""
    sealed: dict[int, str] = {}
    active: dict[int, str] = {}
    for name in segment_names(directory):
        if is_live_sealed(name):
            sealed[offset_from_name(name)] = name
        elif name.endswith(ACTIVE_SUFFIX) and name.count(".") == 1:
            active[offset_from_name(name)] = name
    return sealed, active
