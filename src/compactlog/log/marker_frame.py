"""The active-segment frame of a transaction marker (a COMMIT or ABORT control row), built from a template.

A marker is one row of a fixed shape (:func:`compactlog.record.marker_rows`): no key, value or headers, its
producer's id and epoch, transactional, a control type. Its frame leaves out the same columns every time
(:data:`MARKER_OMITTED`), and its payload, the Arrow IPC message of a one-row batch of the stored columns
(two null binary columns and fixed-width ones), is the same bytes for every marker but five values, each at
a fixed place of the payload: the offset and the timestamp (int64), the producer id (int64), the epoch
(int16) and the control type (int8), little-endian. So a marker's payload is a copy of a template payload
with those values written in, and its header is packed from the same values (:mod:`compactlog.active_segment`
gives the header's format and the CRC's extent): byte for byte what :func:`encode_stored` writes for the
marker's batch, without building Arrow arrays or serializing them per marker (a marker goes into each
partition of every transaction).

The template and the value places come from the general encoding itself: the template is
:func:`encode_stored`'s payload for one marker, and each place is where the decoded column's buffer lies in
it. The template is checked once against :func:`encode_stored` for a second marker whose every value
differs; a pyarrow whose encoding the check refutes gets the general encoding for every marker instead.
"""

from __future__ import annotations

import struct
import zlib
from typing import NamedTuple

import pyarrow as pa

from ..active_segment import FRAME_MAGIC, encode_stored, omitted_columns, stored_columns
from ..frame_plan import FRAME_OVERHEAD_BYTES, row_sizes
from ..record import CONTROL_ABORT, CONTROL_COMMIT, marker_arrays, marker_rows

__all__ = ["MARKER_FRAME_BYTES", "MARKER_OMITTED", "marker_frame"]

# The columns a marker leaves at their defaults (not stored), and the bytes its row adds to a frame for
# the roll decision (:func:`plan_frames` of its one row: :func:`row_sizes`, plus a frame's overhead).
MARKER_OMITTED = omitted_columns(marker_rows(0, 0, CONTROL_COMMIT, 0))
MARKER_FRAME_BYTES = int(row_sizes(marker_rows(0, 0, CONTROL_COMMIT, 0), MARKER_OMITTED)[0]) + FRAME_OVERHEAD_BYTES

_SCHEMA, _KEPT = stored_columns(MARKER_OMITTED)
# The frame header after the magic: payload length, CRC, then (from _CRC_START on, what the CRC covers) the
# omitted mask, reserved 0, row count 1, base and last offset, first and max timestamp.
_LENGTH_CRC = struct.Struct("<II")
_COVERED = struct.Struct("<HHIqqqq")
_I64, _I16, _I8 = struct.Struct("<q"), struct.Struct("<h"), struct.Struct("<b")


class _Template(NamedTuple):
    """A marker's payload and where each of its five values lies in it (the column's data buffer)."""

    payload: bytes
    offset: int
    timestamp: int
    producer_id: int
    epoch: int
    control_type: int


def _general(producer_id: int, epoch: int, control_type: int, timestamp: int,
             offset: int) -> tuple[bytes, pa.Buffer, pa.RecordBatch]:
    columns = marker_arrays(producer_id, epoch, control_type, timestamp, offset)
    batch = pa.RecordBatch.from_arrays([columns[i] for i in _KEPT], schema=_SCHEMA)
    header, payload = encode_stored(batch, MARKER_OMITTED)
    return header, payload, batch


def _build_template() -> _Template | None:
    """The template payload and its value places, or None when the general encoding of a second marker is
    not what the template gives (then every marker takes the general encoding)."""
    _, payload, _ = _general(0, 0, CONTROL_COMMIT, 0, 0)
    buffer = pa.py_buffer(payload.to_pybytes())
    decoded = pa.ipc.read_record_batch(buffer, _SCHEMA)
    template = _Template(buffer.to_pybytes(), *(
        decoded.column(_SCHEMA.get_field_index(name)).buffers()[1].address - buffer.address
        for name in ("offset", "timestamp", "producer_id", "producer_epoch", "control_type")))
    sample = (0x0102030405060708, -0x1112131415161718, 0x2122232425262728, 0x3132, CONTROL_ABORT)
    expected_header, expected_payload, _ = _general(sample[2], sample[3], sample[4], sample[1], sample[0])
    header, payload = _encode(template, *sample)
    if header != expected_header or payload != expected_payload.to_pybytes():
        return None
    return template


def _encode(template: _Template, offset: int, timestamp: int, producer_id: int, epoch: int,
            control_type: int) -> tuple[bytes, bytearray]:
    payload = bytearray(template.payload)
    _I64.pack_into(payload, template.offset, offset)
    _I64.pack_into(payload, template.timestamp, timestamp)
    _I64.pack_into(payload, template.producer_id, producer_id)
    _I16.pack_into(payload, template.epoch, epoch)
    _I8.pack_into(payload, template.control_type, control_type)
    covered = _COVERED.pack(MARKER_OMITTED, 0, 1, offset, offset, timestamp, timestamp)
    crc = zlib.crc32(payload, zlib.crc32(covered))
    return FRAME_MAGIC + _LENGTH_CRC.pack(len(payload), crc) + covered, payload


_TEMPLATE = _build_template()


def marker_frame(producer_id: int, epoch: int, control_type: int, timestamp: int,
                 offset: int) -> tuple[bytes, pa.Buffer]:
    """The header and payload of the frame of one marker at ``offset``: what :func:`encode_stored` gives for
    the marker's batch."""
    if _TEMPLATE is None:
        header, payload, _ = _general(producer_id, epoch, control_type, timestamp, offset)
        return header, payload
    header, payload = _encode(_TEMPLATE, offset, timestamp, producer_id, epoch, control_type)
    return header, pa.py_buffer(payload)
