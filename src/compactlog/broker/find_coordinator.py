"""FindCoordinator: where a consumer group's or a transactional id's coordinator is.

Rules (Kafka's ``KafkaApis.handleFindCoordinatorRequest`` on one broker): this broker coordinates every
group and every transactional id, so the answer is always this node at the advertised address of the
listener the request came in on. A key type other than group (0) or transaction (1) is INVALID_REQUEST
(share groups, type 2, are not spoken here); so is an empty transactional id, which names no coordinator.
Versions 0-3 ask for one key; version 4 batches keys and answers each in ``coordinators``.
"""

from __future__ import annotations

from typing import Any

from .context import BrokerContext
from .error_codes import INVALID_REQUEST, NONE

__all__ = ["GROUP", "TRANSACTION", "handle_find_coordinator"]

GROUP = 0
TRANSACTION = 1


def coordinator_error(key: str, key_type: int) -> tuple[int, str | None]:
    """The error code and message for a coordinator key of a type, NONE when this broker coordinates it."""
    if key_type not in (GROUP, TRANSACTION):
        return INVALID_REQUEST, f"coordinator key type {key_type} is not supported (0: group, 1: transaction)"
    if key_type == TRANSACTION and not key:
        return INVALID_REQUEST, "an empty transactional id has no coordinator"
    return NONE, None


async def handle_find_coordinator(context: BrokerContext, request: Any, version: int,
                                  listener: str) -> dict[str, Any]:
    address = context.advertised[listener]
    key_type = request.key_type if version >= 1 else GROUP
    keys = request.coordinator_keys if version >= 4 else [request.key]
    answers = []
    for key in keys:
        code, message = coordinator_error(key, key_type)
        found = code == NONE
        answers.append({"key": key, "node_id": context.node_id if found else -1, "host": address.host if found else "",
                        "port": address.port if found else -1, "error_code": code, "error_message": message})
    if version >= 4:
        return {"throttle_time_ms": 0, "coordinators": answers}
    return {"throttle_time_ms": 0, **{k: v for k, v in answers[0].items() if k != "key"}}
