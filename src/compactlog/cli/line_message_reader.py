"""Kafka's ``LineMessageReader``: how the console producer turns one line of input into one record.

A line is ``[headers<headers.delimiter>][key<key.separator>]value``: the headers part is there when
``parse.headers`` is true, the key part when ``parse.key`` is true, each ending at the first occurrence of
its delimiter (so a value may hold the key separator, and a key the headers delimiter's characters after
it). The headers part is pairs ``hkey<headers.key.separator>hvalue`` separated by ``headers.separator``;
trailing empty pairs are dropped (Java's ``String.split``). A key, value or header value equal to
``null.marker`` is null (a null value is a tombstone); a headers part equal to it means no headers; a
header key equal to it is an error (header keys cannot be null). A missing delimiter is an error unless
``ignore.error`` is true: then the line has no headers (or no key) and the rest of it is the value, and a
header pair without its separator is a header with a null value. Separators must differ from each other and
from ``null.marker`` (Kafka refuses the same pairs).

Defaults are Kafka's except ``parse.key`` (true here) and ``key.separator`` (``:`` here), this tool's
habits since its first version. Deviations: ``headers.separator`` is a literal string (Kafka compiles it as
a Java regex; the same for every separator without regex metacharacters); an empty separator is refused.
Bytes are kept as given: a line is split as bytes, so input that is not UTF-8 round-trips (a header key
must be UTF-8, it is a string).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple

from ..errors import InvalidRecordError
from .common import UsageError
from .console_properties import ConsoleProperty

READER_PROPERTIES = (
    ConsoleProperty("parse.key", "boolean", True, "each line starts with a key ending at key.separator"),
    ConsoleProperty("key.separator", "string", ":", "between a line's key and its value"),
    ConsoleProperty("parse.headers", "boolean", False,
                    "each line starts with headers ending at headers.delimiter"),
    ConsoleProperty("headers.delimiter", "string", "\t", "between a line's headers and its key (or value)"),
    ConsoleProperty("headers.separator", "string", ",", "between two headers"),
    ConsoleProperty("headers.key.separator", "string", ":", "between a header's key and its value"),
    ConsoleProperty("null.marker", "string", None,
                    "a key, value or header value equal to it is null (a null value is a tombstone); "
                    "headers equal to it are no headers"),
    ConsoleProperty("ignore.error", "boolean", False,
                    "a line missing a delimiter has no headers (or key) instead of stopping the command"),
)

_SHOWN = 80  # characters of a bad line quoted in its error


class LineRecord(NamedTuple):
    """One line as a record: its key, value (None: a tombstone) and headers."""

    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


class _Encoded(NamedTuple):
    """The reader's separators and null marker as UTF-8 bytes, which lines are split on."""

    key_separator: bytes
    headers_delimiter: bytes
    headers_separator: bytes
    headers_key_separator: bytes
    null_marker: bytes | None


@dataclass(frozen=True)
class LineMessageReader:
    """The reader's settings (see the module doc); :meth:`read_line` parses one line."""

    parse_key: bool = True
    key_separator: str = ":"
    parse_headers: bool = False
    headers_delimiter: str = "\t"
    headers_separator: str = ","
    headers_key_separator: str = ":"
    null_marker: str | None = None
    ignore_error: bool = False

    @classmethod
    def from_properties(cls, values: Mapping[str, bool | str | None]) -> LineMessageReader:
        """The reader of parsed ``--property`` values (:data:`READER_PROPERTIES`); a UsageError when two
        separators are equal, or one is empty or equal to ``null.marker``."""
        reader = cls(**{name.replace(".", "_"): value for name, value in values.items()})  # type: ignore[arg-type]
        separators = {"key.separator": reader.key_separator, "headers.delimiter": reader.headers_delimiter,
                      "headers.separator": reader.headers_separator,
                      "headers.key.separator": reader.headers_key_separator}
        for name, separator in separators.items():
            if not separator:
                raise UsageError(f"property {name} cannot be empty")
            if separator == reader.null_marker:
                raise UsageError(f"properties null.marker and {name} may not be equal")
        headers = ["headers.delimiter", "headers.separator", "headers.key.separator"]
        for i, first in enumerate(headers):
            for second in headers[i + 1:]:
                if separators[first] == separators[second]:
                    raise UsageError(f"properties {first} and {second} may not be equal")
        return reader

    @functools.cached_property
    def _encoded(self) -> _Encoded:
        return _Encoded(_encode(self.key_separator), _encode(self.headers_delimiter),
                        _encode(self.headers_separator), _encode(self.headers_key_separator),
                        None if self.null_marker is None else _encode(self.null_marker))

    def read_line(self, line: bytes, line_number: int) -> LineRecord:
        """The record of one line (without its line ending); InvalidRecordError names the line number.

        Lines are split as bytes on the separators' UTF-8 bytes: the same splits as on the decoded text
        (UTF-8 is self-synchronising), and bytes that are not UTF-8 are kept as they are."""
        encoded = self._encoded
        null = encoded.null_marker
        if self.parse_key and not self.parse_headers:  # the common case, in a few steps
            index = line.find(encoded.key_separator)
            if index >= 0:
                head, tail = line[:index], line[index + len(encoded.key_separator):]
                return LineRecord(None if head == null else head, None if tail == null else tail, [])
        position = 0
        headers_part: bytes | None = None
        if self.parse_headers:
            headers_part = self._until(line, position, encoded.headers_delimiter, "headers delimiter",
                                       line_number)
            if headers_part is not None:
                position = len(headers_part) + len(encoded.headers_delimiter)
        key: bytes | None = None
        if self.parse_key:
            key = self._until(line, position, encoded.key_separator, "key separator", line_number)
            if key is not None:
                position += len(key) + len(encoded.key_separator)
        value = line[position:] if position else line
        headers = [] if headers_part is None or headers_part == null else self._headers(headers_part, line_number)
        return LineRecord(None if key == null else key, None if value == null else value, headers)

    def _until(self, line: bytes, start: int, delimiter: bytes, what: str, line_number: int) -> bytes | None:
        index = line.find(delimiter, start)
        if index < 0:
            if self.ignore_error:
                return None
            raise InvalidRecordError(f"line {line_number}: no {what} {_decoded(delimiter)!r} in {_quoted(line)}")
        return line[start:index]

    def _headers(self, part: bytes, line_number: int) -> list[tuple[str, bytes | None]]:
        encoded = self._encoded
        pairs = part.split(encoded.headers_separator)
        while pairs and not pairs[-1]:  # Java's split drops trailing empty strings
            pairs.pop()
        if not pairs:
            pairs = [b""]  # "".split(...) in Java is [""], a pair without a separator
        headers: list[tuple[str, bytes | None]] = []
        for pair in pairs:
            index = pair.find(encoded.headers_key_separator)
            header_value: bytes | None
            if index < 0:
                if not self.ignore_error:
                    raise InvalidRecordError(f"line {line_number}: no header key separator "
                                             f"{self.headers_key_separator!r} in header {_quoted(pair)}")
                header_key, header_value = pair, None
            else:
                header_key = pair[:index]
                header_value = pair[index + len(encoded.headers_key_separator):]
            if header_key == encoded.null_marker:
                raise InvalidRecordError(f"line {line_number}: a header key equal to the null marker "
                                         f"{self.null_marker!r} (header keys cannot be null)")
            try:
                name = header_key.decode("utf-8")
            except UnicodeDecodeError as e:
                raise InvalidRecordError(f"line {line_number}: header key {_quoted(header_key)} is not UTF-8") from e
            headers.append((name, None if header_value == encoded.null_marker else header_value))
        return headers


def _encode(text: str) -> bytes:
    """A property's text as bytes (a property given as bytes that are not UTF-8 keeps them)."""
    return text.encode("utf-8", "surrogateescape")


def _decoded(data: bytes) -> str:
    return data.decode("utf-8", "backslashreplace")


def _quoted(data: bytes) -> str:
    text = _decoded(data)
    return repr(text if len(text) <= _SHOWN else text[:_SHOWN] + "...")
