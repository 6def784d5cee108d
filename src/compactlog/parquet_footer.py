"""The Parquet footer's row-group list: put in offset order after a segment was written newest first.

A Parquet file ends with its footer, ``FileMetaData`` in Thrift's compact protocol, then the footer's
length (u32, little endian) and ``PAR1``. The footer lists the row groups, and readers take a file's rows
in that list's order; each column chunk is found by the absolute file offset the footer gives for it, so
the physical order of row groups in the file does not matter to any reader.

The single-pass cleaner decides a group's records newest first, so it writes their row groups newest first
(no spill, no second copy). :func:`reverse_row_groups` then reverses the footer's list, which makes the
file exactly the file an oldest-first writer makes, to every reader, apart from where the bytes of each row
group lie. The rewrite is of the footer alone, in place: the list holds the same elements, and their
``ordinal`` fields (a row group's position) are renumbered 0..n-1 again, so the footer keeps its length.

Compact protocol, as used here: a struct is a run of fields, each a header byte (field-id delta in the
high nibble, or 0 and a zigzag varint id; the type in the low nibble) then the value, ended by a 0 byte.
Integers are zigzag varints, binary is a varint length then the bytes, a list is a header byte (size in
the high nibble, or 15 and a varint size; the element type in the low nibble) then the elements.
:class:`CompactReader` reads it here and for :mod:`.parquet_pages` (page headers).
"""

from __future__ import annotations

import os
import struct

from .errors import CorruptSegmentError
from .faults import io_fault

_MAGIC = b"PAR1"
_TRAILER = struct.Struct("<I4s")  # footer length, magic

# Compact protocol type ids.
_TRUE, _FALSE, _BYTE, _I16, I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT = range(1, 13)
_ROW_GROUPS_FIELD = 4  # FileMetaData.row_groups: list<RowGroup>
_ORDINAL_FIELD = 7  # RowGroup.ordinal: i16


class CompactReader:
    """A cursor over compact-protocol bytes (a footer, a page header) that can skip any value."""

    def __init__(self, data: bytes | memoryview, pos: int = 0) -> None:  # a memoryview of unsigned bytes
        self.data = data
        self.pos = pos

    def byte(self) -> int:
        try:
            value = self.data[self.pos]
        except IndexError:
            raise CorruptSegmentError("Parquet metadata ends inside a value") from None
        self.pos += 1
        return value

    def varint(self) -> int:
        data, pos = self.data, self.pos
        shift = result = 0
        try:
            while True:
                byte = data[pos]
                pos += 1
                result |= (byte & 0x7F) << shift
                if byte < 0x80:
                    self.pos = pos
                    return result
                shift += 7
                if shift > 70:
                    raise CorruptSegmentError("Parquet metadata holds an over-long varint")
        except IndexError:
            raise CorruptSegmentError("Parquet metadata ends inside a value") from None

    def field(self, last_id: int) -> tuple[int, int]:
        """The next field's (id, type); type 0 is the struct's end."""
        header = self.byte()
        kind = header & 0x0F
        if kind == 0:
            return 0, 0
        delta = header >> 4
        return (last_id + delta if delta else unzigzag(self.varint())), kind

    def list_header(self) -> tuple[int, int]:
        header = self.byte()
        size = header >> 4
        return (self.varint() if size == 15 else size), header & 0x0F

    def skip(self, kind: int) -> None:
        if kind in (_TRUE, _FALSE):
            return
        if kind == _BYTE:
            self.pos += 1
        elif kind in (_I16, I32, _I64):
            self.varint()
        elif kind == _DOUBLE:
            self.pos += 8
        elif kind == _BINARY:
            length = self.varint()  # read before pos: the varint moves it
            self.pos += length
        elif kind in (_LIST, _SET):
            size, element = self.list_header()
            for _ in range(size):
                self.skip_element(element)
        elif kind == _MAP:
            size = self.varint()
            if size:
                types = self.byte()
                for _ in range(size):
                    self.skip_element(types >> 4)
                    self.skip_element(types & 0x0F)
        elif kind == _STRUCT:
            last = 0
            while True:
                last, field_kind = self.field(last)
                if field_kind == 0:
                    return
                self.skip(field_kind)
        else:
            raise CorruptSegmentError(f"Parquet metadata holds an unknown Thrift type {kind}")
        if self.pos > len(self.data):
            raise CorruptSegmentError("Parquet metadata ends inside a value")

    def skip_element(self, kind: int) -> None:
        # A boolean list element is a whole byte, unlike a boolean field.
        if kind in (_TRUE, _FALSE):
            self.pos += 1
        else:
            self.skip(kind)


def unzigzag(value: int) -> int:
    return (value >> 1) ^ -(value & 1)


def _zigzag_varint(value: int) -> bytes:
    encoded = (value << 1) ^ (value >> 63)
    out = bytearray()
    while True:
        if encoded < 0x80:
            out.append(encoded)
            return bytes(out)
        out.append((encoded & 0x7F) | 0x80)
        encoded >>= 7


def _renumbered(element: bytes, ordinal: int) -> bytes:
    """A RowGroup struct's bytes with its ordinal field (if any) set to ``ordinal``."""
    reader = CompactReader(element)
    last = 0
    while True:
        last, kind = reader.field(last)
        if kind == 0:
            return element
        value_start = reader.pos
        reader.skip(kind)
        if last == _ORDINAL_FIELD and kind == _I16:
            return element[:value_start] + _zigzag_varint(ordinal) + element[reader.pos:]


def reversed_footer(footer: bytes) -> bytes:
    """``footer`` (FileMetaData bytes) with its row-group list in reverse order, ordinals renumbered."""
    reader = CompactReader(footer)
    last = 0
    while True:
        last, kind = reader.field(last)
        if kind == 0:
            return footer  # no row groups listed: nothing to reorder
        if last == _ROW_GROUPS_FIELD and kind == _LIST:
            break
        reader.skip(kind)
    size, element_kind = reader.list_header()
    if element_kind != _STRUCT:
        raise CorruptSegmentError("Parquet footer's row groups are not structs")
    spans = []
    for _ in range(size):
        start = reader.pos
        reader.skip(_STRUCT)
        spans.append((start, reader.pos))
    first, end = spans[0][0] if spans else reader.pos, reader.pos
    elements = [_renumbered(footer[s:e], ordinal) for ordinal, (s, e) in enumerate(reversed(spans))]
    body = b"".join(elements)
    if len(body) != end - first:
        raise CorruptSegmentError("Parquet footer's row groups changed length when renumbered")
    return footer[:first] + body + footer[end:]


def reverse_row_groups(path: str) -> None:
    """Reverse the order of the row groups listed in the footer of the Parquet file at ``path``, in place
    (the caller fsyncs). The footer keeps its length, so only its own bytes are rewritten."""
    with open(path, "r+b") as file:
        size = os.fstat(file.fileno()).st_size
        if size < 2 * len(_MAGIC) + 4:
            raise CorruptSegmentError(f"{path}: too short for a Parquet file")
        file.seek(size - _TRAILER.size)
        length, magic = _TRAILER.unpack(file.read(_TRAILER.size))
        start = size - _TRAILER.size - length
        if magic != _MAGIC or start < len(_MAGIC):
            raise CorruptSegmentError(f"{path}: not a plain Parquet footer")
        file.seek(start)
        footer = file.read(length)
        patched = reversed_footer(footer)
        if patched != footer:
            file.seek(start)
            io_fault("segment.footer-reverse")
            file.write(patched)
