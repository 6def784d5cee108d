"""One partition's log, split by noun as Kafka's storage module:

* :mod:`.log`: :class:`Log` (Kafka's ``UnifiedLog``): the segment list, append and roll, locking and the
  cross-process refresh, the producer-state queries, retention's deletes and the cleaner's swap entry point;
* :mod:`.loader`: opening a partition (``LogLoader``): every crash point and its recovery;
* :mod:`.swap`: the cleaner's ``.cleaned`` -> ``.swap`` -> live protocol and its recovery;
* :mod:`.reads`: reads from a consistent snapshot of the segment list;
* :mod:`.producers`: the producer state's snapshots and rebuild, and the active segment's transaction index;
* :mod:`.marker_frame`: a transaction marker's frame, built from a template;
* :mod:`.directory`: which files of a partition directory are live segments; fsyncing the directory;
* :mod:`.deleted_files`: segments renamed ``.deleted``, removed after ``file.delete.delay.ms``.

Dependencies point one way: the cleaner and the store use the log, never the reverse; of the cleaner the
log uses only the pure roll rules of :mod:`compactlog.cleaner.plan`, which import nothing of compactlog.
"""

from .directory import fsync_dir
from .log import Log

__all__ = ["Log", "fsync_dir"]
