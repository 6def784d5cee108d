"""How one config is declared and parsed: Kafka's ``ConfigDef`` (name, type, default, doc, range).

The tables of :mod:`compactlog.config` (topic, broker, producer configs) and :mod:`compactlog.server_config`
(the Kafka-protocol server's) are tuples of :class:`ConfigDef`; each value passes through
:meth:`ConfigDef.parse`, and every error message names the config and states :meth:`ConfigDef.allowed`.
"""

from __future__ import annotations

import math
import numbers
import re
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from compactlog.errors import ConfigError
from compactlog.limits import INT_MAX, INT_MIN, LONG_MAX, LONG_MIN

__all__ = ["ConfigDef", "Kind", "Synonym"]

Kind = Literal["int", "long", "double", "boolean", "string", "list"]

# Java's int and long ranges bound every integer config, as ConfigDef's INT and LONG types do.
_TYPE_BOUNDS: dict[str, tuple[float, float]] = {
    "int": (INT_MIN, INT_MAX), "long": (LONG_MIN, LONG_MAX), "double": (-math.inf, math.inf)}
# Kafka parses with Integer.parseInt / Long.parseLong / Double.parseDouble: no "1.5" for a LONG, no "1_000".
_INT_RE = re.compile(r"[+-]?[0-9]+")
_FLOAT_RE = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_NO_EFFECT = " Accepted for Kafka compatibility, no effect here: {}."


class Synonym(NamedTuple):
    """A broker config that supplies a topic config's default (``ServerTopicConfigSynonyms``); ``scale``
    converts its unit to the topic's (``log.roll.hours``: 3600000). All but a config's last synonym are unset
    by default, and then defer to the next one (``log.retention.ms`` > ``.minutes`` > ``.hours``)."""

    name: str
    scale: int = 1


@dataclass(frozen=True)
class ConfigDef:
    """One config: Kafka name, type, default, doc, allowed values, broker synonyms (highest precedence first).

    Numbers lie in ``[low, high]`` (``(low, high]`` if ``low_open``) and in the Java type's range; ``choices``
    restricts strings and list elements. ``attr`` is the Python attribute name."""

    name: str
    kind: Kind
    default: Any
    doc: str
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    choices: tuple[str, ...] = ()
    nullable: bool = False
    synonyms: tuple[Synonym, ...] = ()
    no_effect: str = ""  # why a config accepted so that Kafka's server.properties load does nothing here

    @property
    def attr(self) -> str:
        return self.name.replace(".", "_")

    @property
    def described(self) -> str:
        """The doc as ``describe`` shows it: a config with no effect here says so, and why."""
        return self.doc + (_NO_EFFECT.format(self.no_effect) if self.no_effect else "")

    def _bounds(self) -> tuple[Any, Any]:
        type_low, type_high = _TYPE_BOUNDS[self.kind]
        low = type_low if self.low is None else max(type_low, self.low)
        return low, type_high if self.high is None else min(type_high, self.high)

    def allowed(self) -> str:
        """The allowed values in words, as every error message about this config states them."""
        low, high = self._bounds() if self.kind in _TYPE_BOUNDS else (None, None)
        text = {
            "list": "a non-empty comma-separated list of " + ", ".join(self.choices),
            "string": "one of " + ", ".join(self.choices) if self.choices else "a non-empty string",
            "boolean": "true or false",
            "double": f"a number in {'(' if self.low_open else '['}{float(low or 0)}, {float(high or 0)}]",
        }.get(self.kind, f"an integer in [{low}, {high}]")
        return text + (" or null" if self.nullable else "")

    def _error(self, value: object, problem: str) -> ConfigError:
        return ConfigError(f"{self.name}: {value!r} {problem}; allowed: {self.allowed()}")

    def parse(self, value: object) -> Any:
        """A native value or a Kafka CLI string ("1000", "0.5", "compact,delete") as this config's value."""
        if value is None and self.nullable:
            return None
        text = value.strip() if isinstance(value, str) else None  # Kafka trims values
        if self.kind == "list":
            return self._parse_list(value)
        if self.kind == "boolean":  # "true"/"false" in any case, as Kafka; 1 is not a boolean
            if text is not None and text.lower() in ("true", "false"):
                return text.lower() == "true"
            if isinstance(value, bool):
                return value
            raise self._error(value, "is not a boolean")
        if self.kind == "string":  # choices are case-sensitive, as ConfigDef.ValidString
            if not text or (self.choices and text not in self.choices):
                raise self._error(value, "is not allowed")
            return text
        # Numbers. bool is an int subclass, but True is no segment size; a float is no integer even when
        # integral, and "1_000" no number, as Java's Long.parseLong and Double.parseDouble have it.
        integral = self.kind != "double"
        number: float
        if text is not None and (_INT_RE if integral else _FLOAT_RE).fullmatch(text):
            number = int(text) if integral else float(text)
        elif integral and isinstance(value, numbers.Integral) and not isinstance(value, bool):
            number = int(value)
        elif not integral and isinstance(value, numbers.Real) and not isinstance(value, bool):
            number = float(value)
        else:
            raise self._error(value, "is not an integer" if integral else "is not a number")
        low, high = self._bounds()
        above_low = low < number if self.low_open else low <= number
        if not (above_low and number <= high and math.isfinite(number)):
            raise self._error(number, "is out of range")
        return number

    def _parse_list(self, value: object) -> tuple[str, ...]:
        if isinstance(value, str):
            items = value.split(",") if value.strip() else []
        elif isinstance(value, list | tuple) and all(isinstance(item, str) for item in value):
            items = list(value)
        else:
            raise self._error(value, "is not a list of strings")
        parsed: list[str] = []
        for item in (item.strip() for item in items):
            if self.choices and item not in self.choices:  # case-sensitive, as Kafka's validator
                raise self._error(item, "is not allowed")
            if item not in parsed:  # "compact,compact" means "compact"
                parsed.append(item)
        # Kafka lets an empty cleanup.policy through (a log neither deleted nor compacted); we refuse it.
        if not parsed:
            raise self._error(value, "is an empty list")
        return tuple(parsed)

    def render(self, value: Any) -> Any:  # as a properties map holds it: lists comma-joined
        return ",".join(value) if self.kind == "list" else value
