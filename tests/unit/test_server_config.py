"""The Kafka-protocol server's configs: listener syntax, defaults, server.properties shared with the data
directory's config."""

from __future__ import annotations

import pytest

import compactlog
from compactlog.errors import ConfigError
from compactlog.server_config import Listener, load_server_config, parse_listeners, server_config


def test_listeners_in_kafkas_syntax() -> None:
    assert parse_listeners("PLAINTEXT://127.0.0.1:9092, INTERNAL://[::1]:0,OPEN://:19092") == (
        Listener("PLAINTEXT", "127.0.0.1", 9092), Listener("INTERNAL", "::1", 0), Listener("OPEN", "", 19092))
    assert str(Listener("INTERNAL", "::1", 9)) == "INTERNAL://[::1]:9"


@pytest.mark.parametrize(("text", "problem"), [
    ("127.0.0.1:9092", "is not NAME://host:port"),
    ("PLAINTEXT://127.0.0.1", "is not NAME://host:port"),
    ("PLAINTEXT://127.0.0.1:70000", "port 70000 is out of range"),
    ("PLAINTEXT://127.0.0.1:1,PLAINTEXT://127.0.0.1:2", "PLAINTEXT is used twice"),
])
def test_a_bad_listener_is_refused_naming_the_key(text: str, problem: str) -> None:
    with pytest.raises(ConfigError, match=f"^listeners: .*{problem}"):
        parse_listeners(text)


def test_defaults_are_loopback_no_auto_creation_and_kafkas_request_limit() -> None:
    config = server_config({})
    assert config.listeners == (Listener("PLAINTEXT", "127.0.0.1", 9092),)
    assert config.advertised_listeners is None and config.auto_create_topics_enable is False
    assert (config.socket_request_max_bytes, config.node_id) == (104_857_600, 0)


def test_node_id_wins_over_broker_id() -> None:
    assert server_config({"broker.id": "3"}).node_id == 3
    assert server_config({"broker.id": "3", "node.id": "5"}).node_id == 5


def test_server_properties_hold_both_configs_and_the_command_line_wins(tmp_path) -> None:
    data_dir = tmp_path / "data"
    compactlog.open(data_dir).close()
    (data_dir / "server.properties").write_text(
        "listeners=PLAINTEXT://127.0.0.1:19092\nauto.create.topics.enable=true\nlog.cleaner.threads=2\n")
    config = load_server_config(data_dir, {"advertised.listeners": "PLAINTEXT://broker.example:9092"})
    assert config.listeners == (Listener("PLAINTEXT", "127.0.0.1", 19092),) and config.auto_create_topics_enable
    assert config.advertised_listeners == (Listener("PLAINTEXT", "broker.example", 9092),)
    with compactlog.open(data_dir) as store:  # the data directory's config leaves the server's keys alone
        assert store.broker.log_cleaner_threads == 2
    with pytest.raises(ConfigError, match=r"socket\.request\.max\.bytes: 0 is out of range"):
        load_server_config(data_dir, {"socket.request.max.bytes": "0"})
