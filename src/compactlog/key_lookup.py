"""Finding one key's stored records (``explain``, ``verify-erasure``): which partitions of its topic are
searched, and which row groups of a sealed segment can hold it.

Partitions. A key may be stored in any partition of its topic: the producer chose the partition, by its own
partitioner or explicitly. Kafka's Java client and compactlog's Python API hash the key with murmur2;
librdkafka's clients (kcat, confluent-kafka) default to ``consistent_random``, the key's CRC32 modulo the
partition count; any client may name a partition. So every partition is searched
(:func:`partitions_to_search`), or the one the user names; what the partitioners would pick
(:func:`partitioner_hints`) is printed beside the answer, never taken for it.

Sealed segments. A segment's Parquet footer holds, per row group, the minimum and maximum of the ``key``
column (:data:`~compactlog.sealed_segment.STATISTICS_COLUMNS`), ordered as unsigned bytes (Parquet's order
for a BYTE_ARRAY column without a logical type, and Python's for ``bytes``). The writer never truncates
them: a row group holding a key longer than its statistics limit (pyarrow's default, 4 KiB) has none. A
row group is read only when it can hold the key (:func:`key_row_groups`): it has no usable statistics, or
``min <= key <= max``; a row group whose statistics exclude the key cannot hold it (every non-null key of
the row group lies inside its range). A segment none of whose row groups can hold the key is not read
beyond its footer. The active segment (frames, no statistics) is always read whole. Min and max skip well
when keys grow with offsets (sequence numbers, time-ordered ids); keys spread at random (hashes, UUIDs) put
nearly every row group's range around any key, and then nearly every row group is read.

The statistics are read from the footer as it is on disk: Parquet gives a footer no checksum, and
``compactlog.checksum`` (:func:`~compactlog.sealed_segment.footer_checksum`) covers the offset and timestamp
statistics, not the key's.
"""

from __future__ import annotations

import zlib

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .errors import UnknownTopicOrPartitionError
from .partitioner import partition_for_key

KEY_COLUMN = "key"
_BYTE_ARRAY = "BYTE_ARRAY"

# What each default partitioner picks for a keyed record, by name: (name, who uses it).
MURMUR2 = "murmur2"
CONSISTENT_RANDOM = "consistent_random"
PARTITIONER_USERS = {MURMUR2: "Kafka's Java client, compactlog's Python API",
                     CONSISTENT_RANDOM: "librdkafka: kcat, confluent-kafka"}


def partitions_to_search(partition_count: int, partition: int | None, topic: str) -> list[int]:
    """Every partition of the topic, or only ``partition`` when given (an error if the topic has no such
    partition)."""
    if partition is None:
        return list(range(partition_count))
    if partition not in range(partition_count):
        raise UnknownTopicOrPartitionError(f"topic {topic!r} has no partition {partition}")
    return [partition]


def consistent_partition(key: bytes, partition_count: int) -> int:
    """librdkafka's ``consistent`` partitioner (and ``consistent_random``'s, for a non-empty key): the key's
    CRC32 (IEEE, zlib's) modulo the partition count."""
    return zlib.crc32(key) % partition_count


def partitioner_hints(key: bytes, partition_count: int) -> dict[str, int]:
    """The partition each default partitioner picks for ``key``: hints only (module docstring)."""
    return {MURMUR2: partition_for_key(key, partition_count),
            CONSISTENT_RANDOM: consistent_partition(key, partition_count)}


def hints_text(topic: str, key: bytes, partition_count: int) -> str:
    """The hints as one line's part, e.g. ``murmur2 (Kafka's Java client, ...) -> t-2; ...``."""
    return "; ".join(f"{name} ({PARTITIONER_USERS[name]}) -> {topic}-{partition}"
                     for name, partition in partitioner_hints(key, partition_count).items())


def partitions_text(topic: str, partitions: list[int]) -> str:
    """``t-0`` for one partition, ``t-0, t-2`` for a few, ``t-0 .. t-99 (100 partitions)`` for a run of many."""
    if len(partitions) > 3 and partitions == list(range(partitions[0], partitions[-1] + 1)):
        return f"{topic}-{partitions[0]} .. {topic}-{partitions[-1]} ({len(partitions)} partitions)"
    return ", ".join(f"{topic}-{p}" for p in partitions)


def _key_column_index(metadata: pq.FileMetaData) -> int | None:
    schema = metadata.schema
    return next((i for i in range(len(schema)) if schema.column(i).path == KEY_COLUMN), None)


def key_row_groups(metadata: pq.FileMetaData, key: bytes) -> list[int]:
    """The row groups of a sealed segment that can hold ``key`` (module docstring), in footer order: those
    whose ``key`` statistics are missing, or admit the key."""
    column = _key_column_index(metadata)
    groups = []
    for i in range(metadata.num_row_groups):
        chunk = metadata.row_group(i).column(column) if column is not None else None
        # A chunk whose type is not BYTE_ARRAY (a damaged footer) is read, never skipped: its statistics are
        # not looked at (pyarrow aborts the process on the statistics of a chunk of the wrong type).
        stats = chunk.statistics if chunk is not None and chunk.physical_type == _BYTE_ARRAY else None
        if not _excludes(stats, key):
            groups.append(i)
    return groups


def _excludes(stats: pq.Statistics | None, key: bytes) -> bool:
    """Whether a row group's ``key`` statistics prove it holds no record of ``key``."""
    if stats is None or not stats.has_min_max:
        return False
    low, high = stats.min, stats.max
    return isinstance(low, bytes) and isinstance(high, bytes) and not low <= key <= high


def rows_of_key(table: pa.Table, key: bytes) -> pa.Table:
    """The rows of ``table`` whose key is ``key``."""
    return table.filter(pc.fill_null(pc.equal(table.column(KEY_COLUMN), pa.scalar(key, pa.binary())), False))


def read_key_row_groups(file: pq.ParquetFile, key: bytes, columns: list[str]) -> tuple[pa.Table, int]:
    """``columns`` of the row groups of ``file`` that can hold ``key`` (all of them still to be filtered
    by :func:`rows_of_key`), and how many row groups were read. Page checksums are verified as the file's
    reader was opened to (:func:`~compactlog.sealed_segment.open_parquet`)."""
    groups = key_row_groups(file.metadata, key)
    if not groups:
        return pa.schema([file.schema_arrow.field(c) for c in columns]).empty_table(), 0
    return file.read_row_groups(groups, columns=columns), len(groups)
