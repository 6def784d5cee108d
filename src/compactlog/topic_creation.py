"""A topic's creation: its checks, its durable order of steps, and the recovery of a creation that a crash or a
failed write interrupted.

Every step, the checks included, holds the ``.topics`` lock (:func:`~compactlog.topic_metadata.metadata_lock`),
as a deletion and both recoveries do, so no other creation, deletion or recovery of any store, in this
process or another, runs in between. The checks come first and write nothing: the name is free
(TopicExistsError), collides with no topic (InvalidTopicError), and the count fits ``max.broker.partitions``
with the partitions of every other topic (InvalidPartitionsError; :func:`check_partition_count`). A
validate-only creation stops there. Then, each step durable before the next, with what a crash after it
leaves and how :func:`finish_pending_creations` (run when a writable store opens) finishes it:

1. a marker, ``.topics/<topic>.new``, holding the new topic id, is written (fault point
   ``store.create-marked``): recovery removes the marker: the creation never happened;
2. every ``<topic>-<n>`` directory already there is renamed ``-delete`` (no topic of the name exists: a
   creation killed before markers existed left it; removed at the end), then each partition directory is made
   (``store.create-partition-made``, once a partition) and the data directory fsynced: recovery renames
   every ``<topic>-<n>`` directory ``-delete`` (removed by the same open), then removes the marker;
3. the topic's cleaner checkpoints, left by a deletion killed part-way, are removed: recovery as for 2;
4. the metadata file is written, fsynced and renamed: the moment the topic exists
   (``store.create-metadata-written``): recovery removes the marker only: the topic exists, whole;
5. the marker is removed.

So recovery decides by one fact: a marker whose topic has a metadata file is a finished creation, one without
is undone. A write that fails (``ENOSPC``, ``EIO``) at steps 1 to 5 (each a named I/O point,
``topic-creation.*``) is undone at once (its metadata file removed first if the rename was done, then as
recovery undoes) and raised as KafkaStorageError: nothing of the topic is kept; if the undo fails too, its
marker stays for the next writable open. A ``.new`` file is this marker only: a topic's name plus ``.new``
fits a file name (249 + 4 bytes).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from .checkpoint import CheckpointFile
from .errors import CompactLogError, KafkaStorageError, TopicExistsError
from .faults import fault_point, io_fault
from .segment import fsync_path
from .topic_deletion import partition_numbers, rename_for_removal
from .topic_metadata import (
    check_no_collision,
    check_partition_count,
    listed_topics,
    metadata_lock,
    write_topic_metadata_locked,
)

MARKER_SUFFIX = ".new"


def marker_path(topics_dir: str, topic: str) -> str:
    return os.path.join(topics_dir, f"{topic}{MARKER_SUFFIX}")


def _metadata_path(topics_dir: str, topic: str) -> str:
    return os.path.join(topics_dir, f"{topic}.json")


def create_topic_files(data_dir: str, topics_dir: str, checkpoint: CheckpointFile, topic: str, partitions: int,
                       overrides: Mapping[str, Any], partitions_of: Callable[[str], int],
                       max_broker_partitions: int, validate_only: bool = False) -> None:
    """Check, then (unless ``validate_only``) create, topic ``topic`` in the order of the module docstring.
    ``topic`` and ``overrides`` are already valid; ``partitions_of(name)``: an existing topic's partition
    count (a topic whose metadata cannot be read counts none)."""
    doomed: list[str] = []  # directories renamed -delete: removed once the lock is released
    try:
        with metadata_lock(topics_dir):
            existing = listed_topics(topics_dir)
            if topic in existing:
                raise TopicExistsError(f"topic {topic!r} already exists")
            check_no_collision(topic, existing)
            check_partition_count(topic, partitions, _hosted(existing, partitions_of), max_broker_partitions)
            if validate_only:
                return
            try:
                _create(data_dir, topics_dir, checkpoint, topic, partitions, overrides, doomed)
                os.unlink(marker_path(topics_dir, topic))
                io_fault("topic-creation.unmark-dir-fsync")
                fsync_path(topics_dir)
            except BaseException as e:
                with contextlib.suppress(OSError):  # else the marker stays, for the next writable open
                    # A metadata file is this creation's (the name was free under the lock), written but not
                    # known durable: it goes first, so that a crash in the undo leaves an undone creation.
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(_metadata_path(topics_dir, topic))
                    _finish(data_dir, topics_dir, topic, doomed)
                if isinstance(e, OSError) and not isinstance(e, CompactLogError):
                    raise KafkaStorageError(f"creating topic {topic!r} failed; nothing of it is kept: {e}") from e
                raise
    finally:
        for path in doomed:
            shutil.rmtree(path, ignore_errors=True)


def _hosted(topics: list[str], partitions_of: Callable[[str], int]) -> int:
    total = 0
    for name in topics:
        with contextlib.suppress(CompactLogError):  # unreadable metadata: counted as none, not a refusal
            total += partitions_of(name)
    return total


def _create(data_dir: str, topics_dir: str, checkpoint: CheckpointFile, topic: str, partitions: int,
            overrides: Mapping[str, Any], doomed: list[str]) -> None:
    """Steps 1 to 4 (under the lock); the directories renamed ``-delete`` are added to ``doomed``."""
    topic_id = uuid.uuid4().hex
    marker = marker_path(topics_dir, topic)
    with open(marker, "w", encoding="utf-8") as f:
        io_fault("topic-creation.marker-write")
        f.write(topic_id)
        f.flush()
        io_fault("topic-creation.marker-fsync")
        os.fsync(f.fileno())
    io_fault("topic-creation.marker-dir-fsync")
    fsync_path(topics_dir)
    fault_point("store.create-marked")
    doomed += _rename_partition_dirs(data_dir, topic)
    for partition in range(partitions):
        io_fault("topic-creation.partition-mkdir")
        os.mkdir(os.path.join(data_dir, f"{topic}-{partition}"))
        fault_point("store.create-partition-made")
    io_fault("topic-creation.partition-dir-fsync")
    fsync_path(data_dir)
    if any(tp[0] == topic for tp in checkpoint.read()):
        checkpoint.update(keep=lambda tp: tp[0] != topic)
    write_topic_metadata_locked(_metadata_path(topics_dir, topic), topic, partitions, overrides, topic_id)
    fault_point("store.create-metadata-written")


def _rename_partition_dirs(data_dir: str, topic: str) -> list[str]:
    """Rename every ``<topic>-<n>`` directory ``-delete`` (for removal); returns their new paths. Called while
    no topic ``topic`` exists, so they belong to none."""
    doomed = [rename_for_removal(os.path.join(data_dir, f"{topic}-{partition}"))
              for partition in partition_numbers(data_dir, topic)]
    if doomed:
        fsync_path(data_dir)
    return doomed


def _finish(data_dir: str, topics_dir: str, topic: str, doomed: list[str]) -> None:
    """Finish the creation of ``topic`` whose marker is there (under the lock): undone unless its metadata
    file exists; then the marker goes. The directories renamed ``-delete`` are added to ``doomed``."""
    if not os.path.exists(_metadata_path(topics_dir, topic)):
        doomed += _rename_partition_dirs(data_dir, topic)
    with contextlib.suppress(FileNotFoundError):  # a failed step 1 may not have made it
        os.unlink(marker_path(topics_dir, topic))
    fsync_path(topics_dir)


def finish_pending_creations(data_dir: str, topics_dir: str) -> None:
    """Finish every creation a crash interrupted (module docstring); the ``-delete`` directories it leaves are
    removed by :func:`~compactlog.topic_deletion.finish_pending_deletions`, which the open calls next. Called
    when a writable store opens."""
    if not any(name.endswith(MARKER_SUFFIX) for name in os.listdir(topics_dir)):
        return
    with metadata_lock(topics_dir):
        for name in sorted(os.listdir(topics_dir)):
            if name.endswith(MARKER_SUFFIX):
                _finish(data_dir, topics_dir, name[: -len(MARKER_SUFFIX)], [])
