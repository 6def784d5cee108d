"""FindCoordinator on the wire at every version we answer: this broker, at the advertised address, for
groups and transactional ids; INVALID_REQUEST for a key type we do not coordinate or an empty
transactional id."""

from __future__ import annotations

import pytest
from kafka.protocol.metadata import FindCoordinatorRequest, FindCoordinatorResponse
from test_wire import Connection

from compactlog.broker.error_codes import INVALID_REQUEST, NONE

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_one_key_is_answered_with_this_broker(broker: str, version: int) -> None:
    conn = Connection(broker)
    try:
        fields = {"key": "orders-app"} | ({"key_type": 1} if version >= 1 else {})
        answer = conn.call(FindCoordinatorRequest(version=version, **fields), FindCoordinatorResponse)
        assert (answer.error_code, answer.node_id, f"{answer.host}:{answer.port}") == (NONE, 0, broker)
        if version >= 1:
            bad = conn.call(FindCoordinatorRequest(version=version, key="g", key_type=2), FindCoordinatorResponse)
            assert (bad.error_code, bad.node_id, bad.port) == (INVALID_REQUEST, -1, -1)
            assert "key type 2" in bad.error_message
    finally:
        conn.close()


def test_batched_keys_are_answered_each(broker: str) -> None:
    conn = Connection(broker)
    try:
        groups = conn.call(FindCoordinatorRequest(version=4, key_type=0, coordinator_keys=["a", "b", ""]),
                           FindCoordinatorResponse)
        assert [(c.key, c.error_code, c.node_id, f"{c.host}:{c.port}") for c in groups.coordinators] == [
            (key, NONE, 0, broker) for key in ("a", "b", "")]
        txns = conn.call(FindCoordinatorRequest(version=4, key_type=1, coordinator_keys=["tx", ""]),
                         FindCoordinatorResponse)
        assert [(c.key, c.error_code) for c in txns.coordinators] == [("tx", NONE), ("", INVALID_REQUEST)]
    finally:
        conn.close()
