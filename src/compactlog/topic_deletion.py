"""A topic's deletion: its durable order of steps, and the recovery of a deletion a crash interrupted.

A deletion is announced by a marker, ``.topics/<topic>.del``, holding the id of the topic it deletes
(empty for a topic written before ids existed); a 249-character name plus ``.del`` fits a file name's 255
bytes. Markers named ``<topic>.deleting``, which earlier versions wrote (a name of 247 characters or more could
not be deleted then), are finished the same way. The steps, each durable before the next, with what a crash
after each leaves and how :func:`finish_pending_deletions` (run when a writable store opens) finishes it:

1. the marker is written (fault point ``store.delete-marked``): the topic is whole; recovery deletes it;
2. the topic's cleaner checkpoints are removed (``store.delete-checkpoint-cleared``): a checkpoint left
   behind would count a re-created topic's first offsets as cleaned, so its tombstones would expire while
   the values they delete stay; recovery removes them again and goes on;
3. each partition directory ``<topic>-<p>`` is renamed ``<topic>-<p>.<uuid>-delete`` under its partition
   lock (``store.delete-partition-renamed``, once a partition), Kafka's name for a directory being removed:
   recovery renames the others;
4. the metadata file goes (``store.delete-metadata-removed``): the topic no longer exists; recovery removes
   the marker;
5. the marker goes (``store.delete-unmarked``); then the ``-delete`` directories are removed, as every
   writable open also removes them (:func:`remove_deleted_partitions`, as Kafka does at startup).

Steps 1 to 5 and their recovery hold the ``.topics`` lock (:func:`~compactlog.topic_metadata.metadata_lock`),
as a creation does throughout (:mod:`compactlog.topic_creation`), and act only while the metadata file holds
the marker's topic id. Directories without a metadata file belong to a creation (whose own marker finishes or
undoes it) and are never renamed here; the marker's directories are renamed while the old metadata file is
still there, and a marker whose metadata file is gone or holds another id only needs removing.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import uuid

from .checkpoint import CheckpointFile
from .data_dir import exclusive_lock
from .errors import UnknownTopicOrPartitionError, storage_errors
from .faults import fault_point, io_fault
from .segment import fsync_path, removed_on_error
from .topic_metadata import metadata_lock

DELETE_DIR_SUFFIX = "-delete"
MARKER_SUFFIX = ".del"
MARKER_SUFFIXES = (MARKER_SUFFIX, ".deleting")  # the second: markers of earlier versions, still finished


def marker_path(topics_dir: str, topic: str) -> str:
    return os.path.join(topics_dir, f"{topic}{MARKER_SUFFIX}")


def is_being_deleted(topics_dir: str, topic: str, topic_id: str | None) -> bool:
    """Whether a deletion of topic ``topic`` (id ``topic_id``) is marked and not finished: one that failed
    part-way (a retry or the next open finishes it) or runs in another process. Its partitions must not be
    opened: what they took would be deleted."""
    try:
        with open(marker_path(topics_dir, topic), encoding="utf-8", errors="replace") as f:
            return f.read() == (topic_id or "")
    except FileNotFoundError:
        return False
    except OSError as e:  # a name too long for a marker: no deletion of it can have been marked
        if e.errno != errno.ENAMETOOLONG:
            raise
        return False


def _metadata_path(topics_dir: str, topic: str) -> str:
    return os.path.join(topics_dir, f"{topic}.json")


def _holds_id(path: str, topic_id: str) -> bool:
    """Whether the metadata file ``path`` is there and holds ``topic_id`` (``""``: a file without an id).
    A file that cannot be parsed counts as holding it: metadata files are written whole and renamed, so a
    damaged one is not a creation under way but the marked topic's file, damaged since."""
    try:
        with open(path, "rb") as f:
            raw = json.loads(f.read().decode("utf-8"))
    except FileNotFoundError:
        return False
    except ValueError:
        return True
    held = raw.get("topic_id") if isinstance(raw, dict) else None
    return (held if isinstance(held, str) else "") == topic_id


@storage_errors("deleting a topic")
def delete_topic_files(data_dir: str, topics_dir: str, topic: str, partitions: int, topic_id: str | None,
                       checkpoint: CheckpointFile) -> None:
    """Delete topic ``topic`` (``partitions`` partitions, id ``topic_id``) in the order of the module
    docstring. The caller has closed its own logs of the topic."""
    marker = marker_path(topics_dir, topic)
    with metadata_lock(topics_dir):
        if not _holds_id(_metadata_path(topics_dir, topic), topic_id or ""):  # deleted (and created?) meanwhile
            raise UnknownTopicOrPartitionError(f"topic {topic!r} was deleted by another store meanwhile")
        with removed_on_error(marker):  # a marker not yet durable is no deletion: the topic stays whole
            _write_marker(marker, topic_id or "")
        fault_point("store.delete-marked")
        doomed = _delete_marked(data_dir, topics_dir, topic, partitions, checkpoint, marker)
    for path in doomed:
        shutil.rmtree(path, ignore_errors=True)


def _write_marker(path: str, topic_id: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        io_fault("topic-deletion.marker-write")
        f.write(topic_id)
        f.flush()
        io_fault("topic-deletion.marker-fsync")
        os.fsync(f.fileno())
    io_fault("topic-deletion.marker-dir-fsync")
    fsync_path(os.path.dirname(path))


def _delete_marked(data_dir: str, topics_dir: str, topic: str, partitions: int | None,
                   checkpoint: CheckpointFile, marker: str) -> list[str]:
    """Steps 2 to 5 for a topic marked by the file ``marker`` (under the ``.topics`` lock); returns the
    ``-delete`` directories to remove. ``partitions`` None: every ``<topic>-<n>`` directory (recovery, which
    does not parse metadata)."""
    checkpoint.update(keep=lambda tp: tp[0] != topic)
    fault_point("store.delete-checkpoint-cleared")
    numbers = range(partitions) if partitions is not None else partition_numbers(data_dir, topic)
    doomed = []
    for partition in numbers:
        directory = os.path.join(data_dir, f"{topic}-{partition}")
        if not os.path.isdir(directory):
            continue  # renamed before a crash
        # The partition lock (``<partition-dir>/.lock``, as :func:`compactlog.data_dir.open_partition_lock`)
        with exclusive_lock(os.path.join(directory, ".lock")):  # waits out an append or a swap of another process
            io_fault("topic-deletion.partition-rename")
            doomed.append(rename_for_removal(directory))
        io_fault("topic-deletion.partition-dir-fsync")
        fsync_path(data_dir)
        fault_point("store.delete-partition-renamed")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(_metadata_path(topics_dir, topic))
    io_fault("topic-deletion.metadata-dir-fsync")
    fsync_path(topics_dir)
    fault_point("store.delete-metadata-removed")
    os.unlink(marker)
    io_fault("topic-deletion.unmark-dir-fsync")
    fsync_path(topics_dir)
    fault_point("store.delete-unmarked")
    return doomed


def rename_for_removal(directory: str) -> str:
    """Rename a partition directory Kafka's ``<topic>-<partition>.<uuid>-delete`` (the name cut to fit a file
    name's 255 bytes), which belongs to no topic and which every writable open removes; returns the new path.
    The caller fsyncs the data directory."""
    target = f"{os.path.basename(directory)[:200]}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}"
    target = os.path.join(os.path.dirname(directory), target)
    os.replace(directory, target)
    return target


def partition_numbers(data_dir: str, topic: str) -> list[int]:
    """The numbers of the ``<topic>-<n>`` directories in ``data_dir`` (a name's last ``-<digits>`` is its
    partition, so another topic's directories never match)."""
    prefix = f"{topic}-"
    return sorted(int(name[len(prefix):]) for name in os.listdir(data_dir)
                  if name.startswith(prefix) and name[len(prefix):].isdigit())


@storage_errors("finishing a topic's deletion")
def finish_pending_deletions(data_dir: str, topics_dir: str, checkpoint: CheckpointFile) -> None:
    """Finish every deletion a crash interrupted (see the module docstring), then remove every ``-delete``
    directory. Called when a writable store opens."""
    if any(name.endswith(MARKER_SUFFIXES) for name in os.listdir(topics_dir)):
        with metadata_lock(topics_dir):
            for name in sorted(os.listdir(topics_dir)):
                suffix = next((s for s in MARKER_SUFFIXES if name.endswith(s)), None)
                if suffix is None:
                    continue
                topic = name[: -len(suffix)]
                marker = os.path.join(topics_dir, name)
                with open(marker, encoding="utf-8", errors="replace") as f:
                    marked_id = f.read()
                if _holds_id(_metadata_path(topics_dir, topic), marked_id):
                    _delete_marked(data_dir, topics_dir, topic, None, checkpoint, marker)
                else:  # the topic is gone (step 4 was done) or created again since: only the marker is left
                    os.unlink(marker)
                    fsync_path(topics_dir)
    remove_deleted_partitions(data_dir)


def remove_deleted_partitions(data_dir: str) -> None:
    """Remove ``*-delete`` directories: renamed by a deletion, they belong to no topic."""
    for name in os.listdir(data_dir):
        path = os.path.join(data_dir, name)
        if name.endswith(DELETE_DIR_SUFFIX) and os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
