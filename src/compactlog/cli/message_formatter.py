"""Kafka's ``DefaultMessageFormatter``: how the console consumer prints one record.

Fields in this order, each only when its ``print.*`` property is true: ``<type>:<ms>`` (the timestamp, its
type ``CreateTime`` or ``LogAppendTime`` as the topic's ``message.timestamp.type``; ``NO_TIMESTAMP`` when
there is none), ``Partition:<p>``, ``Offset:<o>``, the headers (``k:v`` pairs joined by
``headers.separator``, ``NO_HEADERS`` when there are none), the key, the value. A field is followed by
``key.separator`` when a later field is printed, else by ``line.separator``, so the last printed field ends
the line. A null key, value or header value prints as ``null.literal``. Keys and values are written as
their bytes (a record's value need not be text); a header's key is text and its separator is always ``:``.
``print.value`` is true by default, the others false; ``print.delivery`` (share groups) is not supported.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import pyarrow as pa

from .console_properties import ConsoleProperty

FORMATTER_PROPERTIES = (
    ConsoleProperty("print.timestamp", "boolean", False, "print the timestamp as <type>:<ms>"),
    ConsoleProperty("print.partition", "boolean", False, "print Partition:<p>"),
    ConsoleProperty("print.offset", "boolean", False, "print Offset:<o>"),
    ConsoleProperty("print.headers", "boolean", False, "print the headers as k:v,k2:v2 (or NO_HEADERS)"),
    ConsoleProperty("print.key", "boolean", False, "print the key"),
    ConsoleProperty("print.value", "boolean", True, "print the value"),
    ConsoleProperty("key.separator", "string", "\t", "between two printed fields"),
    ConsoleProperty("line.separator", "string", "\n", "after the last printed field of a record"),
    ConsoleProperty("headers.separator", "string", ",", "between two headers"),
    ConsoleProperty("null.literal", "string", "null", "printed for a null key, value or header value"),
)

Header = tuple[str, bytes | None]


@dataclass(frozen=True)
class MessageFormatter:
    """The formatter's settings (see the module doc); :meth:`format` prints one record."""

    print_timestamp: bool = False
    print_partition: bool = False
    print_offset: bool = False
    print_headers: bool = False
    print_key: bool = False
    print_value: bool = True
    key_separator: str = "\t"
    line_separator: str = "\n"
    headers_separator: str = ","
    null_literal: str = "null"

    @classmethod
    def from_properties(cls, values: Mapping[str, bool | str | None]) -> MessageFormatter:
        """The formatter of parsed ``--property`` values (:data:`FORMATTER_PROPERTIES`)."""
        return cls(**{name.replace(".", "_"): value for name, value in values.items()})  # type: ignore[arg-type]

    def columns(self) -> list[str]:
        """The record columns a read must return for this formatter."""
        wanted = [("timestamp", self.print_timestamp), ("headers", self.print_headers), ("key", self.print_key),
                  ("value", self.print_value)]
        return ["offset", *(name for name, printed in wanted if printed)]

    def format(self, partition: int, offset: int, timestamp: int | None, timestamp_type: str,
               key: bytes | None, value: bytes | None, headers: list[Header] | None) -> bytes:
        """One record as the console consumer prints it (the module doc's format)."""
        field_sep, line_sep = self.key_separator.encode(), self.line_separator.encode()
        null = self.null_literal.encode()
        fields: list[bytes] = []
        if self.print_timestamp:
            fields.append(b"NO_TIMESTAMP" if timestamp is None else f"{timestamp_type}:{timestamp}".encode())
        if self.print_partition:
            fields.append(f"Partition:{partition}".encode())
        if self.print_offset:
            fields.append(f"Offset:{offset}".encode())
        if self.print_headers:
            fields.append(self.headers_separator.encode().join(
                f"{k}:".encode() + (null if v is None else v) for k, v in headers)
                if headers else b"NO_HEADERS")
        if self.print_key:
            fields.append(null if key is None else key)
        if self.print_value:
            fields.append(null if value is None else value)
        return field_sep.join(fields) + line_sep if fields else b""

    def format_table(self, table: pa.Table, partition: int, timestamp_type: str) -> Iterator[bytes]:
        """:meth:`format` of every row of a read's table (the columns of :meth:`columns`), in order."""
        count = table.num_rows
        offsets = table.column("offset").to_pylist()
        none: list[None] = [None] * count
        timestamps = table.column("timestamp").to_pylist() if self.print_timestamp else none
        keys = table.column("key").to_pylist() if self.print_key else none
        values = table.column("value").to_pylist() if self.print_value else none
        headers = table.column("headers").to_pylist() if self.print_headers else none
        for i in range(count):
            header = headers[i]
            yield self.format(partition, offsets[i], timestamps[i], timestamp_type, keys[i], values[i],
                              [(h["key"], h["value"]) for h in header] if header else None)
