"""Kafka's request and response messages, from kafka-python's ``kafka.protocol``.

Why kafka-python's ``kafka.protocol`` rather than kio: both are generated from Kafka's own JSON message
definitions and both encode and decode every version, flexible ones included (tagged fields, compact
strings); kafka-python 3.x runs on Python 3.10 (kio needs 3.11, the project supports 3.10) and is pure
Python with compiled per-version encoders. So one maintained dependency serves the messages and the tests'
client, and no message is written by hand here. The record batches inside Produce and Fetch messages are
bytes to these messages: their codec is compactlog's own (:mod:`compactlog.protocol.record_batch` over the
C extension ``protocol/_record_batch.c``), not kafka-python's ``kafka.record``.

:func:`decode_request` decodes a request frame. :func:`null_field` finds a null that a decoded request may not hold.

:func:`build` makes a message (or a nested struct) of a version from plain values: nested structs from
dicts, arrays of structs from lists of dicts; fields left out take the schema's defaults, fields that
``version`` does not have are dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["build", "decode_request", "null_field"]

_ARRAY, _STRUCT = 1, 2  # a field holding an array of structs, a struct


def decode_request(request: Any, frame: bytes, version: int) -> Any:
    """The message of class ``request`` at ``version`` decoded from ``frame`` (its request header, then its
    body), with its header (``.header``: the correlation id and client id).

    The same generated decoders as ``request.decode(frame, version=version, header=True)``, but the header
    is decoded by the header schema's compiled decoder, at an offset of the frame: kafka-python's own header
    path copies the whole frame (a Produce's records) into a BytesIO and walks the header schema field by
    field, which cost more than the body's decode. The client id of a request header is a non-compact
    string in every version (flexible ones add tagged fields), as kafka-python's ``ApiHeader`` has it."""
    view = memoryview(frame)
    header, body_at = _header_decoder(request.header_class, request.flexible_version_q(version))(view, 0)
    message = request.decode(view[body_at:], version=version)
    message.with_header(correlation_id=header.correlation_id, client_id=header.client_id)
    return message


_HEADER_DECODERS: dict[tuple[type, bool], Callable[[memoryview, int], tuple[Any, int]]] = {}


def _header_decoder(header_class: Any, flexible: bool) -> Callable[[memoryview, int], tuple[Any, int]]:
    decoder = _HEADER_DECODERS.get((header_class, flexible))
    if decoder is None:
        header_version = header_class._flexible_versions[0] if flexible else header_class._valid_versions[0]
        decoder = _HEADER_DECODERS[(header_class, flexible)] = header_class._struct.compiled_decode_from(
            header_version, compact=False, tagged=flexible, data_class=header_class)
    return decoder


def build(container: Any, version: int, values: Mapping[str, Any]) -> Any:
    """An instance of the kafka-python message or struct class ``container`` at ``version``."""
    fields = _build_fields(container, version)
    converted = {}
    for name, value in values.items():
        nested, data_class = fields[name]
        if nested < 0:
            continue  # a field of other versions: handlers fill every field of the newest they answer
        if value is not None and nested == _ARRAY:
            converted[name] = [build(data_class, version, item) if isinstance(item, Mapping) else item
                               for item in value]
        elif value is not None and nested == _STRUCT and isinstance(value, Mapping):
            converted[name] = build(data_class, version, value)
        else:
            converted[name] = value
    return container(version=version, **converted)


# (message or struct class, version) -> each field's name -> (-1: not in this version, _ARRAY, _STRUCT or 0,
# its struct class): the schema read once per class and version, not per response.
_BUILD_FIELDS: dict[tuple[Any, int], dict[str, tuple[int, Any]]] = {}


def _build_fields(container: Any, version: int) -> dict[str, tuple[int, Any]]:
    fields = _BUILD_FIELDS.get((container, version))
    if fields is None:
        fields = _BUILD_FIELDS[(container, version)] = {
            name: (-1 if not field.for_version_q(version) else _ARRAY if field.is_struct_array()
                   else _STRUCT if field.is_struct() else 0,
                   field.data_class if field.is_struct_array() or field.is_struct() else None)
            for name, field in container.fields.items()}
    return fields


def null_field(message: Any, version: int) -> str | None:
    """The path of the first field of a decoded ``message`` (or struct) that is null although ``version``
    does not allow it (an array, struct or string of length -1 where the schema has no nullableVersions),
    else None. kafka-python decodes such a field as None; Kafka's generated readers refuse it ("non-nullable
    field ... was serialized as null"), and so does the broker, before any handler sees it. The schema is
    read once per message class and version (:func:`_null_checks`): a request then costs only its values."""
    for name, refuses_null, nested in _null_checks(type(message), version):
        value = getattr(message, name, None)
        if value is None:
            if refuses_null:
                return name
            continue
        if nested == _ARRAY:
            for index, item in enumerate(value):
                inner = null_field(item, version)
                if inner is not None:
                    return f"{name}[{index}].{inner}"
        elif nested == _STRUCT:
            inner = null_field(value, version)
            if inner is not None:
                return f"{name}.{inner}"
    return None

# (message or struct class, version) -> its fields to look at: (name, null refused, _ARRAY/_STRUCT/0 for
# fields whose structs have fields to look at). Fields that can hold no refused null are left out.
_NULL_CHECKS: dict[tuple[type, int], tuple[tuple[str, bool, int], ...]] = {}


def _null_checks(container: type, version: int) -> tuple[tuple[str, bool, int], ...]:
    checks = _NULL_CHECKS.get((container, version))
    if checks is not None:
        return checks
    found = []
    for name, field in container.fields.items():  # type: ignore[attr-defined]
        if not field.for_version_q(version):
            continue
        refuses_null = not field.nullable_for_version_q(version) and (
            field.is_array() or field.is_struct() or field.type_str in ("string", "bytes"))
        nested = _ARRAY if field.is_struct_array() else _STRUCT if field.is_struct() else 0
        if nested and not _null_checks(field.data_class, version):
            nested = 0  # its structs hold nothing to check
        if refuses_null or nested:
            found.append((name, refuses_null, nested))
    checks = _NULL_CHECKS[(container, version)] = tuple(found)
    return checks
