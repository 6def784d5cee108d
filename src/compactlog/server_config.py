"""The Kafka-protocol server's configs: listeners, advertised listeners, request and fetch sizes, connection
limits (Kafka's ``SocketServerConfigs``), node id, groups.

They are read, like the data-directory config (:mod:`compactlog.config`), from ``<data-dir>/server.properties``
under Kafka's names, and may be overridden on the command line. Each is declared once here as a
:class:`~compactlog.config_def.ConfigDef`; :func:`compactlog.config.load_broker_config` leaves these keys
(``SERVER_CONFIG_NAMES``) to this module.

Listener syntax (Kafka's ``listeners``): a comma-separated list of ``NAME://host:port``, each NAME once,
host an address or name (empty: every interface; the default is loopback) and port 0 a free port. Every
listener speaks PLAINTEXT (there is no ``listener.security.protocol.map``: no TLS or SASL yet).
``advertised.listeners`` has the same syntax and is what Metadata tells clients to connect to: the
advertised listener of the same NAME as the listener a request arrived on; unset, the bound listeners.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from .config_def import ConfigDef
from .errors import ConfigError
from .limits import INT_MAX
from .properties import read_server_properties

__all__ = ["SERVER_CONFIGS", "SERVER_CONFIG_NAMES", "Listener", "ServerConfig", "load_server_config",
           "parse_connection_overrides", "parse_listeners"]

DEFAULT_LISTENERS = "PLAINTEXT://127.0.0.1:9092"

SERVER_CONFIGS: tuple[ConfigDef, ...] = (
    ConfigDef("listeners", "string", DEFAULT_LISTENERS, "Addresses the server listens on, as "
              "NAME://host:port[,...] (port 0: any free port); loopback by default."),
    ConfigDef("advertised.listeners", "string", None, "Addresses clients are told to connect to "
              "(Metadata); unset means the listeners as bound.", nullable=True),
    ConfigDef("auto.create.topics.enable", "boolean", False, "Create a topic that a Metadata request names "
              "and that does not exist (Kafka's default is true; ours is false)."),
    ConfigDef("socket.request.max.bytes", "int", 104_857_600, "The largest request frame accepted; a larger "
              "one closes its connection.", low=1, high=INT_MAX),
    ConfigDef("fetch.max.bytes", "int", 57_671_680, "The maximum number of bytes we will return for a fetch "
              "request (the smaller of this and the request's max_bytes; the first batch of the first partition "
              "with records is returned even if larger, so that a consumer makes progress). Must be at least "
              "1024.", low=1024, high=INT_MAX),
    ConfigDef("connections.max.idle.ms", "long", 600_000, "Idle connections timeout: the server closes the "
              "connections that idle (no byte read or written) more than this, a request in flight or not; "
              "negative: never."),
    ConfigDef("max.connections", "int", INT_MAX, "The maximum number of connections we allow in the broker at "
              "any time, on all listeners together; at the limit, new connections wait (unaccepted, in the "
              "listen backlog) until one closes.", low=0, high=INT_MAX),
    ConfigDef("max.connections.per.ip", "int", INT_MAX, "The maximum number of connections we allow from each "
              "ip address. This can be set to 0 if there are overrides configured using "
              "max.connections.per.ip.overrides property. New connections from the ip address are dropped if "
              "the limit is reached.", low=0, high=INT_MAX),
    ConfigDef("max.connections.per.ip.overrides", "string", None, "A comma-separated list of per-ip or hostname "
              "overrides to the default maximum number of connections. An example value is "
              "\"hostName:100,127.0.0.1:200\"; unset or empty: none.", nullable=True),
    ConfigDef("node.id", "int", 0, "This server's id in Metadata (the leader of every partition).", low=0),
    ConfigDef("broker.id", "int", None, "Kafka's older name of node.id; node.id wins when both are set.",
              low=0, nullable=True),
    ConfigDef("num.partitions", "int", 1, "Partitions of a topic created automatically or with -1 "
              "partitions.", low=1),
    ConfigDef("group.min.session.timeout.ms", "int", 6000, "The shortest session.timeout.ms a group member may "
              "ask for (JoinGroup answers INVALID_SESSION_TIMEOUT below it).", low=0),
    ConfigDef("group.max.session.timeout.ms", "int", 1_800_000, "The longest session.timeout.ms a group member "
              "may ask for (JoinGroup answers INVALID_SESSION_TIMEOUT above it).", low=0),
    ConfigDef("group.initial.rebalance.delay.ms", "int", 3000, "How long a new group's first rebalance waits for "
              "more members to join (extended by this while they keep coming, up to the rebalance timeout).",
              low=0),
    ConfigDef("group.max.size", "int", INT_MAX, "The most members a group takes (JoinGroup answers "
              "GROUP_MAX_SIZE_REACHED past it).", low=1),
    ConfigDef("offsets.retention.check.interval.ms", "long", 600_000, "How often committed offsets are checked "
              "for expiry (offsets.retention.minutes).", low=1),
    ConfigDef("offsets.topic.num.partitions", "int", 50, "Partitions of __consumer_offsets when it is created "
              "(a group's offsets live in partition abs(hash(group id)) % this).", low=1),
    ConfigDef("offsets.topic.segment.bytes", "int", 104_857_600, "segment.bytes of __consumer_offsets when it is "
              "created, kept small for faster compaction and loading.", low=1, high=INT_MAX),
    ConfigDef("offsets.retention.minutes", "int", 10_080, "Committed offsets of a group without members expire "
              "this long after their commit or the group becoming empty, whichever is later (tombstones).", low=1),
    # Kafka declares no lower bound; a negative limit would refuse even empty metadata.
    ConfigDef("offset.metadata.max.bytes", "int", 4096, "The longest metadata string an offset commit may carry, "
              "counted in characters as Java's String.length(); a longer one's partition is not committed and "
              "answers OFFSET_METADATA_TOO_LARGE.", low=0),
    ConfigDef("transaction.abort.timed.out.transaction.cleanup.interval.ms", "int", 10_000, "How often the "
              "broker aborts the transactions open longer than their transaction.timeout.ms.", low=1),
)
# The keys of server.properties that are the server's; the data-directory config skips exactly these.
SERVER_CONFIG_NAMES = frozenset(d.name for d in SERVER_CONFIGS)
_BY_NAME = {d.name: d for d in SERVER_CONFIGS}
_HOST_RE = re.compile(r"[0-9a-zA-Z\-%._:]+")  # Kafka's Utils.validHostPattern
_LISTENER_RE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)://(\[[^\]]*\]|[^:/\[\]]*):([0-9]+)")


@dataclass(frozen=True)
class Listener:
    """One ``NAME://host:port`` entry."""

    name: str
    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


def parse_listeners(text: str, key: str = "listeners") -> tuple[Listener, ...]:
    """Kafka's listener list as :class:`Listener` values; a malformed entry, a port out of range or a
    listener name used twice is a ConfigError naming ``key``."""
    listeners: list[Listener] = []
    for raw in (part.strip() for part in text.split(",")):
        match = _LISTENER_RE.fullmatch(raw)
        if match is None:
            raise ConfigError(f"{key}: {raw!r} is not NAME://host:port; allowed: e.g. {DEFAULT_LISTENERS}")
        name, host, port = match.group(1).upper(), match.group(2).strip("[]"), int(match.group(3))
        if port > 65535:
            raise ConfigError(f"{key}: port {port} is out of range; allowed: 0..65535")
        if any(existing.name == name for existing in listeners):
            raise ConfigError(f"{key}: listener name {name} is used twice; allowed: each name once")
        listeners.append(Listener(name, host, port))
    return tuple(listeners)


def parse_connection_overrides(text: str, key: str = "max.connections.per.ip.overrides",
                               ) -> tuple[tuple[str, int], ...]:
    """Kafka's ``host:count`` list (comma-separated; the last colon splits, so an IPv6 address may be the
    host) as ``(host, count)`` pairs; a host of other characters than Kafka's (letters, digits, ``-%._:``) or
    a count that is not an integer in 0..2^31-1 is a ConfigError naming ``key``."""
    overrides: list[tuple[str, int]] = []
    for raw in (part.strip() for part in text.split(",") if text.strip()):
        host, colon, count = raw.rpartition(":")
        host, count = host.strip(), count.strip()
        if not colon or not host or not _HOST_RE.fullmatch(host):
            raise ConfigError(f"{key}: {raw!r} is not host:count; allowed: e.g. hostName:100,127.0.0.1:200")
        if not re.fullmatch(r"[0-9]+", count) or int(count) > INT_MAX:
            raise ConfigError(f"{key}: the count of {host} ({count!r}) is not allowed; allowed: an integer in "
                              f"[0, {INT_MAX}]")
        overrides.append((host, int(count)))
    return tuple(overrides)


@dataclass(frozen=True)
class ServerConfig:
    """The server configs, parsed; ``listeners`` and ``advertised_listeners`` as :class:`Listener` values."""

    listeners: tuple[Listener, ...]
    advertised_listeners: tuple[Listener, ...] | None
    auto_create_topics_enable: bool
    socket_request_max_bytes: int
    fetch_max_bytes: int
    connections_max_idle_ms: int
    max_connections: int
    max_connections_per_ip: int
    max_connections_per_ip_overrides: tuple[tuple[str, int], ...]  # (host name or address, limit)
    node_id: int
    num_partitions: int
    group_min_session_timeout_ms: int
    group_max_session_timeout_ms: int
    group_initial_rebalance_delay_ms: int
    group_max_size: int
    offsets_retention_check_interval_ms: int
    offsets_topic_num_partitions: int
    offsets_topic_segment_bytes: int
    offsets_retention_minutes: int
    offset_metadata_max_bytes: int
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int


def server_config(values: Mapping[str, object]) -> ServerConfig:
    """A :class:`ServerConfig` from Kafka-named values (strings or native); missing keys take defaults,
    unknown keys are left to the data-directory config."""
    values = dict(values)
    overrides_text = values.get("max.connections.per.ip.overrides")
    if isinstance(overrides_text, str) and not overrides_text.strip():  # Kafka's default: the empty string
        values["max.connections.per.ip.overrides"] = None
    parsed = {d.name: d.parse(values[d.name]) if d.name in values else d.default for d in SERVER_CONFIGS}
    advertised = parsed["advertised.listeners"]
    node_id = parsed["node.id"] if "node.id" in values or parsed["broker.id"] is None else parsed["broker.id"]
    overrides = parse_connection_overrides(parsed["max.connections.per.ip.overrides"] or "")
    if parsed["max.connections.per.ip"] == 0 and not overrides:
        raise ConfigError("max.connections.per.ip: 0 is allowed only if max.connections.per.ip.overrides is set")
    return ServerConfig(
        listeners=parse_listeners(parsed["listeners"]),
        advertised_listeners=None if advertised is None else parse_listeners(advertised, "advertised.listeners"),
        auto_create_topics_enable=parsed["auto.create.topics.enable"],
        socket_request_max_bytes=parsed["socket.request.max.bytes"],
        fetch_max_bytes=parsed["fetch.max.bytes"],
        connections_max_idle_ms=parsed["connections.max.idle.ms"],
        max_connections=parsed["max.connections"],
        max_connections_per_ip=parsed["max.connections.per.ip"],
        max_connections_per_ip_overrides=overrides,
        node_id=node_id,
        num_partitions=parsed["num.partitions"],
        group_min_session_timeout_ms=parsed["group.min.session.timeout.ms"],
        group_max_session_timeout_ms=parsed["group.max.session.timeout.ms"],
        group_initial_rebalance_delay_ms=parsed["group.initial.rebalance.delay.ms"],
        group_max_size=parsed["group.max.size"],
        offsets_retention_check_interval_ms=parsed["offsets.retention.check.interval.ms"],
        offsets_topic_num_partitions=parsed["offsets.topic.num.partitions"],
        offsets_topic_segment_bytes=parsed["offsets.topic.segment.bytes"],
        offsets_retention_minutes=parsed["offsets.retention.minutes"],
        offset_metadata_max_bytes=parsed["offset.metadata.max.bytes"],
        transaction_abort_timed_out_transaction_cleanup_interval_ms=parsed[
            "transaction.abort.timed.out.transaction.cleanup.interval.ms"],
    )


def load_server_config(data_dir: str | os.PathLike[str], overrides: Mapping[str, object] | None = None,
                       ) -> ServerConfig:
    """The server configs of ``<data_dir>/server.properties`` (if present) with ``overrides`` (the command
    line's) applied on top."""
    props: dict[str, object] = {**read_server_properties(data_dir), **(overrides or {})}
    return server_config({k: v for k, v in props.items() if k in _BY_NAME})
