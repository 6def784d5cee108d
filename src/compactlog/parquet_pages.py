"""The pages of a Parquet column chunk, found from their headers, and each page's CRC checked.

A column chunk is a run of pages from its first page's file offset (the dictionary page's when it has one)
for ``total_compressed_size`` bytes. A page is a ``PageHeader`` (Thrift compact protocol, read with
:class:`.parquet_footer.CompactReader`) then ``compressed_page_size`` bytes of page data. The header's
fields: 1 type, 2 uncompressed_page_size, 3 compressed_page_size, 4 crc (optional), then the header of the
page's type (5, 6, 7 or 8). Parquet's ``crc`` is the CRC-32 of the gzip polynomial (zlib's) over the page
data as stored, compressed when the chunk is, the header excluded; it is written as a signed i32. A page
without one (a segment written before checksums) is read unchecked, as Parquet's own readers do.

The CRC is ISA-L's (``isal``), which folds with carry-less multiplication: several times as fast as Arrow's
table-driven CRC-32, on the largest single cost of verifying a clean's reads (every byte of every segment
it reads). :func:`verify_chunk` is the check; reading a segment calls it before Parquet decodes the chunk
(:mod:`.segment_file`).
"""

from __future__ import annotations

from isal.isal_zlib import crc32

from .errors import CorruptSegmentError
from .parquet_footer import I32, CompactReader, unzigzag

_COMPRESSED_SIZE_FIELD = 3  # PageHeader.compressed_page_size: i32
_CRC_FIELD = 4  # PageHeader.crc: i32


class CorruptPageError(CorruptSegmentError):
    """A page whose data does not match its CRC, or a column chunk whose pages cannot be walked; the read
    that met it names the file."""


def verify_chunk(data: memoryview, start: int, size: int) -> int:
    """Check the CRC of every page of the column chunk at ``data[start:start + size]`` that has one, and
    that the pages fill the chunk exactly; returns how many pages were checked. A page whose CRC differs,
    a header that cannot be read or pages that overrun the chunk are a :class:`CorruptPageError`."""
    try:
        return _verify_chunk(data, start, size)
    except CorruptPageError:
        raise
    except CorruptSegmentError as e:  # a page header that ends early or holds an unknown type
        raise CorruptPageError(f"column chunk at byte {start}: {e}") from e


def _verify_chunk(data: memoryview, start: int, size: int) -> int:
    data = data.cast("B")  # bytes as unsigned ints, whatever the exporter's format (a pa.Buffer's is signed)
    end = start + size
    if start < 0 or size < 0 or end > len(data):
        raise CorruptPageError(f"column chunk [{start}, {end}) lies outside the file's {len(data)} bytes")
    reader = CompactReader(data, start)
    checked = 0
    while reader.pos < end:
        page_start = reader.pos
        compressed_size = -1
        expected: int | None = None
        field = 0
        while True:
            field, kind = reader.field(field)
            if kind == 0:
                break
            if kind == I32 and field == _COMPRESSED_SIZE_FIELD:
                compressed_size = unzigzag(reader.varint())
            elif kind == I32 and field == _CRC_FIELD:
                expected = unzigzag(reader.varint()) & 0xFFFFFFFF
            else:
                reader.skip(kind)
        body = reader.pos
        if compressed_size < 0 or body + compressed_size > end:
            raise CorruptPageError(f"page at byte {page_start}: {compressed_size} bytes of page data do not "
                                      f"fit the column chunk [{start}, {end})")
        reader.pos = body + compressed_size
        if expected is not None:
            if crc32(data[body:reader.pos]) != expected:
                raise CorruptPageError(f"page at byte {page_start}: CRC mismatch")
            checked += 1
    return checked
