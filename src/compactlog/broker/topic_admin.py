"""Topic administration over the wire: CreateTopics, DeleteTopics, DescribeConfigs, AlterConfigs,
IncrementalAlterConfigs. The same topics and configs as the command line's and the Python API's.

Rules:

* CreateTopics: the replication factor is 1 or -1 (the default), else INVALID_REPLICATION_FACTOR; manual
  assignments must put every partition on this node alone, else INVALID_REPLICA_ASSIGNMENT; -1 partitions
  means ``num.partitions``; a count that is not positive, or that would pass ``max.broker.partitions`` with
  the topics already there, is INVALID_PARTITIONS, answered before anything is written; a name that
  collides with a topic's ('.' and '_' alike) is INVALID_TOPIC_EXCEPTION with Kafka's message naming it;
  configs are validated by our config (a bad value is INVALID_CONFIG with our message naming the key and
  the allowed values); ``validate_only`` makes every one of these checks and creates nothing;
* DeleteTopics of an internal topic (``__consumer_offsets``) is INVALID_TOPIC_EXCEPTION: it is never deleted;
* a topic's configs are described with source DYNAMIC_TOPIC_CONFIG where the value differs from the data
  directory's default, else DEFAULT_CONFIG; the broker resource (type 4, named by the node id) describes
  the data-directory config (``server.properties``) as STATIC_BROKER_CONFIG, read-only over the wire;
* AlterConfigs replaces a topic's overrides by the request's set (a key left out goes back to its
  default); IncrementalAlterConfigs SETs, DELETEs (resets), APPENDs to and SUBTRACTs from a list config.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..config import alter, describe_configs, topic_config
from ..errors import CompactLogError, ConfigError, InvalidRequestError
from ..store import Store
from .context import BrokerContext
from .error_codes import (
    INVALID_REPLICA_ASSIGNMENT,
    INVALID_REPLICATION_FACTOR,
    NONE,
    error_code,
)

__all__ = ["handle_alter_configs", "handle_create_topics", "handle_delete_topics", "handle_describe_configs",
           "handle_incremental_alter_configs"]

TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4
DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 1, 4, 5
# Kafka's DescribeConfigs config types, by our ConfigDef kinds.
CONFIG_TYPES = {"boolean": 1, "string": 2, "int": 3, "long": 5, "double": 6, "list": 7}
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def _text(value: object) -> str:
    """A config value as Kafka writes it: lists comma-joined, booleans lower case."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple | list):
        return ",".join(value)
    return str(value)


# -- CreateTopics and DeleteTopics --------------------------------------------------------------------------

async def handle_create_topics(context: BrokerContext, request: Any, version: int, listener: str) -> dict[str, Any]:
    asked = [(t.name, t.num_partitions, t.replication_factor, [list(a.broker_ids) for a in t.assignments],
              {c.name: c.value for c in t.configs}) for t in request.topics]
    results = await context.run(_create_topics, context.store, asked, request.validate_only,
                                context.config.num_partitions, context.node_id)
    return {"throttle_time_ms": 0, "topics": results}


def _create_topics(store: Store, asked: list[tuple[str, int, int, list[list[int]], dict[str, str | None]]],
                   validate_only: bool, num_partitions: int, node_id: int) -> list[dict[str, Any]]:
    return [_create_topic(store, *topic, validate_only, num_partitions, node_id) for topic in asked]


def _create_topic(store: Store, name: str, partitions: int, replication_factor: int, assignments: list[list[int]],
                  configs: dict[str, str | None], validate_only: bool, num_partitions: int,
                  node_id: int) -> dict[str, Any]:
    def failed(code: int, message: str) -> dict[str, Any]:
        return {"name": name, "error_code": code, "error_message": message, "num_partitions": -1,
                "replication_factor": -1, "configs": None}

    if replication_factor not in (-1, 1) and not assignments:
        return failed(INVALID_REPLICATION_FACTOR, f"replication factor {replication_factor} is not allowed: this "
                      "server is the only replica; allowed: 1 or -1")
    if assignments:
        if partitions != -1 or replication_factor != -1:
            return failed(INVALID_REPLICA_ASSIGNMENT, "assignments exclude num_partitions and replication_factor")
        if any(brokers != [node_id] for brokers in assignments):
            return failed(INVALID_REPLICA_ASSIGNMENT, f"every partition's only replica must be node {node_id}")
        partitions = len(assignments)
    if partitions == -1:
        partitions = num_partitions
    overrides = {key: value for key, value in configs.items() if value is not None}
    try:  # the count (and max.broker.partitions) is checked before anything is written
        store.create_topic(name, partitions, overrides, validate_only=validate_only)
        parsed = topic_config(overrides, store.broker) if validate_only else store.topic_config(name)
    except CompactLogError as e:
        return failed(error_code(e), str(e))
    return {"name": name, "error_code": NONE, "error_message": None, "num_partitions": partitions,
            "replication_factor": 1, "configs": [
                {"name": key, "value": _text(value), "read_only": False, "is_sensitive": False,
                 "config_source": DYNAMIC_TOPIC_CONFIG if key in overrides else DEFAULT_CONFIG}
                for key, value in parsed.to_properties().items()]}


async def handle_delete_topics(context: BrokerContext, request: Any, version: int, listener: str) -> dict[str, Any]:
    return {"throttle_time_ms": 0, "responses": await context.run(_delete_topics, context.store,
                                                                  list(request.topic_names))}


def _delete_topics(store: Store, names: list[str]) -> list[dict[str, Any]]:
    results = []
    for name in names:
        try:
            store.delete_topic(name)
            results.append({"name": name, "error_code": NONE, "error_message": None})
        except CompactLogError as e:
            results.append({"name": name, "error_code": error_code(e), "error_message": str(e)})
    return results


# -- DescribeConfigs --------------------------------------------------------------------------------------

async def handle_describe_configs(context: BrokerContext, request: Any, version: int,
                                  listener: str) -> dict[str, Any]:
    asked = [(r.resource_type, r.resource_name, r.configuration_keys) for r in request.resources]
    results = await context.run(_describe_all, context.store, asked, str(context.node_id),
                                request.include_documentation)
    return {"throttle_time_ms": 0, "results": results}


def _describe_all(store: Store, asked: list[tuple[int, str, list[str] | None]], node: str,
                  documentation: bool) -> list[dict[str, Any]]:
    return [_describe(store, kind, name, keys, node, documentation) for kind, name, keys in asked]


def _describe(store: Store, kind: int, name: str, keys: list[str] | None, node: str,
              documentation: bool) -> dict[str, Any]:
    result: dict[str, Any] = {"resource_type": kind, "resource_name": name, "error_message": None, "configs": []}
    try:
        if kind == TOPIC_RESOURCE:
            values = store.topic_config(name).to_properties()
            defaults = store.broker.topic_defaults().to_properties()
            scope, read_only = "topic", False
            sources = {key: DEFAULT_CONFIG if defaults.get(key) == value else DYNAMIC_TOPIC_CONFIG
                       for key, value in values.items()}
        elif kind == BROKER_RESOURCE and name in (node, ""):
            values, scope, read_only = store.broker.to_properties(), "broker", True
            sources = dict.fromkeys(values, STATIC_BROKER_CONFIG)
        else:
            raise InvalidRequestError(f"resource type {kind} named {name!r} has no configs here; allowed: topics "
                                      f"(type {TOPIC_RESOURCE}) and broker {node} (type {BROKER_RESOURCE})")
    except CompactLogError as e:
        return {**result, "error_code": error_code(e), "error_message": str(e)}
    docs = {key: (kind_, doc) for key, kind_, _, doc in describe_configs(scope)}  # type: ignore[arg-type]
    result["configs"] = [
        {"name": key, "value": _text(value), "read_only": read_only, "config_source": sources[key],
         "is_sensitive": False, "synonyms": [], "config_type": CONFIG_TYPES.get(docs[key][0], 0),
         "documentation": docs[key][1] if documentation else None}
        for key, value in values.items() if keys is None or key in keys]
    return {**result, "error_code": NONE}


# -- AlterConfigs and IncrementalAlterConfigs -------------------------------------------------------------

async def handle_alter_configs(context: BrokerContext, request: Any, version: int, listener: str) -> dict[str, Any]:
    asked = [(r.resource_type, r.resource_name, {c.name: (SET, c.value) for c in r.configs}, True)
             for r in request.resources]
    return {"throttle_time_ms": 0,
            "responses": await context.run(_alter_all, context.store, asked, request.validate_only)}


async def handle_incremental_alter_configs(context: BrokerContext, request: Any, version: int,
                                           listener: str) -> dict[str, Any]:
    asked = [(r.resource_type, r.resource_name, {c.name: (c.config_operation, c.value) for c in r.configs}, False)
             for r in request.resources]
    return {"throttle_time_ms": 0,
            "responses": await context.run(_alter_all, context.store, asked, request.validate_only)}


def _alter_all(store: Store, asked: list[tuple[int, str, dict[str, tuple[int, str | None]], bool]],
               validate_only: bool) -> list[dict[str, Any]]:
    results = []
    for kind, name, operations, replace in asked:
        result = {"resource_type": kind, "resource_name": name, "error_code": NONE, "error_message": None}
        try:
            if kind != TOPIC_RESOURCE:
                raise InvalidRequestError(f"resource type {kind} cannot be altered over the wire; allowed: topics "
                                          f"(type {TOPIC_RESOURCE}); the broker's configs are in server.properties")
            changes = _changes(store, name, operations, replace)
            if validate_only:
                alter(store.topic_config(name), changes, store.broker)
            else:
                store.alter_topic_config(name, changes)
        except CompactLogError as e:
            result.update(error_code=error_code(e), error_message=str(e))
        results.append(result)
    return results


def _changes(store: Store, topic: str, operations: Mapping[str, tuple[int, str | None]],
             replace: bool) -> dict[str, Any]:
    """The store's config changes (None: back to the default) for a request's operations."""
    current = store.topic_config(topic)
    changes: dict[str, Any] = {}
    if replace:  # AlterConfigs: every override not named goes back to its default
        defaults = store.broker.topic_defaults().to_properties()
        changes = {key: None for key, value in current.to_properties().items() if defaults.get(key) != value}
    for key, (operation, value) in operations.items():
        if operation == SET:
            changes[key] = value
        elif operation == DELETE:
            changes[key] = None
        elif operation in (APPEND, SUBTRACT):
            existing = current.get(key)
            if not isinstance(existing, tuple):
                raise ConfigError(f"{key}: APPEND and SUBTRACT apply to list configs only")
            items = [item.strip() for item in (value or "").split(",") if item.strip()]
            merged = [*existing, *(i for i in items if i not in existing)] if operation == APPEND else \
                [i for i in existing if i not in items]
            changes[key] = ",".join(merged)
        else:
            raise InvalidRequestError(f"{key}: config operation {operation}; allowed: 0 SET, 1 DELETE, 2 APPEND, "
                                      "3 SUBTRACT")
    return changes
