"""``compactlog explain --topic T --key K [--partition P]``: every stored record of one key and, for each
one still stored, why it is there and when the rules let it go (:mod:`compactlog.key_history`).

The partition is Kafka's default partitioner's (murmur2 of the key) unless ``--partition`` is given. The
partition is opened read-only: explaining changes nothing. ``--json`` prints the same as JSON.

For each tombstone of the key it also names the consumer groups of the topic that have not read past it
(:mod:`compactlog.consumer_horizon`: those with a committed offset for a partition of the topic, or whose
members subscribe to it, whose offset for this partition is not past the tombstone): a group that read the
key's value before may still hold it until it reads the tombstone.
"""

from __future__ import annotations

import argparse
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ..cleaner.plan import PartitionState
from ..consumer_horizon import ConsumerPositions, groups_behind, topic_groups
from ..key_history import KeyRecord, RecordFate, explain_key, format_ms
from ..log import Log
from ..partition_view import planner_state, read_only_log
from ..partitioner import partition_for_key
from ..store import Store
from .common import data_dir_parent, open_store, print_json
from .consumer_positions import read_consumer_positions

KEY_COLUMNS = ["offset", "timestamp", "key", "value", "delete_horizon_ms"]


def add_parser(commands: Any) -> None:
    explain = commands.add_parser("explain", parents=[data_dir_parent()],
                                  help="why a key's older records are still stored, and when they go",
                                  description=__doc__.split("\n\n", 1)[1] if __doc__ else None)
    explain.add_argument("--topic", required=True)
    explain.add_argument("--key", required=True, help="the key (UTF-8 text)")
    explain.add_argument("--partition", type=int, help="default: the key's partition by murmur2")
    explain.add_argument("--json", action="store_true", help="machine-readable output")
    explain.set_defaults(run=run)


def key_partition(store: Store, topic: str, key: bytes, partition: int | None) -> int:
    return partition if partition is not None else partition_for_key(key, store.partitions(topic))


def key_records(log: Log, key: bytes) -> list[KeyRecord]:
    """Every stored record of ``key`` in the log's live segments, in offset order, with its file."""
    sealed, active = log.snapshot()
    found: list[KeyRecord] = []
    parts: list[tuple[str, pa.Table]] = [(s.path, s.read(columns=KEY_COLUMNS)) for s in sealed]
    batches = list(active.read_batches(active.base_offset))
    if batches:
        parts.append((active.path, pa.Table.from_batches(batches).select(KEY_COLUMNS)))
    for path, table in parts:
        rows = table.filter(pc.fill_null(pc.equal(table.column("key"), pa.scalar(key, pa.binary())), False))
        name = path.rsplit("/", 1)[-1]
        for offset, timestamp, value_valid, horizon in zip(
                rows.column("offset").to_pylist(), rows.column("timestamp").to_pylist(),
                pc.is_valid(rows.column("value")).to_pylist(), rows.column("delete_horizon_ms").to_pylist(),
                strict=True):
            found.append(KeyRecord(offset, timestamp, name, not value_valid, horizon))
    return sorted(found, key=lambda r: r.offset)


def explain(store: Store, topic: str, key: bytes, partition: int) -> tuple[PartitionState, list[RecordFate]]:
    config = store.topic_config(topic)
    with read_only_log(store, topic, partition) as log:
        records = key_records(log, key)
        state = planner_state(log, config, store.checkpoint.read().get((topic, partition)))
    return state, explain_key(records, state, store.clock(), config.roll_ms, config.delete_retention_ms)


def tombstone_readers(positions: ConsumerPositions | None, topic: str, partition: int,
                      fates: list[RecordFate]) -> dict[int, list[str] | None]:
    """Offset of each tombstone of the key -> the groups that have not read past it (None: unknown)."""
    return {f.record.offset: None if positions is None else groups_behind(positions, topic, partition, f.record.offset)
            for f in fates if f.record.tombstone}


def fate_dict(fate: RecordFate, behind: dict[int, list[str] | None]) -> dict[str, Any]:
    r = fate.record
    described = {"offset": r.offset, "timestamp": r.timestamp, "segment": r.segment, "section": fate.section,
                 "status": fate.status, "tombstone": r.tombstone,
                 "delete_horizon_ms": None if r.delete_horizon_ms < 0 else r.delete_horizon_ms,
                 "reason": fate.reason, "removable_at_ms": fate.removable_at_ms}
    if r.tombstone:
        described["groups_not_read_past"] = behind[r.offset]
    return described


def readers_line(offset: int, behind: dict[int, list[str] | None], groups_error: str | None,
                 topic_has_groups: bool) -> str:
    """What ``explain`` prints under a tombstone about the groups that have not read past it."""
    groups = behind[offset]
    if groups is None:
        return f"    consumer groups: cannot be read ({groups_error})"
    if groups:
        return f"    consumer groups not past it: {', '.join(groups)}"
    if topic_has_groups:
        return "    consumer groups: every group of the topic has read past it"
    return "    consumer groups: none consumes the topic"


def fate_line(fate: RecordFate) -> str:
    r = fate.record
    goes = "" if fate.removable_at_ms is None else f"; may go from {format_ms(fate.removable_at_ms)}"
    return (f"  offset {r.offset}\t{format_ms(r.timestamp)}\t{r.segment}\t{fate.section}\t{fate.status}: "
            f"{fate.reason}{goes}")


def run(args: argparse.Namespace) -> int:
    key = args.key.encode()
    with open_store(args) as store:
        partition = key_partition(store, args.topic, key, args.partition)
        state, fates = explain(store, args.topic, key, partition)
        now = store.clock()
        # __consumer_offsets is read whole: only when the key has a tombstone to ask about.
        has_tombstone = any(f.record.tombstone for f in fates)
        positions, groups_error = read_consumer_positions(store) if has_tombstone else (ConsumerPositions({}), None)
    behind = tombstone_readers(positions, args.topic, partition, fates)
    if args.json:
        print_json({"topic": args.topic, "partition": partition, "key": args.key, "now_ms": now,
                    "records": [fate_dict(f, behind) for f in fates]})
        return 0
    how = "given" if args.partition is not None else "murmur2 of the key"
    print(f"Key {args.key!r} in {args.topic}-{partition} (partition: {how}) at {format_ms(now)}: "
          f"{len(fates)} stored record(s); log [{state.log_start_offset}, {state.log_end_offset}), "
          f"cleaner checkpoint {'-' if state.checkpoint is None else state.checkpoint}")
    for fate in fates:
        print(fate_line(fate))
        if fate.record.tombstone:
            print(readers_line(fate.record.offset, behind, groups_error,
                               positions is not None and bool(topic_groups(positions, args.topic))))
    return 0
