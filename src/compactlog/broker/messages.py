"""Kafka's request and response messages, from kafka-python's ``kafka.protocol``.

Why kafka-python's ``kafka.protocol`` rather than kio: both are generated from Kafka's own JSON message
definitions and both encode and decode every version, flexible ones included (tagged fields, compact
strings); kafka-python 3.x also carries the record-batch codec (``kafka.record``) that the records
adapter uses, runs on Python 3.10 (kio needs 3.11, the project supports 3.10), and is pure Python with
compiled per-version encoders. So one maintained dependency serves the messages, the records and the
tests' client, and no message is written by hand here.

:func:`null_field` finds a null that a decoded request may not hold.

:func:`build` makes a message (or a nested struct) of a version from plain values: nested structs from
dicts, arrays of structs from lists of dicts; fields left out take the schema's defaults, fields that
``version`` does not have are dropped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["build", "null_field"]


def build(container: Any, version: int, values: Mapping[str, Any]) -> Any:
    """An instance of the kafka-python message or struct class ``container`` at ``version``."""
    fields = container.fields
    converted = {}
    for name, value in values.items():
        field = fields[name]
        if not field.for_version_q(version):
            continue  # a field of other versions: handlers fill every field of the newest they answer
        if value is not None and field.is_struct_array():
            converted[name] = [build(field.data_class, version, item) if isinstance(item, Mapping) else item
                               for item in value]
        elif value is not None and field.is_struct() and isinstance(value, Mapping):
            converted[name] = build(field.data_class, version, value)
        else:
            converted[name] = value
    return container(version=version, **converted)


def null_field(message: Any, version: int) -> str | None:
    """The path of the first field of a decoded ``message`` (or struct) that is null although ``version``
    does not allow it (an array, struct or string of length -1 where the schema has no nullableVersions),
    else None. kafka-python decodes such a field as None; Kafka's generated readers refuse it ("non-nullable
    field ... was serialized as null"), and so does the broker, before any handler sees it."""
    for name, field in type(message).fields.items():
        if not field.for_version_q(version):
            continue
        value = getattr(message, name, None)
        if value is None:
            if not field.nullable_for_version_q(version) and (field.is_array() or field.is_struct()
                                                              or field.type_str in ("string", "bytes")):
                return name
            continue
        if field.is_struct_array():
            for index, item in enumerate(value):
                inner = null_field(item, version)
                if inner is not None:
                    return f"{name}[{index}].{inner}"
        elif field.is_struct():
            inner = null_field(value, version)
            if inner is not None:
                return f"{name}.{inner}"
    return None
