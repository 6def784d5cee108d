"""A topic's metadata file ``<data-dir>/.topics/<topic>.json`` and the rules for topic names.

Format: ``{"name", "partitions", "config": {overrides by Kafka name}, "topic_id", "checksum"}`` (the id is
new at every creation, so a store can tell a re-created topic from the one it had open; files written before
ids existed have none; ``checksum`` is the CRC32 of the other fields as sorted-key JSON, and files written
before it are read unchecked). The file is written to a temporary file, fsynced and renamed: creating it is
the moment a topic exists, removing it the moment it is deleted. A file that cannot be read as this format is a
:class:`CorruptTopicMetadataError` naming it, raised when that topic is used; other topics are unaffected.

Names follow Kafka: ``[a-zA-Z0-9._-]``, 1..249 characters, not ``.`` or ``..``; and two names that differ
only in ``.`` versus ``_`` collide (Kafka's ``Topic.hasCollision``: its metric names replace ``.`` with
``_``), so a topic is refused when its name collides with an existing one, with Kafka's message naming them.

A topic's partition count is a positive integer; with the partitions of every other topic it is at most the
data directory's ``max.broker.partitions``, and each partition's directory name ``<topic>-<partition>``
must fit a file name (255 bytes): :func:`check_partition_count`, which creation checks before it writes
anything (and a change of a topic's count would check the same way).

Internal topics, as Kafka's ``Topic.isInternal``: ``__consumer_offsets``, written by the group coordinator
only (a client's Produce to it is refused) and never deleted. Kafka's other internal names
(``__transaction_state``, ``__share_group_state``) are ordinary topics here: transaction state is kept in
``.transactions/`` files and there are no share groups.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import uuid
import zlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from .config import BrokerConfig, TopicConfig, topic_config
from .data_dir import exclusive_lock
from .errors import ConfigError, CorruptTopicMetadataError, InvalidPartitionsError, InvalidTopicError, storage_errors
from .faults import io_fault
from .segment import fsync_path, removed_on_error

TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]+")
MAX_TOPIC_NAME = 249
MAX_FILE_NAME = 255  # bytes: the longest file name most file systems take
GROUP_METADATA_TOPIC_NAME = "__consumer_offsets"  # Kafka's Topic.GROUP_METADATA_TOPIC_NAME
INTERNAL_TOPICS = frozenset({GROUP_METADATA_TOPIC_NAME})


def is_internal(topic: str) -> bool:
    """Kafka's ``Topic.isInternal``, for the internal topics this broker has (module docstring)."""
    return topic in INTERNAL_TOPICS


def validate_topic_name(name: object) -> str:
    """Kafka's topic-name rules; they also keep every name inside the data directory."""
    if not isinstance(name, str) or not name:
        raise InvalidTopicError(f"topic name must be a non-empty string, got {name!r}")
    if name in (".", ".."):
        raise InvalidTopicError(f"topic name cannot be {name!r}")
    if len(name) > MAX_TOPIC_NAME:
        raise InvalidTopicError(f"topic name is {len(name)} characters; at most {MAX_TOPIC_NAME} are allowed")
    if not TOPIC_NAME.fullmatch(name):  # not match(): "$" would let a trailing newline through
        raise InvalidTopicError(
            f"topic name {name!r} may contain only ASCII letters, digits, '.', '_' and '-'")
    return name


def unify_collision_chars(name: str) -> str:
    """Kafka's ``Topic.unifyCollisionChars``: ``.`` read as ``_``."""
    return name.replace(".", "_")


def colliding_topics(name: str, existing: Iterable[str]) -> list[str]:
    """The existing topics whose names differ from ``name`` yet collide with it, sorted."""
    unified = unify_collision_chars(name)
    return sorted(t for t in existing if t != name and unify_collision_chars(t) == unified)


def check_no_collision(name: str, existing: Iterable[str]) -> None:
    """Refuse ``name`` if it collides with an existing topic, in Kafka's words (``AdminZkClient``)."""
    colliding = colliding_topics(name, existing)
    if colliding:
        raise InvalidTopicError(f"Topic '{name}' collides with existing topics: {', '.join(colliding)}")


def check_partition_count(topic: str, partitions: object, hosted: int = 0,
                          max_broker_partitions: int | None = None) -> int:
    """Check the count of partitions ``topic`` is to have (a creation's; a change's new total), before anything
    is written: a positive integer; the name of its last partition's directory fits a file name; and, with
    ``max_broker_partitions``, ``hosted`` (the partitions of every other topic) plus it is at most that
    limit. Returns the count; raises InvalidPartitionsError naming what was broken."""
    if isinstance(partitions, bool) or not isinstance(partitions, int) or partitions < 1:
        raise InvalidPartitionsError(f"topic {topic!r}: number of partitions {partitions!r} is not a positive "
                                     "integer")
    last = f"{topic}-{partitions - 1}"
    if len(last.encode()) > MAX_FILE_NAME:
        raise InvalidPartitionsError(f"topic {topic!r}: {partitions} partitions are too many for a name of "
                                     f"{len(topic)} characters: the directory {last!r} would be longer than a "
                                     f"file name may be ({MAX_FILE_NAME} bytes)")
    if max_broker_partitions is not None and hosted + partitions > max_broker_partitions:
        raise InvalidPartitionsError(f"topic {topic!r}: {partitions} partitions would make {hosted + partitions} "
                                     f"in this data directory, which holds {hosted}; max.broker.partitions is "
                                     f"{max_broker_partitions}")
    return partitions


@dataclass
class TopicMetadata:
    name: str
    partitions: int
    overrides: dict[str, Any]
    config: TopicConfig
    stamp: tuple[int, int] = field(default=(0, 0))  # (mtime_ns, inode) of the file it was read from
    topic_id: str | None = None  # new for every creation of the name (Kafka's topic id, KIP-516)


def read_topic_metadata(path: str, topic: str, broker: BrokerConfig, stamp: tuple[int, int]) -> TopicMetadata:
    """The metadata in ``path``; FileNotFoundError propagates (the topic does not exist)."""
    with open(path, "rb") as f:
        data = f.read()
    try:
        raw = json.loads(data.decode("utf-8"))
        partitions, overrides, topic_id = raw["partitions"], raw["config"], raw.get("topic_id")
        if isinstance(partitions, bool) or not isinstance(partitions, int) or partitions < 1:
            raise ValueError(f"partitions must be a positive integer, got {partitions!r}")
        if not isinstance(overrides, dict) or not (topic_id is None or isinstance(topic_id, str)):
            raise ValueError("config must be an object and topic_id a string")
        if "checksum" in raw and raw.pop("checksum") != _checksum(raw):  # files written before it have none
            raise ValueError("checksum mismatch")
    except (ValueError, KeyError, TypeError) as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise CorruptTopicMetadataError(
            f"topic {topic!r}: cannot read its metadata file {path}: {type(e).__name__}: {e}") from e
    try:  # a config the broker's defaults now refuse is a ConfigError, not corruption
        config = topic_config(overrides, broker)
    except ConfigError as e:
        raise ConfigError(f"topic {topic!r} ({path}): {e}") from e
    return TopicMetadata(topic, partitions, dict(overrides), config, stamp, topic_id)


def _checksum(meta: Mapping[str, Any]) -> int:
    """CRC32 of the metadata (every field but the checksum) as sorted-key JSON."""
    return zlib.crc32(json.dumps(meta, sort_keys=True).encode())


@contextlib.contextmanager
def metadata_lock(directory: str) -> Iterator[None]:
    """``flock`` of ``.topics/.lock``: held by each write of a metadata file, by the removal of stale
    temporary files, so that the removal never takes the file of a write in progress, and by a topic's
    deletion and its recovery (:mod:`compactlog.topic_deletion`). Not re-entrant: never nest it."""
    with exclusive_lock(os.path.join(directory, ".lock")):
        yield


@storage_errors("writing topic metadata")
def write_topic_metadata(path: str, topic: str, partitions: int, overrides: Mapping[str, Any],
                         topic_id: str | None) -> None:
    """Write a topic's metadata file (module docstring), under the ``.topics`` lock."""
    with metadata_lock(os.path.dirname(path)):
        write_topic_metadata_locked(path, topic, partitions, overrides, topic_id)


def write_topic_metadata_locked(path: str, topic: str, partitions: int, overrides: Mapping[str, Any],
                                topic_id: str | None) -> None:
    """:func:`write_topic_metadata` for a caller that holds the ``.topics`` lock. A failed write leaves no
    temporary file."""
    directory = os.path.dirname(path)
    # Not "<path>.<uuid>.tmp": a 249-character topic name would make that longer than a file name may be.
    tmp = os.path.join(directory, f".{uuid.uuid4().hex}.tmp")
    with removed_on_error(tmp):
        with open(tmp, "w", encoding="utf-8") as f:
            meta = {"name": topic, "partitions": partitions, "config": dict(overrides), "topic_id": topic_id}
            io_fault("topic-metadata.write")
            json.dump({**meta, "checksum": _checksum(meta)}, f, sort_keys=True)
            f.flush()
            io_fault("topic-metadata.fsync")
            os.fsync(f.fileno())
        io_fault("topic-metadata.rename")
        os.replace(tmp, path)
    io_fault("topic-metadata.dir-fsync")
    fsync_path(directory)


def listed_topics(directory: str) -> list[str]:
    """The topics whose metadata files are in ``directory`` (``.topics``), sorted."""
    return sorted(n[: -len(".json")] for n in os.listdir(directory) if n.endswith(".json"))


def remove_stale_tmp(directory: str) -> None:
    """Remove the ``.<uuid>.tmp`` files of metadata writes killed before their rename (the writes never
    happened). Called when a store opens."""
    with metadata_lock(directory):
        for name in os.listdir(directory):
            if name.startswith(".") and name.endswith(".tmp"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(directory, name))
