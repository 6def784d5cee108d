"""The group requests over the wire: JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch,
ListGroups, DescribeGroups, DeleteGroups, OffsetDelete. Each handler turns a request's fields into a call of
the group coordinator (:mod:`compactlog.coordinator.group_coordinator`) and its answer into the response's
fields, per version.

Rules, as Kafka's ``KafkaApis``:

* JoinGroup v0 has no rebalance timeout: the session timeout serves as one; v4+ members without an id are
  sent back for one (MEMBER_ID_REQUIRED); a member's host is its connection's (``/`` + IP, as Kafka);
* LeaveGroup v0-v2 leave one member (its error is the response's); v3+ batch members, each with its error;
* OffsetCommit of a topic or partition this broker does not have is UNKNOWN_TOPIC_OR_PARTITION for that
  partition alone (the others are committed); v2-v4's retention time is not kept: offsets expire by
  ``offsets.retention.minutes``, as Kafka 2.1+ does for every version; a partition whose metadata is longer
  than ``offset.metadata.max.bytes`` is not committed and answers OFFSET_METADATA_TOO_LARGE, the others are
  (the same holds for TxnOffsetCommit); a group error still answers every partition;
* OffsetFetch of a partition without a committed offset answers offset -1; no topics (v2+) means all the
  group's; v8+ batch groups; an unknown group has no offsets (not an error); with ``require_stable`` (v7+,
  sent by read_committed consumers) a partition whose offset an open transaction has pending answers
  UNSTABLE_OFFSET_COMMIT, and the client retries once the transaction has ended;
* DescribeGroups shows members' metadata and assignments only when the group is Stable, and an unknown group
  as Dead with no error; ListGroups v4+ filter by state, v5+ by type (every group here is "classic").
"""

from __future__ import annotations

from typing import Any

from ..coordinator.group_metadata import GroupState
from ..coordinator.group_metadata_manager import GroupMetadataManager, OffsetAndMetadata, TopicPartition
from ..coordinator.member_metadata import JoinParams
from ..errors import UnknownTopicOrPartitionError
from ..network.socket_server import CLIENT_HOST
from ..store import Store
from .context import BrokerContext
from .error_codes import NONE, OFFSET_METADATA_TOO_LARGE, UNKNOWN_TOPIC_OR_PARTITION, UNSTABLE_OFFSET_COMMIT

__all__ = ["handle_delete_groups", "handle_describe_groups", "handle_heartbeat", "handle_join_group",
           "handle_leave_group", "handle_list_groups", "handle_offset_commit", "handle_offset_delete",
           "handle_offset_fetch", "handle_sync_group", "offset_metadata_too_large", "partition_commit_error"]

CLASSIC = "classic"
NO_OFFSET = -1
# DescribeGroups' authorized operations when the client did not ask for them: kafka-python's bitfield encodes
# None as Kafka's Int.MinValue.
OPERATIONS_NOT_REQUESTED = None


def _client_id(request: Any) -> str:
    return getattr(request.header, "client_id", None) or ""


# -- membership ---------------------------------------------------------------------------------------------

async def handle_join_group(context: BrokerContext, request: Any, version: int, listener: str) -> dict[str, Any]:
    params = JoinParams(
        member_id=request.member_id,
        group_instance_id=request.group_instance_id if version >= 5 else None,
        client_id=_client_id(request),
        client_host=CLIENT_HOST.get(),
        rebalance_timeout_ms=request.rebalance_timeout_ms if version >= 1 else request.session_timeout_ms,
        session_timeout_ms=request.session_timeout_ms,
        protocol_type=request.protocol_type,
        protocols=tuple((p.name, bytes(p.metadata)) for p in request.protocols),
        require_known_member_id=version >= 4,
    )
    result = await context.groups.join(request.group_id, params)
    return {"throttle_time_ms": 0, "error_code": result.error, "generation_id": result.generation,
            "protocol_type": result.protocol_type,
            "protocol_name": result.protocol if version >= 7 else result.protocol or "",
            "leader": result.leader, "skip_assignment": result.skip_assignment, "member_id": result.member_id,
            "members": [{"member_id": member_id, "group_instance_id": instance_id, "metadata": metadata}
                        for member_id, instance_id, metadata in result.members]}


async def handle_sync_group(context: BrokerContext, request: Any, version: int, listener: str) -> dict[str, Any]:
    result = await context.groups.sync(
        request.group_id, request.member_id, request.group_instance_id if version >= 3 else None,
        request.generation_id, request.protocol_type if version >= 5 else None,
        request.protocol_name if version >= 5 else None,
        {a.member_id: bytes(a.assignment) for a in request.assignments})
    return {"throttle_time_ms": 0, "error_code": result.error, "protocol_type": result.protocol_type,
            "protocol_name": result.protocol, "assignment": result.assignment}


async def handle_heartbeat(context: BrokerContext, request: Any, version: int, listener: str) -> dict[str, Any]:
    error = context.groups.heartbeat(request.group_id, request.member_id,
                                     request.group_instance_id if version >= 3 else None, request.generation_id)
    return {"throttle_time_ms": 0, "error_code": error}


async def handle_leave_group(context: BrokerContext, request: Any, version: int, listener: str) -> dict[str, Any]:
    if version < 3:
        errors = await context.groups.leave(request.group_id, [(request.member_id, None)])
        return {"throttle_time_ms": 0, "error_code": errors[0]}
    leaving = [(m.member_id, m.group_instance_id) for m in request.members]
    errors = await context.groups.leave(request.group_id, leaving)
    return {"throttle_time_ms": 0, "error_code": NONE,
            "members": [{"member_id": member_id, "group_instance_id": instance_id, "error_code": error}
                        for (member_id, instance_id), error in zip(leaving, errors, strict=True)]}


# -- offsets ------------------------------------------------------------------------------------------------

def _missing_partitions(store: Store, partitions: list[TopicPartition]) -> set[TopicPartition]:
    """The partitions among ``partitions`` that this broker does not have."""
    counts: dict[str, int] = {}
    for topic in {t for t, _ in partitions}:
        try:
            counts[topic] = store.partitions(topic)
        except UnknownTopicOrPartitionError:
            counts[topic] = 0
    return {(t, p) for t, p in partitions if not 0 <= p < counts[t]}


def offset_metadata_too_large(metadata: str, max_bytes: int) -> bool:
    """Kafka's ``isMetadataInvalid``: a committed offset's metadata is longer than ``offset.metadata.max.bytes``,
    its length counted as Java's ``String.length()`` (UTF-16 code units), not in bytes despite the name."""
    return len(metadata.encode("utf-16-le")) // 2 > max_bytes


def partition_commit_error(missing: bool, too_large: bool, group_error: int) -> int:
    """One partition's error in an OffsetCommit or TxnOffsetCommit response: a partition this broker does not
    have is UNKNOWN_TOPIC_OR_PARTITION whatever the group; otherwise the group's error answers every
    partition, and only with none does a partition with too long metadata answer OFFSET_METADATA_TOO_LARGE."""
    if missing:
        return UNKNOWN_TOPIC_OR_PARTITION
    return OFFSET_METADATA_TOO_LARGE if too_large and group_error == NONE else group_error


async def handle_offset_commit(context: BrokerContext, request: Any, version: int, listener: str) -> dict[str, Any]:
    asked = [(topic.name, p.partition_index, OffsetAndMetadata(
        p.committed_offset, p.committed_leader_epoch if version >= 6 else -1, p.committed_metadata or ""))
        for topic in request.topics for p in topic.partitions]
    missing = await context.run(_missing_partitions, context.store, [(t, p) for t, p, _ in asked])
    too_large = {(t, p) for t, p, offset in asked
                 if offset_metadata_too_large(offset.metadata, context.config.offset_metadata_max_bytes)}
    offsets = {(t, p): offset for t, p, offset in asked if (t, p) not in missing and (t, p) not in too_large}
    error = await context.groups.commit_offsets(
        request.group_id, request.member_id, request.group_instance_id if version >= 7 else None,
        request.generation_id_or_member_epoch, offsets)
    by_topic: dict[str, list[dict[str, int]]] = {}
    for topic, partition, _ in asked:
        code = partition_commit_error((topic, partition) in missing, (topic, partition) in too_large, error)
        by_topic.setdefault(topic, []).append({"partition_index": partition, "error_code": code})
    return {"throttle_time_ms": 0,
            "topics": [{"name": name, "partitions": partitions} for name, partitions in by_topic.items()]}


def _read_offsets(manager: GroupMetadataManager, group_id: str, require_stable: bool,
                  ) -> tuple[dict[TopicPartition, OffsetAndMetadata], set[TopicPartition]]:
    """A group's committed offsets, and (when the client requires stable offsets) the partitions whose offsets
    an open transaction has pending."""
    return manager.committed(group_id), manager.pending_txn_offsets(group_id) if require_stable else set()


async def _fetched(context: BrokerContext, group_id: str, topics: list[tuple[str, list[int]]] | None,
                   require_stable: bool) -> list[dict[str, Any]]:
    """OffsetFetch's topics for one group: the asked partitions (all the group's when ``topics`` is None)."""
    committed, pending = await context.run(_read_offsets, context.groups.manager, group_id, require_stable)
    if topics is None:
        grouped: dict[str, list[int]] = {}
        for topic, partition in sorted(committed.keys() | pending):
            grouped.setdefault(topic, []).append(partition)
        topics = list(grouped.items())
    answer = []
    for name, partitions in topics:
        rows = []
        for partition in partitions:
            offset = None if (name, partition) in pending else committed.get((name, partition))
            rows.append({"partition_index": partition,
                         "error_code": UNSTABLE_OFFSET_COMMIT if (name, partition) in pending else NONE,
                         "committed_offset": NO_OFFSET if offset is None else offset.offset,
                         "committed_leader_epoch": -1 if offset is None else offset.leader_epoch,
                         "metadata": "" if offset is None else offset.metadata})
        answer.append({"name": name, "partitions": rows})
    return answer


async def handle_offset_fetch(context: BrokerContext, request: Any, version: int, listener: str) -> dict[str, Any]:
    require_stable = version >= 7 and request.require_stable
    if version >= 8:
        groups = [{"group_id": g.group_id, "error_code": NONE, "topics": await _fetched(
            context, g.group_id, None if g.topics is None else [(t.name, list(t.partition_indexes)) for t in g.topics],
            require_stable)} for g in request.groups]
        return {"throttle_time_ms": 0, "groups": groups}
    topics = None if request.topics is None else [(t.name, list(t.partition_indexes)) for t in request.topics]
    return {"throttle_time_ms": 0, "error_code": NONE,
            "topics": await _fetched(context, request.group_id, topics, require_stable)}


async def handle_offset_delete(context: BrokerContext, request: Any, version: int, listener: str) -> dict[str, Any]:
    asked = [(topic.name, p.partition_index) for topic in request.topics for p in topic.partitions]
    error, errors = await context.groups.delete_offsets(request.group_id, asked)
    by_topic: dict[str, list[dict[str, int]]] = {}
    if error == NONE:
        for topic, partition in asked:
            by_topic.setdefault(topic, []).append({"partition_index": partition,
                                                   "error_code": errors[(topic, partition)]})
    return {"error_code": error, "throttle_time_ms": 0,
            "topics": [{"name": name, "partitions": partitions} for name, partitions in by_topic.items()]}


# -- administration -----------------------------------------------------------------------------------------

async def handle_list_groups(context: BrokerContext, request: Any, version: int, listener: str) -> dict[str, Any]:
    states = {s.lower() for s in request.states_filter} if version >= 4 else set()
    types = {t.lower() for t in request.types_filter} if version >= 5 else set()
    listed = []
    if not types or CLASSIC in types:
        for group in context.groups.groups.values():
            if group.state != GroupState.DEAD and (not states or group.state.value.lower() in states):
                listed.append({"group_id": group.group_id, "protocol_type": group.protocol_type or "",
                               "group_state": group.state.value, "group_type": CLASSIC})
    return {"throttle_time_ms": 0, "error_code": NONE, "groups": listed}


async def handle_describe_groups(context: BrokerContext, request: Any, version: int,
                                 listener: str) -> dict[str, Any]:
    described = []
    for group_id in request.groups:
        group = context.groups.groups.get(group_id)
        if group is None:
            described.append({"error_code": NONE, "group_id": group_id, "group_state": GroupState.DEAD.value,
                              "protocol_type": "", "protocol_data": "", "members": [],
                              "authorized_operations": OPERATIONS_NOT_REQUESTED})
            continue
        stable = group.state == GroupState.STABLE
        protocol = group.protocol or "" if stable else ""
        members = [{"member_id": m.member_id, "group_instance_id": m.group_instance_id, "client_id": m.client_id,
                    "client_host": m.client_host, "member_metadata": m.metadata(protocol) if stable else b"",
                    "member_assignment": m.assignment if stable else b""} for m in group.members.values()]
        described.append({"error_code": NONE, "group_id": group_id, "group_state": group.state.value,
                          "protocol_type": group.protocol_type or "", "protocol_data": protocol,
                          "members": members, "authorized_operations": OPERATIONS_NOT_REQUESTED})
    return {"throttle_time_ms": 0, "groups": described}


async def handle_delete_groups(context: BrokerContext, request: Any, version: int, listener: str) -> dict[str, Any]:
    results = await context.groups.delete_groups(list(request.groups_names))
    return {"throttle_time_ms": 0,
            "results": [{"group_id": group_id, "error_code": error} for group_id, error in results.items()]}
