"""The ``--property k=v`` settings of the console tools: each declared once, with its type, default and doc.

These are the settings of Kafka's console producer's ``LineMessageReader`` and of the console consumer's
``DefaultMessageFormatter``, not store configs: Kafka declares them in those classes, outside
``ConfigDef``, and so do we, in :mod:`.line_message_reader` and :mod:`.message_formatter`, with the
declaration type of this module. Kafka's rules: a boolean is ``true`` or ``false`` in any case, trimmed; a
string is taken as given, untrimmed (a separator may be a space or a tab); a repeated property takes its last
value. Deviations: an unknown property, or a boolean that is neither true nor false, is a usage error naming
the property (Kafka ignores the first and reads the second as false, so a typo silently changes the output);
the escapes ``\\t``, ``\\n`` and ``\\r`` in a string stand for a tab, a newline and a carriage return (Kafka
takes them literally; a shell passes them so unless quoted as ``$'\\t'``).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from .common import UsageError

Kind = Literal["boolean", "string"]
_ESCAPES = {"\\t": "\t", "\\n": "\n", "\\r": "\r"}


@dataclass(frozen=True)
class ConsoleProperty:
    """One ``--property``: Kafka's name, its kind, its default (None: unset) and what it does."""

    name: str
    kind: Kind
    default: bool | str | None
    doc: str


def unescape(text: str) -> str:
    """``\\t``, ``\\n`` and ``\\r`` as the characters they name; any other text as it is."""
    for escape, character in _ESCAPES.items():
        text = text.replace(escape, character)
    return text


def parse_properties(pairs: Sequence[str], declared: Sequence[ConsoleProperty],
                     given: Mapping[str, bool | str | None] | None = None) -> dict[str, bool | str | None]:
    """Every declared property's value: its default, then ``given`` (values set by other flags), then the
    ``NAME=VALUE`` ``pairs`` in order. Raises UsageError for a pair without ``=``, an unknown name or a
    boolean that is not true or false."""
    by_name = {p.name: p for p in declared}
    values: dict[str, bool | str | None] = {p.name: p.default for p in declared}
    values.update(given or {})
    for pair in pairs:
        name, sep, text = pair.partition("=")
        name = name.strip()
        if not sep or not name:
            raise UsageError(f"--property takes NAME=VALUE, got {pair!r}")
        prop = by_name.get(name)
        if prop is None:
            close = difflib.get_close_matches(name, list(by_name), n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise UsageError(f"unknown property {name!r}{hint}; known: {', '.join(sorted(by_name))}")
        if prop.kind == "boolean":
            flag = text.strip().lower()
            if flag not in ("true", "false"):
                raise UsageError(f"property {name}: {text!r} is not a boolean; allowed: true or false")
            values[name] = flag == "true"
        else:
            values[name] = unescape(text)
    return values


def describe(declared: Sequence[ConsoleProperty]) -> str:
    """The properties as ``--help`` lists them: one line each, with the default."""
    lines = []
    for p in declared:
        default = "unset" if p.default is None else str(p.default).lower() if p.kind == "boolean" \
            else repr(p.default)
        lines.append(f"  {p.name} (default {default}): {p.doc}")
    return "\n".join(lines)
