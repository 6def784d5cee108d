"""Kafka's request and response messages, from kafka-python's ``kafka.protocol``.

Why kafka-python's ``kafka.protocol`` rather than kio: both are generated from Kafka's own JSON message
definitions and both encode and decode every version, flexible ones included (tagged fields, compact
strings); kafka-python 3.x runs on Python 3.10 (kio needs 3.11, the project supports 3.10) and is pure
Python with compiled per-version encoders. So one maintained dependency serves the messages and the tests'
client, and no message is written by hand here. The record batches inside Produce and Fetch messages are
bytes to these messages: their codec is compactlog's own (:mod:`compactlog.protocol.record_batch` over the
C extension ``protocol/_record_batch.c``), not kafka-python's ``kafka.record``.

:func:`decode_request` decodes a request frame, strictly: a field that runs past the end of the frame is a
:class:`~compactlog.errors.MalformedRequestError`, as Kafka's readers throw on a buffer underflow, and so
is a null that the request may not hold (:func:`null_field`).

:func:`encode_response` encodes a response frame; a large one (a Fetch response's records) in a buffer of its
own, sized once and sent as it is.

:func:`build` makes a message (or a nested struct) of a version from plain values: nested structs from
dicts, arrays of structs from lists of dicts; fields left out take the schema's defaults, fields that
``version`` does not have are dropped.
"""

from __future__ import annotations

import io
import struct
import types
from collections.abc import Callable, Mapping
from typing import Any

from kafka.protocol.schemas.fields.codecs import EncodeBuffer

from ..errors import MalformedRequestError

__all__ = ["LARGE_RESPONSE_BYTES", "build", "decode_request", "encode_response", "null_field"]

_ARRAY, _STRUCT = 1, 2  # a field holding an array of structs, a struct
# A compiled decoder: (buffer, position) -> (the message or struct, the position after it).
_Decoder = Callable[[memoryview, int], tuple[Any, int]]


def decode_request(request: Any, frame: bytes | bytearray, version: int) -> Any:
    """The message of class ``request`` at ``version`` decoded from ``frame`` (its request header, then its
    body), with its header (``.header``: the correlation id and client id). A frame that is not such a
    request is :class:`~compactlog.errors.MalformedRequestError`: a field cut short (below), bytes the
    decoder cannot read, or a null where the schema allows none (:func:`null_field`).

    The decoders are kafka-python's generated ones (the header schema's and the message's, at an offset of
    the frame: kafka-python's own header path copies the whole frame, a Produce's records, into a BytesIO),
    made strict (:func:`_strict`). The client id of a request header is a non-compact string in every
    version (flexible ones add tagged fields), as kafka-python's ``ApiHeader`` has it.

    Strictness: a generated decoder reads a string or bytes field as a slice, which a frame cut short makes
    shorter without an error (a Metadata request cut inside "health" named topic "healt"), but it still
    advances its position by the length the field declared. Positions only grow, so a field that ran past
    the end leaves the final position past the end: one comparison per request, not one per field. Fixed-size
    fields, varints and array elements past the end already raise (``struct.error``, ``IndexError``); tagged
    fields are read through a reader that refuses a short read. Bytes after the last field are ignored, as
    Kafka ignores them."""
    try:
        view = memoryview(frame)
        flexible = request.flexible_version_q(version)
        header, body_at = _header_decoder(request.header_class, flexible)(view, 0)
        message, end = _body_decoder(request, version, flexible)(view, body_at)
    except MalformedRequestError:
        raise
    except Exception as e:  # the decoder raises whatever a bad byte leads it to (struct.error, IndexError, ...)
        raise MalformedRequestError(f"{request.name} v{version} cannot be decoded: {type(e).__name__}: {e}") from e
    if end > len(view):
        raise MalformedRequestError(f"{request.name} v{version}: a field runs past the end of the request "
                                    f"({len(view)} bytes; its fields declare {end})")
    null = null_field(message, version)
    if null is not None:
        raise MalformedRequestError(f"{request.name} v{version}: non-nullable field {null} is null")
    message.with_header(correlation_id=header.correlation_id, client_id=header.client_id)
    return message


_HEADER_DECODERS: dict[tuple[type, bool], _Decoder] = {}
_BODY_DECODERS: dict[tuple[type, int], _Decoder] = {}


def _header_decoder(header_class: Any, flexible: bool) -> _Decoder:
    decoder = _HEADER_DECODERS.get((header_class, flexible))
    if decoder is None:
        header_version = header_class._flexible_versions[0] if flexible else header_class._valid_versions[0]
        decoder = _HEADER_DECODERS[(header_class, flexible)] = _strict(header_class._struct.compiled_decode_from(
            header_version, compact=False, tagged=flexible, data_class=header_class), flexible)
    return decoder


def _body_decoder(request: Any, version: int, flexible: bool) -> _Decoder:
    decoder = _BODY_DECODERS.get((request, version))
    if decoder is None:
        decoder = _BODY_DECODERS[(request, version)] = _strict(request._struct.compiled_decode_from(
            version, compact=flexible, tagged=flexible, data_class=request[None]), flexible)
    return decoder


class _ExactReader(io.BytesIO):
    """A BytesIO whose ``read(n)`` returns n bytes or raises: what the generated decoders read tagged fields
    through (a BytesIO returns fewer bytes at its end, so an unknown tagged field cut short was kept short)."""

    def read(self, size: int | None = -1, /) -> bytes:
        data = super().read(size)
        if size is not None and 0 <= size != len(data):
            raise MalformedRequestError(f"a tagged field of {size} bytes is cut short at {len(data)}")
        return data


def _strict(decoder: _Decoder, tagged: bool) -> _Decoder:
    """``decoder`` (a generated one), with its tagged fields (``tagged``: a flexible version's) read through
    :class:`_ExactReader`. A generated decoder reads a non-empty tagged-field section through
    ``_BytesIO(...)``, a name of its own globals (a dict per compiled function); the copy made here gets
    globals of its own, so kafka-python's cached decoder is left as it is."""
    if not tagged:
        return decoder
    if not isinstance(decoder, types.FunctionType) or "_BytesIO" not in decoder.__globals__:
        raise TypeError(f"kafka-python's decoder {decoder!r} no longer reads tagged fields through _BytesIO")
    return types.FunctionType(decoder.__code__, {**decoder.__globals__, "_BytesIO": _ExactReader}, decoder.__name__,
                              decoder.__defaults__, decoder.__closure__)


# A response expected to be larger than this (its records' bytes) is encoded in a buffer of its own.
LARGE_RESPONSE_BYTES = 1 << 20
_FRAME_OVERHEAD_BYTES = 64 << 10  # room for a large response's fields besides its records
_SIZE = struct.Struct(">i")


def encode_response(message: Any, size_hint: int = 0) -> bytearray:
    """``message`` (with its header) as a frame: its size, then its bytes.

    kafka-python encodes into a per-thread buffer that it keeps between messages, and copies the frame out
    of it: after one large Fetch response it would hold twice that response's size for the life of the
    process. A message whose ``size_hint`` (the bytes of the records it carries) is above
    :data:`LARGE_RESPONSE_BYTES` is therefore encoded into a buffer of its own, sized for it, which becomes
    the frame (trimmed in place, not copied)."""
    if size_hint <= LARGE_RESPONSE_BYTES:
        return message.encode(header=True, framed=True)  # a bytearray of its own: sent as is, not copied again
    version = message.API_VERSION
    flexible = message.flexible_version_q(version)
    out = EncodeBuffer(size_hint + _FRAME_OVERHEAD_BYTES)
    out.pos = _SIZE.size
    message.encode_header_into(out, flexible=flexible)
    message._struct.compiled_encode_into(version, compact=flexible, tagged=flexible)(message, out)
    frame: bytearray = out.buf
    _SIZE.pack_into(frame, 0, out.pos - _SIZE.size)
    del frame[out.pos:]
    return frame


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
