"""The console producer's line parser (Kafka's LineMessageReader) and the ``--property`` parsing it uses."""

from __future__ import annotations

import pytest

from compactlog.cli.common import UsageError
from compactlog.cli.console_properties import parse_properties
from compactlog.cli.line_message_reader import READER_PROPERTIES, LineMessageReader, LineRecord
from compactlog.errors import InvalidRecordError


def reader(*pairs: str) -> LineMessageReader:
    return LineMessageReader.from_properties(parse_properties(pairs, READER_PROPERTIES))


def test_defaults_here_are_a_key_before_the_first_colon() -> None:
    assert reader().read_line(b"k:v:w", 1) == LineRecord(b"k", b"v:w", [])  # the value keeps later separators
    assert reader().read_line(b"k:", 1) == LineRecord(b"k", b"", [])  # an empty value is not a tombstone
    assert reader("parse.key=false").read_line(b"k:v", 1) == LineRecord(None, b"k:v", [])


def test_null_marker_makes_a_key_a_value_or_a_header_value_null() -> None:
    assert reader("null.marker=NULL").read_line(b"k:NULL", 1) == LineRecord(b"k", None, [])
    assert reader("null.marker=NULL").read_line(b"NULL:v", 1) == LineRecord(None, b"v", [])
    r = reader("null.marker=NULL", "parse.headers=true")
    assert r.read_line(b"h:NULL\tk:NULL", 1) == LineRecord(b"k", None, [("h", None)])
    assert r.read_line(b"NULL\tNULL:v", 1) == LineRecord(None, b"v", [])  # headers equal to it: none
    assert r.read_line(b"h:1\tk:NULLx", 1).value == b"NULLx"  # only a whole value is the marker
    with pytest.raises(InvalidRecordError, match="line 4: a header key equal to the null marker 'NULL'"):
        r.read_line(b"NULL:1\tk:v", 4)


def test_headers_come_first_split_by_their_separators() -> None:
    r = reader("parse.headers=true")
    assert r.read_line(b"a:1,b:x:y,c:\tk:v", 1) == LineRecord(b"k", b"v", [("a", b"1"), ("b", b"x:y"), ("c", b"")])
    assert r.read_line(b"a:1,\tk:v", 1).headers == [("a", b"1")]  # trailing empty pairs dropped, as Java's split
    custom = reader("parse.headers=true", "headers.delimiter=|", "headers.separator=;", "headers.key.separator==",
                    "key.separator=\\t")
    assert custom.read_line(b"a=1;b=2|k\tv|w", 1) == LineRecord(b"k", b"v|w", [("a", b"1"), ("b", b"2")])


def test_a_missing_separator_is_an_error_naming_the_line_unless_ignored() -> None:
    with pytest.raises(InvalidRecordError, match="line 7: no key separator ':' in 'no separator here'"):
        reader().read_line(b"no separator here", 7)
    with pytest.raises(InvalidRecordError, match="line 2: no headers delimiter '\\\\t' in 'k:v'"):
        reader("parse.headers=true").read_line(b"k:v", 2)
    with pytest.raises(InvalidRecordError, match="line 3: no header key separator ':' in header 'b'"):
        reader("parse.headers=true").read_line(b"a:1,b\tk:v", 3)
    with pytest.raises(InvalidRecordError, match="line 5: no header key separator ':' in header ''"):
        reader("parse.headers=true").read_line(b"\tk:v", 5)  # empty headers, as "".split() in Java: one pair
    lenient = reader("parse.headers=true", "ignore.error=true")
    assert lenient.read_line(b"v", 1) == LineRecord(None, b"v", [])
    assert lenient.read_line(b"a:1,b\tk:v", 1).headers == [("a", b"1"), ("b", None)]


def test_lines_split_as_bytes_and_bytes_that_are_not_utf8_round_trip() -> None:
    assert reader().read_line(b"\xff\xfe:\x80v", 1) == LineRecord(b"\xff\xfe", b"\x80v", [])
    accented = reader("key.separator=\u00e9")  # a separator of two bytes in UTF-8
    assert accented.read_line("k\u00e9v\u00e9".encode(), 1) == LineRecord(b"k", "v\u00e9".encode(), [])
    with pytest.raises(InvalidRecordError, match=r"header key '\\\\xff' is not UTF-8"):
        reader("parse.headers=true").read_line(b"\xff:1\tk:v", 1)


@pytest.mark.parametrize(("pairs", "message"), [
    (["parse.headers=true", "headers.separator=\\t"], "headers.delimiter and headers.separator may not be equal"),
    (["headers.key.separator=,"], "headers.separator and headers.key.separator may not be equal"),
    (["headers.delimiter=:"], "headers.delimiter and headers.key.separator may not be equal"),
    (["null.marker=:"], "null.marker and key.separator may not be equal"),
    (["key.separator="], "key.separator cannot be empty"),
    (["parse.key=yes"], "property parse.key: 'yes' is not a boolean"),
    (["parse.kye=true"], "unknown property 'parse.kye' \\(did you mean parse.key\\?\\)"),
    (["parse.key"], "--property takes NAME=VALUE"),
])
def test_bad_properties_are_usage_errors(pairs: list[str], message: str) -> None:
    with pytest.raises(UsageError, match=message):
        reader(*pairs)


def test_properties_booleans_any_case_last_value_wins_and_given_values_come_first() -> None:
    values = parse_properties([" parse.key = TRUE ", "key.separator=;", "key.separator=|"], READER_PROPERTIES,
                              {"parse.key": False, "null.marker": "-"})
    assert values["parse.key"] is True and values["key.separator"] == "|" and values["null.marker"] == "-"
    assert values["headers.delimiter"] == "\t" and values["ignore.error"] is False
