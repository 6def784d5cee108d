"""Tests for compactlog.parquet_pages and the reads of compactlog.segment_file: every page a read decodes has
its CRC checked (data and dictionary pages, every codec, a read of some columns, the cleaner's row-group
reads), pages without a CRC are read, and a chunk whose pages cannot be walked is damage, not data."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from compactlog.errors import CorruptSegmentError
from compactlog.parquet_pages import CorruptPageError, verify_chunk
from compactlog.record import SCHEMA, to_rows
from compactlog.sealed_segment import SealedSegment, write_sealed
from compactlog.segment import segment_name
from compactlog.segment_file import open_parquet, read_parquet


def _rows(count: int) -> pa.Table:
    rows = to_rows(pa.table({"key": [b"key-%06d" % i for i in range(count)],
                             "value": [b"value-%06d-" % i + bytes(40) for i in range(count)]}), 1_000)
    return rows.set_column(0, "offset", pa.array(range(count), pa.int64())).cast(SCHEMA)


def _chunks(path: Path) -> list[tuple[str, int, int]]:
    """Every column chunk of the file: (column path, first byte, size)."""
    metadata = pq.read_metadata(path)
    chunks = []
    for group in range(metadata.num_row_groups):
        for leaf in range(metadata.num_columns):
            chunk = metadata.row_group(group).column(leaf)
            start = chunk.dictionary_page_offset if chunk.has_dictionary_page else chunk.data_page_offset
            chunks.append((chunk.path_in_schema, start, chunk.total_compressed_size))
    return chunks


def _flip(path: Path, position: int) -> None:
    data = bytearray(path.read_bytes())
    data[position] ^= 0x10
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("compression", ["none", "snappy", "zstd", "lz4", "gzip"])
def test_every_page_of_a_written_segment_has_a_crc_that_matches(tmp_path: Path, compression: str) -> None:
    path = tmp_path / segment_name(0, ".parquet")
    write_sealed(str(path), _rows(3000), 0, 3000, compression=compression)
    data = memoryview(path.read_bytes())
    for name, start, size in _chunks(path):
        assert verify_chunk(data, start, size) >= 1, name  # at least one page, each with a CRC


def test_a_flipped_byte_in_any_page_of_any_column_fails_the_read_of_that_column(tmp_path: Path) -> None:
    """A byte flipped in the page data of each chunk in turn, dictionary pages included: reading that column
    (alone, or with the others) is a CorruptSegmentError naming the file; other columns still read."""
    path = tmp_path / segment_name(0, ".parquet")
    write_sealed(str(path), _rows(500), 0, 500, compression="none")
    pristine = path.read_bytes()
    for name, start, size in _chunks(path):
        column = name.split(".")[0]
        path.write_bytes(pristine)
        _flip(path, start + size - 1)  # the last byte of the chunk: page data, never a header
        segment = SealedSegment.open(str(path), 0)
        with pytest.raises(CorruptSegmentError, match=str(path)):
            segment.read(columns=[column])
        with pytest.raises(CorruptSegmentError, match=str(path)):
            segment.read()
        with pytest.raises(CorruptSegmentError, match=str(path)):
            read_parquet(str(path), [column])
        other = "offset" if column != "offset" else "key"
        assert read_parquet(str(path), [other]).num_rows == 500


def test_the_dictionary_page_is_checked(tmp_path: Path) -> None:
    path = tmp_path / segment_name(0, ".parquet")
    write_sealed(str(path), _rows(200), 0, 200, compression="none")
    chunk = pq.read_metadata(path).row_group(0).column(SCHEMA.get_field_index("timestamp"))
    assert chunk.has_dictionary_page
    data = bytearray(path.read_bytes())
    first_data_page = chunk.data_page_offset
    data[first_data_page - 1] ^= 0x01  # the dictionary page's last byte: its one value
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptPageError, match="CRC mismatch"):
        verify_chunk(memoryview(bytes(data)), chunk.dictionary_page_offset, chunk.total_compressed_size)
    with pytest.raises(CorruptSegmentError, match=str(path)):
        read_parquet(str(path), ["timestamp"])


def test_pages_are_walked_in_any_view_of_the_file(tmp_path: Path) -> None:
    """A pa.Buffer exports its bytes as signed chars: a header byte of 0x80 or more must still read as such
    (a misread header would skip a page's check or fail a sound file)."""
    path = tmp_path / segment_name(0, ".parquet")
    write_sealed(str(path), _rows(3000), 0, 3000, compression="snappy")
    for view in (memoryview(path.read_bytes()), memoryview(pa.py_buffer(path.read_bytes()))):
        assert [verify_chunk(view, start, size) for _, start, size in _chunks(path)] == \
            [verify_chunk(memoryview(path.read_bytes()), start, size) for _, start, size in _chunks(path)]


def test_pages_written_without_a_crc_are_read_and_counted_as_unchecked(tmp_path: Path) -> None:
    path = tmp_path / "old.parquet"
    pq.write_table(_rows(100), path, write_page_checksum=False)
    data = memoryview(path.read_bytes())
    assert all(verify_chunk(data, start, size) == 0 for _, start, size in _chunks(path))
    with open_parquet(str(path)) as file:
        assert file.read().num_rows == 100


def test_many_pages_in_a_chunk_are_each_checked(tmp_path: Path) -> None:
    path = tmp_path / "pages.parquet"
    pq.write_table(_rows(5000), path, write_page_checksum=True, data_page_size=1024, write_batch_size=16,
                   use_dictionary=False, write_statistics=False, compression="none")
    (_, start, size), = [chunk for chunk in _chunks(path) if chunk[0] == "value"]
    data = bytearray(path.read_bytes())
    pages = verify_chunk(memoryview(bytes(data)), start, size)
    assert pages > 50
    position = data.find(b"value-002500-")  # the data of a page in the middle
    assert start < position < start + size
    data[position] ^= 0x04
    with pytest.raises(CorruptPageError, match="CRC mismatch"):
        verify_chunk(memoryview(bytes(data)), start, size)


def test_a_chunk_whose_pages_do_not_fill_it_is_damage(tmp_path: Path) -> None:
    path = tmp_path / segment_name(0, ".parquet")
    write_sealed(str(path), _rows(100), 0, 100, compression="none")
    data = memoryview(path.read_bytes())
    _, start, size = _chunks(path)[0]
    with pytest.raises(CorruptPageError, match="do not fit"):
        verify_chunk(data, start, size - 1)  # the last page overruns the chunk
    with pytest.raises(CorruptPageError, match="outside the file"):
        verify_chunk(data, start, len(data))
    with pytest.raises(CorruptPageError):
        verify_chunk(data, start + 1, size - 1)  # not a page header: undecodable or overrunning


def test_the_cleaner_reads_are_checked_too(tmp_path: Path) -> None:
    """The cleaner's row-group reads (kernel.prefetched) go through the same check: a flipped value page makes
    the round fail with the file named, never a rewrite of the damaged rows."""
    from compactlog.cleaner.kernel import SegmentFile, prefetched

    path = tmp_path / segment_name(0, ".parquet")
    write_sealed(str(path), _rows(300), 0, 300, compression="snappy")
    value = pq.read_metadata(path).row_group(0).column(SCHEMA.get_field_index("value"))
    _flip(path, value.data_page_offset + value.total_compressed_size - 1)
    segment = SegmentFile(str(path), 0, 300, os.path.getsize(path), 300)
    with pytest.raises(CorruptSegmentError, match=str(path)):
        list(prefetched([segment]))
    assert [table.num_rows for _, _, table in prefetched([segment], lambda s: ["offset", "key"])] == [300]


def test_an_empty_file_is_damage_not_an_empty_segment(tmp_path: Path) -> None:
    path = tmp_path / "empty.parquet"
    path.write_bytes(b"")
    with pytest.raises(CorruptSegmentError, match=str(path)):
        read_parquet(str(path))
