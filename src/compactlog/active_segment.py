"""The active segment: ``<base>.log``, one append-only file of checksummed Arrow IPC frames.

A frame is a 52-byte header (little-endian ``magic "CLB2", payload length u32, crc32 u32, omitted-columns
mask u16, reserved u16 (0), row count u32, base offset i64, last offset i64, first timestamp i64, max
timestamp i64``) followed by the payload, one Arrow IPC record-batch message holding the columns of
:data:`compactlog.record.SCHEMA` whose bit is clear in the mask. A set bit ``i`` means column ``i`` holds its
default in every row (:data:`OMITTABLE_DEFAULTS`: no headers, no producer id, no epoch, no sequence, not
transactional, a data record, no delete horizon), so it is not stored: ordinary records then cost little
more than their offset, timestamp, key and value. The CRC covers the header after the CRC field and the
payload. A frame is valid only if it is whole, its CRC matches and its offsets continue the previous
frame's. Recovery (:meth:`ActiveSegment.scan`) truncates the file at the first invalid frame when no valid
frame follows it (a torn tail, Kafka's recovery), and logs what it dropped (logger ``compactlog``); an
invalid frame followed by a valid one (found by searching the rest of the file for a frame magic whose CRC
matches) is damage, not a torn write: :class:`CorruptSegmentError`, and nothing is truncated. Frames of
the first format (``magic "CLB1"``, a 44-byte header without the mask, the reserved field and the row
count; every column stored) are still read.
"""

from __future__ import annotations

import bisect
import logging
import os
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from .columns import to_numpy
from .errors import CorruptSegmentError
from .faults import io_fault
from .record import (
    CONTROL_NONE,
    NO_DELETE_HORIZON,
    NO_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    SCHEMA,
    constant_column,
)
from .segment import SegmentMeta, truncate_file

FRAME_MAGIC = b"CLB2"
_FRAME_HEADER = struct.Struct("<4sIIHHIqqqq")
FRAME_HEADER_SIZE = _FRAME_HEADER.size
# The first frame format (every column stored, no row count): still read, never written.
LEGACY_FRAME_MAGIC = b"CLB1"
_LEGACY_HEADER = struct.Struct("<4sIIqqqq")
_CRC_START = 12  # the CRC covers the header from here on, then the payload
CACHED_FRAME_MAX_BYTES = 4 << 20  # the largest frame an active segment keeps decoded after a read

# Columns a frame leaves out when every row holds the default (index in SCHEMA -> default; None = null).
OMITTABLE_DEFAULTS: dict[int, object] = {
    SCHEMA.get_field_index("headers"): None,
    SCHEMA.get_field_index("producer_id"): NO_PRODUCER_ID,
    SCHEMA.get_field_index("producer_epoch"): NO_EPOCH,
    SCHEMA.get_field_index("sequence"): NO_SEQUENCE,
    SCHEMA.get_field_index("is_transactional"): False,
    SCHEMA.get_field_index("control_type"): CONTROL_NONE,
    SCHEMA.get_field_index("delete_horizon_ms"): NO_DELETE_HORIZON,
}
_CONTROL_BIT = 1 << SCHEMA.get_field_index("control_type")
_ALL_COLUMNS = (1 << len(SCHEMA)) - 1
_stored_schemas: dict[int, tuple[pa.Schema, list[int]]] = {}
_log = logging.getLogger("compactlog")


@dataclass(frozen=True, slots=True)
class FrameInfo:
    """Where one frame of the active segment lies and what it holds."""

    position: int
    size: int  # header + payload
    base_offset: int
    last_offset: int
    first_timestamp: int
    max_timestamp: int
    omitted: int = 0  # the mask of columns not stored (their defaults)
    rows: int = 0
    header_size: int = FRAME_HEADER_SIZE  # 44 for a legacy "CLB1" frame


def _holds_only(column: pa.Array | pa.ChunkedArray, default: object) -> bool:
    """Whether every row of ``column`` is ``default`` (None: null)."""
    if default is None:
        return column.null_count == len(column)
    if column.null_count:
        return False
    if isinstance(column, pa.ChunkedArray):
        if column.num_chunks != 1:
            return all(_holds_only(chunk, default) for chunk in column.chunks)
        column = column.chunk(0)
    if isinstance(default, bool):
        return column.true_count == (len(column) if default else 0)
    values = to_numpy(column)
    if not len(values):
        return True
    # The first row settles most columns (a producer's fields are never their defaults): no reduction then.
    return bool(values[0] == default) and bool((values == default).all())


def omitted_columns(rows: pa.Table | pa.RecordBatch) -> int:
    """The mask of the columns of ``rows`` (in SCHEMA) that hold their default in every row."""
    omitted = 0
    for index, default in OMITTABLE_DEFAULTS.items():
        if _holds_only(rows.column(index), default):
            omitted |= 1 << index
    return omitted


_HEADERS_BIT = 1 << SCHEMA.get_field_index("headers")
_PRODUCER_BITS = sum(1 << SCHEMA.get_field_index(name) for name in ("producer_id", "producer_epoch", "sequence"))
_TRANSACTIONAL_BIT = 1 << SCHEMA.get_field_index("is_transactional")
_DATA_BITS = _CONTROL_BIT | 1 << SCHEMA.get_field_index("delete_horizon_ms")


def batch_omitted(has_headers: bool, producer: tuple[int, int, int, bool] | None) -> int:
    """:func:`omitted_columns` of one batch of data records (no control rows, no delete horizon) known by
    its shape instead of its columns: the headers unless a record has some; without a producer (its fields
    "none") the producer columns; with one ``(id, epoch, base sequence, transactional)``, whose id, epoch and
    sequences are stored, the transactional flag unless set."""
    omitted = _DATA_BITS | (0 if has_headers else _HEADERS_BIT)
    if producer is None:
        return omitted | _PRODUCER_BITS | _TRANSACTIONAL_BIT
    return omitted | (0 if producer[3] else _TRANSACTIONAL_BIT)


def stored_columns(omitted: int) -> tuple[pa.Schema, list[int]]:
    """The schema of a payload with the ``omitted`` columns left out, and the SCHEMA indexes it keeps."""
    cached = _stored_schemas.get(omitted)
    if cached is None:
        kept = [i for i in range(len(SCHEMA)) if not omitted >> i & 1]
        cached = _stored_schemas[omitted] = (pa.schema([SCHEMA.field(i) for i in kept]), kept)
    return cached


# Bytes a stored column takes per row in a frame beyond its variable-length data (an upper bound:
# validity bits are counted as a byte). Indexed like SCHEMA.
_ROW_BYTES = (8, 8, 5, 5, 5, 8, 2, 4, 1, 1, 8)


_frame_row_bytes: dict[int, int] = {}


def frame_row_bytes(omitted: int) -> int:
    """Fixed bytes one row costs in a frame that leaves out the ``omitted`` columns."""
    known = _frame_row_bytes.get(omitted)
    if known is None:
        known = _frame_row_bytes[omitted] = sum(_ROW_BYTES[i] for i in stored_columns(omitted)[1])
    return known


def frame_parts(batch: pa.RecordBatch, omitted: int | None = None) -> tuple[bytes, pa.Buffer]:
    """The header and the payload of one frame for ``batch`` (offsets and timestamps assigned, in SCHEMA).
    ``omitted`` (default: every column holding only its default) must only name such columns."""
    if omitted is None:
        omitted = omitted_columns(batch)
    return encode_stored(batch.select(stored_columns(omitted)[1]) if omitted else batch, omitted)


def encode_stored(stored: pa.RecordBatch, omitted: int,
                  bounds: tuple[int, int, int, int] | None = None) -> tuple[bytes, pa.Buffer]:
    """The header and the payload of one frame from a batch of the stored columns only (in the schema
    :func:`stored_columns` gives for ``omitted``). Written one after the other, the payload is never
    copied into a joined ``bytes``. ``bounds``, when the caller knows them: the batch's first and last
    offsets, its first timestamp and its largest (else read from its columns)."""
    payload = stored.serialize()
    if bounds is None:
        offsets = to_numpy(stored.column(0))
        timestamps = to_numpy(stored.column(1))
        bounds = (int(offsets[0]), int(offsets[-1]), int(timestamps[0]), int(timestamps.max()))
    rest = struct.pack("<HHIqqqq", omitted, 0, stored.num_rows, *bounds)
    crc = zlib.crc32(payload, zlib.crc32(rest))
    return FRAME_MAGIC + struct.pack("<II", payload.size, crc) + rest, payload


def encode_frame(batch: pa.RecordBatch) -> bytes:
    """One whole frame for ``batch`` as bytes (see :func:`frame_parts`)."""
    header, payload = frame_parts(batch)
    return header + payload.to_pybytes()


def decode_payload(payload: pa.Buffer | bytes, omitted: int) -> pa.RecordBatch:
    """A frame's payload as a batch in SCHEMA, its omitted columns filled in with their defaults."""
    stored_schema, kept = stored_columns(omitted)
    batch = pa.ipc.read_record_batch(pa.py_buffer(payload) if isinstance(payload, bytes) else payload,
                                     stored_schema)
    if not omitted:
        return batch
    n = batch.num_rows
    columns = dict(zip(kept, batch.columns, strict=True))
    arrays = [columns[i] if i in columns else constant_column(OMITTABLE_DEFAULTS[i], SCHEMA.field(i).type, n)
              for i in range(len(SCHEMA))]
    return pa.RecordBatch.from_arrays(arrays, schema=SCHEMA)


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
        # The frame read last, decoded (position, rows): a consumer's next fetch starts inside the frame its
        # previous fetch ended in, so sequential reads decode each frame once instead of twice. Frames are
        # never rewritten in place while this object lives (an undone append reopens the segment), so the
        # position names the frame. One frame at most, and none larger than CACHED_FRAME_MAX_BYTES.
        self._last_read: tuple[int, pa.RecordBatch] | None = None

    @classmethod
    def create(cls, path: str, base_offset: int) -> ActiveSegment:
        io_fault("log.segment-create")
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

    def growth_on_disk(self) -> int | None:
        """The bytes appended to the file since this object last saw it; None when the file is gone,
        replaced by another or shorter (then this object no longer describes it)."""
        try:
            stat = os.stat(self.path)
        except FileNotFoundError:
            return None
        if stat.st_ino != self._inode or stat.st_size < self.size:
            return None
        return stat.st_size - self.size

    def scan(self, truncate: bool) -> int:
        """Read frames after the known end; verify each. Returns the count of invalid tail bytes."""
        with open(self.path, "rb") as f:
            self._inode = os.fstat(f.fileno()).st_ino
            file_size = os.fstat(f.fileno()).st_size
            f.seek(self.size)
            position = self.size
            while position + _LEGACY_HEADER.size <= file_size:
                header = f.read(FRAME_HEADER_SIZE)
                if header[:4] == LEGACY_FRAME_MAGIC:  # written before columns could be omitted
                    header = header[:_LEGACY_HEADER.size]
                    _, length, crc, base, last, first_ts, max_ts = _LEGACY_HEADER.unpack(header)
                    omitted, reserved, rows = 0, 0, 1
                elif len(header) == FRAME_HEADER_SIZE:
                    (magic, length, crc, omitted, reserved, rows, base, last, first_ts,
                     max_ts) = _FRAME_HEADER.unpack(header)
                    if magic != FRAME_MAGIC:
                        if position == 0 and magic.strip(b"\0"):
                            # Not a torn write (those are a prefix of a frame, or zeros): a file of another
                            # format. Truncating it would drop every record it holds.
                            raise CorruptSegmentError(
                                f"{self.path}: unknown frame format (magic {magic!r}); not truncating it")
                        break
                else:
                    break
                end = position + len(header) + length
                if end > file_size or base != self.next_offset or last < base or rows < 1 or reserved \
                        or omitted & ~_ALL_COLUMNS:
                    break
                f.seek(position + len(header))
                payload = f.read(length)
                if zlib.crc32(payload, zlib.crc32(header[_CRC_START:])) != crc:
                    break
                # Markers are counted from the payload; a frame without the control column has none.
                batch = None if omitted & _CONTROL_BIT else decode_payload(payload, omitted)
                if len(header) != FRAME_HEADER_SIZE:
                    assert batch is not None
                    rows = batch.num_rows
                frame = FrameInfo(position, end - position, base, last, first_ts, max_ts, omitted, rows,
                                  len(header))
                self._add_frame(frame, batch)
                position = end
        invalid = file_size - self.size
        if invalid:
            self._check_torn_tail(file_size)
        if invalid and truncate:
            _log.warning("%s: truncating %d bytes after offset %d at byte %d (a torn or corrupt tail)",
                         self.path, invalid, self.next_offset - 1, self.size)
            truncate_file(self.path, self.size)
        return invalid

    def _check_torn_tail(self, file_size: int) -> None:
        """Raise :class:`CorruptSegmentError` when a frame with a matching CRC lies after the first invalid
        byte (``self.size``): the invalid bytes are damage inside the file, not a torn tail."""
        with open(self.path, "rb") as f:
            f.seek(self.size)
            rest = f.read(file_size - self.size)
        found = _next_valid_frame(rest, 1)
        if found is not None:
            raise CorruptSegmentError(
                f"{self.path}: invalid frame at byte {self.size} (after offset {self.next_offset - 1}) followed "
                f"by a valid frame at byte {self.size + found}; not truncating")

    def _add_frame(self, frame: FrameInfo, batch: pa.RecordBatch | None, controls: int | None = None) -> None:
        """Account for a frame; its control rows are ``controls`` when the caller knows how many, else
        counted from ``batch`` (its rows; needed only when the frame stores control types)."""
        self.frames.append(frame)
        self._last_offsets.append(frame.last_offset)
        self.size = frame.position + frame.size
        self.record_count += frame.rows
        if controls is not None:
            self.control_count += controls
        elif batch is not None and not frame.omitted & _CONTROL_BIT:
            types = to_numpy(batch.column(batch.schema.get_field_index("control_type")))
            self.control_count += int(np.count_nonzero(types != CONTROL_NONE))
        self.max_timestamp = max(self.max_timestamp, frame.max_timestamp)

    def append(self, batch: pa.RecordBatch) -> None:
        """Append one frame. Not durable until :meth:`flush`. The caller holds the partition lock."""
        header, payload = frame_parts(batch)
        self.append_encoded(header, payload, batch)

    def append_encoded(self, header: bytes, payload: pa.Buffer, batch: pa.RecordBatch | None,
                       controls: int | None = None) -> None:
        """Append a frame encoded by :func:`encode_stored`; ``batch`` holds its rows (stored columns at
        least), needed only when the frame stores control types and ``controls`` (how many of its rows are
        control rows) is not given. The caller holds the partition lock."""
        _, _, _, omitted, _, rows, base, last, first_ts, max_ts = _FRAME_HEADER.unpack(header)
        if base != self.next_offset:
            raise CorruptSegmentError(
                f"{self.path}: a frame at offset {base} cannot follow {self.next_offset}")
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        try:
            position = os.lseek(fd, 0, os.SEEK_END)
            if position != self.size:  # another writer's bytes we have not scanned: a caller bug
                raise CorruptSegmentError(f"{self.path}: expected end {self.size}, found {position}")
            _write_all(fd, [header, memoryview(payload)])
        finally:
            os.close(fd)
        frame = FrameInfo(position, len(header) + payload.size, base, last, first_ts, max_ts, omitted, rows)
        self._add_frame(frame, batch, controls)

    def flush(self) -> None:
        fd = self.open_for_sync()
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def open_for_sync(self) -> int:
        """A descriptor of the segment's file for :func:`sync_and_close`."""
        return os.open(self.path, os.O_RDONLY)

    def open_for_sync_if_same(self) -> int | None:
        """:meth:`open_for_sync` when the file at the path is still this segment's (same inode): the frames
        appended through this object are then in it. None when another process rolled, swapped or replaced
        it (the caller catches up with the directory first)."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return None
        if os.fstat(fd).st_ino != self._inode:
            os.close(fd)
            return None
        return fd

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
                yield _slice_batch(self._decoded(f.fileno(), frame), start_offset, end_offset)

    def frames_from_time(self, timestamp_ms: int) -> list[FrameInfo]:
        return [frame for frame in self.frames if frame.max_timestamp >= timestamp_ms]

    def read_frame(self, frame: FrameInfo) -> pa.RecordBatch:
        with open(self.path, "rb") as f:
            return self._decoded(f.fileno(), frame)

    def _decoded(self, fd: int, frame: FrameInfo) -> pa.RecordBatch:
        """A frame's rows: from the last-read cache, else read from ``fd`` and decoded (and then cached)."""
        cached = self._last_read  # one read of the attribute: another thread may replace it meanwhile
        if cached is not None and cached[0] == frame.position:
            return cached[1]
        batch = decode_payload(_read_payload(fd, frame), frame.omitted)
        if frame.size <= CACHED_FRAME_MAX_BYTES:
            self._last_read = (frame.position, batch)
        return batch

    def to_table(self) -> pa.Table:
        batches = list(self.read_batches(self.base_offset))
        return pa.Table.from_batches(batches, SCHEMA) if batches else SCHEMA.empty_table()


# An append's durability needs the data and the file size (what recovery reads), not the timestamps: fdatasync
# gives that and skips the inode's timestamp update (about a quarter of an fsync's time here). Where the
# platform has none (macOS), fsync.
sync_data = getattr(os, "fdatasync", os.fsync)


def sync_and_close(fd: int) -> None:
    """Make the frames written to a descriptor from :meth:`ActiveSegment.open_for_sync` durable
    (:data:`sync_data`; the ``log.fsync`` fault point first) and close it."""
    try:
        io_fault("log.fsync")
        sync_data(fd)
    finally:
        os.close(fd)


def _write_all(fd: int, parts: list[bytes | memoryview]) -> None:
    """Write ``parts`` one after the other (one ``writev`` unless the kernel takes fewer bytes)."""
    views = [memoryview(part).cast("B") for part in parts]
    while views:
        written = os.writev(fd, views)
        while views and written >= len(views[0]):
            written -= len(views[0])
            views.pop(0)
        if views:
            views[0] = views[0][written:]


def _next_valid_frame(data: bytes, start: int) -> int | None:
    """The position in ``data`` of the first whole frame at or after ``start`` whose CRC matches, or None."""
    candidates = []
    for magic in (FRAME_MAGIC, LEGACY_FRAME_MAGIC):
        position = data.find(magic, start)
        while position >= 0:
            candidates.append(position)
            position = data.find(magic, position + 1)
    for position in sorted(candidates):
        legacy = data[position:position + 4] == LEGACY_FRAME_MAGIC
        header_size = _LEGACY_HEADER.size if legacy else FRAME_HEADER_SIZE
        if position + header_size > len(data):
            continue
        length, crc = struct.unpack_from("<II", data, position + 4)
        end = position + header_size + length
        if end <= len(data) and zlib.crc32(data[position + header_size:end],
                                           zlib.crc32(data[position + _CRC_START:position + header_size])) == crc:
            return position
    return None


def _read_payload(fd: int, frame: FrameInfo) -> bytes:
    return os.pread(fd, frame.size - frame.header_size, frame.position + frame.header_size)


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
    return int(np.searchsorted(to_numpy(offsets), value, side="left"))
