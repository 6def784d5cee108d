"""Tests for compactlog.config_sources: every topic config's effective value and where it comes from."""

from __future__ import annotations

from pathlib import Path

from compactlog.config import TOPIC_CONFIGS
from compactlog.config_sources import (
    SOURCE_DATA_DIRECTORY,
    SOURCE_DEFAULT,
    SOURCE_TOPIC,
    ConfigEntry,
    ConfigSynonym,
    topic_config_entries,
)
from compactlog.properties import read_server_properties


def by_name(entries: list[ConfigEntry]) -> dict[str, ConfigEntry]:
    return {e.name: e for e in entries}


def test_every_topic_config_is_listed_once_in_declaration_order() -> None:
    assert [e.name for e in topic_config_entries({}, {})] == [d.name for d in TOPIC_CONFIGS]


def test_defaults_are_named_by_the_last_broker_synonym() -> None:
    retention = by_name(topic_config_entries({}, {}))["retention.ms"]
    assert retention == ConfigEntry("retention.ms", 604_800_000, SOURCE_DEFAULT,
                                    (ConfigSynonym("log.retention.hours", 168, SOURCE_DEFAULT),))


def test_a_topic_override_is_its_source_even_when_equal_to_the_default() -> None:
    entries = by_name(topic_config_entries({"cleanup.policy": ("compact",), "segment.bytes": 1_073_741_824}, {}))
    assert entries["cleanup.policy"].value == "compact" and entries["cleanup.policy"].source == SOURCE_TOPIC
    assert entries["segment.bytes"].source == SOURCE_TOPIC
    assert entries["segment.bytes"].synonyms == (ConfigSynonym("segment.bytes", 1_073_741_824, SOURCE_TOPIC),
                                                 ConfigSynonym("log.segment.bytes", 1_073_741_824, SOURCE_DEFAULT))


def test_the_data_directory_sets_defaults_through_synonyms_milliseconds_first() -> None:
    props = {"log.retention.hours": "1", "log.retention.minutes": "30", "log.cleaner.min.cleanable.ratio": "0.5"}
    entries = by_name(topic_config_entries({"delete.retention.ms": "5"}, props))
    assert entries["retention.ms"].value == 1_800_000 and entries["retention.ms"].source == SOURCE_DATA_DIRECTORY
    assert [(s.name, s.value, s.source) for s in entries["retention.ms"].synonyms] == [
        ("log.retention.minutes", 30, SOURCE_DATA_DIRECTORY), ("log.retention.hours", 1, SOURCE_DATA_DIRECTORY),
        ("log.retention.hours", 168, SOURCE_DEFAULT)]
    # Set in server.properties to its default value: still the data directory's setting.
    assert entries["min.cleanable.dirty.ratio"].source == SOURCE_DATA_DIRECTORY
    assert entries["delete.retention.ms"].source == SOURCE_TOPIC and entries["delete.retention.ms"].value == 5
    assert entries["segment.ms"].source == SOURCE_DEFAULT


def test_server_properties_are_read_as_written(tmp_path: Path) -> None:
    assert read_server_properties(tmp_path) == {}
    (tmp_path / "server.properties").write_text("# a comment\nlog.retention.hours = 1\n")
    assert read_server_properties(tmp_path) == {"log.retention.hours": "1"}


def test_the_servers_own_keys_in_server_properties_are_not_data_directory_configs() -> None:
    props = {"listeners": "PLAINTEXT://127.0.0.1:9092", "offsets.topic.num.partitions": "3",
             "log.retention.hours": "1"}
    assert by_name(topic_config_entries({}, props))["retention.ms"].value == 3_600_000
