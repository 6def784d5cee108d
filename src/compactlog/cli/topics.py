"""``compactlog topics``: create, list, describe, alter and delete topics, as ``kafka-topics`` does.

The topic is ``--topic T`` (Kafka's spelling) or a positional name. ``describe`` shows what
``kafka-topics --describe`` shows for a local log plus the cleaner's view of each partition: offsets, size,
segments, its clean, dirty and uncleanable bytes, dirty ratio, first dirty and first uncleanable offsets, the
compaction delay, and whether the next cleaner pass compacts it or why not (active segment only, min lag
until when, ratio below the threshold, uncleanable and its error, no compact policy, cleaner disabled).
``Configs`` lists the topic's own configs, also those equal to the default; ``--all`` lists every effective
config with its source, as ``kafka-configs --describe --all``. It also names the data directory's settings
(``server.properties``, set away from their defaults) that are accepted for Kafka compatibility but have no
effect here, and why.

Per partition it also shows the consumer-aware tombstone horizon (:mod:`compactlog.consumer_horizon`): how
many tombstones the partition stores and the consumer groups of the topic that have not read past the
oldest of them (``-``: none stored; unknown when ``__consumer_offsets`` cannot be read, with a note why).
Counting them reads each partition's ``offset`` and ``value`` columns (a segment's footer keeps no
statistics of ``value``), one segment at a time.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

import compactlog
from compactlog.config import BROKER_CONFIGS
from compactlog.config_sources import SOURCE_TOPIC, ConfigEntry, topic_config_entries
from compactlog.consumer_horizon import ConsumerPositions, partition_tombstones
from compactlog.errors import CompactLogError
from compactlog.partition_view import stored_tombstones
from compactlog.properties import read_server_properties

from . import log_picture
from .common import UsageError, data_dir_parent, human_bytes, open_store, parse_config_pairs, print_json
from .consumer_positions import read_consumer_positions


def add_topic_argument(parser: argparse.ArgumentParser, required: bool = True) -> None:
    """``--topic T``, Kafka's spelling, or the topic name as the first positional argument."""
    parser.add_argument("topic_positional", nargs="?", metavar="TOPIC", help="the topic (or --topic TOPIC)")
    parser.add_argument("--topic", metavar="TOPIC", help="the topic" + ("" if required else " (default: every topic)"))


def optional_topic_name(args: argparse.Namespace) -> str | None:
    """The topic of ``--topic`` or of the positional name, or None; a usage error when both are given and
    name different topics."""
    flag, positional = args.topic, args.topic_positional
    if flag is not None and positional is not None and flag != positional:
        raise UsageError(f"two topics given: {positional!r} and --topic {flag!r}")
    return flag if flag is not None else positional


def topic_name(args: argparse.Namespace) -> str:
    """:func:`optional_topic_name`, required."""
    topic = optional_topic_name(args)
    if topic is None:
        raise UsageError("the topic is required: --topic TOPIC")
    return topic


def add_parser(commands: Any) -> None:
    parent = data_dir_parent()
    topics = commands.add_parser("topics", parents=[parent], help="create, list, describe, alter and delete topics",
                                 description=__doc__.split("\n\n", 1)[1] if __doc__ else None)
    actions = topics.add_subparsers(dest="action", metavar="ACTION", required=True)

    create = actions.add_parser("create", parents=[parent], help="create a topic")
    add_topic_argument(create)
    create.add_argument("--partitions", type=int, default=1, help="number of partitions (default 1)")
    create.add_argument("--config", action="append", metavar="NAME=VALUE",
                        help="a topic config, Kafka's name (repeatable): --config cleanup.policy=compact")
    create.add_argument("--if-not-exists", action="store_true", help="succeed if the topic exists")
    create.set_defaults(run=run_create)

    listing = actions.add_parser("list", parents=[parent], help="list topics")
    listing.set_defaults(run=run_list)

    describe = actions.add_parser("describe", parents=[parent],
                                  help="partitions, offsets and whether (and why not) each can be compacted now")
    add_topic_argument(describe, required=False)
    describe.add_argument("--all", action="store_true",
                          help="every effective config with its source (topic, data-directory, default)")
    describe.add_argument("--segments", action="store_true", help="list every segment too")
    describe.add_argument("--json", action="store_true", help="machine-readable output")
    log_picture.add_arguments(describe)
    describe.set_defaults(run=run_describe)

    alter = actions.add_parser("alter", parents=[parent], help="change topic configs")
    add_topic_argument(alter)
    alter.add_argument("--config", action="append", metavar="NAME=VALUE", help="set a config (repeatable)")
    alter.add_argument("--delete-config", action="append", metavar="NAME", default=[],
                       help="reset a config to the data directory's default (repeatable)")
    alter.set_defaults(run=run_alter)

    delete = actions.add_parser("delete", parents=[parent], help="delete a topic and its data")
    add_topic_argument(delete)
    delete.set_defaults(run=run_delete)


def run_create(args: argparse.Namespace) -> int:
    topic = topic_name(args)
    with open_store(args, create=True) as store:
        try:
            store.create_topic(topic, args.partitions, parse_config_pairs(args.config))
        except compactlog.TopicExistsError:
            if not args.if_not_exists:
                raise
            print(f"Topic {topic} already exists.")
            return 0
    print(f"Created topic {topic}.")
    return 0


def run_list(args: argparse.Namespace) -> int:
    with open_store(args) as store:
        for name in store.topics():
            print(name)
    return 0


def config_entries(store: compactlog.Store, topic: str) -> list[ConfigEntry]:
    """Every effective config of ``topic`` with its source (:mod:`compactlog.config_sources`)."""
    return topic_config_entries(store.topic_overrides(topic), read_server_properties(store.data_dir))


def broker_configs_without_effect(store: compactlog.Store) -> dict[str, str]:
    """``name=value`` -> doc of each broker config set away from its default that has no effect here."""
    return {f"{d.name}={d.render(store.broker.get(d.name))}": d.described for d in BROKER_CONFIGS
            if d.no_effect and store.broker.get(d.name) != d.default}


def tombstone_horizon(store: compactlog.Store, topic: str, partition: int,
                      positions: ConsumerPositions | None) -> dict[str, Any]:
    """A partition's stored tombstones and the groups behind the oldest (None where unknown: a log that
    cannot be read, or offsets that cannot be)."""
    try:
        tombstones = stored_tombstones(store.log(topic, partition))
    except CompactLogError:  # the partition's error is already its uncleanable reason
        return {"tombstone_count": None, "oldest_tombstone_offset": None, "groups_behind_oldest_tombstone": None}
    horizon = partition_tombstones(positions or ConsumerPositions({}), topic, partition, tombstones.count,
                                   tombstones.oldest_offset)
    return {"tombstone_count": horizon.tombstone_count, "oldest_tombstone_offset": horizon.oldest_tombstone_offset,
            "groups_behind_oldest_tombstone": None if positions is None else list(horizon.groups_behind_oldest)}


def describe_topic(store: compactlog.Store, topic: str, all_configs: bool,
                   positions: ConsumerPositions | None = None) -> dict[str, Any]:
    partitions = []
    for info in store.describe(topic):
        entry = dataclasses.asdict(info)
        entry["segment_count"] = len(info.segments)
        entry.update(tombstone_horizon(store, topic, info.partition, positions))
        partitions.append(entry)
    entries = config_entries(store, topic)
    described = {"topic": topic, "partitions": partitions,
                 "configs": {e.name: e.value for e in entries if e.source == SOURCE_TOPIC},
                 "broker_configs_without_effect": broker_configs_without_effect(store)}
    if all_configs:
        described["all_configs"] = [dataclasses.asdict(e) for e in entries]
    return described


def _offset(value: int | None) -> str:
    return "-" if value is None else str(value)


def partition_line(p: dict[str, Any]) -> str:
    """One partition as ``describe`` prints it: Kafka's tab-separated ``Name: value`` fields."""
    answer = p["cleanability"]
    line = (f"\tPartition: {p['partition']}\tLogStart: {p['log_start_offset']}\tLogEnd: {p['log_end_offset']}"
            f"\tSize: {human_bytes(p['size_bytes'])}\tSegments: {p['segment_count']}")
    if answer["first_dirty_offset"] is not None:
        line += (f"\tClean: {human_bytes(answer['clean_bytes'])}\tDirty: {human_bytes(answer['dirty_bytes'])}"
                 f"\tUncleanable: {human_bytes(answer['uncleanable_bytes'])}\tDirtyRatio: {p['dirty_ratio']:.2f}"
                 f"\tFirstDirty: {_offset(p['first_dirty_offset'])}"
                 f"\tFirstUncleanable: {_offset(p['first_uncleanable_offset'])}"
                 f"\tCompactionDelay: {p['max_compaction_delay_ms']} ms")
    verdict = "yes" if answer["cleanable"] else "no"
    line += f"\tCleanable: {verdict} ({answer['detail']})"
    if p.get("tombstone_count") is not None:
        behind = p["groups_behind_oldest_tombstone"]
        groups = "unknown" if behind is None else ",".join(behind) or "-"
        line += f"\tTombstones: {p['tombstone_count']}"
        if p["oldest_tombstone_offset"] is not None:
            line += f"\tOldestTombstone: {p['oldest_tombstone_offset']}\tGroupsBehindIt: {groups}"
    return line


def print_topic(described: dict[str, Any], segments: bool) -> None:
    configs = ",".join(f"{k}={v}" for k, v in sorted(described["configs"].items()))
    print(f"Topic: {described['topic']}\tPartitionCount: {len(described['partitions'])}\tConfigs: {configs}")
    for p in described["partitions"]:
        print(partition_line(p))
        if segments:
            for s in p["segments"]:
                print(f"\t\tSegment: {s['base_offset']}\tRecords: {s['record_count']}"
                      f"\tSize: {human_bytes(s['size_bytes'])}\tMaxTimestamp: {s['max_timestamp']}"
                      + ("\t(active)" if s["active"] else ""))
    if "all_configs" in described:  # as kafka-configs --describe --all prints them
        print(f"All configs for topic {described['topic']} are:")
        for e in described["all_configs"]:
            synonyms = ", ".join(f"{s['source']}:{s['name']}={s['value']}" for s in e["synonyms"])
            print(f"  {e['name']}={e['value']} source={e['source']} synonyms={{{synonyms}}}")


def run_describe(args: argparse.Namespace) -> int:
    topic = optional_topic_name(args)
    with open_store(args) as store:
        positions, groups_error = read_consumer_positions(store)
        if topic:
            described = [describe_topic(store, topic, args.all, positions)]
        else:  # every topic: one whose metadata cannot be read shows its error, the others are described
            described = []
            for name in store.topics():
                try:
                    described.append(describe_topic(store, name, args.all, positions))
                except CompactLogError as e:
                    described.append({"topic": name, "error": str(e)})
        inert = broker_configs_without_effect(store)
        log_picture.write_pictures(args, store, topic)
    if args.json:
        print_json(described if not topic else described[0])
    else:
        for entry in described:
            if "error" in entry:
                print(f"Topic: {entry['topic']}\tError: {entry['error']}")
            else:
                print_topic(entry, args.segments)
        for setting, doc in inert.items():
            print(f"Note: {setting} (server.properties): {doc}")
        if groups_error is not None:
            print(f"Note: the consumer groups behind each tombstone are unknown: {groups_error}")
    return 1 if any("error" in entry for entry in described) else 0


def run_alter(args: argparse.Namespace) -> int:
    topic = topic_name(args)
    changes: dict[str, Any] = dict(parse_config_pairs(args.config))
    changes.update({name: None for name in args.delete_config})
    if not changes:
        raise UsageError("nothing to alter: give --config NAME=VALUE or --delete-config NAME")
    with open_store(args) as store:
        store.alter_topic_config(topic, changes)
    print(f"Altered topic {topic}.")
    return 0


def run_delete(args: argparse.Namespace) -> int:
    topic = topic_name(args)
    with open_store(args) as store:
        store.delete_topic(topic)
    print(f"Deleted topic {topic}.")
    return 0
