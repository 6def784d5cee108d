"""The erasure proof of one key (``compactlog verify-erasure``): a scan of every file of every partition
directory of the key's topic (:func:`scan_topic`; a key may be in any partition: :mod:`compactlog.key_lookup`)
for values of the key older than its newest tombstone in that partition.

Files scanned, whatever their state (:mod:`compactlog.segment` names them):

* Parquet files: live sealed segments (``<base>.parquet``) and those in transit (``.cleaned``, ``.swap``,
  ``.deleted``, ``.sealing``): every row group whose key statistics admit the key
  (:func:`compactlog.key_lookup.key_row_groups`) is read, with page checksums verified; a row group whose
  statistics exclude the key cannot hold it and is not read (a file none of whose row groups can is
  counted as skipped);
* frame files: the active segment (``<base>.log``) and any ``.log`` in transit, every whole frame whose
  CRC matches (damage inside the file makes the file unreadable); a torn tail holds no records, but its
  bytes are searched for the key, as they are still on disk until a writer truncates them;
* producer snapshots (``.snapshot``, ``.snapshot.tmp``): parsed; their fields (producer ids, epochs,
  sequences, offsets) cannot hold a key or value, so a snapshot that parses holds none, and one that does
  not parse is unreadable;
* every other file (lock files, anything unexpected): searched byte for byte for the key.

A file that cannot be read proves nothing: the scan reports it, and the proof fails. The key's newest
record in a partition is the highest offset found in any of its files. The proof holds for a partition when
that record is a tombstone (or no record of the key is left at all: the tombstone, too, has gone) and no
value of the key at a lower offset is left in any file, nor the key's bytes in a file that holds no records;
it holds for the topic when it holds for every partition searched.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from .active_segment import ActiveSegment
from .errors import CompactLogError
from .key_lookup import read_key_row_groups, rows_of_key
from .log.producers import SNAPSHOT_SUFFIX
from .producer_state import ProducerStateManager
from .sealed_segment import READ_ERRORS, open_parquet
from .segment import ACTIVE_SUFFIX, SEALED_SUFFIX, is_segment_name, offset_from_name

_COLUMNS = ["offset", "timestamp", "key", "value", "delete_horizon_ms"]


@dataclass(frozen=True, slots=True)
class FoundRecord:
    """A record of the key in one file."""

    file: str
    offset: int
    timestamp: int
    tombstone: bool
    delete_horizon_ms: int

    @property
    def live_file(self) -> bool:
        """In a segment of the log (``<base>.parquet`` or ``<base>.log``), not a file in transit."""
        return self.file.count(".") == 1


@dataclass
class ErasureScan:
    """Everything the scan found of the key."""

    files: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # Parquet files whose key statistics exclude the key
    records: list[FoundRecord] = field(default_factory=list)
    key_bytes: list[tuple[str, int]] = field(default_factory=list)  # (file, byte position) in non-record files
    unreadable: dict[str, str] = field(default_factory=dict)  # file -> why

    @property
    def newest(self) -> FoundRecord | None:
        return max(self.records, key=lambda r: r.offset, default=None)

    @property
    def surviving_values(self) -> list[FoundRecord]:
        """Values of the key older than its newest record, when that is a tombstone; every value when the
        newest record is a value (the key is live)."""
        newest = self.newest
        if newest is None:
            return []
        if not newest.tombstone:
            return sorted((r for r in self.records if not r.tombstone), key=lambda r: (r.offset, r.file))
        return sorted((r for r in self.records if not r.tombstone and r.offset < newest.offset),
                      key=lambda r: (r.offset, r.file))

    @property
    def nothing_stored(self) -> bool:
        """No record of the key, none of its bytes, and no file that could hide one. True of a key whose
        tombstone has been removed too (an erasure's end state), and equally of a key never written, or
        misspelt: the disk cannot tell them apart."""
        return not self.records and not self.key_bytes and not self.unreadable

    @property
    def erased(self) -> bool:
        newest = self.newest
        return ((newest is None or newest.tombstone) and not self.surviving_values and not self.key_bytes
                and not self.unreadable)


def _rows_of(path: str, name: str, key: bytes) -> tuple[pa.Table, int, bool]:
    """The rows of a segment file that can hold ``key`` (a Parquet file's row groups by their key
    statistics, a frame file whole), where its valid bytes end (a frame file's torn tail lies after), and
    whether any of it was read (False: a Parquet file whose key statistics exclude the key)."""
    if SEALED_SUFFIX in name:
        try:
            with open_parquet(path) as file:
                table, groups_read = read_key_row_groups(file, key, _COLUMNS)
                return table, os.path.getsize(path), groups_read > 0 or file.metadata.num_row_groups == 0
        except READ_ERRORS as e:
            raise CompactLogError(f"unreadable Parquet file: {e}") from e
    segment, _ = ActiveSegment.open(path, offset_from_name(name), truncate=False)
    return segment.to_table().select(_COLUMNS), segment.size, True


def scan_partition(directory: str, key: bytes) -> ErasureScan:
    """Scan every file of ``directory`` for ``key`` (module docstring). Changes nothing."""
    scan = ErasureScan()
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        if not os.path.isfile(path):
            continue
        scan.files.append(name)
        holds_records = is_segment_name(name) and (SEALED_SUFFIX in name or ACTIVE_SUFFIX in name)
        if not holds_records:
            with open(path, "rb") as f:
                data = f.read()
            if SNAPSHOT_SUFFIX in name:  # producer ids, epochs and sequences: no field can hold record data
                try:
                    ProducerStateManager.from_snapshot(data)
                except (ValueError, KeyError, TypeError) as e:
                    scan.unreadable[name] = f"damaged producer snapshot: {e}"
                continue
            position = data.find(key) if key else -1
            if position >= 0:
                scan.key_bytes.append((name, position))
            continue
        try:
            table, valid_end, read = _rows_of(path, name, key)
        except (CompactLogError, OSError) as e:
            scan.unreadable[name] = str(e)
            continue
        if not read:
            scan.skipped.append(name)
        with open(path, "rb") as f:  # a torn tail is not records, but its bytes are still on disk
            f.seek(valid_end)
            position = f.read().find(key) if key else -1
        if position >= 0:
            scan.key_bytes.append((name, valid_end + position))
        rows = rows_of_key(table, key)
        for offset, timestamp, valid, horizon in zip(
                rows.column("offset").to_pylist(), rows.column("timestamp").to_pylist(),
                pc.is_valid(rows.column("value")).to_pylist(), rows.column("delete_horizon_ms").to_pylist(),
                strict=True):
            scan.records.append(FoundRecord(name, offset, timestamp, not valid, horizon))
    return scan


def scan_topic(data_dir: str, topic: str, partitions: Iterable[int], key: bytes) -> dict[int, ErasureScan]:
    """:func:`scan_partition` of each of ``partitions`` of ``topic`` (every one a key may be in: the caller
    chooses them with :func:`compactlog.key_lookup.partitions_to_search`)."""
    return {partition: scan_partition(os.path.join(data_dir, f"{topic}-{partition}"), key)
            for partition in partitions}


def transit_fate(name: str, file_delete_delay_ms: int) -> str:
    """When the rules remove a file in transit that still holds a value."""
    if name.endswith(".deleted"):
        return (f"a replaced or retention-deleted file awaiting file.delete.delay.ms ({file_delete_delay_ms} ms) "
                "in the process that replaced it; removed at the latest when a writer next opens the partition")
    return ("left by an interrupted cleaner swap or roll: crash recovery removes it (or installs it) when a "
            "writer next opens the partition")
