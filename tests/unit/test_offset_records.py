"""``__consumer_offsets`` records in Kafka's bytes. The expected bytes are written out by hand from Kafka's
definitions and protocol primitives (int16 version first; int16-length strings, int32-length bytes and
int32-counted arrays; in a flexible version, unsigned-varint length+1 strings, bytes and arrays, and one
empty tagged-field byte 00 after each struct), independently of kafka-python, which the code uses."""

from __future__ import annotations

import pytest

from compactlog.coordinator.offset_records import (
    GroupKey,
    GroupSnapshot,
    MemberSnapshot,
    OffsetAndMetadata,
    OffsetKey,
    decode_group_value,
    decode_key,
    decode_offset_value,
    encode_group_key,
    encode_group_value,
    encode_offset_key,
    encode_offset_value,
)
from compactlog.errors import CorruptOffsetsRecordError

COMMIT_MS = "0000018bcfe56800"  # 1_700_000_000_000 as int64
EXPIRE_MS = "0000018bcfe5a0e8"  # 1_700_000_014_568 as int64 (0x18bcfe5a0e8)


def test_offset_commit_key_is_version_1_then_group_topic_partition() -> None:
    expected = bytes.fromhex("0001" "0005" + b"group".hex() + "0005" + b"topic".hex() + "00000003")
    assert encode_offset_key("group", "topic", 3) == expected
    assert decode_key(expected) == OffsetKey("group", "topic", 3)
    # Version 0 has the same fields (written by Kafka before 0.10); it is read too.
    assert decode_key(b"\x00\x00" + expected[2:]) == OffsetKey("group", "topic", 3)


def test_group_metadata_key_is_version_2_then_group() -> None:
    expected = bytes.fromhex("0002" "0005" + b"group".hex())
    assert encode_group_key("group") == expected
    assert decode_key(expected) == GroupKey("group")


def test_offset_commit_value_v3_as_kafka_writes_it() -> None:
    value = OffsetAndMetadata(offset=100, leader_epoch=7, metadata="m", commit_timestamp=1_700_000_000_000)
    expected = bytes.fromhex("0003" "0000000000000064" "00000007" "0001" + b"m".hex() + COMMIT_MS)
    assert encode_offset_value(value) == expected
    assert decode_offset_value(expected) == value


def test_offset_commit_value_with_an_expire_timestamp_is_v1_without_leader_epoch() -> None:
    value = OffsetAndMetadata(offset=100, leader_epoch=7, metadata="", commit_timestamp=1_700_000_000_000,
                              expire_timestamp=1_700_000_014_568)
    expected = bytes.fromhex("0001" "0000000000000064" "0000" + COMMIT_MS + EXPIRE_MS)
    assert encode_offset_value(value) == expected
    assert decode_offset_value(expected) == OffsetAndMetadata(100, -1, "", 1_700_000_000_000, 1_700_000_014_568)


@pytest.mark.parametrize(("hex_value", "decoded"), [
    ("0000" "0000000000000064" "0001" + b"m".hex() + COMMIT_MS, OffsetAndMetadata(100, -1, "m", 1_700_000_000_000)),
    ("0002" "0000000000000064" "0001" + b"m".hex() + COMMIT_MS, OffsetAndMetadata(100, -1, "m", 1_700_000_000_000)),
    # v4, flexible: compact string (length+1 = 02), then an empty tagged-field section.
    ("0004" "0000000000000064" "00000007" "02" + b"m".hex() + COMMIT_MS + "00",
     OffsetAndMetadata(100, 7, "m", 1_700_000_000_000)),
])
def test_every_offset_commit_value_version_is_read(hex_value: str, decoded: OffsetAndMetadata) -> None:
    assert decode_offset_value(bytes.fromhex(hex_value)) == decoded


MEMBER = MemberSnapshot(member_id="m1", group_instance_id=None, client_id="c", client_host="/h",
                        rebalance_timeout_ms=10, session_timeout_ms=20, subscription=b"s", assignment=b"a")
GROUP = GroupSnapshot(group_id="g", protocol_type="consumer", generation=1, protocol="range", leader="m1",
                      current_state_timestamp=99, members=(MEMBER,))
HEAD = "0008" + b"consumer".hex() + "00000001" "0005" + b"range".hex() + "0002" + b"m1".hex()  # v0-v3 fields
MEMBER_V3 = ("0002" + b"m1".hex() + "ffff" "0001" + b"c".hex() + "0002" + b"/h".hex() + "0000000a" "00000014"
             "00000001" + b"s".hex() + "00000001" + b"a".hex())


def test_group_metadata_value_v3_as_kafka_writes_it() -> None:
    expected = bytes.fromhex("0003" + HEAD + "0000000000000063" "00000001" + MEMBER_V3)
    assert encode_group_value(GROUP) == expected
    assert decode_group_value("g", expected) == GROUP


def test_group_metadata_value_v0_member_takes_its_session_timeout_as_rebalance_timeout() -> None:
    member_v0 = ("0002" + b"m1".hex() + "0001" + b"c".hex() + "0002" + b"/h".hex() + "00000014"
                 "00000001" + b"s".hex() + "00000001" + b"a".hex())
    decoded = decode_group_value("g", bytes.fromhex("0000" + HEAD + "00000001" + member_v0))
    assert decoded.members[0].rebalance_timeout_ms == 20  # Kafka's reading of a v0 member
    assert decoded.current_state_timestamp == -1  # absent before v2
    assert decoded.members[0].group_instance_id is None


def test_group_metadata_value_v4_flexible_with_a_static_member() -> None:
    head = "09" + b"consumer".hex() + "00000001" "06" + b"range".hex() + "03" + b"m1".hex()
    member = ("03" + b"m1".hex() + "03" + b"i1".hex() + "02" + b"c".hex() + "03" + b"/h".hex() + "0000000a"
              "00000014" "02" + b"s".hex() + "02" + b"a".hex() + "00")
    decoded = decode_group_value("g", bytes.fromhex("0004" + head + "0000000000000063" "02" + member + "00"))
    assert decoded == GroupSnapshot("g", "consumer", 1, "range", "m1", 99,
                                    (MemberSnapshot("m1", "i1", "c", "/h", 10, 20, b"s", b"a"),))


def test_an_offsets_only_group_has_null_protocol_and_leader() -> None:
    group = GroupSnapshot("g", "", 0, None, None, 5, ())
    expected = bytes.fromhex("0003" "0000" "00000000" "ffff" "ffff" "0000000000000005" "00000000")
    assert encode_group_value(group) == expected
    assert decode_group_value("g", expected) == group


@pytest.mark.parametrize(("data", "problem"), [
    (b"\x00\x03" + encode_group_key("g")[2:], "key version 3 is unknown"),
    (b"\x00", "has no int16 version"),
    (encode_offset_key("g", "t", 0)[:-1], "cannot be decoded"),
])
def test_a_bad_key_is_a_clear_error(data: bytes, problem: str) -> None:
    with pytest.raises(CorruptOffsetsRecordError, match=problem):
        decode_key(data)


def test_a_bad_value_is_a_clear_error() -> None:
    value = encode_offset_value(OffsetAndMetadata(1, commit_timestamp=2))
    with pytest.raises(CorruptOffsetsRecordError, match="OffsetCommitValue version 5 is unknown"):
        decode_offset_value(b"\x00\x05" + value[2:])
    with pytest.raises(CorruptOffsetsRecordError, match="1 bytes left over"):
        decode_offset_value(value + b"\x00")
    with pytest.raises(CorruptOffsetsRecordError, match="GroupMetadataValue version -1 is unknown"):
        decode_group_value("g", b"\xff\xff" + encode_group_value(GROUP)[2:])
    with pytest.raises(CorruptOffsetsRecordError, match="cannot be decoded"):
        decode_group_value("g", encode_group_value(GROUP)[:-3])
