"""Connection limits as pure rules: idle expiry (Kafka's IdleExpiryManager), connection quotas (Kafka's
ConnectionQuotas) and their configs (names, defaults and ranges as Kafka's SocketServerConfigs)."""

from __future__ import annotations

import pytest

from compactlog.errors import ConfigError
from compactlog.limits import INT_MAX
from compactlog.network.connection_quotas import ConnectionQuotas
from compactlog.network.idle_expiry import IdleExpiry
from compactlog.network.socket_server import ConnectionLimits
from compactlog.server_config import server_config


def test_a_connection_expires_once_inactive_for_longer_than_the_limit_oldest_first() -> None:
    idle = IdleExpiry(max_idle_ms=100)
    assert idle.next_expiry_ms() is None and idle.expired(10_000) == []
    idle.update("a", 0)
    idle.update("b", 50)
    idle.update("c", 60)
    idle.update("a", 70)  # active again: now the newest
    assert idle.next_expiry_ms() == 151  # b's: the oldest activity, 50, plus 100, plus 1
    assert idle.expired(150) == []  # b has been inactive for exactly the limit: not more
    assert idle.expired(161) == ["b", "c"]
    assert idle.expired(161) == [] and len(idle) == 1  # forgotten once returned
    idle.remove("a")
    assert idle.expired(10_000) == []


def test_a_per_ip_limit_refuses_the_connection_past_it_and_counts_nothing_for_it() -> None:
    quotas = ConnectionQuotas(max_connections=10, max_connections_per_ip=2,
                              max_connections_per_ip_overrides={"10.0.0.9": 0, "10.0.0.8": 3})
    assert quotas.admit("10.0.0.1") is None and quotas.admit("10.0.0.1") is None
    assert quotas.admit("10.0.0.1") == 2  # refused, naming the limit
    assert (quotas.count("10.0.0.1"), quotas.total) == (2, 2)
    assert quotas.admit("10.0.0.9") == 0  # an override of 0: every connection refused
    assert [quotas.admit("10.0.0.8") for _ in range(4)] == [None, None, None, 3]
    quotas.release("10.0.0.1")
    assert quotas.admit("10.0.0.1") is None  # a slot freed by a close
    with pytest.raises(ValueError):
        quotas.release("10.0.0.2")


def test_the_broker_wide_limit_counts_every_address() -> None:
    quotas = ConnectionQuotas(max_connections=2, max_connections_per_ip=INT_MAX)
    assert quotas.admit("10.0.0.1") is None and quotas.slot_available()
    assert quotas.admit("10.0.0.2") is None and not quotas.slot_available()
    quotas.release("10.0.0.1")
    assert quotas.slot_available()


def test_connection_configs_have_kafkas_names_defaults_and_ranges() -> None:
    config = server_config({})
    assert (config.fetch_max_bytes, config.connections_max_idle_ms, config.max_connections,
            config.max_connections_per_ip, config.max_connections_per_ip_overrides) == (
        57_671_680, 600_000, INT_MAX, INT_MAX, ())
    config = server_config({"max.connections.per.ip": "0", "connections.max.idle.ms": "-1",
                            "max.connections.per.ip.overrides": " hostName:100 , 127.0.0.1:200,::1:3"})
    assert config.max_connections_per_ip_overrides == (("hostName", 100), ("127.0.0.1", 200), ("::1", 3))
    assert config.connections_max_idle_ms == -1  # negative: no idle expiry, as Kafka
    assert server_config({"max.connections.per.ip.overrides": ""}).max_connections_per_ip_overrides == ()
    for values, problem in [
        ({"fetch.max.bytes": "1023"}, r"fetch\.max\.bytes: 1023 is out of range; allowed: an integer in \[1024, "),
        ({"max.connections": "-1"}, r"max\.connections: -1 is out of range"),
        ({"max.connections.per.ip": "0"}, r"max\.connections\.per\.ip: 0 is allowed only if max\.connections\.per\."
                                          r"ip\.overrides is set"),
        ({"max.connections.per.ip.overrides": "host 1:5"}, r"'host 1:5' is not host:count"),
        ({"max.connections.per.ip.overrides": "127.0.0.1"}, r"'127\.0\.0\.1' is not host:count"),
        ({"max.connections.per.ip.overrides": "h:-1"}, r"the count of h \('-1'\) is not allowed"),
    ]:
        with pytest.raises(ConfigError, match=problem):
            server_config(values)


def test_an_override_names_a_host_resolved_to_its_addresses_at_start() -> None:
    quotas = ConnectionLimits(max_connections_per_ip=5, max_connections_per_ip_overrides=(("localhost", 1),)).quotas()
    assert quotas.limit("127.0.0.1") == 1 and quotas.limit("10.0.0.1") == 5
    with pytest.raises(ConfigError, match=r"max\.connections\.per\.ip\.overrides: host 'no-such-host\.invalid'"):
        ConnectionLimits(max_connections_per_ip_overrides=(("no-such-host.invalid", 1),)).quotas()
