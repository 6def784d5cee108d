"""The group request handlers (broker/group_apis.py) on a BrokerContext over a store with a FakeClock: per-version
fields that the real-client tests do not reach."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kafka.protocol.admin.groups import (
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
)
from kafka.protocol.consumer.group import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)

from compactlog.broker import group_apis
from compactlog.broker.context import BrokerContext
from compactlog.broker.error_codes import (
    GROUP_ID_NOT_FOUND,
    MEMBER_ID_REQUIRED,
    NONE,
    UNKNOWN_MEMBER_ID,
    UNKNOWN_TOPIC_OR_PARTITION,
    UNSTABLE_OFFSET_COMMIT,
)
from compactlog.broker.kafka_apis import KafkaApis
from compactlog.broker.messages import build
from compactlog.coordinator.group_metadata_manager import OffsetAndMetadata
from compactlog.server_config import server_config
from compactlog.store import open_store
from support import FakeClock


def context(tmp_path) -> BrokerContext:
    store = open_store(tmp_path, FakeClock())
    store.create_topic("t", 2)
    return BrokerContext(store, server_config({"offsets.topic.num.partitions": 2,
                                              "group.initial.rebalance.delay.ms": 0}))


def fetch(context: BrokerContext, version: int, require_stable: bool) -> dict[tuple[str, int], tuple[int, int]]:
    """OffsetFetch of the group's partitions: (topic, partition) -> (error, offset)."""
    request = OffsetFetchRequest(version=version, group_id="g", topics=None, require_stable=require_stable)
    response: dict[str, Any] = asyncio.run(group_apis.handle_offset_fetch(context, request, version, "PLAINTEXT"))
    return {(t["name"], p["partition_index"]): (p["error_code"], p["committed_offset"])
            for t in response["topics"] for p in t["partitions"]}


def test_offset_fetch_requiring_stable_offsets_answers_unstable_for_a_pending_transactions(tmp_path) -> None:
    ctx = context(tmp_path)
    try:
        ctx.groups.manager.store_offsets("g", {("t", 0): OffsetAndMetadata(1)})
        ctx.groups.manager.store_txn_offsets("g", 100, 0, {("t", 1): OffsetAndMetadata(5)})
        assert fetch(ctx, 7, require_stable=True) == {("t", 0): (NONE, 1), ("t", 1): (UNSTABLE_OFFSET_COMMIT, -1)}
        assert fetch(ctx, 7, require_stable=False) == {("t", 0): (NONE, 1)}
        assert fetch(ctx, 6, require_stable=True) == {("t", 0): (NONE, 1)}  # v6 has no require_stable
    finally:
        ctx.close()
        ctx.store.close()


def test_offset_commit_refuses_only_the_partitions_this_broker_does_not_have(tmp_path) -> None:
    ctx = context(tmp_path)
    try:
        partition = OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition
        request = OffsetCommitRequest(version=8, group_id="g", generation_id_or_member_epoch=-1, member_id="",
                                      group_instance_id=None, topics=[
            OffsetCommitRequest.OffsetCommitRequestTopic(name="t", partitions=[
                partition(partition_index=1, committed_offset=4, committed_leader_epoch=-1, committed_metadata=None),
                partition(partition_index=2, committed_offset=4, committed_leader_epoch=-1, committed_metadata=None)]),
            OffsetCommitRequest.OffsetCommitRequestTopic(name="missing", partitions=[
                partition(partition_index=0, committed_offset=4, committed_leader_epoch=-1, committed_metadata="")])])
        response = asyncio.run(group_apis.handle_offset_commit(ctx, request, 8, "PLAINTEXT"))
        assert {(t["name"], p["partition_index"]): p["error_code"] for t in response["topics"]
                for p in t["partitions"]} == {("t", 1): NONE, ("t", 2): UNKNOWN_TOPIC_OR_PARTITION,
                                              ("missing", 0): UNKNOWN_TOPIC_OR_PARTITION}
        assert {tp: o.offset for tp, o in ctx.groups.manager.committed("g").items()} == {("t", 1): 4}
    finally:
        ctx.close()
        ctx.store.close()


@pytest.mark.parametrize("version", range(10))
def test_every_advertised_membership_version_joins_syncs_heartbeats_and_leaves(tmp_path, version: int) -> None:
    """JoinGroup at ``version`` (v4+ after MEMBER_ID_REQUIRED), then SyncGroup, Heartbeat and LeaveGroup at
    the nearest version each has, all through the dispatcher's decode and encode."""
    ctx = context(tmp_path)
    apis = KafkaApis(ctx)

    async def send(request_class: Any, response_class: Any, v: int, fields: dict[str, Any]) -> Any:
        request = build(request_class, v, fields)
        request.with_header(correlation_id=7, client_id="client")
        frame = await apis.handle(bytes(request.encode(header=True)), "PLAINTEXT")
        assert isinstance(frame, bytearray)
        return response_class.decode(bytes(frame[4:]), version=v, header=True)

    async def scenario() -> None:
        join = {"group_id": "g", "session_timeout_ms": 10_000, "rebalance_timeout_ms": 10_000, "member_id": "",
                "group_instance_id": None, "protocol_type": "consumer", "reason": None,
                "protocols": [{"name": "range", "metadata": b"subscription"}]}
        joined = await send(JoinGroupRequest, JoinGroupResponse, version, join)
        if version >= 4:
            assert joined.error_code == MEMBER_ID_REQUIRED and joined.member_id.startswith("client-")
            joined = await send(JoinGroupRequest, JoinGroupResponse, version, {**join, "member_id": joined.member_id})
        assert (joined.error_code, joined.generation_id, joined.leader) == (NONE, 1, joined.member_id)
        assert [(m.member_id, m.metadata) for m in joined.members] == [(joined.member_id, b"subscription")]
        member = {"group_id": "g", "generation_id": 1, "member_id": joined.member_id, "group_instance_id": None}
        synced = await send(SyncGroupRequest, SyncGroupResponse, min(version, 5), {
            **member, "protocol_type": "consumer", "protocol_name": "range",
            "assignments": [{"member_id": joined.member_id, "assignment": b"mine"}]})
        assert (synced.error_code, synced.assignment) == (NONE, b"mine")
        beat = await send(HeartbeatRequest, HeartbeatResponse, min(version, 4), member)
        assert beat.error_code == NONE
        leave_version = min(version, 5)
        identity = {"member_id": joined.member_id, "group_instance_id": None, "reason": None}
        left = await send(LeaveGroupRequest, LeaveGroupResponse, leave_version,
                          {"group_id": "g", "member_id": joined.member_id, "members": [identity]})
        errors = [left.error_code] + [m.error_code for m in left.members or ()]
        assert errors == [NONE] * (1 if leave_version < 3 else 2)
        beat = await send(HeartbeatRequest, HeartbeatResponse, min(version, 4), member)
        assert beat.error_code == UNKNOWN_MEMBER_ID

    try:
        asyncio.run(scenario())
    finally:
        ctx.close()
        ctx.store.close()


@pytest.mark.parametrize("version", range(10))
def test_every_advertised_offsets_and_administration_version(tmp_path, version: int) -> None:
    """A simple consumer's OffsetCommit, OffsetFetch, ListGroups, DescribeGroups, OffsetDelete and DeleteGroups,
    each at ``version`` capped to its advertised range, through the dispatcher's decode and encode."""
    ctx = context(tmp_path)
    apis = KafkaApis(ctx)

    async def send(request_class: Any, response_class: Any, low: int, high: int, fields: dict[str, Any]) -> Any:
        v = max(low, min(version, high))
        request = build(request_class, v, fields)
        request.with_header(correlation_id=7, client_id="client")
        frame = await apis.handle(bytes(request.encode(header=True)), "PLAINTEXT")
        assert isinstance(frame, bytearray)
        return response_class.decode(bytes(frame[4:]), version=v, header=True)

    async def scenario() -> None:
        committed = await send(OffsetCommitRequest, OffsetCommitResponse, 2, 9, {
            "group_id": "g", "generation_id_or_member_epoch": -1, "member_id": "", "group_instance_id": None,
            "retention_time_ms": -1, "topics": [{"name": "t", "partitions": [
                {"partition_index": 1, "committed_offset": 42, "committed_leader_epoch": -1,
                 "committed_metadata": "meta"}]}]})
        assert [(p.partition_index, p.error_code) for t in committed.topics for p in t.partitions] == [(1, NONE)]
        topics = [{"name": "t", "partition_indexes": [0, 1]}]
        fetched = await send(OffsetFetchRequest, OffsetFetchResponse, 1, 9, {
            "group_id": "g", "topics": topics, "require_stable": False,
            "groups": [{"group_id": "g", "member_id": None, "member_epoch": -1, "topics": topics}]})
        partitions = fetched.groups[0].topics[0].partitions if version >= 8 else fetched.topics[0].partitions
        assert [(p.partition_index, p.committed_offset, p.metadata) for p in partitions] == [
            (0, -1, ""), (1, 42, "meta")]
        listed = await send(ListGroupsRequest, ListGroupsResponse, 0, 5, {"states_filter": [], "types_filter": []})
        assert [(g.group_id, g.protocol_type) for g in listed.groups] == [("g", "")]
        described = await send(DescribeGroupsRequest, DescribeGroupsResponse, 0, 5, {
            "groups": ["g", "other"], "include_authorized_operations": False})
        assert [(g.group_id, g.group_state, g.error_code) for g in described.groups] == [
            ("g", "Empty", NONE), ("other", "Dead", NONE)]
        removed = await send(OffsetDeleteRequest, OffsetDeleteResponse, 0, 0, {
            "group_id": "g", "topics": [{"name": "t", "partitions": [{"partition_index": 1}]}]})
        assert removed.error_code == NONE and removed.topics[0].partitions[0].error_code == NONE
        deleted = await send(DeleteGroupsRequest, DeleteGroupsResponse, 0, 2, {"groups_names": ["g", "other"]})
        assert [(r.group_id, r.error_code) for r in deleted.results] == [("g", NONE), ("other", GROUP_ID_NOT_FOUND)]

    try:
        asyncio.run(scenario())
    finally:
        ctx.close()
        ctx.store.close()
