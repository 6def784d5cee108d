"""Sealed segments: ``<base>.parquet``, a Parquet file written once and replaced whole, never edited.

The footer's key-value metadata records ``compactlog.base_offset``, ``compactlog.next_offset`` (one past
the range the segment covers), ``compactlog.record_count``, ``compactlog.control_count``,
``compactlog.first_timestamp`` and ``compactlog.max_timestamp``, and ``compactlog.aborted``, the segment's
transaction index: a JSON list of ``[producer id, first offset, ABORT marker offset]`` for the aborted
transactions whose marker lies in the segment (Kafka's ``.txnindex``), and ``compactlog.checksum`` (below);
rows are in offset order, so row-group statistics on ``offset`` and ``timestamp`` let a seek read only the
row groups it needs. (The footer lists the row groups in offset order; in a file the single-pass cleaner
wrote, their bytes lie newest first: :mod:`.parquet_footer`.) This module owns the reader
(:class:`SealedSegment`) and the writer (:class:`SegmentWriter`, :func:`write_sealed`); a file's bytes are
read by :mod:`.segment_file`.

Integrity. Every page carries Parquet's CRC32 (``write_page_checksum``), checked on every read before the
page is decoded (:func:`.segment_file.open_parquet`). The footer is not covered by page checksums, so
``compactlog.checksum`` is a CRC32 of what reads rely on in it (:func:`footer_checksum`): the other
``compactlog.*`` values and, per row group in footer order, its row count and the statistics of ``offset``
(min, max) and ``timestamp`` (max), which seeks use to skip row groups. Rows read are checked too: offsets
strictly increasing inside ``[base_offset, next_offset)``. Damage found by any of these is a
:class:`CorruptSegmentError` naming the file and its offset range, never data. Segments written before
checksums (no ``compactlog.checksum``, no page CRCs) are still read: a page's CRC is checked when the page
has one, and their footers are held to the same range checks without the CRC.
"""

from __future__ import annotations

import contextlib
import json
import mmap
import os
import zlib
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .columns import from_numpy, to_numpy
from .errors import CorruptSegmentError
from .faults import io_fault
from .parquet_footer import reverse_row_groups
from .producer_state import AbortedTxn
from .record import CONTROL_NONE, SCHEMA
from .segment import SegmentMeta, fsync_path
from .segment_file import READ_ERRORS, VerifiedParquetFile, open_parquet, read_parquet_unwrapped
from .segment_file import read_parquet as read_parquet  # segments' readers import it from here
from .writeback import start_writeback

# Rows per Parquet row group of a sealed segment (about 8-9 MB decoded with 100-byte values). A row group
# is the unit the cleaner reads, maps, decides and encodes, and each step holds one, so this sets the
# cleaner's working memory: 131072 rows took a 5M-record clean to 444 MiB peak RSS, 65536 to 367 MiB, at
# the same speed within this machine's noise. Any engine reads row groups of this size well (DuckDB writes
# 122,880 rows).
ROW_GROUP_ROWS = 65536
# Parquet writer settings. Statistics only where readers prune by them (offset and timestamp ranges, key
# lookups by other engines); dictionary pages only for columns that are mostly constant. Offsets, keys and
# values of a compacted segment are nearly all distinct, so a dictionary there is built only to be dropped.
STATISTICS_COLUMNS = ["offset", "timestamp", "key"]
DICTIONARY_COLUMNS = [name for name in SCHEMA.names if name not in ("offset", "key", "value")]
_META_PREFIX = b"compactlog."
_ABORTED_KEY = b"compactlog.aborted"  # JSON [[producer id, first offset, marker offset], ...]
_CHECKSUM_KEY = b"compactlog.checksum"  # footer_checksum() as a decimal string
_OFFSET_COLUMN = SCHEMA.get_field_index("offset")
_TIMESTAMP_COLUMN = SCHEMA.get_field_index("timestamp")

# One row group as the footer checksum sees it: (rows, min offset, max offset, max timestamp).
RowGroupRange = tuple[int, int, int, int]


def footer_checksum(fields: dict[bytes, bytes], row_groups: Sequence[RowGroupRange]) -> int:
    """CRC32 of the ``compactlog.*`` footer values (all but the checksum itself) and the row groups'
    ranges, in the footer's order."""
    text = "".join(f"{k.decode()}={v.decode()}\n" for k, v in sorted(fields.items()) if k != _CHECKSUM_KEY)
    text += "".join(f"{rows},{low},{high},{ts}\n" for rows, low, high, ts in row_groups)
    return zlib.crc32(text.encode())


def footer_row_groups(metadata: pq.FileMetaData) -> list[RowGroupRange] | None:
    """Each row group's range from the footer's statistics, or None when one has none. Raises
    CorruptSegmentError when a column chunk's type is not its column's (pyarrow aborts the process, not
    raises, on the statistics of such a chunk)."""
    groups = []
    types = [metadata.schema.column(c).physical_type for c in range(len(metadata.schema))]
    for i in range(metadata.num_row_groups):
        group = metadata.row_group(i)
        if group.num_columns != len(types) or any(
                group.column(c).physical_type != kind for c, kind in enumerate(types)):
            raise CorruptSegmentError(f"row group {i}: column types do not match the schema")
        offsets = group.column(_OFFSET_COLUMN).statistics
        timestamps = group.column(_TIMESTAMP_COLUMN).statistics
        if offsets is None or not offsets.has_min_max or timestamps is None or not timestamps.has_min_max:
            return None
        groups.append((group.num_rows, offsets.min, offsets.max, timestamps.max))
    return groups


def offsets_problem(offsets: np.ndarray, base_offset: int, next_offset: int) -> str | None:
    """Why ``offsets`` (read from one segment, in order) cannot be its rows, or None when they can."""
    if not len(offsets):
        return None
    if offsets[0] < base_offset or offsets[-1] >= next_offset:
        return f"offsets {offsets[0]}..{offsets[-1]} outside the segment's range"
    if len(offsets) > 1 and not bool(np.all(offsets[1:] > offsets[:-1])):
        return "offsets not strictly increasing"
    return None


class SealedSegment:
    """A sealed Parquet segment. Immutable: replaced whole by the cleaner, never edited."""

    def __init__(self, path: str, meta: SegmentMeta, inode: int) -> None:
        self.path = path
        self.meta = meta
        # The transaction index: aborted transactions whose ABORT marker is in this segment.
        self.aborted: tuple[AbortedTxn, ...] = ()
        self.inode = inode
        # The file's bytes when a read pinned them (:meth:`pinned`); reads then never open ``path``.
        self.source: pa.Buffer | None = None

    def pinned(self) -> SealedSegment:
        """This segment read from then on through a read-only mapping of its file: a swap may rename, replace
        or delete ``path`` and the bytes stay those this segment's metadata describes (an unlinked file's
        mapping stays readable on POSIX). FileNotFoundError if ``path`` is no longer that file."""
        fd = os.open(self.path, os.O_RDONLY)
        try:
            if os.fstat(fd).st_ino != self.inode:
                raise FileNotFoundError(f"{self.path} was replaced")
            mapped = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        finally:
            os.close(fd)
        segment = SealedSegment(self.path, self.meta, self.inode)
        segment.aborted = self.aborted
        segment.source = pa.py_buffer(mapped)
        return segment

    def _file(self) -> VerifiedParquetFile:
        return open_parquet(self.path if self.source is None else self.source)

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
            fields = {k[len(_META_PREFIX):].decode(): int(v)
                      for k, v in kv.items() if k.startswith(_META_PREFIX) and k != _ABORTED_KEY}
            aborted = tuple(AbortedTxn(*entry) for entry in json.loads(kv.get(_ABORTED_KEY, b"[]")))
            meta = SegmentMeta(fields["base_offset"], fields["next_offset"], stat.st_size,
                               fields["record_count"], fields["control_count"], fields["first_timestamp"],
                               fields["max_timestamp"], False)
        except (KeyError, ValueError) as e:
            raise CorruptSegmentError(f"{path}: missing or malformed compactlog metadata: {e}") from e
        if expected_base is not None and meta.base_offset != expected_base:
            raise CorruptSegmentError(f"{path}: footer says base offset {meta.base_offset}")
        if meta_data.num_rows != meta.record_count or meta.next_offset < meta.base_offset:
            raise CorruptSegmentError(
                f"{path}: {meta_data.num_rows} rows but metadata says {meta.record_count}, "
                f"range [{meta.base_offset}, {meta.next_offset})")
        stored = meta_data.schema.to_arrow_schema()
        if [(f.name, f.type) for f in stored] != [(f.name, f.type) for f in SCHEMA]:
            raise CorruptSegmentError(f"{path}: columns {stored.names} are not a segment's, offsets "
                                      f"[{meta.base_offset}, {meta.next_offset})")
        try:
            groups = footer_row_groups(meta_data)
        except CorruptSegmentError as e:
            raise CorruptSegmentError(f"{path}: {e}, offsets [{meta.base_offset}, {meta.next_offset})") from e
        if groups:
            low = meta.base_offset
            for rows, first, last, _ in groups:  # in offset order, inside the segment's range
                if first < low or last < first or last - first < rows - 1:
                    raise CorruptSegmentError(
                        f"{path}: row group offsets {first}..{last} out of order or outside "
                        f"[{meta.base_offset}, {meta.next_offset})")
                low = last + 1
            if low > meta.next_offset:
                raise CorruptSegmentError(f"{path}: offsets outside [{meta.base_offset}, {meta.next_offset})")
        if _CHECKSUM_KEY in kv:
            expected = footer_checksum({k: v for k, v in kv.items() if k.startswith(_META_PREFIX)}, groups or [])
            if groups is None or kv[_CHECKSUM_KEY] != str(expected).encode():
                raise CorruptSegmentError(f"{path}: footer checksum mismatch, offsets "
                                          f"[{meta.base_offset}, {meta.next_offset})")
        segment = cls(path, meta, stat.st_ino)
        segment.aborted = aborted
        return segment

    def corrupt(self, cause: object) -> CorruptSegmentError:
        return CorruptSegmentError(f"{self.path}: offsets [{self.base_offset}, {self.next_offset}): {cause}")

    def verified(self, table: pa.Table) -> pa.Table:
        """``table`` (rows read from this segment) after checking its offsets, when it has them."""
        if "offset" in table.column_names:
            problem = offsets_problem(to_numpy(table.column("offset")), self.base_offset, self.next_offset)
            if problem is not None:
                raise self.corrupt(problem)
        return table

    def row_groups_for_offsets(self, file: VerifiedParquetFile, start: int, end: int | None) -> list[int]:
        groups = []
        for i in range(file.metadata.num_row_groups):
            stats = file.metadata.row_group(i).column(0).statistics
            overlaps = stats is not None and stats.has_min_max and stats.max >= start and (
                end is None or stats.min < end)
            if stats is None or not stats.has_min_max or overlaps:
                groups.append(i)
        return groups

    def read_from_time(self, timestamp_ms: int, columns: list[str]) -> Iterator[pa.Table]:
        """The row groups, in order, whose newest timestamp is at least ``timestamp_ms`` (by the
        ``timestamp`` column statistics; a group without statistics is read)."""
        try:
            with self._file() as file:
                metadata = file.metadata
                for i in range(metadata.num_row_groups):
                    stats = metadata.row_group(i).column(_TIMESTAMP_COLUMN).statistics
                    if stats is not None and stats.has_min_max and stats.max < timestamp_ms:
                        continue
                    table = file.read_row_group(i, columns=columns)
                    yield self.verified(table)
        except FileNotFoundError:
            raise
        except READ_ERRORS as e:
            raise self.corrupt(e) from e

    def read(self, start_offset: int | None = None, end_offset: int | None = None,
             columns: list[str] | None = None) -> pa.Table:
        """Rows with offsets in ``[start_offset, end_offset)``; the whole segment when both are None."""
        start = start_offset if start_offset is not None else self.base_offset
        read_columns = columns if columns is None or "offset" in columns else ["offset", *columns]
        if start <= self.base_offset and (end_offset is None or end_offset >= self.next_offset):
            try:
                table = read_parquet_unwrapped(self.path if self.source is None else self.source, read_columns)
            except FileNotFoundError:
                raise
            except READ_ERRORS as e:
                raise self.corrupt(e) from e
            if table.num_rows != self.meta.record_count:
                raise self.corrupt(f"{table.num_rows} rows, footer says {self.meta.record_count}")
            table = self.verified(table)
            return table.select(columns) if columns is not None else table
        try:
            with self._file() as file:
                groups = self.row_groups_for_offsets(file, start, end_offset)
                table = file.read_row_groups(groups, columns=read_columns) if groups else (
                    SCHEMA.empty_table().select(read_columns) if read_columns else SCHEMA.empty_table())
        except FileNotFoundError:
            raise
        except READ_ERRORS as e:
            raise self.corrupt(e) from e
        offsets = to_numpy(self.verified(table).column("offset"))
        mask = offsets >= start
        if end_offset is not None:
            mask &= offsets < end_offset
        table = table.filter(from_numpy(mask))
        return table.select(columns) if columns is not None else table


class SegmentWriter:
    """Streams rows into a new sealed segment at ``path`` (a temporary name the caller renames later).
    The footer metadata is written by :meth:`close`, which also fsyncs the file."""

    def __init__(self, path: str, base_offset: int, compression: str = "snappy", background: bool = False,
                 newest_first: bool = False) -> None:
        self.path = path
        self.base_offset = base_offset
        self.record_count = 0
        self.control_count = 0
        self.first_timestamp = -1
        self.max_timestamp = -1
        self.bytes_written = 0
        try:
            self._writer = pq.ParquetWriter(path, SCHEMA, compression=compression, write_page_checksum=True,
                                            write_statistics=STATISTICS_COLUMNS, use_dictionary=DICTIONARY_COLUMNS)
        except BaseException:  # the file is created before its magic is written (which fails on a full disk)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            raise
        # Each row group's range as written, for the footer checksum (written newest first or oldest first).
        self._row_groups: list[RowGroupRange] = []
        # Small writes (a cleaner filters row group by row group) are gathered into full row groups.
        self._pending: list[pa.Table] = []
        self._pending_rows = 0
        # newest_first=True: each write holds rows older than every earlier write (each in offset order), so
        # row groups are written newest first and :meth:`close` reverses the footer's list of them
        # (:func:`.parquet_footer.reverse_row_groups`): the file then reads oldest first, as any segment.
        self._newest_first = newest_first
        # background=True encodes and writes each row group on a thread of its own while the caller prepares
        # the next one (at most one row group in flight).
        self._encoder = ThreadPoolExecutor(1, thread_name_prefix="compactlog-write") if background else None
        self._in_flight: Future[None] | None = None

    def write(self, rows: pa.Table | pa.RecordBatch) -> None:
        if rows.num_rows == 0:
            return
        table = rows if isinstance(rows, pa.Table) else pa.Table.from_batches([rows])
        if table.schema != SCHEMA:
            table = table.cast(SCHEMA)
        timestamps = table.column(1)
        if self.record_count == 0 or self._newest_first:
            self.first_timestamp = timestamps[0].as_py()
        self.max_timestamp = max(self.max_timestamp, int(to_numpy(timestamps).max()))
        self.control_count += int(np.count_nonzero(to_numpy(table.column(9)) != CONTROL_NONE))
        self.record_count += table.num_rows
        self._pending.append(table)
        self._pending_rows += table.num_rows
        if self._pending_rows >= ROW_GROUP_ROWS:
            self._write_pending()

    def _write_pending(self, final: bool = False) -> None:
        if not self._pending:
            return
        pending = list(reversed(self._pending)) if self._newest_first else self._pending
        table = pa.concat_tables(pending) if len(pending) > 1 else pending[0]
        if not self._newest_first:
            self._pending, self._pending_rows = [], 0
            self._encode([table])
            return
        # Whole row groups cut from the newest end, newest first; the oldest rows short of a whole row group
        # wait for older ones (or close).
        keep = 0 if final else table.num_rows % ROW_GROUP_ROWS
        self._pending = [table.slice(0, keep)] if keep else []
        self._pending_rows = keep
        groups = []
        end = table.num_rows
        while end > keep:
            start = max(keep, end - ROW_GROUP_ROWS)
            groups.append(table.slice(start, end - start))
            end = start
        self._encode(groups)

    def _encode(self, tables: list[pa.Table]) -> None:
        """Write ``tables`` in order, each a row group (oldest first: split into whole row groups)."""

        def write() -> None:
            for table in tables:
                io_fault("segment.row-group-write")
                self._writer.write_table(table, row_group_size=ROW_GROUP_ROWS)
                offsets, timestamps = to_numpy(table.column(0)), to_numpy(table.column(1))
                for start in range(0, table.num_rows, ROW_GROUP_ROWS):  # write_table's cut into row groups
                    end = min(start + ROW_GROUP_ROWS, table.num_rows)
                    self._row_groups.append((end - start, int(offsets[start:end].min()),
                                             int(offsets[start:end].max()), int(timestamps[start:end].max())))
            start_writeback(self.path)

        if self._encoder is None:
            write()
            return
        self._wait()
        self._in_flight = self._encoder.submit(write)

    def _wait(self) -> None:
        if self._in_flight is not None:
            in_flight, self._in_flight = self._in_flight, None
            in_flight.result()

    def _stop(self) -> None:
        if self._encoder is not None:
            try:
                self._wait()
            finally:
                self._encoder.shutdown()
                self._encoder = None

    def close(self, next_offset: int, aborted: Sequence[AbortedTxn] = ()) -> SealedSegment:
        self._write_pending(final=True)
        self._stop()
        metadata = {
            "base_offset": self.base_offset, "next_offset": next_offset, "record_count": self.record_count,
            "control_count": self.control_count, "first_timestamp": self.first_timestamp,
            "max_timestamp": self.max_timestamp,
        }
        footer = {f"compactlog.{k}": str(v) for k, v in metadata.items()}
        footer[_ABORTED_KEY.decode()] = json.dumps(
            [[a.producer_id, a.first_offset, a.last_offset] for a in sorted(aborted, key=lambda a: a.last_offset)])
        # The footer lists row groups in offset order (reversed after a newest-first write).
        groups = sorted(self._row_groups, key=lambda group: group[1])
        footer[_CHECKSUM_KEY.decode()] = str(footer_checksum(
            {k.encode(): v.encode() for k, v in footer.items()}, groups))
        self._writer.add_key_value_metadata(footer)
        io_fault("segment.footer-write")
        self._writer.close()
        if self._newest_first:
            reverse_row_groups(self.path)
        io_fault("segment.fsync")
        fsync_path(self.path)
        segment = SealedSegment.open(self.path, self.base_offset)
        self.bytes_written = segment.meta.size_bytes
        return segment

    def abort(self) -> None:
        try:
            with contextlib.suppress(Exception):
                self._stop()
            self._writer.close()
        finally:
            if os.path.exists(self.path):
                os.unlink(self.path)


def write_sealed(path: str, rows: pa.Table | list[pa.RecordBatch], base_offset: int, next_offset: int,
                 compression: str = "snappy", aborted: Sequence[AbortedTxn] = ()) -> SealedSegment:
    """Write a whole sealed segment to ``path`` and fsync it."""
    writer = SegmentWriter(path, base_offset, compression)
    try:
        if isinstance(rows, pa.Table):
            writer.write(rows)
        else:
            for batch in rows:
                writer.write(batch)
        return writer.close(next_offset, aborted)
    except BaseException:
        writer.abort()
        raise
