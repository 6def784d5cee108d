"""Tests for compactlog.parquet_footer: reversing the footer's row-group list of a Parquet file written
newest first gives the file every reader reads oldest first."""

from __future__ import annotations

import struct
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compactlog import CorruptSegmentError
from compactlog.parquet_footer import reverse_row_groups, reversed_footer


def rows(n: int) -> pa.Table:
    """Columns of several Thrift-encoded shapes in the footer: ints, strings, booleans, nullable lists."""
    return pa.table({
        "offset": pa.array(range(n), pa.int64()),
        "key": pa.array([f"k{i}" for i in range(n)]),
        "flag": pa.array([i % 3 == 0 for i in range(n)]),
        "headers": pa.array([[{"key": "h", "value": b"v"}] if i % 2 else None for i in range(n)],
                            pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))),
    })


def write_newest_first(path: Path, table: pa.Table, sizes: list[int], **options: object) -> None:
    """``table`` cut into row groups of ``sizes`` (oldest first), written newest first."""
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    with pq.ParquetWriter(path, table.schema, **options) as writer:  # type: ignore[arg-type]
        for start, size in reversed(list(zip(starts, sizes, strict=True))):
            writer.write_table(table.slice(start, size), row_group_size=size)


def footer(path: Path) -> bytes:
    data = path.read_bytes()
    (length,) = struct.unpack("<I", data[-8:-4])
    return data[-8 - length:-8]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.integers(1, 40), min_size=1, max_size=150), st.sampled_from(["snappy", "none", "zstd"]),
       st.booleans())
def test_a_file_written_newest_first_reads_oldest_first_once_reversed(
        tmp_path: Path, sizes: list[int], compression: str, statistics: bool) -> None:
    path = tmp_path / "f.parquet"
    table = rows(sum(sizes))
    write_newest_first(path, table, sizes, compression=compression, write_statistics=statistics)
    size = path.stat().st_size
    reverse_row_groups(str(path))
    assert path.stat().st_size == size  # the footer kept its length
    file = pq.ParquetFile(path)
    assert [file.metadata.row_group(i).num_rows for i in range(file.metadata.num_row_groups)] == sizes
    assert file.read().equals(table)
    for i in range(file.metadata.num_row_groups):  # each row group reads as itself
        start = sum(sizes[:i])
        assert file.read_row_group(i).equals(table.slice(start, sizes[i]))
    read_by_duckdb = duckdb.sql(f"SELECT \"offset\" FROM '{path}'").fetchall()
    assert [o for (o,) in read_by_duckdb] == list(range(sum(sizes)))


def test_reversing_twice_gives_the_footer_back(tmp_path: Path) -> None:
    path = tmp_path / "f.parquet"
    write_newest_first(path, rows(300), [1] * 100 + [2] * 100)  # ordinals of one and of two bytes
    before = footer(path)
    assert reversed_footer(reversed_footer(before)) == before
    assert reversed_footer(before) != before


def test_a_file_without_row_groups_is_left_as_it_is(tmp_path: Path) -> None:
    path = tmp_path / "f.parquet"
    pq.write_table(rows(0), path)
    before = path.read_bytes()
    reverse_row_groups(str(path))
    assert path.read_bytes() == before
    assert pq.read_table(path).num_rows == 0


def test_one_row_group_is_left_as_it_is(tmp_path: Path) -> None:
    path = tmp_path / "f.parquet"
    write_newest_first(path, rows(5), [5])
    before = path.read_bytes()
    reverse_row_groups(str(path))
    assert path.read_bytes() == before


@pytest.mark.parametrize("content", [b"", b"PAR1", b"not parquet at all, not at all", b"PAR1" + b"\0" * 4 + b"PAR1"])
def test_what_is_not_a_parquet_file_is_refused(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "f.parquet"
    path.write_bytes(content)
    with pytest.raises(CorruptSegmentError):
        reverse_row_groups(str(path))
    assert path.read_bytes() == content


def test_a_footer_cut_short_is_refused_and_not_written(tmp_path: Path) -> None:
    path = tmp_path / "f.parquet"
    write_newest_first(path, rows(20), [10, 10])
    data = path.read_bytes()
    (length,) = struct.unpack("<I", data[-8:-4])
    cut = data[:-8 - length] + data[-8 - length:-8 - length // 2] + struct.pack("<I", length - length // 2) + b"PAR1"
    path.write_bytes(cut)
    with pytest.raises(CorruptSegmentError):
        reverse_row_groups(str(path))
    assert path.read_bytes() == cut


def test_an_unknown_thrift_type_is_refused() -> None:
    with pytest.raises(CorruptSegmentError, match="unknown Thrift type"):
        reversed_footer(bytes([0x1D]))  # field 1 of type 13: no such type
