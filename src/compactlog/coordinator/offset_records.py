"""The records of ``__consumer_offsets``: Kafka's own key and value schemas, byte for byte.

Every record of the topic has a key and a value that each begin with a big-endian int16 version, followed
by the fields of that version in Kafka's protocol encoding (strings int16-length-prefixed, bytes
int32-length-prefixed, arrays int32-counted; from the first flexible version on, compact (unsigned-varint
length + 1) strings, bytes and arrays, and a tagged-field section after each struct). The key's version
says what the record is:

=============  ==================  ====================================================================
key version    key fields          value
=============  ==================  ====================================================================
0, 1           group, topic,       OffsetCommitValue v0-v4: offset, leaderEpoch (v3+), metadata,
               partition           commitTimestamp, expireTimestamp (v1 only); v4 is flexible
2              group               GroupMetadataValue v0-v4: protocolType, generation, protocol, leader,
                                   currentStateTimestamp (v2+), members (MemberMetadata: memberId,
                                   groupInstanceId (v3+), clientId, clientHost, rebalanceTimeout (v1+),
                                   sessionTimeout, subscription, assignment); v4 is flexible
=============  ==================  ====================================================================

A null value is a tombstone: the offset or the group is deleted. The definitions are Kafka's JSON message
definitions, transcribed next to this module (``OffsetCommitKey.json`` etc., each noting its origin) and
compiled by kafka-python's loader, which also encodes and decodes them. We write what Kafka 3.x and 4.x
write: key versions 1 and 2, OffsetCommitValue v3 (v1 when an expire timestamp is set), GroupMetadataValue
v3. Any version of the table is read; another version, or a record with bytes short or left over, is a
:class:`~compactlog.errors.CorruptOffsetsRecordError`.
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass
from typing import Any

from kafka.protocol.api_data import ApiData

from ..errors import CorruptOffsetsRecordError

__all__ = [
    "GroupKey",
    "GroupSnapshot",
    "MemberSnapshot",
    "OffsetAndMetadata",
    "OffsetKey",
    "decode_group_value",
    "decode_key",
    "decode_offset_value",
    "encode_group_key",
    "encode_group_value",
    "encode_offset_key",
    "encode_offset_value",
]

_SCHEMAS = __package__  # the JSON definitions live in this package


class OffsetCommitKey(ApiData, load_json=_SCHEMAS):  # type: ignore[call-arg]
    """Kafka's OffsetCommitKey (kafka-python compiles ``OffsetCommitKey.json``)."""


class OffsetCommitValue(ApiData, load_json=_SCHEMAS):  # type: ignore[call-arg]
    """Kafka's OffsetCommitValue."""


class GroupMetadataKey(ApiData, load_json=_SCHEMAS):  # type: ignore[call-arg]
    """Kafka's GroupMetadataKey."""


class GroupMetadataValue(ApiData, load_json=_SCHEMAS):  # type: ignore[call-arg]
    """Kafka's GroupMetadataValue."""


OFFSET_KEY_VERSIONS = (0, 1)
GROUP_KEY_VERSION = 2
OFFSET_KEY_VERSION = 1  # what Kafka writes
OFFSET_VALUE_VERSION = 3  # what Kafka writes without an expire timestamp
OFFSET_VALUE_VERSION_WITH_EXPIRE = 1  # the only version that carries expireTimestamp
GROUP_VALUE_VERSION = 3
VALUE_VERSIONS = range(0, 5)  # OffsetCommitValue and GroupMetadataValue are both v0-v4


@dataclass(frozen=True)
class OffsetAndMetadata:
    """A committed offset, as OffsetCommitValue holds it."""

    offset: int
    leader_epoch: int = -1  # -1: none
    metadata: str = ""
    commit_timestamp: int = -1  # ms; the manager fills the clock's now when -1
    expire_timestamp: int = -1  # only OffsetCommitValue v1 carries it; -1 otherwise


@dataclass(frozen=True)
class MemberSnapshot:
    """One member of a group, as GroupMetadataValue's MemberMetadata holds it."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes  # the member's metadata for the chosen protocol
    assignment: bytes


@dataclass(frozen=True)
class GroupSnapshot:
    """What Kafka's GroupMetadataValue holds (with the group id of its key)."""

    group_id: str
    protocol_type: str  # "consumer"; "" for a group that only commits offsets
    generation: int
    protocol: str | None  # the chosen assignor, e.g. "range"
    leader: str | None
    current_state_timestamp: int  # ms
    members: tuple[MemberSnapshot, ...]


@dataclass(frozen=True)
class OffsetKey:
    """The key of an offset commit record."""

    group: str
    topic: str
    partition: int


@dataclass(frozen=True)
class GroupKey:
    """The key of a group metadata record."""

    group: str


# -- keys ----------------------------------------------------------------------------------------------------


def encode_offset_key(group: str, topic: str, partition: int) -> bytes:
    return bytes(OffsetCommitKey(version=OFFSET_KEY_VERSION, group=group, topic=topic, partition=partition).encode())


def encode_group_key(group: str) -> bytes:
    return bytes(GroupMetadataKey(version=GROUP_KEY_VERSION, group=group).encode())


def decode_key(data: bytes) -> OffsetKey | GroupKey:
    """The key of a ``__consumer_offsets`` record; its version says which of the two it is."""
    version = _version(data, "key")
    if version in OFFSET_KEY_VERSIONS:
        key = _decode(OffsetCommitKey, data, "OffsetCommitKey")
        return OffsetKey(key.group, key.topic, key.partition)
    if version == GROUP_KEY_VERSION:
        return GroupKey(_decode(GroupMetadataKey, data, "GroupMetadataKey").group)
    raise CorruptOffsetsRecordError(f"__consumer_offsets key version {version} is unknown; known: 0 and 1 (offset "
                                    f"commit), 2 (group metadata)")


# -- values --------------------------------------------------------------------------------------------------


def encode_offset_value(value: OffsetAndMetadata) -> bytes:
    """OffsetCommitValue v3, or v1 (which has no leader epoch) when ``expire_timestamp`` is set, as Kafka."""
    if value.expire_timestamp != -1:
        record = OffsetCommitValue(version=OFFSET_VALUE_VERSION_WITH_EXPIRE, offset=value.offset,
                                   metadata=value.metadata, commit_timestamp=value.commit_timestamp,
                                   expire_timestamp=value.expire_timestamp)
    else:
        record = OffsetCommitValue(version=OFFSET_VALUE_VERSION, offset=value.offset, leader_epoch=value.leader_epoch,
                                   metadata=value.metadata, commit_timestamp=value.commit_timestamp)
    return bytes(record.encode())


def decode_offset_value(data: bytes) -> OffsetAndMetadata:
    _check_value_version(data, "OffsetCommitValue")
    value = _decode(OffsetCommitValue, data, "OffsetCommitValue")
    return OffsetAndMetadata(offset=value.offset, leader_epoch=value.leader_epoch, metadata=value.metadata,
                             commit_timestamp=value.commit_timestamp, expire_timestamp=value.expire_timestamp)


def encode_group_value(group: GroupSnapshot) -> bytes:
    """GroupMetadataValue v3, as Kafka writes it."""
    member_type = GroupMetadataValue.MemberMetadata
    members = [member_type(version=GROUP_VALUE_VERSION, member_id=m.member_id, group_instance_id=m.group_instance_id,
                           client_id=m.client_id, client_host=m.client_host,
                           rebalance_timeout=m.rebalance_timeout_ms, session_timeout=m.session_timeout_ms,
                           subscription=m.subscription, assignment=m.assignment)
               for m in group.members]
    record = GroupMetadataValue(version=GROUP_VALUE_VERSION, protocol_type=group.protocol_type,
                                generation=group.generation, protocol=group.protocol, leader=group.leader,
                                current_state_timestamp=group.current_state_timestamp, members=members)
    return bytes(record.encode())


def decode_group_value(group_id: str, data: bytes) -> GroupSnapshot:
    """A group's metadata; fields a version lacks take Kafka's defaults (rebalance timeout: the session
    timeout, as Kafka reads a v0 member)."""
    _check_value_version(data, "GroupMetadataValue")
    value = _decode(GroupMetadataValue, data, "GroupMetadataValue")
    members = []
    for m in value.members:
        if m.subscription is None or m.assignment is None:  # kafka-python reads a -1 length as null
            raise CorruptOffsetsRecordError(f"GroupMetadataValue of {len(data)} bytes: member {m.member_id!r} has "
                                            "a null subscription or assignment, which are not nullable")
        rebalance = m.session_timeout if value.version == 0 else m.rebalance_timeout
        members.append(MemberSnapshot(m.member_id, m.group_instance_id, m.client_id, m.client_host, rebalance,
                                      m.session_timeout, bytes(m.subscription), bytes(m.assignment)))
    return GroupSnapshot(group_id, value.protocol_type, value.generation, value.protocol, value.leader,
                         value.current_state_timestamp, tuple(members))


# -- framing checks ------------------------------------------------------------------------------------------


def _version(data: bytes, what: str) -> int:
    if len(data) < 2:
        raise CorruptOffsetsRecordError(f"__consumer_offsets {what} of {len(data)} bytes has no int16 version")
    return int(struct.unpack_from(">h", data)[0])


def _check_value_version(data: bytes, name: str) -> None:
    version = _version(data, f"{name} value")
    if version not in VALUE_VERSIONS:
        # kafka-python would read a newer version as its newest: refuse it instead of guessing.
        raise CorruptOffsetsRecordError(f"{name} version {version} is unknown; known: 0..{VALUE_VERSIONS[-1]}")


def _decode(schema: Any, data: bytes, name: str) -> Any:
    """Decode all of ``data``; short bytes, or bytes left over, make the record corrupt."""
    buffer = io.BytesIO(data)
    try:
        decoded = schema.decode(buffer)
    except (struct.error, ValueError, EOFError, IndexError, TypeError) as e:  # kafka-python on bad bytes
        raise CorruptOffsetsRecordError(f"{name} of {len(data)} bytes cannot be decoded: "
                                        f"{type(e).__name__}: {e}") from e
    if buffer.tell() != len(data):
        raise CorruptOffsetsRecordError(f"{name} of {len(data)} bytes has {len(data) - buffer.tell()} bytes "
                                        "left over after its fields")
    return decoded
