"""compactlog.config: Kafka's defaults, validation, string parsing, broker synonyms, round trips."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from compactlog.config import (
    BROKER_CONFIGS,
    PRODUCER_CONFIGS,
    TOPIC_CONFIGS,
    BrokerConfig,
    ProducerConfig,
    TopicConfig,
    alter,
    describe_configs,
    load_broker_config,
    producer_config,
    topic_config,
)
from compactlog.errors import ConfigError
from compactlog.properties import parse_properties, read_server_properties
from compactlog.server_config import SERVER_CONFIGS, load_server_config

INT_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1

# Kafka's LogConfig defaults, written out independently of the module's table.
KAFKA_TOPIC_DEFAULTS: dict[str, Any] = {
    "cleanup.policy": "delete",
    "segment.bytes": 1073741824,
    "segment.ms": 604800000,
    "min.cleanable.dirty.ratio": 0.5,
    "min.compaction.lag.ms": 0,
    "max.compaction.lag.ms": LONG_MAX,
    "delete.retention.ms": 86400000,
    "retention.ms": 604800000,
    "retention.bytes": -1,
    "max.message.bytes": 1048588,
    "file.delete.delay.ms": 60000,
    "message.timestamp.type": "CreateTime",
    "compression.type": "producer",
}


def write_server_properties(directory: Path, text: str) -> Path:
    path = directory / "server.properties"
    path.write_text(text, encoding="utf-8")
    return path


# --- defaults -----------------------------------------------------------------------------------------------


def test_topic_defaults_equal_kafkas() -> None:
    assert TopicConfig().to_properties() == KAFKA_TOPIC_DEFAULTS
    assert topic_config({}) == TopicConfig()
    assert BrokerConfig().topic_defaults() == TopicConfig()
    config = TopicConfig()
    assert config.cleanup_policy == ("delete",)
    assert config.delete and not config.compact
    assert config.parquet_compression == "snappy"
    assert config.roll_ms == 604800000


def test_broker_defaults_equal_kafkas() -> None:
    broker = BrokerConfig()
    assert broker.log_cleaner_enable is True
    assert broker.log_cleaner_threads == 1
    assert broker.log_cleaner_dedupe_buffer_size == 134217728
    assert broker.log_cleaner_io_buffer_load_factor == 0.9
    assert broker.log_cleaner_io_buffer_size == 524288
    assert broker.log_cleaner_backoff_ms == 15000
    assert broker.producer_id_expiration_ms == 86400000
    assert broker.transaction_max_timeout_ms == 900000
    assert broker.log_roll_ms is None and broker.log_roll_hours == 168
    assert broker.log_retention_ms is None and broker.log_retention_minutes is None
    assert broker.log_retention_hours == 168
    assert broker.message_max_bytes == 1048588
    assert broker.log_cleanup_policy == ("delete",)


def test_producer_defaults_equal_kafkas() -> None:
    assert producer_config() == ProducerConfig()
    assert ProducerConfig().to_properties() == {
        "batch.size": 16384,
        "linger.ms": 5,
        "transaction.timeout.ms": 60000,
        "enable.idempotence": True,
    }
    assert ProducerConfig().transactional_id is None


def test_dataclass_fields_follow_the_tables() -> None:
    for cls, defs in ((TopicConfig, TOPIC_CONFIGS), (BrokerConfig, BROKER_CONFIGS),
                      (ProducerConfig, PRODUCER_CONFIGS)):
        fields = dataclasses.fields(cls)
        assert [f.name for f in fields] == [d.name.replace(".", "_") for d in defs]
        assert [f.default for f in fields] == [d.default for d in defs]


def test_describe_configs() -> None:
    rows = describe_configs()
    assert [row[0] for row in rows] == list(KAFKA_TOPIC_DEFAULTS)
    by_name = {name: (kind, default, doc) for name, kind, default, doc in rows}
    assert by_name["cleanup.policy"][:2] == ("list", "delete")
    assert by_name["max.compaction.lag.ms"][:2] == ("long", str(LONG_MAX))
    assert by_name["min.cleanable.dirty.ratio"][:2] == ("double", "0.5")
    assert all(doc for _, _, doc in by_name.values())
    broker = {name: (kind, default) for name, kind, default, _ in describe_configs("broker")}
    assert broker["log.cleaner.enable"] == ("boolean", "true")
    assert broker["log.cleaner.threads"] == ("int", "1")
    assert broker["log.roll.ms"] == ("long", "null")
    assert broker["log.retention.hours"] == ("int", "168")
    producer = {name: (kind, default) for name, kind, default, _ in describe_configs("producer")}
    assert producer["transactional.id"] == ("string", "null")


# --- validation ---------------------------------------------------------------------------------------------

BAD_TOPIC_VALUES = [
    ("segment.bytes", 13),
    ("segment.bytes", INT_MAX + 1),
    ("segment.bytes", True),
    ("segment.bytes", 1024.0),
    ("segment.bytes", "1.5"),
    ("segment.bytes", "1e3"),
    ("segment.bytes", "abc"),
    ("segment.ms", 0),
    ("segment.ms", "1_000"),
    ("segment.ms", LONG_MAX + 1),
    ("min.cleanable.dirty.ratio", 1.5),
    ("min.cleanable.dirty.ratio", -0.1),
    ("min.cleanable.dirty.ratio", "2"),
    ("min.cleanable.dirty.ratio", "half"),
    ("min.cleanable.dirty.ratio", True),
    ("min.cleanable.dirty.ratio", float("nan")),
    ("min.compaction.lag.ms", -1),
    ("max.compaction.lag.ms", 0),
    ("delete.retention.ms", -1),
    ("retention.ms", -2),
    ("retention.bytes", LONG_MAX + 1),
    ("retention.bytes", "unlimited"),
    ("max.message.bytes", -1),
    ("max.message.bytes", INT_MAX + 1),
    ("file.delete.delay.ms", -1),
    ("message.timestamp.type", "createtime"),
    ("message.timestamp.type", 1),
    ("message.timestamp.type", ""),
    ("compression.type", "brotli"),
    ("compression.type", "ZSTD"),
    ("cleanup.policy", "compacted"),
    ("cleanup.policy", "Compact"),
    ("cleanup.policy", "compact,bogus"),
    ("cleanup.policy", ""),
    ("cleanup.policy", " , "),
    ("cleanup.policy", []),
    ("cleanup.policy", ["compact", 1]),
    ("cleanup.policy", 5),
]


@pytest.mark.parametrize(("key", "value"), BAD_TOPIC_VALUES)
def test_bad_topic_values_are_rejected_naming_the_key(key: str, value: object) -> None:
    with pytest.raises(ConfigError, match=rf"^{key}: .*; allowed: ") as caught:
        topic_config({key: value})
    assert isinstance(caught.value, ValueError)
    # The same rule holds on alter, on from_properties, and on direct construction.
    with pytest.raises(ConfigError, match=key):
        alter(TopicConfig(), {key: value})
    with pytest.raises(ConfigError, match=key):
        TopicConfig.from_properties({key: value})
    direct: dict[str, Any] = {key.replace(".", "_"): value}
    with pytest.raises(ConfigError, match=key):
        TopicConfig(**direct)


BAD_BROKER_VALUES = [
    ("log.cleaner.enable", "yes"),
    ("log.cleaner.enable", 1),
    ("log.cleaner.threads", 0),
    ("log.cleaner.dedupe.buffer.size", 1023),
    ("log.cleaner.io.buffer.load.factor", 0),
    ("log.cleaner.io.buffer.load.factor", 1.01),
    ("log.cleaner.io.buffer.size", -1),
    ("log.cleaner.io.buffer.size", INT_MAX + 1),
    ("log.cleaner.backoff.ms", -1),
    ("producer.id.expiration.ms", 0),
    ("transaction.max.timeout.ms", 0),
    ("log.segment.bytes", 13),
    ("log.roll.ms", 0),
    ("log.roll.hours", 0),
    ("log.retention.ms", -2),
    ("log.retention.hours", "1.5"),
    ("log.cleaner.min.cleanable.ratio", 1.5),
    ("log.cleaner.max.compaction.lag.ms", 0),
    ("log.cleanup.policy", "bogus"),
    ("log.message.timestamp.type", "Create"),
    ("compression.type", "none"),
    ("message.max.bytes", -1),
]


@pytest.mark.parametrize(("key", "value"), BAD_BROKER_VALUES)
def test_bad_broker_values_are_rejected_naming_the_key(key: str, value: object) -> None:
    with pytest.raises(ConfigError, match=rf"^{key}: .*; allowed: "):
        BrokerConfig.from_properties({key: value})


BAD_PRODUCER_VALUES = [
    ("batch.size", -1),
    ("linger.ms", -1),
    ("linger.ms", 1.5),
    ("transaction.timeout.ms", 0),
    ("enable.idempotence", "maybe"),
    ("enable.idempotence", 0),
    ("transactional.id", ""),
    ("transactional.id", 5),
]


@pytest.mark.parametrize(("key", "value"), BAD_PRODUCER_VALUES)
def test_bad_producer_values_are_rejected_naming_the_key(key: str, value: object) -> None:
    with pytest.raises(ConfigError, match=rf"^{key}: .*; allowed: "):
        producer_config({key: value})


def test_error_messages_state_the_allowed_values() -> None:
    with pytest.raises(ConfigError) as caught:
        topic_config({"min.cleanable.dirty.ratio": 1.5})
    assert str(caught.value) == (
        "min.cleanable.dirty.ratio: 1.5 is out of range; allowed: a number in [0.0, 1.0]")
    with pytest.raises(ConfigError) as caught:
        topic_config({"segment.bytes": "13"})
    assert str(caught.value) == "segment.bytes: 13 is out of range; allowed: an integer in [14, 2147483647]"
    with pytest.raises(ConfigError) as caught:
        topic_config({"segment.bytes": True})
    assert str(caught.value) == (
        "segment.bytes: True is not an integer; allowed: an integer in [14, 2147483647]")
    with pytest.raises(ConfigError, match=r"allowed: one of CreateTime, LogAppendTime"):
        topic_config({"message.timestamp.type": "Now"})
    with pytest.raises(ConfigError, match=r"allowed: a non-empty comma-separated list of delete, compact"):
        topic_config({"cleanup.policy": []})
    with pytest.raises(ConfigError, match=r"allowed: a number in \(0.0, 1.0\]"):
        BrokerConfig.from_properties({"log.cleaner.io.buffer.load.factor": 0})


def test_unknown_keys_are_rejected_with_a_suggestion() -> None:
    with pytest.raises(ConfigError) as caught:
        topic_config({"segment.byte": 100})
    message = str(caught.value)
    assert message.startswith("unknown topic config 'segment.byte'; did you mean 'segment.bytes'?")
    assert "known: cleanup.policy, segment.bytes, segment.ms" in message
    with pytest.raises(ConfigError, match=r"unknown topic config 'no.such.thing'; known: cleanup.policy"):
        topic_config({"no.such.thing": 1})
    with pytest.raises(ConfigError, match=r"unknown topic config 'segment.byte'"):
        alter(TopicConfig(), {"segment.byte": 100})
    with pytest.raises(ConfigError, match=r"unknown topic config 'segment.byte'"):
        TopicConfig().get("segment.byte")
    with pytest.raises(ConfigError, match=r"unknown producer config 'lingerms'; did you mean 'linger.ms'"):
        producer_config({"lingerms": 1})
    # A topic config name is not a broker config name.
    with pytest.raises(ConfigError, match=r"unknown broker config 'segment.bytes'"):
        BrokerConfig.from_properties({"segment.bytes": 100})


def test_booleans_are_not_integers_and_integers_not_booleans() -> None:
    with pytest.raises(ConfigError, match=r"retention.bytes"):
        topic_config({"retention.bytes": False})
    with pytest.raises(ConfigError, match=r"enable.idempotence"):
        producer_config({"enable.idempotence": 1})


def test_transactional_id_requires_idempotence() -> None:
    with pytest.raises(ConfigError, match=r"enable.idempotence.*transactional.id"):
        producer_config({"transactional.id": "tx-1", "enable.idempotence": "false"})
    config = producer_config({"transactional.id": " tx-1 ", "linger.ms": "0", "batch.size": "1"})
    assert (config.transactional_id, config.linger_ms, config.batch_size) == ("tx-1", 0, 1)
    assert ProducerConfig.from_properties(config.to_properties()) == config


# --- parsing ------------------------------------------------------------------------------------------------


def test_strings_are_parsed_as_kafkas_cli_gives_them() -> None:
    config = topic_config({
        "cleanup.policy": "compact,delete",
        "segment.bytes": "1000",
        "segment.ms": " 60000 ",
        "min.cleanable.dirty.ratio": "0.25",
        "min.compaction.lag.ms": "+5",
        "max.compaction.lag.ms": str(LONG_MAX),
        "retention.ms": "-1",
        "retention.bytes": "-100",
        "message.timestamp.type": " LogAppendTime",
        "compression.type": "zstd",
    })
    assert config.cleanup_policy == ("compact", "delete")
    assert config.segment_bytes == 1000
    assert config.segment_ms == 60000
    assert config.min_cleanable_dirty_ratio == 0.25
    assert config.min_compaction_lag_ms == 5
    assert config.max_compaction_lag_ms == LONG_MAX
    assert (config.retention_ms, config.retention_bytes) == (-1, -100)
    assert config.message_timestamp_type == "LogAppendTime"
    assert config.parquet_compression == "zstd"
    assert isinstance(topic_config({"min.cleanable.dirty.ratio": 1}).min_cleanable_dirty_ratio, float)
    assert topic_config({"min.cleanable.dirty.ratio": ".5e0"}).min_cleanable_dirty_ratio == 0.5


def test_booleans_parse_in_any_case() -> None:
    assert BrokerConfig.from_properties({"log.cleaner.enable": "FALSE"}).log_cleaner_enable is False
    assert BrokerConfig.from_properties({"log.cleaner.enable": " True "}).log_cleaner_enable is True
    assert BrokerConfig.from_properties({"log.cleaner.enable": False}).log_cleaner_enable is False


def test_numpy_integers_are_integers() -> None:
    np = pytest.importorskip("numpy")
    assert topic_config({"segment.bytes": np.int64(100)}).segment_bytes == 100
    assert type(topic_config({"segment.bytes": np.int64(100)}).segment_bytes) is int


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("compact", ("compact",)),
        ("delete", ("delete",)),
        ("compact,delete", ("compact", "delete")),
        ("delete, compact", ("delete", "compact")),
        (" compact , compact ", ("compact",)),
        (["compact"], ("compact",)),
        (("compact", "delete"), ("compact", "delete")),
        (["delete ", " compact"], ("delete", "compact")),
    ],
)
def test_cleanup_policy_forms(value: object, expected: tuple[str, ...]) -> None:
    config = topic_config({"cleanup.policy": value})
    assert config.cleanup_policy == expected
    assert config.compact == ("compact" in expected)
    assert config.delete == ("delete" in expected)
    assert config.get("cleanup.policy") == expected
    assert config.to_properties()["cleanup.policy"] == ",".join(expected)


@pytest.mark.parametrize(
    ("codec", "parquet"),
    [("producer", "snappy"), ("uncompressed", "none"), ("zstd", "zstd"), ("lz4", "lz4"),
     ("snappy", "snappy"), ("gzip", "gzip")],
)
def test_parquet_compression(codec: str, parquet: str) -> None:
    assert topic_config({"compression.type": codec}).parquet_compression == parquet


def test_direct_construction_normalizes_and_validates() -> None:
    config = TopicConfig(cleanup_policy="compact, delete", segment_bytes="2048")  # type: ignore[arg-type]
    assert config.cleanup_policy == ("compact", "delete")
    assert config.segment_bytes == 2048
    with pytest.raises(ConfigError, match=r"segment.bytes"):
        TopicConfig(segment_bytes=1)


# --- cross-checks and derived values ------------------------------------------------------------------------


def test_min_lag_must_not_exceed_max_lag_on_create() -> None:
    with pytest.raises(ConfigError) as caught:
        topic_config({"min.compaction.lag.ms": 10, "max.compaction.lag.ms": 5})
    assert "min.compaction.lag.ms" in str(caught.value) and "max.compaction.lag.ms" in str(caught.value)
    with pytest.raises(ConfigError, match=r"min.compaction.lag.ms.*max.compaction.lag.ms"):
        TopicConfig(min_compaction_lag_ms=10, max_compaction_lag_ms=5)
    equal = topic_config({"min.compaction.lag.ms": 5, "max.compaction.lag.ms": 5})
    assert equal.min_compaction_lag_ms == equal.max_compaction_lag_ms == 5


def test_min_lag_must_not_exceed_max_lag_on_alter() -> None:
    config = topic_config({"max.compaction.lag.ms": 100})
    with pytest.raises(ConfigError, match=r"min.compaction.lag.ms.*max.compaction.lag.ms"):
        alter(config, {"min.compaction.lag.ms": 200})
    lowered = alter(topic_config({"min.compaction.lag.ms": 50}), {"max.compaction.lag.ms": 50})
    assert lowered.max_compaction_lag_ms == 50
    with pytest.raises(ConfigError, match=r"max.compaction.lag.ms"):
        alter(lowered, {"max.compaction.lag.ms": 49})
    # Raising both in one change is fine; the check sees the final values.
    both = alter(config, {"min.compaction.lag.ms": 200, "max.compaction.lag.ms": 300})
    assert (both.min_compaction_lag_ms, both.max_compaction_lag_ms) == (200, 300)


def test_broker_lag_defaults_are_cross_checked_with_broker_names() -> None:
    with pytest.raises(ConfigError, match=r"log.cleaner.min.compaction.lag.ms .*log.cleaner.max.compaction"):
        BrokerConfig.from_properties({
            "log.cleaner.min.compaction.lag.ms": 10, "log.cleaner.max.compaction.lag.ms": 5})


def test_roll_ms() -> None:
    base = {"segment.ms": 5000, "max.compaction.lag.ms": 1000}
    assert topic_config({**base, "cleanup.policy": "compact"}).roll_ms == 1000
    assert topic_config({**base, "cleanup.policy": "compact,delete"}).roll_ms == 1000
    assert topic_config({**base, "cleanup.policy": "delete"}).roll_ms == 5000
    assert topic_config({"cleanup.policy": "compact", "segment.ms": 5000}).roll_ms == 5000


def test_alter_applies_changes_and_resets_none_to_the_broker_default() -> None:
    broker = BrokerConfig.from_properties({"log.segment.bytes": "4096", "log.cleanup.policy": "compact"})
    config = topic_config({"segment.bytes": 100, "retention.ms": 1000}, broker)
    assert config.segment_bytes == 100 and config.compact
    changed = alter(config, {"segment.bytes": None, "delete.retention.ms": "5"}, broker)
    assert changed.segment_bytes == 4096
    assert changed.delete_retention_ms == 5
    assert changed.retention_ms == 1000  # untouched keys keep their values
    assert config.segment_bytes == 100  # the original is unchanged
    assert alter(config, {"segment.bytes": None}).segment_bytes == 1073741824  # Kafka's without a broker
    assert alter(config, {}) == config


def test_configs_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        TopicConfig().segment_bytes = 100  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        BrokerConfig().log_cleaner_threads = 2  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        ProducerConfig().linger_ms = 2  # type: ignore[misc]
    assert hash(TopicConfig()) == hash(TopicConfig())


# --- round trips --------------------------------------------------------------------------------------------


def test_to_properties_round_trips() -> None:
    config = topic_config({
        "cleanup.policy": "compact,delete", "segment.bytes": 14, "segment.ms": 1,
        "min.cleanable.dirty.ratio": 0, "min.compaction.lag.ms": 7, "max.compaction.lag.ms": 7,
        "delete.retention.ms": 0, "retention.ms": -1, "retention.bytes": 123,
        "max.message.bytes": 0, "file.delete.delay.ms": 0,
        "message.timestamp.type": "LogAppendTime", "compression.type": "uncompressed",
    })
    props = config.to_properties()
    assert set(props) == set(KAFKA_TOPIC_DEFAULTS)
    assert TopicConfig.from_properties(props) == config
    assert TopicConfig.from_properties({k: str(v) for k, v in props.items()}) == config
    assert all(config.get(name) == getattr(config, name.replace(".", "_")) for name in props)
    broker = BrokerConfig.from_properties({"log.roll.ms": 10, "log.cleaner.threads": 3})
    assert BrokerConfig.from_properties(broker.to_properties()) == broker
    assert "log.retention.ms" not in broker.to_properties()  # unset nullable configs are left out


# (min.compaction.lag.ms >= 0, max.compaction.lag.ms >= 1) with min <= max; sorting keeps the larger >= 1.
LAGS = st.tuples(st.integers(0, LONG_MAX), st.integers(1, LONG_MAX)).map(sorted)


@given(
    segment_bytes=st.integers(14, INT_MAX),
    segment_ms=st.integers(1, LONG_MAX),
    lags=LAGS,
    delete_retention_ms=st.integers(0, LONG_MAX),
    retention_ms=st.integers(-1, LONG_MAX),
    retention_bytes=st.integers(-(2**63), LONG_MAX),
    max_message_bytes=st.integers(0, INT_MAX),
    file_delete_delay_ms=st.integers(0, LONG_MAX),
    ratio=st.floats(0, 1),
)
def test_valid_values_round_trip(
    segment_bytes: int, segment_ms: int, lags: list[int], delete_retention_ms: int, retention_ms: int,
    retention_bytes: int, max_message_bytes: int, file_delete_delay_ms: int, ratio: float,
) -> None:
    min_lag, max_lag = lags  # sorted, so min <= max as the cross-check requires
    overrides = {
        "segment.bytes": segment_bytes, "segment.ms": segment_ms, "min.compaction.lag.ms": min_lag,
        "max.compaction.lag.ms": max_lag, "delete.retention.ms": delete_retention_ms,
        "retention.ms": retention_ms, "retention.bytes": retention_bytes,
        "max.message.bytes": max_message_bytes, "file.delete.delay.ms": file_delete_delay_ms,
        "min.cleanable.dirty.ratio": ratio,
    }
    config = topic_config(overrides)
    for name, value in overrides.items():
        assert config.get(name) == value
    assert TopicConfig.from_properties(config.to_properties()) == config
    as_strings = {k: repr(v) if isinstance(v, float) else str(v) for k, v in config.to_properties().items()}
    assert topic_config(as_strings) == config


# --- server.properties --------------------------------------------------------------------------------------


def test_missing_server_properties_gives_defaults(tmp_path: Path) -> None:
    assert load_broker_config(tmp_path) == BrokerConfig()
    assert load_broker_config(str(tmp_path)) == BrokerConfig()


def test_server_properties_syntax(tmp_path: Path) -> None:
    write_server_properties(tmp_path, "\n".join([
        "# a comment",
        "! another comment",
        "",
        "   ",
        "log.cleaner.threads=4",
        "  log.cleaner.backoff.ms : 250  ",
        "log.cleaner.enable   false",
        "log.cleanup.policy = compact, \\",
        "    delete",
        "log.cleaner.dedupe.buffer.size=1024",
        "log.cleaner.dedupe.buffer.size=4096",  # the last one wins
    ]))
    broker = load_broker_config(tmp_path)
    assert broker.log_cleaner_threads == 4
    assert broker.log_cleaner_backoff_ms == 250
    assert broker.log_cleaner_enable is False
    assert broker.log_cleanup_policy == ("compact", "delete")
    assert broker.log_cleaner_dedupe_buffer_size == 4096


def test_parse_properties() -> None:
    assert parse_properties("a=1\nb: 2\nc 3\nd\n#e=5\n  !f=6\ng = x=y\nh=\\\\\n") == {
        "a": "1", "b": "2", "c": "3", "d": "", "g": "x=y", "h": "\\\\"}


@pytest.mark.parametrize(
    ("broker_key", "value", "topic_key", "expected"),
    [
        ("log.cleanup.policy", "compact", "cleanup.policy", ("compact",)),
        ("log.segment.bytes", "1024", "segment.bytes", 1024),
        ("log.roll.ms", "100", "segment.ms", 100),
        ("log.roll.hours", "2", "segment.ms", 7_200_000),
        ("log.cleaner.min.cleanable.ratio", "0.1", "min.cleanable.dirty.ratio", 0.1),
        ("log.cleaner.min.compaction.lag.ms", "10", "min.compaction.lag.ms", 10),
        ("log.cleaner.max.compaction.lag.ms", "20", "max.compaction.lag.ms", 20),
        ("log.cleaner.delete.retention.ms", "30", "delete.retention.ms", 30),
        ("log.retention.ms", "40", "retention.ms", 40),
        ("log.retention.minutes", "5", "retention.ms", 300_000),
        ("log.retention.hours", "1", "retention.ms", 3_600_000),
        ("log.retention.bytes", "50", "retention.bytes", 50),
        ("message.max.bytes", "60", "max.message.bytes", 60),
        ("log.segment.delete.delay.ms", "70", "file.delete.delay.ms", 70),
        ("log.message.timestamp.type", "LogAppendTime", "message.timestamp.type", "LogAppendTime"),
        ("compression.type", "gzip", "compression.type", "gzip"),
    ],
)
def test_broker_synonyms_set_topic_defaults(
    tmp_path: Path, broker_key: str, value: str, topic_key: str, expected: object
) -> None:
    write_server_properties(tmp_path, f"{broker_key}={value}\n")
    broker = load_broker_config(tmp_path)
    defaults = broker.topic_defaults()
    assert defaults.get(topic_key) == expected
    assert topic_config({}, broker) == defaults
    # A topic override beats the broker default.
    override = {topic_key: TOPIC_DEFAULT_OVERRIDES[topic_key]}
    assert topic_config(override, broker).get(topic_key) == topic_config(override).get(topic_key)


TOPIC_DEFAULT_OVERRIDES: dict[str, object] = {
    "cleanup.policy": "delete", "segment.bytes": 999, "segment.ms": 999, "min.cleanable.dirty.ratio": 0.9,
    "min.compaction.lag.ms": 0, "max.compaction.lag.ms": 999, "delete.retention.ms": 999, "retention.ms": 999,
    "retention.bytes": 999, "max.message.bytes": 999, "file.delete.delay.ms": 999,
    "message.timestamp.type": "CreateTime", "compression.type": "lz4",
}


@pytest.mark.parametrize(
    ("lines", "retention_ms"),
    [
        ([], 604_800_000),
        (["log.retention.hours=1"], 3_600_000),
        (["log.retention.hours=1", "log.retention.minutes=5"], 300_000),
        (["log.retention.minutes=5", "log.retention.hours=1"], 300_000),
        (["log.retention.hours=1", "log.retention.minutes=5", "log.retention.ms=42"], 42),
        (["log.retention.ms=42", "log.retention.hours=1"], 42),
        (["log.retention.ms=-1", "log.retention.hours=1"], -1),
        (["log.retention.hours=-1"], -1),
        (["log.retention.minutes=-1"], -1),
    ],
)
def test_retention_precedence_ms_over_minutes_over_hours(
    tmp_path: Path, lines: list[str], retention_ms: int
) -> None:
    write_server_properties(tmp_path, "\n".join(lines))
    assert load_broker_config(tmp_path).topic_defaults().retention_ms == retention_ms


@pytest.mark.parametrize(
    ("lines", "segment_ms"),
    [
        ([], 604_800_000),
        (["log.roll.hours=1"], 3_600_000),
        (["log.roll.hours=1", "log.roll.ms=500"], 500),
        (["log.roll.ms=500", "log.roll.hours=1"], 500),
    ],
)
def test_roll_precedence_ms_over_hours(tmp_path: Path, lines: list[str], segment_ms: int) -> None:
    write_server_properties(tmp_path, "\n".join(lines))
    assert load_broker_config(tmp_path).topic_defaults().segment_ms == segment_ms


def test_unknown_server_property_is_rejected(tmp_path: Path) -> None:
    path = write_server_properties(tmp_path, "log.segment.byte=1024\n")
    with pytest.raises(ConfigError) as caught:
        load_broker_config(tmp_path)
    message = str(caught.value)
    assert str(path) in message
    assert "unknown broker config 'log.segment.byte'; did you mean 'log.segment.bytes'?" in message
    assert "known: log.cleanup.policy" in message


def test_every_server_config_in_server_properties_is_left_to_the_server(tmp_path: Path) -> None:
    # server_config's table is the one list of the server's keys: the data directory's loader skips each.
    write_server_properties(tmp_path, "".join(f"{d.name}={d.render(d.default)}\n" for d in SERVER_CONFIGS
                                              if d.default is not None) + "log.cleaner.threads=2\n")
    assert load_broker_config(tmp_path) == BrokerConfig(log_cleaner_threads=2)
    assert load_server_config(tmp_path).offset_metadata_max_bytes == 4096  # Kafka's default


def test_unreadable_server_properties_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "server.properties").mkdir()
    for load in (load_broker_config, load_server_config, read_server_properties):
        with pytest.raises(ConfigError, match=r"server\.properties: ") as caught:
            load(tmp_path)
        assert isinstance(caught.value.__cause__, OSError)


def test_bad_server_property_value_names_file_and_key(tmp_path: Path) -> None:
    path = write_server_properties(tmp_path, "log.cleaner.threads=zero\n")
    with pytest.raises(ConfigError, match=r"log.cleaner.threads: 'zero' is not an integer") as caught:
        load_broker_config(tmp_path)
    assert str(caught.value).startswith(f"{path}: ")
    assert isinstance(caught.value.__cause__, ConfigError)


def test_tiny_test_sizes_are_allowed() -> None:
    broker = BrokerConfig.from_properties({"log.cleaner.dedupe.buffer.size": 1024, "log.segment.bytes": 14})
    assert broker.log_cleaner_dedupe_buffer_size == 1024
    assert broker.topic_defaults().segment_bytes == 14
    full = BrokerConfig.from_properties({"log.cleaner.io.buffer.load.factor": 1})
    assert full.log_cleaner_io_buffer_load_factor == 1.0
