"""Where each of a topic's effective configs comes from, as ``kafka-configs --describe --all`` shows it.

Sources, highest precedence first (Kafka's names in brackets):

* ``topic`` (``DYNAMIC_TOPIC_CONFIG``): set on the topic by ``topics create --config`` or ``topics alter``;
  shown as the source also when the value equals the default;
* ``data-directory`` (``STATIC_BROKER_CONFIG``): a broker synonym set in the data directory's
  ``server.properties`` (``log.retention.hours`` for ``retention.ms``); several may be set, the first of the
  synonym list wins (ms over minutes over hours);
* ``default`` (``DEFAULT_CONFIG``): Kafka's default, named by the last broker synonym
  (``log.retention.hours=168``).

Each entry lists every source that sets the config, highest first, as Kafka's ``synonyms={...}``; its value
is the effective one (the topic config's, in the topic config's unit). The names, synonyms and defaults are
the tables of :mod:`compactlog.config`; nothing here declares a config.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .config import BROKER_CONFIGS, TOPIC_CONFIGS, BrokerConfig, topic_config
from .server_config import SERVER_CONFIG_NAMES

SOURCE_TOPIC = "topic"
SOURCE_DATA_DIRECTORY = "data-directory"
SOURCE_DEFAULT = "default"

_BROKER_DEFS = {d.name: d for d in BROKER_CONFIGS}


@dataclass(frozen=True)
class ConfigSynonym:
    """One source that sets a config: its name there (a broker synonym's own name), value and source."""

    name: str
    value: Any
    source: str


@dataclass(frozen=True)
class ConfigEntry:
    """One topic config: effective value, the source that set it, and every source that sets it."""

    name: str
    value: Any
    source: str
    synonyms: tuple[ConfigSynonym, ...]


def topic_config_entries(overrides: Mapping[str, Any], server_properties: Mapping[str, str]) -> list[ConfigEntry]:
    """Every topic config of a topic with ``overrides`` (its own configs, Kafka names) in a data directory
    whose ``server.properties`` holds ``server_properties``, in the order :mod:`compactlog.config` declares
    them. Raises ConfigError for a value the config tables refuse; the server's own keys (``listeners``,
    ``offsets.*``, ``group.*``: ``SERVER_CONFIG_NAMES``) are not the data directory's and are left out. Pure."""
    broker = BrokerConfig.from_properties({k: v for k, v in server_properties.items()
                                           if k not in SERVER_CONFIG_NAMES})
    effective = topic_config(overrides, broker)
    entries = []
    for d in TOPIC_CONFIGS:
        synonyms: list[ConfigSynonym] = []
        if d.name in overrides:
            synonyms.append(ConfigSynonym(d.name, d.render(effective.get(d.name)), SOURCE_TOPIC))
        for syn in d.synonyms:
            if syn.name in server_properties:
                synonyms.append(ConfigSynonym(syn.name, _BROKER_DEFS[syn.name].render(broker.get(syn.name)),
                                              SOURCE_DATA_DIRECTORY))
        last = _BROKER_DEFS[d.synonyms[-1].name]
        synonyms.append(ConfigSynonym(last.name, last.render(last.default), SOURCE_DEFAULT))
        entries.append(ConfigEntry(d.name, d.render(effective.get(d.name)), synonyms[0].source, tuple(synonyms)))
    return entries

