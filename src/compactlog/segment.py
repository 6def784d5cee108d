"""Segments: the files of one partition, and the names they go by.

A partition directory holds segments named by their base offset, zero-padded to 20 digits:

* ``<base>.log``: the **active segment**, one append-only file of frames. A frame is a 44-byte header
  (little-endian ``magic "CLB1", payload length u32, crc32 u32, base offset i64, last offset i64,
  first timestamp i64, max timestamp i64``) followed by the payload, one Arrow IPC record-batch
  message in :data:`compactlog.record.SCHEMA`. The CRC covers the header after the CRC field and the
  payload. A frame is valid only if it is whole, its CRC matches and its offsets continue the previous
  frame's; recovery truncates the file at the first invalid frame (Kafka's torn-tail recovery).
* ``<base>.parquet``: a **sealed segment**, written once. Its footer's key-value metadata records
  ``compactlog.base_offset``, ``compactlog.next_offset`` (one past the range the segment covers),
  ``compactlog.record_count``, ``compactlog.control_count``, ``compactlog.first_timestamp`` and
  ``compactlog.max_timestamp``; rows are in offset order, so row-group statistics on ``offset`` and
  ``timestamp`` let a seek read only the row groups it needs.

Suffixes of files in transit (Kafka's): ``.cleaned`` (cleaner output being written), ``.swap`` (output
ready to replace old segments), ``.deleted`` (replaced, awaiting ``file.delete.delay.ms``) and ``.sealing``
(a roll writing its Parquet file). Recovery of each is in :mod:`compactlog.log`.
"""

from __future__ import annotations

import bisect
import os
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from .errors import CorruptSegmentError
from .record import CONTROL_NONE, SCHEMA

OFFSET_DIGITS = 20
ACTIVE_SUFFIX = ".log"
SEALED_SUFFIX = ".parquet"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
DELETED_SUFFIX = ".deleted"
SEALING_SUFFIX = ".sealing"

FRAME_MAGIC = b"CLB1"
_FRAME_HEADER = struct.Struct("<4sIIqqqq")
FRAME_HEADER_SIZE = _FRAME_HEADER.size
_CRC_START = 12  # the CRC covers the header from here on, then the payload

ROW_GROUP_ROWS = 131072
_META_PREFIX = b"compactlog."


def segment_name(base_offset: int, suffix: str) -> str:
    """``00000000000000000042.parquet``: the base offset, zero-padded to 20 digits, then the suffix."""
    return f"{base_offset:0{OFFSET_DIGITS}d}{suffix}"


def offset_from_name(name: str) -> int:
    """The base offset a file name starts with (the text before the first dot)."""
    return int(name.split(".", 1)[0])


def is_segment_name(name: str) -> bool:
    head = name.split(".", 1)[0]
    return len(head) == OFFSET_DIGITS and head.isdigit()


@dataclass(frozen=True, slots=True)
class FrameInfo:
    """Where one frame of the active segment lies and what it holds."""

    position: int
    size: int  # header + payload
    base_offset: int
    last_offset: int
    first_timestamp: int
    max_timestamp: int


@dataclass(frozen=True, slots=True)
class SegmentMeta:
    """What a segment holds, as planning and describe() see it."""

    base_offset: int
    next_offset: int
    size_bytes: int
    record_count: int
    control_count: int
    first_timestamp: int
    max_timestamp: int
    active: bool


def encode_frame(batch: pa.RecordBatch) -> bytes:
    """One frame for ``batch`` (offsets and timestamps already assigned, in SCHEMA)."""
    payload = batch.serialize()
    offsets = batch.column(0)
    timestamps = batch.column(1)
    first_ts = timestamps[0].as_py()
    max_ts = pa.compute.max(timestamps).as_py()
    rest = struct.pack("<qqqq", offsets[0].as_py(), offsets[-1].as_py(), first_ts, max_ts)
    crc = zlib.crc32(payload, zlib.crc32(rest))
    return FRAME_MAGIC + struct.pack("<II", len(payload), crc) + rest + payload.to_pybytes()


class ActiveSegment:
    """The active segment: frames appended at the end, scanned and verified on open."""

    def __init__(self, path: str, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.frames: list[FrameInfo] = []
        self._last_offsets: list[int] = []
        self.size = 0
        self.record_count = 0
        self.control_count = 0
        self.max_timestamp = -1
        self._inode = -1

    @classmethod
    def create(cls, path: str, base_offset: int) -> ActiveSegment:
        fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o644)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        segment = cls(path, base_offset)
        segment._inode = os.stat(path).st_ino
        return segment

    @classmethod
    def open(cls, path: str, base_offset: int, truncate: bool) -> tuple[ActiveSegment, int]:
        """Open and verify; with ``truncate`` (caller holds the partition lock) cut a torn or corrupt tail.
        Returns the segment and the number of bytes found invalid at the tail."""
        segment = cls(path, base_offset)
        invalid = segment.scan(truncate=truncate)
        return segment, invalid

    @property
    def next_offset(self) -> int:
        return self._last_offsets[-1] + 1 if self._last_offsets else self.base_offset

    @property
    def first_timestamp(self) -> int:
        return self.frames[0].first_timestamp if self.frames else -1

    def meta(self) -> SegmentMeta:
        return SegmentMeta(self.base_offset, self.next_offset, self.size, self.record_count,
                           self.control_count, self.first_timestamp, self.max_timestamp, True)

    def changed_on_disk(self) -> bool:
        """True when the file is not the one this object describes (rolled away) or has grown."""
        try:
            stat = os.stat(self.path)
        except FileNotFoundError:
            return True
        return stat.st_ino != self._inode or stat.st_size != self.size

    def scan(self, truncate: bool) -> int:
        """Read frames after the known end; verify each. Returns the count of invalid tail bytes."""
        with open(self.path, "rb") as f:
            self._inode = os.fstat(f.fileno()).st_ino
            file_size = os.fstat(f.fileno()).st_size
            f.seek(self.size)
            position = self.size
            while position + FRAME_HEADER_SIZE <= file_size:
                header = f.read(FRAME_HEADER_SIZE)
                magic, length, crc, base, last, first_ts, max_ts = _FRAME_HEADER.unpack(header)
                if magic != FRAME_MAGIC or position + FRAME_HEADER_SIZE + length > file_size:
                    break
                if base != self.next_offset or last < base:
                    break
                payload = f.read(length)
                if zlib.crc32(payload, zlib.crc32(header[_CRC_START:])) != crc:
                    break
                batch = pa.ipc.read_record_batch(pa.py_buffer(payload), SCHEMA)
                self._add_frame(FrameInfo(position, FRAME_HEADER_SIZE + length, base, last, first_ts, max_ts),
                                batch)
                position += FRAME_HEADER_SIZE + length
        invalid = file_size - self.size
        if invalid and truncate:
            with open(self.path, "r+b") as f:
                f.truncate(self.size)
                os.fsync(f.fileno())
        return invalid

    def _add_frame(self, frame: FrameInfo, batch: pa.RecordBatch) -> None:
        self.frames.append(frame)
        self._last_offsets.append(frame.last_offset)
        self.size = frame.position + frame.size
        self.record_count += batch.num_rows
        controls = pa.compute.sum(pa.compute.not_equal(batch.column(9), CONTROL_NONE)).as_py() or 0
        self.control_count += controls
        self.max_timestamp = max(self.max_timestamp, frame.max_timestamp)

    def append(self, batch: pa.RecordBatch) -> None:
        """Append one frame. Not durable until :meth:`flush`. The caller holds the partition lock."""
        data = encode_frame(batch)
        with open(self.path, "ab") as f:
            position = f.tell()
            if position != self.size:  # another writer's bytes we have not scanned: a caller bug
                raise CorruptSegmentError(f"{self.path}: expected end {self.size}, found {position}")
            f.write(data)
        _, length, _, base, last, first_ts, max_ts = _FRAME_HEADER.unpack_from(data)
        self._add_frame(FrameInfo(position, len(data), base, last, first_ts, max_ts), batch)

    def flush(self) -> None:
        fd = os.open(self.path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def read_batches(self, start_offset: int, end_offset: int | None = None) -> Iterator[pa.RecordBatch]:
        """Batches holding offsets in ``[start_offset, end_offset)``, sliced to that range."""
        first = bisect.bisect_left(self._last_offsets, start_offset)
        frames = self.frames[first:]
        if not frames:
            return
        with open(self.path, "rb") as f:
            for frame in frames:
                if end_offset is not None and frame.base_offset >= end_offset:
                    break
                payload = os.pread(f.fileno(), frame.size - FRAME_HEADER_SIZE, frame.position + FRAME_HEADER_SIZE)
                batch = pa.ipc.read_record_batch(pa.py_buffer(payload), SCHEMA)
                yield _slice_batch(batch, start_offset, end_offset)

    def frames_from_time(self, timestamp_ms: int) -> list[FrameInfo]:
        return [frame for frame in self.frames if frame.max_timestamp >= timestamp_ms]

    def read_frame(self, frame: FrameInfo) -> pa.RecordBatch:
        with open(self.path, "rb") as f:
            payload = os.pread(f.fileno(), frame.size - FRAME_HEADER_SIZE, frame.position + FRAME_HEADER_SIZE)
        return pa.ipc.read_record_batch(pa.py_buffer(payload), SCHEMA)

    def to_table(self) -> pa.Table:
        batches = list(self.read_batches(self.base_offset))
        return pa.Table.from_batches(batches, SCHEMA) if batches else SCHEMA.empty_table()


def _slice_batch(batch: pa.RecordBatch, start_offset: int, end_offset: int | None) -> pa.RecordBatch:
    offsets = batch.column(0)
    lo = 0
    hi = batch.num_rows
    if offsets[0].as_py() < start_offset:
        lo = int(_search_sorted(offsets, start_offset))
    if end_offset is not None and offsets[-1].as_py() >= end_offset:
        hi = int(_search_sorted(offsets, end_offset))
    return batch.slice(lo, hi - lo) if (lo, hi) != (0, batch.num_rows) else batch


def _search_sorted(offsets: pa.Array, value: int) -> int:
    import numpy as np

    return int(np.searchsorted(offsets.to_numpy(), value, side="left"))


class SealedSegment:
    """A sealed Parquet segment. Immutable: replaced whole by the cleaner, never edited."""

    def __init__(self, path: str, meta: SegmentMeta, inode: int) -> None:
        self.path = path
        self.meta = meta
        self.inode = inode

    @property
    def base_offset(self) -> int:
        return self.meta.base_offset

    @property
    def next_offset(self) -> int:
        return self.meta.next_offset

    @classmethod
    def open(cls, path: str, expected_base: int | None = None) -> SealedSegment:
        """Open and check the footer against the file name and its own metadata."""
        try:
            stat = os.stat(path)
            meta_data = pq.read_metadata(path)
        except (OSError, pa.ArrowException) as e:
            raise CorruptSegmentError(f"{path}: unreadable Parquet footer: {e}") from e
        kv = meta_data.metadata or {}
        try:
            fields = {k[len(_META_PREFIX):].decode(): int(v) for k, v in kv.items() if k.startswith(_META_PREFIX)}
            meta = SegmentMeta(fields["base_offset"], fields["next_offset"], stat.st_size, fields["record_count"],
                               fields["control_count"], fields["first_timestamp"], fields["max_timestamp"], False)
        except (KeyError, ValueError) as e:
            raise CorruptSegmentError(f"{path}: missing or malformed compactlog metadata: {e}") from e
        if expected_base is not None and meta.base_offset != expected_base:
            raise CorruptSegmentError(f"{path}: footer says base offset {meta.base_offset}")
        if meta_data.num_rows != meta.record_count or meta.next_offset < meta.base_offset:
            raise CorruptSegmentError(
                f"{path}: {meta_data.num_rows} rows but metadata says {meta.record_count}, "
                f"range [{meta.base_offset}, {meta.next_offset})")
        if meta.record_count:
            stats = meta_data.row_group(0).column(0).statistics
            last_stats = meta_data.row_group(meta_data.num_row_groups - 1).column(0).statistics
            if stats is not None and last_stats is not None and stats.has_min_max and (
                    stats.min < meta.base_offset or last_stats.max >= meta.next_offset):
                raise CorruptSegmentError(f"{path}: offsets outside [{meta.base_offset}, {meta.next_offset})")
        return cls(path, meta, stat.st_ino)

    def row_groups_for_offsets(self, file: pq.ParquetFile, start: int, end: int | None) -> list[int]:
        groups = []
        for i in range(file.metadata.num_row_groups):
            stats = file.metadata.row_group(i).column(0).statistics
            if stats is None or not stats.has_min_max:
                groups.append(i)
            elif stats.max >= start and (end is None or stats.min < end):
                groups.append(i)
        return groups

    def read(self, start_offset: int | None = None, end_offset: int | None = None,
             columns: list[str] | None = None) -> pa.Table:
        """Rows with offsets in ``[start_offset, end_offset)``; the whole segment when both are None."""
        if (start_offset is None or start_offset <= self.base_offset) and (
                end_offset is None or end_offset >= self.next_offset):
            return pq.read_table(self.path, columns=columns)
        start = start_offset if start_offset is not None else self.base_offset
        read_columns = columns if columns is None or "offset" in columns else ["offset", *columns]
        with pq.ParquetFile(self.path) as file:
            groups = self.row_groups_for_offsets(file, start, end_offset)
            table = file.read_row_groups(groups, columns=read_columns) if groups else (
                SCHEMA.empty_table().select(read_columns) if read_columns else SCHEMA.empty_table())
        offsets = table.column("offset")
        mask = pa.compute.greater_equal(offsets, start)
        if end_offset is not None:
            mask = pa.compute.and_(mask, pa.compute.less(offsets, end_offset))
        table = table.filter(mask)
        return table.select(columns) if columns is not None else table


class SegmentWriter:
    """Streams rows into a new sealed segment at ``path`` (a temporary name the caller renames later).
    The footer metadata is written by :meth:`close`, which also fsyncs the file."""

    def __init__(self, path: str, base_offset: int, compression: str = "snappy") -> None:
        self.path = path
        self.base_offset = base_offset
        self.record_count = 0
        self.control_count = 0
        self.first_timestamp = -1
        self.max_timestamp = -1
        self.bytes_written = 0
        self._writer = pq.ParquetWriter(path, SCHEMA, compression=compression, write_statistics=True)

    def write(self, rows: pa.Table | pa.RecordBatch) -> None:
        if rows.num_rows == 0:
            return
        table = rows if isinstance(rows, pa.Table) else pa.Table.from_batches([rows])
        if table.schema != SCHEMA:
            table = table.cast(SCHEMA)
        timestamps = table.column(1)
        if self.record_count == 0:
            self.first_timestamp = timestamps[0].as_py()
        self.max_timestamp = max(self.max_timestamp, pa.compute.max(timestamps).as_py())
        self.control_count += pa.compute.sum(pa.compute.not_equal(table.column(9), CONTROL_NONE)).as_py() or 0
        self.record_count += table.num_rows
        self._writer.write_table(table, row_group_size=ROW_GROUP_ROWS)

    def close(self, next_offset: int) -> SealedSegment:
        metadata = {
            "base_offset": self.base_offset, "next_offset": next_offset, "record_count": self.record_count,
            "control_count": self.control_count, "first_timestamp": self.first_timestamp,
            "max_timestamp": self.max_timestamp,
        }
        self._writer.add_key_value_metadata({f"compactlog.{k}": str(v) for k, v in metadata.items()})
        self._writer.close()
        fsync_path(self.path)
        segment = SealedSegment.open(self.path, self.base_offset)
        self.bytes_written = segment.meta.size_bytes
        return segment

    def abort(self) -> None:
        try:
            self._writer.close()
        finally:
            if os.path.exists(self.path):
                os.unlink(self.path)


def write_sealed(path: str, rows: pa.Table | list[pa.RecordBatch], base_offset: int, next_offset: int,
                 compression: str = "snappy") -> SealedSegment:
    """Write a whole sealed segment to ``path`` and fsync it."""
    writer = SegmentWriter(path, base_offset, compression)
    try:
        if isinstance(rows, pa.Table):
            writer.write(rows)
        else:
            for batch in rows:
                writer.write(batch)
        return writer.close(next_offset)
    except BaseException:
        writer.abort()
        raise


def fsync_path(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
