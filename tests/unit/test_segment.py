"""Tests for compactlog.segment: file names, the active segment's checksummed frames and their recovery,
and sealed Parquet segments with their footer metadata."""

from __future__ import annotations

import os
import struct
import zlib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compactlog import CorruptSegmentError
from compactlog import sealed_segment as segment_module
from compactlog.active_segment import (
    FRAME_HEADER_SIZE,
    OMITTABLE_DEFAULTS,
    ActiveSegment,
    encode_frame,
    frame_row_bytes,
    omitted_columns,
)
from compactlog.frame_plan import row_sizes
from compactlog.record import CONTROL_COMMIT, SCHEMA, to_rows
from compactlog.sealed_segment import SealedSegment, SegmentWriter, read_parquet, write_sealed
from compactlog.segment import is_segment_name, offset_from_name, segment_name


def batch(offsets: list[int], timestamps: list[int] | None = None, controls: int = 0) -> pa.RecordBatch:
    """SCHEMA rows with the given offsets (key = value = the offset as text)."""
    n = len(offsets)
    table = to_rows(
        pa.table(
            {
                "key": [str(o) for o in offsets],
                "value": [str(o) for o in offsets],
                "timestamp": pa.array(timestamps or [1000 + o for o in offsets], pa.int64()),
            }
        ),
        0,
    )
    table = table.set_column(0, SCHEMA.field(0), pa.array(offsets, pa.int64()))
    if controls:
        control = [CONTROL_COMMIT] * controls + [-1] * (n - controls)
        table = table.set_column(9, SCHEMA.field(9), pa.array(control, pa.int8()))
    batches = table.combine_chunks().to_batches()
    return batches[0] if batches else pa.RecordBatch.from_pylist([], schema=SCHEMA)


def offsets_of(batches: list[pa.RecordBatch] | pa.Table) -> list[int]:
    if isinstance(batches, pa.Table):
        return batches.column("offset").to_pylist()
    return [o for b in batches for o in b.column(0).to_pylist()]


# ------------------------------------------------------------------------------------------ names


def test_segment_names_are_twenty_digit_base_offsets() -> None:
    assert segment_name(42, ".parquet") == "00000000000000000042.parquet"
    assert segment_name(2**63 - 1, ".log") == "09223372036854775807.log"
    assert offset_from_name("00000000000000000042.parquet.deleted") == 42
    assert is_segment_name("00000000000000000042.log")
    assert is_segment_name("00000000000000000042.parquet.swap")
    assert not is_segment_name(".lock")
    assert not is_segment_name("42.log")
    assert not is_segment_name("0000000000000000004x.log")


def test_segment_names_sort_in_offset_order() -> None:
    bases = [0, 9, 10, 99, 100, 12345678901]
    assert sorted(segment_name(b, ".log") for b in reversed(bases)) == [
        segment_name(b, ".log") for b in bases
    ]


# --------------------------------------------------------------------------------- active segment


@pytest.fixture
def active(tmp_path: Path) -> ActiveSegment:
    return ActiveSegment.create(str(tmp_path / segment_name(10, ".log")), 10)


def test_a_new_active_segment_is_empty(active: ActiveSegment) -> None:
    assert (active.size, active.record_count, active.next_offset) == (0, 0, 10)
    assert active.first_timestamp == -1 and active.max_timestamp == -1
    assert os.path.getsize(active.path) == 0
    meta = active.meta()
    assert (meta.base_offset, meta.next_offset, meta.record_count, meta.active) == (10, 10, 0, True)


def test_frame_is_header_plus_ipc_payload(active: ActiveSegment) -> None:
    data = encode_frame(batch([10, 11], [5, 3]))
    assert data[:4] == b"CLB2"
    length = int.from_bytes(data[4:8], "little")
    assert len(data) == FRAME_HEADER_SIZE + length
    omitted, reserved, rows = struct.unpack_from("<HHI", data, 12)
    assert (reserved, rows) == (0, 2)
    values = np.frombuffer(data[20:52], dtype="<i8").tolist()
    assert values == [10, 11, 5, 5]  # base offset, last offset, first timestamp, max timestamp
    # Every column that holds only its default is left out of the payload.
    assert omitted == sum(1 << i for i in OMITTABLE_DEFAULTS)


def test_columns_with_other_values_are_stored_and_read_back(active: ActiveSegment) -> None:
    rows = batch([10, 11], controls=1)
    rows = rows.set_column(5, SCHEMA.field(5), pa.array([7, -1], pa.int64()))
    headers = pa.array([None, [{"key": "h", "value": b"x"}]], SCHEMA.field("headers").type)
    rows = rows.set_column(4, SCHEMA.field(4), headers)
    active.append(rows)
    stored = ~active.frames[0].omitted
    for name in ("headers", "producer_id", "control_type"):
        assert stored >> SCHEMA.get_field_index(name) & 1
    assert pa.Table.from_batches(active.read_batches(10)).equals(pa.Table.from_batches([rows]))
    reopened, _ = ActiveSegment.open(active.path, 10, truncate=False)
    assert reopened.control_count == 1
    assert pa.Table.from_batches(reopened.read_batches(10)).equals(pa.Table.from_batches([rows]))


def test_a_column_is_omitted_only_when_every_row_holds_its_default() -> None:
    rows = batch([10, 11, 12])
    producer_ids = pa.chunked_array([pa.array([-1, -1], pa.int64()), pa.array([7], pa.int64())])
    rows = rows.set_column(5, SCHEMA.field(5), pa.array([-1, -1, 7], pa.int64()))
    rows = rows.set_column(6, SCHEMA.field(6), pa.array([-1, 3, -1], pa.int16()))
    table = pa.Table.from_batches([rows]).set_column(5, SCHEMA.field(5), producer_ids)
    for checked in (rows, table):
        omitted = omitted_columns(checked)
        assert not omitted >> 5 & 1 and not omitted >> 6 & 1  # a default first row does not settle it
        assert omitted >> 7 & 1  # sequence: -1 in every row


def test_row_sizes_count_key_and_value_bytes_and_nulls_as_none() -> None:
    rows = to_rows(pa.table({"key": pa.array([b"abc", None, b""], pa.binary()),
                             "value": pa.chunked_array([pa.array([b"x" * 10], pa.binary()),
                                                        pa.array([b"yy", None], pa.binary())])}), 0)
    fixed = frame_row_bytes(0)
    assert row_sizes(rows).tolist() == [fixed + 13, fixed + 2, fixed]


def test_omitted_columns_read_back_as_their_defaults(active: ActiveSegment) -> None:
    rows = batch([10, 11, 12])
    active.append(rows)
    read = pa.Table.from_batches(active.read_batches(10))
    assert read.schema == SCHEMA
    assert read.equals(pa.Table.from_batches([rows]))
    assert read.column("headers").null_count == 3
    assert read.column("producer_id").to_pylist() == [-1, -1, -1]
    assert read.column("is_transactional").to_pylist() == [False] * 3


def test_appended_frames_are_read_back_and_tracked(active: ActiveSegment) -> None:
    active.append(batch([10, 11, 12], [7, 5, 9]))
    active.append(batch([13], [4]))
    active.flush()
    assert active.next_offset == 14
    assert active.record_count == 4
    assert active.first_timestamp == 7 and active.max_timestamp == 9
    assert active.size == os.path.getsize(active.path)
    assert [(f.base_offset, f.last_offset) for f in active.frames] == [(10, 12), (13, 13)]
    assert offsets_of(list(active.read_batches(10))) == [10, 11, 12, 13]
    assert offsets_of(active.to_table()) == [10, 11, 12, 13]


def test_read_batches_slices_to_the_offset_range(active: ActiveSegment) -> None:
    active.append(batch([10, 11, 12]))
    active.append(batch([13, 14, 15]))
    assert offsets_of(list(active.read_batches(11, 14))) == [11, 12, 13]
    assert offsets_of(list(active.read_batches(13))) == [13, 14, 15]
    assert offsets_of(list(active.read_batches(16))) == []
    assert offsets_of(list(active.read_batches(10, 10))) == []


def test_frames_from_time_keeps_frames_holding_a_later_timestamp(active: ActiveSegment) -> None:
    active.append(batch([10, 11], [100, 300]))
    active.append(batch([12], [200]))
    active.append(batch([13], [400]))
    assert [f.base_offset for f in active.frames_from_time(250)] == [10, 13]
    assert active.frames_from_time(401) == []


def test_reopened_active_segment_has_the_same_frames(active: ActiveSegment) -> None:
    active.append(batch([10, 11], [5, 6]))
    active.append(batch([12], [7], controls=1))
    reopened, invalid = ActiveSegment.open(active.path, 10, truncate=True)
    assert invalid == 0
    assert reopened.frames == active.frames
    assert (reopened.record_count, reopened.control_count, reopened.max_timestamp) == (3, 1, 7)


@pytest.mark.parametrize("truncate", [True, False])
def test_open_reports_a_torn_tail_and_truncates_only_when_asked(
    active: ActiveSegment, truncate: bool
) -> None:
    active.append(batch([10, 11]))
    good = active.size
    active.append(batch([12]))
    torn = active.size - 5
    with open(active.path, "r+b") as f:
        f.truncate(torn)
    reopened, invalid = ActiveSegment.open(active.path, 10, truncate=truncate)
    assert invalid == torn - good
    assert reopened.next_offset == 12
    assert os.path.getsize(active.path) == (good if truncate else torn)


def test_a_frame_that_does_not_continue_the_offsets_ends_the_valid_prefix(active: ActiveSegment) -> None:
    active.append(batch([10, 11]))
    with open(active.path, "ab") as f:
        f.write(encode_frame(batch([13])))  # skips offset 12: not written by an append of this segment
    reopened, invalid = ActiveSegment.open(active.path, 10, truncate=True)
    assert reopened.next_offset == 12 and invalid > 0


def test_a_frame_with_a_bad_crc_ends_the_valid_prefix(active: ActiveSegment) -> None:
    active.append(batch([10]))
    frame = bytearray(encode_frame(batch([11])))
    frame[8] ^= 1  # the CRC itself
    with open(active.path, "ab") as f:
        f.write(bytes(frame))
    reopened, _ = ActiveSegment.open(active.path, 10, truncate=True)
    assert reopened.next_offset == 11
    assert os.path.getsize(active.path) == reopened.size


def test_a_corrupt_first_frame_leaves_an_empty_segment(active: ActiveSegment) -> None:
    active.append(batch([10, 11]))
    with open(active.path, "r+b") as f:  # a torn write: the last bytes of the frame never made it
        f.seek(active.size - 4)
        f.write(b"XXXX")
    reopened, invalid = ActiveSegment.open(active.path, 10, truncate=True)
    assert (reopened.next_offset, reopened.size, invalid) == (10, 0, active.size)


def test_append_after_another_writer_grew_the_file_is_refused(active: ActiveSegment) -> None:
    active.append(batch([10]))
    with open(active.path, "ab") as f:
        f.write(b"someone else")
    with pytest.raises(CorruptSegmentError, match="expected end"):
        active.append(batch([11]))


def test_changed_on_disk_sees_growth_and_replacement(active: ActiveSegment) -> None:
    active.append(batch([10]))
    assert not active.changed_on_disk()
    with open(active.path, "ab") as f:
        f.write(b"x")
    assert active.changed_on_disk()
    os.unlink(active.path)
    assert active.changed_on_disk()


# --------------------------------------------------------------------------------- sealed segments


def test_write_sealed_records_the_footer_metadata(tmp_path: Path) -> None:
    path = str(tmp_path / segment_name(10, ".parquet"))
    rows = pa.Table.from_batches([batch([10, 11, 15], [300, 100, 200], controls=1)])
    sealed = write_sealed(path, rows, 10, 20)
    meta = sealed.meta
    assert (meta.base_offset, meta.next_offset, meta.record_count, meta.control_count) == (10, 20, 3, 1)
    assert (meta.first_timestamp, meta.max_timestamp, meta.active) == (300, 300, False)
    assert meta.size_bytes == os.path.getsize(path)
    assert sealed.inode == os.stat(path).st_ino
    kv = pq.read_metadata(path).metadata
    assert kv[b"compactlog.next_offset"] == b"20"
    reopened = SealedSegment.open(path, 10)
    assert reopened.meta == meta


def test_an_empty_sealed_segment_covers_its_range(tmp_path: Path) -> None:
    sealed = write_sealed(str(tmp_path / "s.parquet"), [], 5, 9)
    assert (sealed.meta.record_count, sealed.meta.first_timestamp, sealed.meta.max_timestamp) == (0, -1, -1)
    assert sealed.read().num_rows == 0
    assert sealed.read(6, 8).num_rows == 0


def test_segment_writer_streams_batches(tmp_path: Path) -> None:
    writer = SegmentWriter(str(tmp_path / "s.parquet"), 0)
    writer.write(batch([0, 1], [50, 60]))
    writer.write(batch([]))
    writer.write(pa.Table.from_batches([batch([4], [40])]))
    sealed = writer.close(5)
    assert offsets_of(sealed.read()) == [0, 1, 4]
    assert (sealed.meta.first_timestamp, sealed.meta.max_timestamp) == (50, 60)
    assert writer.bytes_written == sealed.meta.size_bytes


@pytest.mark.parametrize("background", [False, True])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.integers(0, 9), min_size=1, max_size=30), st.integers(1, 7))
def test_a_segment_written_newest_first_is_the_segment_written_oldest_first(
        tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch, background: bool,
        sizes: list[int], row_group_rows: int) -> None:
    """Writes of older and older rows (the single-pass cleaner's order) make a file that reads oldest first,
    with the same footer metadata, and whole row groups but for the oldest."""
    monkeypatch.setattr(segment_module, "ROW_GROUP_ROWS", row_group_rows)
    tmp = tmp_path_factory.mktemp("w")
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    total = sum(sizes)
    timestamps = [1000 - 3 * o if o % 4 else 500 + o for o in range(total)]
    parts = [batch(list(range(s, s + n)), timestamps[s:s + n], controls=n // 3)
             for s, n in zip(starts, sizes, strict=True)]
    oldest = SegmentWriter(str(tmp / "old.parquet"), 0)
    newest = SegmentWriter(str(tmp / "new.parquet"), 0, background=background, newest_first=True)
    for part in parts:
        oldest.write(part)
    for part in reversed(parts):
        newest.write(part)
    a, b = oldest.close(total), newest.close(total)
    assert b.read().equals(a.read())
    assert (b.meta.record_count, b.meta.control_count, b.meta.first_timestamp, b.meta.max_timestamp) == \
        (a.meta.record_count, a.meta.control_count, a.meta.first_timestamp, a.meta.max_timestamp)
    metadata = pq.read_metadata(tmp / "new.parquet")
    groups = [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)]
    assert all(n == row_group_rows for n in groups[1:]) and sum(groups) == total
    firsts = [metadata.row_group(i).column(0).statistics.min for i in range(metadata.num_row_groups)]
    assert firsts == sorted(firsts)


def test_write_sealed_removes_the_file_when_writing_fails(tmp_path: Path) -> None:
    path = str(tmp_path / "s.parquet")
    with pytest.raises(ValueError):  # pyarrow's ArrowInvalid is one too
        write_sealed(path, pa.table({"offset": ["not an int"]}), 0, 1)
    assert not os.path.exists(path)


def test_sealed_read_with_offsets_and_gaps(tmp_path: Path) -> None:
    sealed = write_sealed(
        str(tmp_path / "s.parquet"), pa.Table.from_batches([batch([10, 12, 13, 17])]), 10, 20
    )
    assert offsets_of(sealed.read()) == [10, 12, 13, 17]
    assert offsets_of(sealed.read(11)) == [12, 13, 17]
    assert offsets_of(sealed.read(11, 17)) == [12, 13]
    assert offsets_of(sealed.read(18)) == []
    table = sealed.read(12, columns=["key"])
    assert table.column_names == ["key"] and table.num_rows == 3


def test_sealed_read_of_a_range_reads_only_its_row_groups(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(segment_module, "ROW_GROUP_ROWS", 10)
    sealed = write_sealed(
        str(tmp_path / "s.parquet"), pa.Table.from_batches([batch(list(range(100)))]), 0, 100
    )
    with pq.ParquetFile(sealed.path) as file:
        assert file.metadata.num_row_groups == 10
        assert sealed.row_groups_for_offsets(file, 35, 52) == [3, 4, 5]
        assert sealed.row_groups_for_offsets(file, 95, None) == [9]
    assert offsets_of(sealed.read(35, 52)) == list(range(35, 52))


def test_read_from_time_skips_row_groups_older_than_the_timestamp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(segment_module, "ROW_GROUP_ROWS", 10)
    stamps = [100 * (i // 10) + (i % 10) for i in range(50)]  # group g holds 100g .. 100g + 9
    stamps[25] = 5  # an old timestamp inside group 2 does not change its newest
    sealed = write_sealed(
        str(tmp_path / "s.parquet"), pa.Table.from_batches([batch(list(range(50)), stamps)]), 0, 50
    )
    groups = list(sealed.read_from_time(205, ["offset", "timestamp"]))
    assert [g.column("offset")[0].as_py() for g in groups] == [20, 30, 40]
    assert list(sealed.read_from_time(10_000, ["offset"])) == []


def _rewrite_metadata(path: str, **changes: str) -> None:
    table = pq.read_table(path)
    kv = dict(pq.read_metadata(path).metadata)
    for key, value in changes.items():
        if value is None:
            kv.pop(f"compactlog.{key}".encode())
        else:
            kv[f"compactlog.{key}".encode()] = value.encode()
    pq.write_table(table.replace_schema_metadata(kv), path)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"record_count": "5"}, "rows but metadata says 5"),
        ({"next_offset": None}, "missing or malformed"),
        ({"max_timestamp": "soon"}, "missing or malformed"),
        ({"base_offset": "11"}, "base offset 11"),
        ({"next_offset": "12"}, r"offsets outside \[10, 12\)"),
    ],
)
def test_sealed_segment_with_inconsistent_metadata_raises_corrupt_segment(
    tmp_path: Path, changes: dict[str, str], message: str
) -> None:
    path = str(tmp_path / segment_name(10, ".parquet"))
    write_sealed(path, pa.Table.from_batches([batch([10, 11, 12])]), 10, 13)
    _rewrite_metadata(path, **changes)
    with pytest.raises(CorruptSegmentError, match=message) as info:
        SealedSegment.open(path, 10)
    assert path in str(info.value)


def test_sealed_segment_that_is_not_parquet_raises_corrupt_segment(tmp_path: Path) -> None:
    path = tmp_path / segment_name(0, ".parquet")
    path.write_bytes(b"definitely not parquet")
    with pytest.raises(CorruptSegmentError, match="unreadable Parquet footer"):
        SealedSegment.open(str(path))


def legacy_frame(rows: pa.RecordBatch) -> bytes:
    """A frame of the first format: magic "CLB1", a 44-byte header, every column stored."""
    payload = rows.serialize().to_pybytes()
    offsets, timestamps = rows.column(0).to_pylist(), rows.column(1).to_pylist()
    rest = struct.pack("<qqqq", offsets[0], offsets[-1], timestamps[0], max(timestamps))
    return b"CLB1" + struct.pack("<II", len(payload), zlib.crc32(payload, zlib.crc32(rest))) + rest + payload


def test_frames_of_the_first_format_are_still_read(active: ActiveSegment) -> None:
    old = batch([10, 11], [5, 6], controls=1)
    with open(active.path, "ab") as f:
        f.write(legacy_frame(old))
    reopened, invalid = ActiveSegment.open(active.path, 10, truncate=True)
    assert invalid == 0
    assert (reopened.next_offset, reopened.record_count, reopened.control_count) == (12, 2, 1)
    reopened.append(batch([12]))  # new frames follow old ones in the same file
    again, invalid = ActiveSegment.open(active.path, 10, truncate=True)
    assert invalid == 0
    table = pa.Table.from_batches(again.read_batches(10))
    assert table.column("offset").to_pylist() == [10, 11, 12]
    assert table.slice(0, 2).equals(pa.Table.from_batches([old]))
    assert again.frames[0].header_size == 44 and again.frames[1].header_size == FRAME_HEADER_SIZE


def test_an_active_segment_of_an_unknown_format_is_refused_not_truncated(tmp_path: Path) -> None:
    from compactlog.active_segment import ActiveSegment
    from compactlog.errors import CorruptSegmentError
    from compactlog.segment import segment_name

    path = tmp_path / segment_name(0, ".log")
    path.write_bytes(b"XYZ9" + b"\x01" * 200)
    with pytest.raises(CorruptSegmentError, match="unknown frame format"):
        ActiveSegment.open(str(path), 0, truncate=True)
    assert path.stat().st_size == 204  # nothing was cut


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.integers(1, 40), max_size=12), st.sampled_from([None, ["offset", "key"], ["value"]]))
def test_read_parquet_is_pq_read_table(tmp_path: Path, sizes: list[int], columns: list[str] | None) -> None:
    """Whole files read in parallel runs of row groups: the rows, in order, and the schema of a plain read,
    for files of no, one and many row groups."""
    path = str(tmp_path / f"{len(sizes)}-{sum(sizes)}.parquet")
    table = pa.table({"offset": pa.array(np.arange(sum(sizes), dtype=np.int64)),
                      "key": pa.array([b"k%d" % i for i in range(sum(sizes))], pa.binary()),
                      "value": pa.array([None if i % 3 else b"v" for i in range(sum(sizes))], pa.binary())})
    with pq.ParquetWriter(path, table.schema) as writer:
        start = 0
        for size in sizes:
            writer.write_table(table.slice(start, size), row_group_size=size)
            start += size
    got = read_parquet(path, columns)
    assert got.equals(pq.read_table(path, columns=columns))
    assert pq.ParquetFile(path).metadata.num_row_groups == len(sizes)


def test_a_sequential_reader_decodes_each_frame_once(active: ActiveSegment,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from compactlog import active_segment

    active.append(batch([10, 11, 12]))
    active.append(batch([13, 14]))
    reads: list[int] = []
    real_read = active_segment._read_payload
    monkeypatch.setattr(active_segment, "_read_payload",
                        lambda fd, frame: reads.append(frame.base_offset) or real_read(fd, frame))
    # Fetches as a consumer makes them: each starts inside the frame the previous one ended in.
    assert offsets_of(list(active.read_batches(10, 12))) == [10, 11]
    assert offsets_of(list(active.read_batches(12, 14))) == [12, 13]
    assert offsets_of(list(active.read_batches(14))) == [14]
    assert reads == [10, 13]
    reopened, _ = ActiveSegment.open(active.path, 10, truncate=False)  # a new object reads the file again
    assert offsets_of(list(reopened.read_batches(11))) == [11, 12, 13, 14]
    assert reads == [10, 13, 10, 13]
