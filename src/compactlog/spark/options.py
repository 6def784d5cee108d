"""The options of the ``compactlog`` data source and of :mod:`compactlog.spark.io`, and the offset rules
of reads: which offsets an option names, how a range is cut into tasks, how far a micro-batch may go.

Pure Python (no pyspark): the driver's planning rules, tested on their own. The table of options and their
meaning is in :mod:`compactlog.spark.datasource`.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..errors import ConfigError, UnknownTopicOrPartitionError
from ..log.reads import ISOLATION_LEVELS
from ..segment import SegmentMeta
from ..store import TOPICS_DIR, Store, open_store

__all__ = [
    "EARLIEST",
    "ISOLATION_LEVELS",
    "LATEST",
    "MODES",
    "SourceOptions",
    "check_isolation_level",
    "open_existing",
    "parse_offsets",
    "rate_limit",
    "resolve_offset",
    "split_range",
]

# Offsets in startingOffsets / endingOffsets JSON, as in Spark's Kafka source.
EARLIEST = -2
LATEST = -1

MODES = ("log", "latest")

# A log read's range is cut at segment boundaries into pieces of about this many bytes, one Spark task each
# (the role of spark.sql.files.maxPartitionBytes for files). minPartitions lowers it.
SPLIT_BYTES = 128 * 1024 * 1024

_READ_OPTIONS = ("path", "topic", "mode", "startingOffsets", "endingOffsets", "isolationLevel",
                 "minPartitions")
_STREAM_OPTIONS = ("path", "topic", "mode", "startingOffsets", "isolationLevel", "maxOffsetsPerTrigger")
_WRITE_OPTIONS = ("path", "topic", "keyColumn", "valueColumn")
# Options Spark itself passes to a streaming sink; accepted and left to Spark.
_STREAM_WRITE_OPTIONS = (*_WRITE_OPTIONS, "checkpointLocation")


@dataclass(frozen=True)
class SourceOptions:
    """The options of one read, stream or write, checked."""

    path: str
    topic: str
    mode: str = "log"
    starting_offsets: str | None = None
    ending_offsets: str | None = None
    isolation_level: str = "read_uncommitted"
    min_partitions: int | None = None
    max_offsets_per_trigger: int | None = None
    key_column: str = "key"
    value_column: str = "value"

    @classmethod
    def parse(cls, options: Mapping[str, str], use: str) -> SourceOptions:
        """Check ``options`` for ``use`` (``read``, ``stream``, ``write`` or ``stream write``): required,
        known, in range."""
        allowed = {"read": _READ_OPTIONS, "stream": _STREAM_OPTIONS, "write": _WRITE_OPTIONS,
                   "stream write": _STREAM_WRITE_OPTIONS}[use]
        by_lower = {name.lower(): name for name in allowed}
        given: dict[str, str] = {}
        for key, value in options.items():
            name = by_lower.get(str(key).lower())
            if name is None:
                raise ConfigError(f"unknown option {key!r} for a compactlog {use}; "
                                  f"allowed: {', '.join(allowed)}")
            given[name] = str(value)
        for required in ("path", "topic"):
            if not given.get(required):
                raise ConfigError(f"option {required!r} is required (the data directory and the topic)")
        mode = given.get("mode", "log").lower()
        if mode not in MODES:
            raise ConfigError(f"option 'mode' is {mode!r}; allowed: {', '.join(MODES)}")
        return cls(
            path=os.path.abspath(given["path"]),
            topic=given["topic"],
            mode=mode,
            starting_offsets=given.get("startingOffsets"),
            ending_offsets=given.get("endingOffsets"),
            isolation_level=check_isolation_level(given.get("isolationLevel", "read_uncommitted")),
            min_partitions=_positive_int(given, "minPartitions"),
            max_offsets_per_trigger=_positive_int(given, "maxOffsetsPerTrigger"),
            key_column=given.get("keyColumn", "key"),
            value_column=given.get("valueColumn", "value"),
        )

    def offsets(self, name: str, num_partitions: int, default: int) -> dict[int, int]:
        """Option ``name`` (startingOffsets or endingOffsets) as partition -> offset (-2/-1 kept)."""
        text = self.starting_offsets if name == "startingOffsets" else self.ending_offsets
        return parse_offsets(name, text, self.topic, num_partitions, default)

    def open(self) -> Store:
        """The store, on the driver; the topic must exist (UnknownTopicOrPartitionError otherwise)."""
        return open_existing(self.path, self.topic)


def open_existing(path: str, topic: str) -> Store:
    """Open the data directory at ``path`` on the driver, which must hold ``topic``. Unlike
    :func:`compactlog.open`, a missing directory is an error, not created: reads and writes need a
    topic."""
    if not os.path.isdir(os.path.join(path, TOPICS_DIR)):
        raise UnknownTopicOrPartitionError(
            f"unknown topic {topic!r}: {path} is not a compactlog data directory")
    store = open_store(path)
    try:
        store.partitions(topic)
    except Exception:
        store.close()
        raise
    return store


def check_isolation_level(level: str) -> str:
    """``read_uncommitted`` or ``read_committed`` (Kafka's isolation.level values)."""
    normalised = str(level).lower()
    if normalised not in ISOLATION_LEVELS:
        raise ConfigError(f"isolation level {level!r}; allowed: {', '.join(ISOLATION_LEVELS)}")
    return normalised


def _positive_int(given: Mapping[str, str], name: str) -> int | None:
    if name not in given:
        return None
    try:
        value = int(given[name])
    except ValueError:
        value = 0
    if value < 1:
        raise ConfigError(f"option {name!r} is {given[name]!r}; allowed: a positive integer")
    return value


def parse_offsets(name: str, text: str | None, topic: str, num_partitions: int, default: int,
                  ) -> dict[int, int]:
    """An offsets option as partition -> offset, where -2 means earliest and -1 latest.

    ``text`` is ``earliest``, ``latest`` or Kafka's JSON ``{"<topic>": {"<partition>": offset}}``; ``None``
    means ``default`` everywhere. Partitions left out of the JSON get ``default``.
    """
    if text is None:
        return dict.fromkeys(range(num_partitions), default)
    word = text.strip().lower()
    if word in ("earliest", "latest"):
        return dict.fromkeys(range(num_partitions), EARLIEST if word == "earliest" else LATEST)
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"option {name!r} is {text!r}; allowed: earliest, latest, or JSON like "
                          f'{{"{topic}": {{"0": 23, "1": -2}}}}') from e
    if not isinstance(parsed, dict) or set(parsed) != {topic} or not isinstance(parsed[topic], dict):
        raise ConfigError(f"option {name!r} must be JSON with exactly the topic {topic!r} as its key, "
                          f'like {{"{topic}": {{"0": 23}}}}; got {text!r}')
    offsets = dict.fromkeys(range(num_partitions), default)
    for partition_text, offset in parsed[topic].items():
        try:
            partition = int(partition_text)
        except ValueError:
            partition = -1
        if not 0 <= partition < num_partitions:
            raise ConfigError(f"option {name!r} names partition {partition_text!r}; topic {topic!r} has "
                              f"partitions 0..{num_partitions - 1}")
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < EARLIEST:
            raise ConfigError(f"option {name!r} has offset {offset!r} for partition {partition}; allowed: an "
                              "offset >= 0, -2 (earliest) or -1 (latest)")
        offsets[partition] = offset
    return offsets


def resolve_offset(offset: int, log_start: int, log_end: int) -> int:
    """An offset option (-2 earliest, -1 latest, else itself) as an offset of a log."""
    return log_start if offset == EARLIEST else log_end if offset == LATEST else offset


def split_range(segments: Sequence[SegmentMeta], start: int, end: int, target_bytes: int,
                ) -> list[tuple[int, int]]:
    """``[start, end)`` cut at segment boundaries into consecutive pieces of about ``target_bytes`` (a
    segment is never split). Pure: the planner's rule, tested on its own."""
    pieces: list[tuple[int, int]] = []
    piece_start, piece_bytes = start, 0
    for segment in segments:
        if segment.next_offset <= start or segment.base_offset >= end:
            continue
        if piece_bytes and piece_bytes + segment.size_bytes > target_bytes:
            pieces.append((piece_start, segment.base_offset))
            piece_start, piece_bytes = segment.base_offset, 0
        piece_bytes += segment.size_bytes
    pieces.append((piece_start, end))
    return pieces


def rate_limit(begin: Mapping[int, int], end: Mapping[int, int], max_offsets: int) -> dict[int, int]:
    """Kafka's maxOffsetsPerTrigger rule: each partition advances by its share of ``max_offsets`` in
    proportion to its backlog (a share below one offset rounds up, so no partition starves)."""
    sizes = {p: max(end[p] - begin[p], 0) for p in end}
    total = sum(sizes.values())
    if total <= max_offsets:
        return dict(end)
    limited = {}
    for partition, size in sizes.items():
        share = max_offsets * (size / total)
        step = math.ceil(share) if share < 1 else math.floor(share)
        limited[partition] = min(begin[partition] + step, end[partition]) if size else end[partition]
    return limited
