"""Every configuration compactlog reads: topic configs, the broker (data-directory) config, producer configs.

Each config is declared once, as a :class:`~compactlog.config_def.ConfigDef` in ``TOPIC_CONFIGS``,
``BROKER_CONFIGS`` or ``PRODUCER_CONFIGS``; parsing, range checks, error messages, dataclass defaults, broker
synonyms and :func:`describe_configs` derive from those entries. Names, defaults and bounds are Kafka's
(``LogConfig``, ``ServerTopicConfigSynonyms``, ``CleanerConfig``, ``ProducerConfig``), with deviations noted
inline. The dataclasses spell out their fields for type checkers; an import-time check keeps them equal to the
tables. The Kafka-protocol server's configs, read from the same ``server.properties``, are declared in
:mod:`compactlog.server_config`; :func:`load_broker_config` leaves their keys to it.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, TypeVar

from compactlog.config_def import ConfigDef, Synonym
from compactlog.errors import ConfigError
from compactlog.limits import INT_MAX, LONG_MAX
from compactlog.properties import SERVER_PROPERTIES, read_server_properties
from compactlog.server_config import SERVER_CONFIG_NAMES

__all__ = ["BROKER_CONFIGS", "PRODUCER_CONFIGS", "TOPIC_CONFIGS", "BrokerConfig", "ProducerConfig", "TopicConfig",
           "alter", "describe_configs", "load_broker_config", "producer_config", "topic_config"]

# Dedupe buffer bytes per cleaner thread. Kafka requires at least 1 MiB; 1 KiB lets tests force multi-pass
# cleaning with small maps.
_MIN_SHARE = 1024

_HOUR, _MINUTE = 3_600_000, 60_000  # ms

# Kafka's compression.type values, in its order -> the pyarrow codec of sealed Parquet segments; we keep no
# producer batches, so "producer" means snappy, Parquet's usual default.
_PARQUET_CODECS = {"uncompressed": "none", "zstd": "zstd", "lz4": "lz4", "snappy": "snappy", "gzip": "gzip",
                   "producer": "snappy"}
TOPIC_CONFIGS: tuple[ConfigDef, ...] = (
    ConfigDef("cleanup.policy", "list", ("delete",), "delete: retention drops old segments; compact: keep "
              "the last record per key.", choices=("delete", "compact"),
              synonyms=(Synonym("log.cleanup.policy"),)),
    # Kafka 4.x raised the minimum to 1 MiB; the classic bound of 14 bytes lets tests use tiny segments.
    ConfigDef("segment.bytes", "int", 1_073_741_824, "Roll the active segment at this size; also the "
              "largest cleaner group.", low=14, high=INT_MAX, synonyms=(Synonym("log.segment.bytes"),)),
    ConfigDef("segment.ms", "long", 604_800_000, "Roll the active segment after this long.", low=1,
              synonyms=(Synonym("log.roll.ms"), Synonym("log.roll.hours", _HOUR))),
    ConfigDef("min.cleanable.dirty.ratio", "double", 0.5, "A log is cleanable when dirty bytes exceed this "
              "share of cleanable bytes.", low=0, high=1,
              synonyms=(Synonym("log.cleaner.min.cleanable.ratio"),)),
    ConfigDef("min.compaction.lag.ms", "long", 0, "Records younger than this are never compacted.", low=0,
              synonyms=(Synonym("log.cleaner.min.compaction.lag.ms"),)),
    ConfigDef("max.compaction.lag.ms", "long", LONG_MAX, "A dirty record older than this makes the log "
              "cleanable whatever its ratio.", low=1,
              synonyms=(Synonym("log.cleaner.max.compaction.lag.ms"),)),
    ConfigDef("delete.retention.ms", "long", 86_400_000, "How long tombstones and transaction markers "
              "outlive the cleaning that first sees them.", low=0,
              synonyms=(Synonym("log.cleaner.delete.retention.ms"),)),
    ConfigDef("retention.ms", "long", 604_800_000, "With the delete policy, drop segments older than "
              "this; -1 means unlimited.", low=-1, synonyms=(Synonym("log.retention.ms"),
              Synonym("log.retention.minutes", _MINUTE), Synonym("log.retention.hours", _HOUR))),
    ConfigDef("retention.bytes", "long", -1, "With the delete policy, drop the oldest segments beyond "
              "this size; negative means unlimited.", synonyms=(Synonym("log.retention.bytes"),)),
    ConfigDef("max.message.bytes", "int", 1_048_588, "The largest record batch the log accepts.", low=0,
              synonyms=(Synonym("message.max.bytes"),)),
    ConfigDef("file.delete.delay.ms", "long", 60_000, "How long replaced segment files wait, renamed "
              ".deleted, before removal.", low=0, synonyms=(Synonym("log.segment.delete.delay.ms"),)),
    ConfigDef("message.timestamp.type", "string", "CreateTime", "Record timestamps: the producer's "
              "(CreateTime) or the append time (LogAppendTime).", choices=("CreateTime", "LogAppendTime"),
              synonyms=(Synonym("log.message.timestamp.type"),)),
    ConfigDef("compression.type", "string", "producer", "Codec of sealed Parquet segments; producer means "
              "snappy, uncompressed none.", choices=tuple(_PARQUET_CODECS), synonyms=(Synonym("compression.type"),)),
)

# Pairs (a, b) of topic configs that must satisfy a <= b (LogConfig.validateValues).
_ORDERED = (("min.compaction.lag.ms", "max.compaction.lag.ms"),)


def _synonym_def(topic: ConfigDef, syn: Synonym) -> ConfigDef:
    """The broker config a synonym declares: the topic config's rules, in the synonym's unit."""
    unit = {1: "", _HOUR: ", in hours", _MINUTE: ", in minutes"}[syn.scale]
    doc = f"Default for the topic config {topic.name}{unit}."
    nullable = syn != topic.synonyms[-1]
    if syn.scale == 1:
        return dataclasses.replace(topic, name=syn.name, default=None if nullable else topic.default, doc=doc,
                                   nullable=nullable, synonyms=())
    # Hours and minutes are Java ints; a positive lower bound rounds up (1 ms -> 1 hour), -1 stays -1.
    low = topic.low if topic.low is None or topic.low <= 0 else -(-int(topic.low) // syn.scale)
    default = None if nullable else topic.default // syn.scale
    return ConfigDef(syn.name, "int", default, doc, low=low, nullable=nullable)


BROKER_CONFIGS: tuple[ConfigDef, ...] = (
    *(_synonym_def(topic, syn) for topic in TOPIC_CONFIGS for syn in topic.synonyms),
    ConfigDef("log.cleaner.enable", "boolean", True, "Run the cleaner; when false, logs whose cleanup.policy has "
              "compact are neither compacted nor retention-cleaned, forced or not; delete-only ones keep retention."),
    # Kafka's definition allows 0 threads, but a broker then fails to start.
    ConfigDef("log.cleaner.threads", "int", 1, "How many partitions a pass cleans at once in process (on Spark, "
              "the session's task slots); each round's map gets dedupe.buffer.size / threads.", low=1),
    ConfigDef("log.cleaner.dedupe.buffer.size", "long", 134_217_728, "Memory for the key -> offset maps of the "
              "cleaner's log.cleaner.threads rounds together. On Spark every running task (a round or a split "
              "round's bin) takes one such share, so the maps total this times slots / threads.", low=_MIN_SHARE),
    ConfigDef("log.cleaner.io.buffer.load.factor", "double", 0.9, "Fill limit of a key -> offset map, as a "
              "fraction of its slots.", low=0, high=1, low_open=True),
    ConfigDef("log.cleaner.io.buffer.size", "int", 524_288, "I/O buffers of all cleaner threads.", low=0,
              no_effect="pyarrow reads and writes the Parquet segments (a row group at a time) with its own buffers"),
    ConfigDef("log.cleaner.backoff.ms", "long", 15_000, "serve's cleaner waits this long after a pass that "
              "cleaned nothing (after one that cleaned, it runs the next at once, as Kafka's).", low=0),
    ConfigDef("producer.id.expiration.ms", "int", 86_400_000,
              "Producers idle this long, outside a transaction, are forgotten.", low=1),
    ConfigDef("transaction.max.timeout.ms", "int", 900_000, "The largest transaction.timeout.ms a transactional "
              "producer may ask for; creating one with more raises InvalidTransactionTimeoutError.", low=1),
    # KIP-578's name (proposed, not in Kafka, whose limit is unbounded). A finite default: a request for 2^31-1
    # partitions is refused before a directory is made. 10,000 is well past the ~4,000 partitions Kafka's
    # guidance puts on one broker, and a topic of that size is created in well under a second.
    ConfigDef("max.broker.partitions", "int", 10_000, "The most partitions the data directory holds, all topics "
              "together (internal ones included); a topic creation that would pass it is refused with "
              "InvalidPartitionsError (INVALID_PARTITIONS over the wire) before anything is written.", low=1),
)

PRODUCER_CONFIGS: tuple[ConfigDef, ...] = (
    ConfigDef("batch.size", "int", 16_384, "Target batch size in bytes.", low=0),
    ConfigDef("linger.ms", "long", 5, "How long a batch waits for more records (Kafka 4.0 default).", low=0),
    ConfigDef("transactional.id", "string", None, "Enables transactions; unset means none.", nullable=True),
    ConfigDef("transaction.timeout.ms", "int", 60_000, "Abort a transaction left open this long, counted "
              "on the store's clock from its first records; at most transaction.max.timeout.ms.", low=1),
    ConfigDef("enable.idempotence", "boolean", True, "Number batches so that retries are not duplicated."),
)

_BY_NAME: dict[str, dict[str, ConfigDef]] = {
    scope: {d.name: d for d in defs}
    for scope, defs in (("topic", TOPIC_CONFIGS), ("broker", BROKER_CONFIGS), ("producer", PRODUCER_CONFIGS))
}


def _default(scope: str, name: str) -> Any:
    return _BY_NAME[scope][name].default


def _lookup(scope: str, name: object) -> ConfigDef:
    defs = _BY_NAME[scope]
    if isinstance(name, str) and name in defs:
        return defs[name]
    close = difflib.get_close_matches(str(name), defs, n=1)
    hint = f"; did you mean '{close[0]}'?" if close else ""
    raise ConfigError(f"unknown {scope} config {name!r}{hint}; known: {', '.join(defs)}")


def _check_order(values: Mapping[str, Any], names: Mapping[str, str]) -> None:
    for low, high in _ORDERED:
        if values[low] > values[high]:
            raise ConfigError(f"{names[low]} ({values[low]}) must be <= {names[high]} ({values[high]}); "
                              f"allowed: {names[low]} in [0, {names[high]}]")


_C = TypeVar("_C", bound="_Config")


class _Config:
    """What the config dataclasses share: validation on construction, access by Kafka name."""

    _SCOPE: ClassVar[str]

    def __post_init__(self) -> None:
        # Every construction (direct, from_properties, alter) normalizes and validates every field.
        for d in _BY_NAME[self._SCOPE].values():
            object.__setattr__(self, d.attr, d.parse(getattr(self, d.attr)))
        self._cross_check()

    def _cross_check(self) -> None:
        pass

    def _apply(self, changes: Mapping[str, object], reset: Any) -> Any:
        """A copy with ``changes`` (Kafka names) parsed in; a None value takes the value of ``reset``."""
        kwargs = {d.attr: getattr(self, d.attr) for d in _BY_NAME[self._SCOPE].values()}
        for name, value in changes.items():
            d = _lookup(self._SCOPE, name)
            kwargs[d.attr] = getattr(reset, d.attr) if value is None else d.parse(value)
        return type(self)(**kwargs)

    @classmethod
    def from_properties(cls: type[_C], props: Mapping[str, object]) -> _C:
        """A config from Kafka-named values (native or strings); missing keys take their defaults."""
        default = cls()
        return default._apply(props, default)

    def get(self, name: str) -> Any:
        """The value of a config by its Kafka name."""
        return getattr(self, _lookup(self._SCOPE, name).attr)

    def to_properties(self) -> dict[str, str | int | float]:
        """Every config by Kafka name (unset nullable ones left out); from_properties reads it back."""
        values = ((d, getattr(self, d.attr)) for d in _BY_NAME[self._SCOPE].values())
        return {d.name: d.render(value) for d, value in values if value is not None}


@dataclass(frozen=True)
class TopicConfig(_Config):
    """The configs of one topic; attributes are the Kafka names with dots replaced by underscores."""

    _SCOPE: ClassVar[str] = "topic"

    cleanup_policy: tuple[str, ...] = _default("topic", "cleanup.policy")
    segment_bytes: int = _default("topic", "segment.bytes")
    segment_ms: int = _default("topic", "segment.ms")
    min_cleanable_dirty_ratio: float = _default("topic", "min.cleanable.dirty.ratio")
    min_compaction_lag_ms: int = _default("topic", "min.compaction.lag.ms")
    max_compaction_lag_ms: int = _default("topic", "max.compaction.lag.ms")
    delete_retention_ms: int = _default("topic", "delete.retention.ms")
    retention_ms: int = _default("topic", "retention.ms")
    retention_bytes: int = _default("topic", "retention.bytes")
    max_message_bytes: int = _default("topic", "max.message.bytes")
    file_delete_delay_ms: int = _default("topic", "file.delete.delay.ms")
    message_timestamp_type: str = _default("topic", "message.timestamp.type")
    compression_type: str = _default("topic", "compression.type")

    def _cross_check(self) -> None:
        _check_order(self.to_properties(), {name: name for name in _BY_NAME["topic"]})

    @property
    def compact(self) -> bool:
        """The cleaner compacts this log (and, with ``delete`` as well, applies retention)."""
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        """Retention (``retention.ms``, ``retention.bytes``) deletes old segments."""
        return "delete" in self.cleanup_policy

    @property
    def roll_ms(self) -> int:
        """The effective roll time, Kafka's ``LogConfig.maxSegmentMs``: ``min(segment.ms,
        max.compaction.lag.ms)`` for a compacted topic with a max lag above 0, so that the max lag can force a
        roll (KIP-354: the cleaner never cleans the active segment)."""
        if self.compact and self.max_compaction_lag_ms > 0:
            return min(self.segment_ms, self.max_compaction_lag_ms)
        return self.segment_ms

    @property
    def parquet_compression(self) -> str:
        """The pyarrow codec of sealed Parquet segments, or "none"."""
        return _PARQUET_CODECS[self.compression_type]

    @classmethod
    def from_properties(cls, props: Mapping[str, object], broker: BrokerConfig | None = None) -> TopicConfig:
        """A topic config from Kafka-named values (native or strings); missing keys take broker defaults."""
        return topic_config(props, broker)


@dataclass(frozen=True)
class BrokerConfig(_Config):
    """The data-directory config (``server.properties``): topic defaults and cleaner settings."""

    _SCOPE: ClassVar[str] = "broker"

    log_cleanup_policy: tuple[str, ...] = _default("broker", "log.cleanup.policy")
    log_segment_bytes: int = _default("broker", "log.segment.bytes")
    log_roll_ms: int | None = _default("broker", "log.roll.ms")
    log_roll_hours: int = _default("broker", "log.roll.hours")
    log_cleaner_min_cleanable_ratio: float = _default("broker", "log.cleaner.min.cleanable.ratio")
    log_cleaner_min_compaction_lag_ms: int = _default("broker", "log.cleaner.min.compaction.lag.ms")
    log_cleaner_max_compaction_lag_ms: int = _default("broker", "log.cleaner.max.compaction.lag.ms")
    log_cleaner_delete_retention_ms: int = _default("broker", "log.cleaner.delete.retention.ms")
    log_retention_ms: int | None = _default("broker", "log.retention.ms")
    log_retention_minutes: int | None = _default("broker", "log.retention.minutes")
    log_retention_hours: int = _default("broker", "log.retention.hours")
    log_retention_bytes: int = _default("broker", "log.retention.bytes")
    message_max_bytes: int = _default("broker", "message.max.bytes")
    log_segment_delete_delay_ms: int = _default("broker", "log.segment.delete.delay.ms")
    log_message_timestamp_type: str = _default("broker", "log.message.timestamp.type")
    compression_type: str = _default("broker", "compression.type")
    log_cleaner_enable: bool = _default("broker", "log.cleaner.enable")
    log_cleaner_threads: int = _default("broker", "log.cleaner.threads")
    log_cleaner_dedupe_buffer_size: int = _default("broker", "log.cleaner.dedupe.buffer.size")
    log_cleaner_io_buffer_load_factor: float = _default("broker", "log.cleaner.io.buffer.load.factor")
    log_cleaner_io_buffer_size: int = _default("broker", "log.cleaner.io.buffer.size")
    log_cleaner_backoff_ms: int = _default("broker", "log.cleaner.backoff.ms")
    producer_id_expiration_ms: int = _default("broker", "producer.id.expiration.ms")
    transaction_max_timeout_ms: int = _default("broker", "transaction.max.timeout.ms")
    max_broker_partitions: int = _default("broker", "max.broker.partitions")

    def _cross_check(self) -> None:
        _check_order(self._resolve(), {d.name: d.synonyms[0].name for d in TOPIC_CONFIGS})
        if (share := self.log_cleaner_dedupe_buffer_size // self.log_cleaner_threads) < _MIN_SHARE:  # Kafka: 1 MiB
            raise ConfigError(f"log.cleaner.dedupe.buffer.size: {share} bytes per cleaner thread is too little; "
                              f"allowed: at least {_MIN_SHARE} times log.cleaner.threads ({self.log_cleaner_threads})")

    def _resolve(self) -> dict[str, Any]:
        """Topic defaults by topic config name; the first synonym that is set wins (ms > minutes > hours)."""
        resolved: dict[str, Any] = {}
        for topic in TOPIC_CONFIGS:
            value, syn = next((getattr(self, s.name.replace(".", "_")), s) for s in topic.synonyms
                              if getattr(self, s.name.replace(".", "_")) is not None)
            # A negative retention in any unit means unlimited (KafkaConfig.logRetentionTimeMillis).
            resolved[topic.name] = -1 if syn.scale > 1 and value < 0 else value * syn.scale
        return resolved

    def topic_defaults(self) -> TopicConfig:
        """The config of a topic with no overrides."""
        return TopicConfig(**{_BY_NAME["topic"][name].attr: value for name, value in self._resolve().items()})


@dataclass(frozen=True)
class ProducerConfig(_Config):
    """The configs of one producer."""

    _SCOPE: ClassVar[str] = "producer"

    batch_size: int = _default("producer", "batch.size")
    linger_ms: int = _default("producer", "linger.ms")
    transactional_id: str | None = _default("producer", "transactional.id")
    transaction_timeout_ms: int = _default("producer", "transaction.timeout.ms")
    enable_idempotence: bool = _default("producer", "enable.idempotence")

    def _cross_check(self) -> None:
        # Kafka: "Cannot set a transactional.id without also enabling idempotence."
        if self.transactional_id is not None and not self.enable_idempotence:
            raise ConfigError(f"enable.idempotence: False with transactional.id {self.transactional_id!r}; "
                              "allowed: true whenever transactional.id is set")


# The tables are the single source of truth: a field that is not in its table (or the reverse) fails import.
for _cls in (TopicConfig, BrokerConfig, ProducerConfig):
    if [f.name for f in dataclasses.fields(_cls)] != [d.attr for d in _BY_NAME[_cls._SCOPE].values()]:
        raise RuntimeError(f"{_cls.__name__}'s fields do not match its config table")


def topic_config(overrides: Mapping[str, object], broker: BrokerConfig | None = None) -> TopicConfig:
    """The broker's topic defaults (Kafka's without ``broker``) with ``overrides`` (Kafka names) applied.

    Values are native or strings as Kafka's CLI gives them ("1000", "0.5", "compact,delete"); None = default.
    """
    defaults = (broker or BrokerConfig()).topic_defaults()
    return defaults._apply(overrides, defaults)


def alter(config: TopicConfig, changes: Mapping[str, object],
          broker: BrokerConfig | None = None) -> TopicConfig:
    """``config`` with ``changes`` applied and revalidated; None resets a key to the broker's default."""
    return config._apply(changes, (broker or BrokerConfig()).topic_defaults())


def producer_config(overrides: Mapping[str, object] | None = None) -> ProducerConfig:
    """A producer's config: Kafka's defaults with ``overrides`` (Kafka names, native or strings) applied."""
    default = ProducerConfig()
    return default._apply(overrides or {}, default)


def load_broker_config(data_dir: str | os.PathLike[str]) -> BrokerConfig:
    """The config of a data directory: ``<data_dir>/server.properties``, or the defaults if it is absent.

    The server's own keys (:data:`compactlog.server_config.SERVER_CONFIG_NAMES`) are left out: they are
    :func:`compactlog.server_config.load_server_config`'s."""
    props = read_server_properties(data_dir)
    try:
        return BrokerConfig.from_properties({k: v for k, v in props.items() if k not in SERVER_CONFIG_NAMES})
    except ConfigError as exc:
        raise ConfigError(f"{os.path.join(data_dir, SERVER_PROPERTIES)}: {exc}") from exc


def describe_configs(scope: Literal["topic", "broker", "producer"] = "topic") -> list[tuple[str, str, str, str]]:
    """(name, type, default, doc) of every config of ``scope``: defaults as Kafka writes them, docs described."""
    kafka_words = {"None": "null", "True": "true", "False": "false"}  # how Kafka writes these defaults
    return [(d.name, d.kind, kafka_words.get(str(d.default), str(d.render(d.default))), d.described)
            for d in _BY_NAME[scope].values()]
