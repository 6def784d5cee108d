"""A segment file's contents as ``kafka-dump-log --files`` prints them (``compactlog dump-segment``).

A sealed segment (Parquet: ``<base>.parquet``, also ``.cleaned``, ``.swap``, ``.deleted``) is read whole
with its page and footer checksums verified; an active segment (``<base>.log``, checksummed Arrow frames,
:mod:`compactlog.active_segment`) is walked frame by frame: a frame whose header, length, CRC or offsets
are invalid is reported with its byte position, and the walk goes on at the next valid frame (if any).

Kafka's batches are runs of consecutive records of one producer (producer id, epoch, transactional flag,
control or data) inside a frame or file; each is printed as a ``baseOffset: ... lastOffset: ...`` line,
then one ``| offset: ...`` line per record, with the key and value (``payload``) only when
``print_data`` (``--print-data-log``), as Kafka does. Markers print their type (``endTxnMarker``).
"""

from __future__ import annotations

import itertools
import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field

import pyarrow as pa

from .active_segment import (
    _CRC_START,
    _FRAME_HEADER,
    _LEGACY_HEADER,
    FRAME_MAGIC,
    LEGACY_FRAME_MAGIC,
    _next_valid_frame,
    decode_payload,
)
from .errors import CompactLogError
from .record import CONTROL_ABORT, CONTROL_COMMIT, CONTROL_EMPTY_BATCH, CONTROL_NONE, NO_DELETE_HORIZON
from .sealed_segment import SealedSegment, read_parquet
from .segment import SEALED_SUFFIX, offset_from_name

_CONTROL_NAMES = {CONTROL_ABORT: "ABORT", CONTROL_COMMIT: "COMMIT", CONTROL_EMPTY_BATCH: "EMPTY_BATCH"}
_BATCH_KEY = ["producer_id", "producer_epoch", "is_transactional", "is_control"]


@dataclass
class Dump:
    """The lines of a dump and the corrupt regions found, by byte position."""

    lines: list[str] = field(default_factory=list)
    corrupt: list[tuple[int, str]] = field(default_factory=list)


def _text(value: bytes | None) -> str:
    return "null" if value is None else value.decode("utf-8", errors="backslashreplace")


def batch_lines(table: pa.Table, position: int | None, print_data: bool) -> Iterator[str]:
    """The batches (producer runs) of ``table`` and their records."""
    rows = table.to_pylist()
    for _, run in itertools.groupby(rows, key=lambda r: (r["producer_id"], r["producer_epoch"],
                                                         r["is_transactional"], r["control_type"] != CONTROL_NONE)):
        batch = list(run)
        first, last = batch[0], batch[-1]
        control = first["control_type"] != CONTROL_NONE
        horizons = {r["delete_horizon_ms"] for r in batch} - {NO_DELETE_HORIZON}
        where = "" if position is None else f" position: {position}"
        yield (f"baseOffset: {first['offset']} lastOffset: {last['offset']} count: {len(batch)}"
               f" producerId: {first['producer_id']} producerEpoch: {first['producer_epoch']}"
               f" isTransactional: {str(first['is_transactional']).lower()} isControl: {str(control).lower()}"
               f" deleteHorizonMs: {min(horizons) if horizons else 'OptionalLong.empty'}{where}"
               f" CreateTime: {max(r['timestamp'] for r in batch)}")
        for r in batch:
            line = (f"| offset: {r['offset']} CreateTime: {r['timestamp']}"
                    f" keySize: {-1 if r['key'] is None else len(r['key'])}"
                    f" valueSize: {-1 if r['value'] is None else len(r['value'])} sequence: {r['sequence']}"
                    f" headerKeys: [{','.join(h['key'] for h in r['headers'] or [])}]")
            if r["delete_horizon_ms"] != NO_DELETE_HORIZON:
                line += f" deleteHorizonMs: {r['delete_horizon_ms']}"
            if control:
                line += f" endTxnMarker: {_CONTROL_NAMES.get(r['control_type'], r['control_type'])}"
            elif print_data:
                line += f" key: {_text(r['key'])} payload: {_text(r['value'])}"
            yield line


def dump_sealed(path: str, print_data: bool) -> Dump:
    dump = Dump()
    try:
        segment = SealedSegment.open(path)
        table = segment.verified(read_parquet(path))
    except CompactLogError as e:
        dump.corrupt.append((0, str(e)))
        return dump
    meta = segment.meta
    aborted = [[a.producer_id, a.first_offset, a.last_offset] for a in segment.aborted]
    dump.lines.append(f"Sealed segment: baseOffset: {meta.base_offset} nextOffset: {meta.next_offset} records: "
                      f"{meta.record_count} markers: {meta.control_count} size: {meta.size_bytes} "
                      f"abortedTransactions: {aborted}")
    dump.lines.extend(batch_lines(table, None, print_data))
    return dump


def dump_active(path: str, print_data: bool) -> Dump:
    """Every frame of a frame file (module docstring)."""
    dump = Dump()
    with open(path, "rb") as f:
        data = f.read()
    base = offset_from_name(os.path.basename(path))
    dump.lines.append(f"Active segment: baseOffset: {base} size: {len(data)}")
    position, expected = 0, base
    while position < len(data):
        problem, end, batch = _frame_at(data, position, expected)
        if problem is None and batch is not None:
            dump.lines.append(f"Frame position: {position} size: {end - position} records: {batch.num_rows}")
            dump.lines.extend(batch_lines(pa.Table.from_batches([batch]), position, print_data))
            expected = batch.column(0)[-1].as_py() + 1
            position = end
            continue
        dump.corrupt.append((position, problem or "invalid frame"))
        found = _next_valid_frame(data, position + 1)
        if found is None:
            dump.lines.append(f"Corrupt frame at position {position}: {problem}; {len(data) - position} byte(s) "
                              "to the end of the file are unreadable")
            break
        dump.lines.append(f"Corrupt frame at position {position}: {problem}; resuming at position {found}")
        position = found
        expected = -1  # offsets after damage cannot be checked against the lost frames
    return dump


def _frame_at(data: bytes, position: int, expected: int) -> tuple[str | None, int, pa.RecordBatch | None]:
    """(problem or None, end position, rows) of the frame at ``position``."""
    magic = data[position:position + 4]
    if magic == LEGACY_FRAME_MAGIC and position + _LEGACY_HEADER.size <= len(data):
        header = data[position:position + _LEGACY_HEADER.size]
        _, length, crc, first, last, _, _ = _LEGACY_HEADER.unpack(header)
        omitted = 0
    elif magic == FRAME_MAGIC and position + _FRAME_HEADER.size <= len(data):
        header = data[position:position + _FRAME_HEADER.size]
        _, length, crc, omitted, _, _, first, last, _, _ = _FRAME_HEADER.unpack(header)
    else:
        return f"no frame header (magic {magic!r})", position, None
    end = position + len(header) + length
    if end > len(data):
        return f"frame of {length} payload bytes runs past the end of the file ({len(data)} bytes)", end, None
    payload = data[position + len(header):end]
    if zlib.crc32(payload, zlib.crc32(header[_CRC_START:])) != crc:
        return "CRC mismatch", end, None
    if expected >= 0 and first != expected:
        return f"offsets {first}..{last} do not follow offset {expected - 1}", end, None
    try:
        batch = decode_payload(payload, omitted)
    except (pa.ArrowException, ValueError) as e:
        return f"undecodable payload: {e}", end, None
    return None, end, batch


def dump_segment(path: str, print_data: bool) -> Dump:
    """The dump of ``path``: a Parquet file by name (``.parquet`` anywhere in it), else a frame file."""
    if SEALED_SUFFIX in os.path.basename(path):
        return dump_sealed(path, print_data)
    return dump_active(path, print_data)
