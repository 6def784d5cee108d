"""The console consumer's record format (Kafka's DefaultMessageFormatter)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from compactlog.cli.console_properties import parse_properties
from compactlog.cli.message_formatter import FORMATTER_PROPERTIES, MessageFormatter
from compactlog.record import HEADER_TYPE

HEADERS = [("h1", b"x"), ("h2", None)]


def formatter(*pairs: str) -> MessageFormatter:
    return MessageFormatter.from_properties(parse_properties(pairs, FORMATTER_PROPERTIES))


def line(f: MessageFormatter, key: bytes | None = b"k", value: bytes | None = b"v",
         headers: list[tuple[str, bytes | None]] | None = None, timestamp: int | None = 1700,
         timestamp_type: str = "CreateTime") -> bytes:
    return f.format(3, 42, timestamp, timestamp_type, key, value, headers)


def test_by_default_only_the_value_prints() -> None:
    assert line(formatter()) == b"v\n"
    assert line(formatter(), value=None) == b"null\n"


@pytest.mark.parametrize(("prop", "expected"), [
    ("print.timestamp", b"CreateTime:1700\tv\n"),
    ("print.partition", b"Partition:3\tv\n"),
    ("print.offset", b"Offset:42\tv\n"),
    ("print.headers", b"h1:x,h2:null\tv\n"),
    ("print.key", b"k\tv\n"),
])
def test_each_print_property_adds_its_field_before_the_value(prop: str, expected: bytes) -> None:
    assert line(formatter(f"{prop}=true"), headers=HEADERS) == expected


def test_every_field_in_kafkas_order() -> None:
    everything = formatter("print.timestamp=true", "print.partition=true", "print.offset=true",
                           "print.headers=true", "print.key=true")
    assert line(everything, headers=HEADERS) == b"CreateTime:1700\tPartition:3\tOffset:42\th1:x,h2:null\tk\tv\n"
    assert line(everything, key=None, headers=None, timestamp=None) == \
        b"NO_TIMESTAMP\tPartition:3\tOffset:42\tNO_HEADERS\tnull\tv\n"
    assert line(everything, timestamp_type="LogAppendTime").startswith(b"LogAppendTime:1700\t")


def test_separators_and_the_null_literal_are_properties() -> None:
    f = formatter("print.key=true", "print.headers=true", "key.separator= | ", "line.separator=\\r\\n",
                  "headers.separator=;", "null.literal=<none>")
    assert line(f, key=None, value=None, headers=HEADERS) == b"h1:x;h2:<none> | <none> | <none>\r\n"


def test_without_the_value_the_last_printed_field_ends_the_line() -> None:
    assert line(formatter("print.key=true", "print.value=false")) == b"k\n"
    assert line(formatter("print.offset=true", "print.value=false")) == b"Offset:42\n"
    assert line(formatter("print.value=false")) == b""


def test_a_table_formats_row_by_row_reading_only_the_printed_columns() -> None:
    f = formatter("print.key=true", "print.headers=true", "print.timestamp=true")
    assert f.columns() == ["offset", "timestamp", "headers", "key", "value"]
    assert formatter().columns() == ["offset", "value"]
    table = pa.table({"offset": pa.array([5, 9], pa.int64()), "timestamp": pa.array([1, 2], pa.int64()),
                      "headers": pa.array([None, [{"key": "a", "value": b"1"}]], HEADER_TYPE),
                      "key": pa.array([b"k", None], pa.binary()), "value": pa.array([None, b"\xff"], pa.binary())})
    assert list(f.format_table(table, 0, "CreateTime")) == [b"CreateTime:1\tNO_HEADERS\tk\tnull\n",
                                                            b"CreateTime:2\ta:1\tnull\t\xff\n"]
