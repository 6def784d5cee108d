"""``compactlog explain --topic T --key K [--partition P]``: every stored record of one key and, for each
one still stored, why it is there and when the rules let it go (:mod:`compactlog.key_history`).

The partition is Kafka's default partitioner's (murmur2 of the key) unless ``--partition`` is given. The
partition is opened read-only: explaining changes nothing. ``--json`` prints the same as JSON.
"""

from __future__ import annotations

import argparse
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ..cleaner.plan import PartitionState
from ..key_history import KeyRecord, RecordFate, explain_key, format_ms
from ..log import Log
from ..partition_view import planner_state, read_only_log
from ..partitioner import partition_for_key
from ..store import Store
from .common import data_dir_parent, open_store, print_json

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


def fate_dict(fate: RecordFate) -> dict[str, Any]:
    r = fate.record
    return {"offset": r.offset, "timestamp": r.timestamp, "segment": r.segment, "section": fate.section,
            "status": fate.status, "tombstone": r.tombstone,
            "delete_horizon_ms": None if r.delete_horizon_ms < 0 else r.delete_horizon_ms,
            "reason": fate.reason, "removable_at_ms": fate.removable_at_ms}


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
    if args.json:
        print_json({"topic": args.topic, "partition": partition, "key": args.key, "now_ms": now,
                    "records": [fate_dict(f) for f in fates]})
        return 0
    how = "given" if args.partition is not None else "murmur2 of the key"
    print(f"Key {args.key!r} in {args.topic}-{partition} (partition: {how}) at {format_ms(now)}: "
          f"{len(fates)} stored record(s); log [{state.log_start_offset}, {state.log_end_offset}), "
          f"cleaner checkpoint {'-' if state.checkpoint is None else state.checkpoint}")
    for fate in fates:
        print(fate_line(fate))
    return 0
