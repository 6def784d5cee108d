"""Metadata: the one broker (this server) and the topics, each partition led by it, replication factor 1.

Rules: a null topic list means every topic, an empty one none; a topic that does not exist is created
(with ``num.partitions`` partitions) only when ``auto.create.topics.enable`` is true and the request
allows it (v4+; earlier versions always allow it, as in Kafka), else answered UNKNOWN_TOPIC_OR_PARTITION.
The broker's address is the advertised listener of the same name as the listener the request came in on.
"""

from __future__ import annotations

import contextlib
from typing import Any

from ..coordinator.group_metadata_manager import OFFSETS_TOPIC
from ..errors import CompactLogError, TopicExistsError
from ..store import Store, validate_topic_name
from .context import BrokerContext
from .error_codes import NONE, UNKNOWN_TOPIC_OR_PARTITION, error_code

__all__ = ["handle_metadata"]

LEADER_EPOCH = 0  # one broker, never re-elected


async def handle_metadata(context: BrokerContext, request: Any, version: int, listener: str) -> dict[str, Any]:
    requested = None if request.topics is None else [t.name for t in request.topics]
    allow_create = context.config.auto_create_topics_enable and (version < 4 or request.allow_auto_topic_creation)
    topics = await context.run(_describe_topics, context.store, requested, allow_create,
                               context.config.num_partitions, context.node_id)
    address = context.advertised[listener]
    return {
        "throttle_time_ms": 0,
        "brokers": [{"node_id": context.node_id, "host": address.host, "port": address.port, "rack": None}],
        "cluster_id": context.cluster_id,
        "controller_id": context.node_id,
        "topics": topics,
    }


def _describe_topics(store: Store, requested: list[str] | None, allow_create: bool, num_partitions: int,
                     node_id: int) -> list[dict[str, Any]]:
    names = store.topics() if requested is None else requested
    return [_describe_topic(store, name, allow_create, num_partitions, node_id) for name in names]


def _describe_topic(store: Store, name: str, allow_create: bool, num_partitions: int,
                    node_id: int) -> dict[str, Any]:
    try:
        validate_topic_name(name)
        try:
            partitions = store.partitions(name)
        except CompactLogError as e:
            if error_code(e) != UNKNOWN_TOPIC_OR_PARTITION or not allow_create:
                raise
            with contextlib.suppress(TopicExistsError):  # created meanwhile, by another client or process
                store.create_topic(name, num_partitions)
            partitions = store.partitions(name)
    except CompactLogError as e:
        return {"error_code": error_code(e), "name": name, "is_internal": False, "partitions": []}
    return {"error_code": NONE, "name": name, "is_internal": name == OFFSETS_TOPIC, "partitions": [
        {"error_code": NONE, "partition_index": p, "leader_id": node_id, "leader_epoch": LEADER_EPOCH,
         "replica_nodes": [node_id], "isr_nodes": [node_id], "offline_replicas": []}
        for p in range(partitions)]}
