"""Strict request decoding: a request cut short anywhere (inside a string, compact string, bytes, array,
struct or tagged field, or its header) is a malformed request, as Kafka's readers throw on a buffer
underflow; the whole request decodes to what was sent; bytes after the last field are ignored, as Kafka
ignores them."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from kafka.protocol.metadata import MetadataRequest

from compactlog.broker.kafka_apis import APIS
from compactlog.broker.messages import build, decode_request
from compactlog.errors import MalformedRequestError

_SIMPLE_VALUES: dict[str, Any] = {
    "int8": 3, "int16": 300, "uint16": 300, "int32": 70_000, "int64": 1 << 40, "float64": 0.5, "bool": True,
    "uuid": uuid.UUID(int=7), "string": "topic-é", "bytes": b"\x00value\xff", "records": b"\x01records"}


def _sample(container: Any, version: int) -> dict[str, Any]:
    """A value for every field of ``container`` at ``version`` (tagged fields too), none of them empty or
    default: two elements per array, non-empty strings and bytes, so that every field has bytes to cut."""
    values: dict[str, Any] = {}
    for name, field in container.fields.items():
        if not field.for_version_q(version):
            continue
        if field.is_struct_array():
            values[name] = [_sample(field.data_class, version) for _ in range(2)]
        elif field.is_struct():
            values[name] = _sample(field.data_class, version)
        elif field.is_array():
            values[name] = [_SIMPLE_VALUES[field.array_of.type_str]] * 2
        else:
            values[name] = _SIMPLE_VALUES[field.type_str]
    return values


def _request_frame(request_class: Any, version: int) -> tuple[Any, bytes]:
    message = build(request_class, version, _sample(request_class, version))
    message.with_header(correlation_id=11, client_id="client-id")
    return message, bytes(message.encode(header=True, framed=False))


_EVERY_VERSION = [(api.request, version) for api in APIS.values()
                  for version in range(api.min_version, api.max_version + 1)]


@pytest.mark.parametrize(("request_class", "version"), _EVERY_VERSION,
                         ids=[f"{r.name}-v{v}" for r, v in _EVERY_VERSION])
def test_every_request_cut_anywhere_is_malformed_and_whole_decodes_as_sent(request_class: Any, version: int) -> None:
    message, frame = _request_frame(request_class, version)
    decoded = decode_request(request_class, frame, version)
    assert decoded == message
    assert (decoded.header.correlation_id, decoded.header.client_id) == (11, "client-id")
    for cut in range(len(frame)):
        with pytest.raises(MalformedRequestError):
            decode_request(request_class, frame[:cut], version)


def test_a_metadata_request_cut_inside_a_topic_name_is_refused_not_read_as_a_shorter_name() -> None:
    for version in (0, 4, 9):
        message = MetadataRequest(version=version, topics=[MetadataRequest.MetadataRequestTopic(
            version=version, name="health")], allow_auto_topic_creation=False)
        message.with_header(correlation_id=1, client_id="c")
        frame = bytes(message.encode(header=True, framed=False))
        cut = frame.index(b"health") + len(b"healt")
        with pytest.raises(MalformedRequestError):
            decode_request(MetadataRequest, frame[:cut], version)


def _with_unknown_tag(frame: bytes, value: bytes) -> bytes:
    """``frame`` (a flexible request whose last byte is its body's empty tagged-field section) with one
    unknown tagged field (tag 99) holding ``value`` instead."""
    assert frame[-1] == 0
    return frame[:-1] + bytes([1, 99, len(value)]) + value


def test_an_unknown_tagged_field_is_kept_and_one_cut_short_is_refused() -> None:
    message = MetadataRequest(version=9, topics=[], allow_auto_topic_creation=False)
    message.with_header(correlation_id=1, client_id="c")
    frame = _with_unknown_tag(bytes(message.encode(header=True, framed=False)), b"12345")
    assert decode_request(MetadataRequest, frame, 9).unknown_tags == {"_99": b"12345"}
    for cut in range(len(frame) - 5, len(frame)):  # inside the tagged field's value
        with pytest.raises(MalformedRequestError, match="tagged field"):
            decode_request(MetadataRequest, frame[:cut], 9)


def test_bytes_after_the_last_field_are_ignored_as_kafka_ignores_them() -> None:
    message, frame = _request_frame(MetadataRequest, 9)
    assert decode_request(MetadataRequest, frame + b"\x00extra", 9) == message
