"""A marker's frame built from the template (:mod:`compactlog.log.marker_frame`) is byte for byte what the
general encoding (:func:`encode_stored` of the marker's batch) gives, for any values of its five fields."""

from __future__ import annotations

import random
import struct
import zlib

import pyarrow as pa
import pytest

from compactlog.log import marker_frame
from compactlog.record import CONTROL_ABORT, CONTROL_COMMIT

EXTREMES = [
    (0, 0, CONTROL_COMMIT, 0, 0),
    (2**63 - 1, 32767, CONTROL_ABORT, 2**63 - 1, 2**63 - 1),
    (-1, -1, CONTROL_COMMIT, -1, 0),  # no producer id, no epoch (never a marker's, but encodable)
    (12345, 1, CONTROL_ABORT, 1_700_000_000_000, 987_654_321),
]


def random_values(seed: int) -> list[tuple[int, int, int, int, int]]:
    rng = random.Random(seed)
    return [(rng.randrange(2**63), rng.randrange(-1, 32768), rng.choice((CONTROL_COMMIT, CONTROL_ABORT)),
             rng.randrange(-1, 2**63), rng.randrange(2**63)) for _ in range(200)]


@pytest.mark.parametrize("values", EXTREMES + random_values(19))
def test_the_template_frame_is_the_general_encoding(values: tuple[int, int, int, int, int]) -> None:
    assert marker_frame._TEMPLATE is not None  # this pyarrow's encoding passed the template's check
    header, payload = marker_frame.marker_frame(*values)
    expected_header, expected_payload, expected_batch = marker_frame._general(*values)
    assert header == expected_header
    assert payload.to_pybytes() == expected_payload.to_pybytes()
    assert pa.ipc.read_record_batch(payload, expected_batch.schema).equals(expected_batch)


def test_without_a_template_every_marker_takes_the_general_encoding(monkeypatch: pytest.MonkeyPatch) -> None:
    values = EXTREMES[3]
    monkeypatch.setattr(marker_frame, "_TEMPLATE", None)
    header, payload = marker_frame.marker_frame(*values)
    expected_header, expected_payload, _ = marker_frame._general(*values)
    assert (header, payload.to_pybytes()) == (expected_header, expected_payload.to_pybytes())


def test_a_template_the_general_encoding_refutes_is_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    real = marker_frame._general

    def drifted(producer_id: int, epoch: int, control_type: int, timestamp: int,
                offset: int) -> tuple[bytes, pa.Buffer, pa.RecordBatch]:
        """As a pyarrow whose encoding also holds the epoch at a place the template does not know."""
        header, payload, batch = real(producer_id, epoch, control_type, timestamp, offset)
        data = payload.to_pybytes()[:-2] + struct.pack("<h", epoch)
        covered = header[12:]
        header = header[:4] + struct.pack("<II", len(data), zlib.crc32(data, zlib.crc32(covered))) + covered
        return header, pa.py_buffer(data), batch

    monkeypatch.setattr(marker_frame, "_general", drifted)
    assert marker_frame._build_template() is None
