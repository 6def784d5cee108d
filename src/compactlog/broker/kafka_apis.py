"""Request dispatch (Kafka's ``KafkaApis``): a request frame's API key and version -> one handler -> the
response frame.

A request frame is a request header (api key int16, api version int16, correlation id int32, client id;
tagged fields in flexible versions) and the request body; the response frame is the size, a response
header (the correlation id; tagged fields in flexible versions, except ApiVersions' which is never
flexible) and the body. Messages come from kafka-python's generated classes (:mod:`.messages`).

Rules, as Kafka's:

* only the APIs and versions of :data:`APIS` are advertised by ApiVersions and answered;
* an ApiVersions request of a version above ours gets a v0 response with ``UNSUPPORTED_VERSION`` and our
  list, so the client can pick a version we speak (librdkafka sends v3 or v4 first);
* any other unknown API key or version, a frame too short for a header, or a request that cannot be
  decoded (:func:`~.messages.decode_request`: a field cut short, a null where none is allowed) is
  :class:`~compactlog.errors.MalformedRequestError`: the socket server closes the connection;
* a handler answers errors as error codes in the response (:mod:`.error_codes`), never as exceptions.

Handlers are ``async (context, request, version, listener name) -> dict of response fields | None``
(None: no response, a Produce with ``acks=0``), or a future of the fields when the request has taken
effect but its response must wait (a Produce for its fsync): the socket server then handles the
connection's next requests meanwhile and sends the responses in order
(:class:`~compactlog.network.request_channel.PendingResponse`). Their blocking store calls run in the
context's thread pool (:mod:`.context`).
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from kafka.protocol.admin import (
    AlterConfigsRequest,
    AlterConfigsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from kafka.protocol.admin.groups import (
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
)
from kafka.protocol.consumer import FetchRequest, FetchResponse, ListOffsetsRequest, ListOffsetsResponse
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
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataRequest,
    MetadataResponse,
)
from kafka.protocol.producer import InitProducerIdRequest, InitProducerIdResponse, ProduceRequest, ProduceResponse
from kafka.protocol.producer.transaction import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)

from ..errors import MalformedRequestError
from ..network.request_channel import PendingResponse
from . import fetch, find_coordinator, group_apis, metadata, produce, topic_admin, txn_apis
from .context import BrokerContext
from .error_codes import NONE, UNSUPPORTED_VERSION
from .messages import build, decode_request, encode_response

__all__ = ["APIS", "Api", "KafkaApis"]

_HEADER = struct.Struct(">hhi")  # api key, api version, correlation id: the start of every request header


Fields = dict[str, Any]
Handler = Callable[[BrokerContext, Any, int, str], Awaitable["Fields | asyncio.Future[Fields] | None"]]


@dataclass(frozen=True)
class Api:
    """One API: its key, message classes, the versions we answer, its handler."""

    key: int
    request: Any
    response: Any
    min_version: int
    max_version: int
    handler: Handler
    # The bytes of the records a response's fields carry, for a response that may be large (a Fetch's):
    # :func:`~.messages.encode_response` encodes a large one in a buffer of its own.
    records_bytes: Callable[[Fields], int] | None = None


async def _api_versions(context: BrokerContext, request: Any, version: int, listener: str) -> dict[str, Any]:
    return {"error_code": NONE, "api_keys": _api_keys(), "throttle_time_ms": 0}


def _api_keys() -> list[dict[str, int]]:
    return [{"api_key": api.key, "min_version": api.min_version, "max_version": api.max_version}
            for api in APIS.values()]


# The versions are those every listed field is handled at. Caps below kafka-python's maxima: Metadata 9 and
# Fetch 12 and Produce 9 and DeleteTopics 5 (later versions name topics by topic id), ListOffsets 7,
# CreateTopics 6, InitProducerId 4, FindCoordinator 4 (5 and 6 add share groups' errors), OffsetCommit 9 and
# OffsetFetch 9 (10 name topics by topic id). OffsetCommit starts at 2, Kafka 4's minimum (0 and 1 kept offsets
# in ZooKeeper or carried per-offset timestamps). AddPartitionsToTxn 3 (4+ is broker to broker), AddOffsetsToTxn,
# EndTxn and TxnOffsetCommit 3 (4 adds TRANSACTION_ABORTABLE, 5 Kafka's transactions v2).
APIS: dict[int, Api] = {api.key: api for api in (
    Api(0, ProduceRequest, ProduceResponse, 3, 9, produce.handle_produce),
    Api(1, FetchRequest, FetchResponse, 4, 12, fetch.handle_fetch, fetch.records_bytes),
    Api(2, ListOffsetsRequest, ListOffsetsResponse, 1, 7, fetch.handle_list_offsets),
    Api(3, MetadataRequest, MetadataResponse, 0, 9, metadata.handle_metadata),
    Api(8, OffsetCommitRequest, OffsetCommitResponse, 2, 9, group_apis.handle_offset_commit),
    Api(9, OffsetFetchRequest, OffsetFetchResponse, 1, 9, group_apis.handle_offset_fetch),
    Api(10, FindCoordinatorRequest, FindCoordinatorResponse, 0, 4, find_coordinator.handle_find_coordinator),
    Api(11, JoinGroupRequest, JoinGroupResponse, 0, 9, group_apis.handle_join_group),
    Api(12, HeartbeatRequest, HeartbeatResponse, 0, 4, group_apis.handle_heartbeat),
    Api(13, LeaveGroupRequest, LeaveGroupResponse, 0, 5, group_apis.handle_leave_group),
    Api(14, SyncGroupRequest, SyncGroupResponse, 0, 5, group_apis.handle_sync_group),
    Api(15, DescribeGroupsRequest, DescribeGroupsResponse, 0, 5, group_apis.handle_describe_groups),
    Api(16, ListGroupsRequest, ListGroupsResponse, 0, 5, group_apis.handle_list_groups),
    Api(18, ApiVersionsRequest, ApiVersionsResponse, 0, 3, _api_versions),
    Api(19, CreateTopicsRequest, CreateTopicsResponse, 2, 6, topic_admin.handle_create_topics),
    Api(20, DeleteTopicsRequest, DeleteTopicsResponse, 1, 5, topic_admin.handle_delete_topics),
    Api(22, InitProducerIdRequest, InitProducerIdResponse, 0, 4, txn_apis.handle_init_producer_id),
    Api(24, AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, 0, 3, txn_apis.handle_add_partitions_to_txn),
    Api(25, AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, 0, 3, txn_apis.handle_add_offsets_to_txn),
    Api(26, EndTxnRequest, EndTxnResponse, 0, 3, txn_apis.handle_end_txn),
    Api(28, TxnOffsetCommitRequest, TxnOffsetCommitResponse, 0, 3, txn_apis.handle_txn_offset_commit),
    Api(32, DescribeConfigsRequest, DescribeConfigsResponse, 1, 4, topic_admin.handle_describe_configs),
    Api(33, AlterConfigsRequest, AlterConfigsResponse, 0, 2, topic_admin.handle_alter_configs),
    Api(44, IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse, 0, 1,
        topic_admin.handle_incremental_alter_configs),
    Api(42, DeleteGroupsRequest, DeleteGroupsResponse, 0, 2, group_apis.handle_delete_groups),
    Api(47, OffsetDeleteRequest, OffsetDeleteResponse, 0, 0, group_apis.handle_offset_delete),
)}
API_VERSIONS_KEY = 18


class KafkaApis:
    """The request handler of the socket server (:data:`compactlog.network.request_channel.RequestHandler`)."""

    def __init__(self, context: BrokerContext) -> None:
        self.context = context

    async def handle(self, frame: bytes | bytearray, listener: str) -> bytearray | PendingResponse | None:
        if len(frame) < _HEADER.size + 2:  # + the client id's length
            raise MalformedRequestError(f"a request of {len(frame)} bytes is shorter than a request header")
        api_key, version, correlation_id = _HEADER.unpack_from(frame)
        api = APIS.get(api_key)
        if api is None:
            raise MalformedRequestError(f"unknown or unsupported API key {api_key}")
        if api_key == API_VERSIONS_KEY and version > api.max_version:
            return _encode(ApiVersionsResponse, 0, correlation_id,
                           {"error_code": UNSUPPORTED_VERSION, "api_keys": _api_keys()})
        if not api.min_version <= version <= api.max_version:
            raise MalformedRequestError(f"{api.request.name} v{version} is not supported; allowed: "
                                        f"v{api.min_version}..v{api.max_version}")
        request = decode_request(api.request, frame, version)
        fields = await api.handler(self.context, request, version, listener)
        if fields is None:
            return None
        if isinstance(fields, asyncio.Future):
            pending: asyncio.Future[bytes | bytearray | None] = fields.get_loop().create_future()
            # Encoded by a callback of the fields' future, not a Task of its own.
            fields.add_done_callback(lambda done: _encode_when_ready(done, pending, api.response, version,
                                                                     correlation_id))
            return PendingResponse(pending)
        return _encode(api.response, version, correlation_id, fields,
                       0 if api.records_bytes is None else api.records_bytes(fields))


def _encode_when_ready(fields: asyncio.Future[Fields], frame: asyncio.Future[bytes | bytearray | None],
                       response: Any, version: int, correlation_id: int) -> None:
    """Settle ``frame`` with the response encoded from the done ``fields`` (or with their error, their
    cancellation: the socket server closes the connection, or it shuts down)."""
    if frame.done():  # cancelled: the server shut down
        return
    if fields.cancelled():
        frame.cancel()
        return
    try:
        frame.set_result(_encode(response, version, correlation_id, fields.result()))
    except Exception as e:
        frame.set_exception(e)


def _encode(response: Any, version: int, correlation_id: int, fields: dict[str, Any], records_bytes: int = 0,
            ) -> bytearray:
    message = build(response, version, fields)
    message.with_header(correlation_id=correlation_id)
    return encode_response(message, records_bytes)
