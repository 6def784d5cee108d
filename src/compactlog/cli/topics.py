"""``compactlog topics``: create, list, describe, alter and delete topics.

``describe`` shows what Kafka's ``kafka-topics --describe`` shows for a local log plus the cleaner's view of
each partition: offsets, size, segments, dirty ratio, first dirty and first uncleanable offsets, and why a
partition is uncleanable, if it is. It also names the data directory's settings (``server.properties``, set
away from their defaults) that are accepted for Kafka compatibility but have no effect here, and why.
"""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

import compactlog
from compactlog.config import BROKER_CONFIGS
from compactlog.errors import CompactLogError

from . import log_picture
from .common import UsageError, data_dir_parent, human_bytes, open_store, parse_config_pairs, print_json


def add_parser(commands: Any) -> None:
    parent = data_dir_parent()
    topics = commands.add_parser("topics", help="create, list, describe, alter and delete topics")
    actions = topics.add_subparsers(dest="action", metavar="ACTION", required=True)

    create = actions.add_parser("create", parents=[parent], help="create a topic")
    create.add_argument("name")
    create.add_argument("--partitions", type=int, default=1, help="number of partitions (default 1)")
    create.add_argument("--config", action="append", metavar="NAME=VALUE",
                        help="a topic config, Kafka's name (repeatable): --config cleanup.policy=compact")
    create.add_argument("--if-not-exists", action="store_true", help="succeed if the topic exists")
    create.set_defaults(run=run_create)

    listing = actions.add_parser("list", parents=[parent], help="list topics")
    listing.set_defaults(run=run_list)

    describe = actions.add_parser("describe", parents=[parent],
                                  help="partitions, offsets and the cleaner's view")
    describe.add_argument("name", nargs="?", help="the topic (default: every topic)")
    describe.add_argument("--segments", action="store_true", help="list every segment too")
    describe.add_argument("--json", action="store_true", help="machine-readable output")
    log_picture.add_arguments(describe)
    describe.set_defaults(run=run_describe)

    alter = actions.add_parser("alter", parents=[parent], help="change topic configs")
    alter.add_argument("name")
    alter.add_argument("--config", action="append", metavar="NAME=VALUE", help="set a config (repeatable)")
    alter.add_argument("--delete-config", action="append", metavar="NAME", default=[],
                       help="reset a config to the data directory's default (repeatable)")
    alter.set_defaults(run=run_alter)

    delete = actions.add_parser("delete", parents=[parent], help="delete a topic and its data")
    delete.add_argument("name")
    delete.set_defaults(run=run_delete)


def run_create(args: argparse.Namespace) -> int:
    with open_store(args, create=True) as store:
        try:
            store.create_topic(args.name, args.partitions, parse_config_pairs(args.config))
        except compactlog.TopicExistsError:
            if not args.if_not_exists:
                raise
            print(f"Topic {args.name} already exists.")
            return 0
    print(f"Created topic {args.name}.")
    return 0


def run_list(args: argparse.Namespace) -> int:
    with open_store(args) as store:
        for name in store.topics():
            print(name)
    return 0


def config_overrides(store: compactlog.Store, topic: str) -> dict[str, Any]:
    """The topic's configs that differ from the data directory's defaults."""
    config = store.topic_config(topic).to_properties()
    defaults = store.broker.topic_defaults().to_properties()
    return {name: value for name, value in config.items() if defaults.get(name) != value}


def broker_configs_without_effect(store: compactlog.Store) -> dict[str, str]:
    """``name=value`` -> doc of each broker config set away from its default that has no effect here."""
    return {f"{d.name}={d.render(store.broker.get(d.name))}": d.described for d in BROKER_CONFIGS
            if d.no_effect and store.broker.get(d.name) != d.default}


def describe_topic(store: compactlog.Store, topic: str) -> dict[str, Any]:
    partitions = []
    for info in store.describe(topic):
        entry = dataclasses.asdict(info)
        entry["segment_count"] = len(info.segments)
        partitions.append(entry)
    return {"topic": topic, "partitions": partitions, "configs": config_overrides(store, topic),
            "broker_configs_without_effect": broker_configs_without_effect(store)}


def _offset(value: int | None) -> str:
    return "-" if value is None else str(value)


def print_topic(described: dict[str, Any], segments: bool) -> None:
    configs = ",".join(f"{k}={v}" for k, v in sorted(described["configs"].items()))
    print(f"Topic: {described['topic']}\tPartitionCount: {len(described['partitions'])}\tConfigs: {configs}")
    for p in described["partitions"]:
        reason = p["uncleanable_reason"]
        print(f"\tPartition: {p['partition']}\tLogStart: {p['log_start_offset']}"
              f"\tLogEnd: {p['log_end_offset']}"
              f"\tSize: {human_bytes(p['size_bytes'])}\tSegments: {p['segment_count']}"
              f"\tDirtyRatio: {p['dirty_ratio']:.2f}\tFirstDirty: {_offset(p['first_dirty_offset'])}"
              f"\tFirstUncleanable: {_offset(p['first_uncleanable_offset'])}"
              + (f"\tUncleanable: {reason}" if reason else ""))
        if segments:
            for s in p["segments"]:
                print(f"\t\tSegment: {s['base_offset']}\tRecords: {s['record_count']}"
                      f"\tSize: {human_bytes(s['size_bytes'])}\tMaxTimestamp: {s['max_timestamp']}"
                      + ("\t(active)" if s["active"] else ""))


def run_describe(args: argparse.Namespace) -> int:
    with open_store(args) as store:
        if args.name:
            described = [describe_topic(store, args.name)]
        else:  # every topic: one whose metadata cannot be read shows its error, the others are described
            described = []
            for name in store.topics():
                try:
                    described.append(describe_topic(store, name))
                except CompactLogError as e:
                    described.append({"topic": name, "error": str(e)})
        inert = broker_configs_without_effect(store)
        log_picture.write_pictures(args, store)
    if args.json:
        print_json(described if not args.name else described[0])
    else:
        for topic in described:
            if "error" in topic:
                print(f"Topic: {topic['topic']}\tError: {topic['error']}")
            else:
                print_topic(topic, args.segments)
        for setting, doc in inert.items():
            print(f"Note: {setting} (server.properties): {doc}")
    return 1 if any("error" in topic for topic in described) else 0


def run_alter(args: argparse.Namespace) -> int:
    changes: dict[str, Any] = dict(parse_config_pairs(args.config))
    changes.update({name: None for name in args.delete_config})
    if not changes:
        raise UsageError("nothing to alter: give --config NAME=VALUE or --delete-config NAME")
    with open_store(args) as store:
        store.alter_topic_config(args.name, changes)
    print(f"Altered topic {args.name}.")
    return 0


def run_delete(args: argparse.Namespace) -> int:
    with open_store(args) as store:
        store.delete_topic(args.name)
    print(f"Deleted topic {args.name}.")
    return 0
