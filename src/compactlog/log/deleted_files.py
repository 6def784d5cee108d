"""Segments awaiting removal, Kafka's asynchronous delete: a segment replaced by the cleaner's swap or
removed by retention is renamed ``<name>.deleted`` at once, which takes it out of the segment list
atomically, and the file is removed once ``file.delete.delay.ms`` has passed, so that a read that pinned it
finishes first. The ``.deleted`` files of a process that died meanwhile are removed by the loader."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable

from ..faults import io_fault
from ..segment import DELETED_SUFFIX


class DeletedFiles:
    """One partition's ``.deleted`` files and when each is due (the caller holds the partition lock)."""

    def __init__(self, clock: Callable[[], int]) -> None:
        self._clock = clock
        self._pending: list[tuple[int, str]] = []  # (due at, path)

    def schedule(self, path: str, delay_ms: int) -> None:
        """Rename ``path`` to ``.deleted`` and remove it once ``delay_ms`` has passed."""
        deleted = path + DELETED_SUFFIX
        io_fault("log.delete-rename")
        os.replace(path, deleted)
        self._pending.append((self._clock() + delay_ms, deleted))
        self.remove_due()

    def remove_due(self) -> None:
        """Remove the files whose delay has passed."""
        now = self._clock()
        due = [path for deadline, path in self._pending if deadline <= now]
        self._pending = [(deadline, path) for deadline, path in self._pending if deadline > now]
        for path in due:
            with contextlib.suppress(FileNotFoundError):  # removed by a recovery meanwhile
                os.unlink(path)
