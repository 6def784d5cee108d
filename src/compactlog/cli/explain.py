"""``compactlog explain --topic T --key K [--partition P]``: every stored record of one key and, for each
one still stored, why it is there and when the rules let it go (:mod:`compactlog.key_history`).

Every partition of the topic is searched, as a producer may have put the key in any of them (its
partitioner's choice or its own: :mod:`compactlog.key_lookup`), unless ``--partition`` names one; the
partitions the default partitioners would pick are printed as hints. Sealed segments whose key statistics
exclude the key are not read; the active segment always is. Each partition is opened read-only: explaining
changes nothing. A partition that cannot be read (its log cannot be opened, or a segment that could hold the
key cannot be read) is named and the others are still explained; the exit code is then 1, as the key may be
stored there. ``--json`` prints the same as JSON.

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
from ..errors import CompactLogError
from ..key_history import KeyRecord, RecordFate, explain_key, format_ms
from ..key_lookup import (
    hints_text,
    partitioner_hints,
    partitions_text,
    partitions_to_search,
    read_key_row_groups,
    rows_of_key,
)
from ..log import Log
from ..partition_view import planner_state, read_only_log
from ..sealed_segment import READ_ERRORS, open_parquet
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
    explain.add_argument("--partition", type=int,
                         help="search only this partition (default: every partition of the topic)")
    explain.add_argument("--json", action="store_true", help="machine-readable output")
    explain.set_defaults(run=run)


def key_records(log: Log, key: bytes) -> list[KeyRecord]:
    """Every stored record of ``key`` in the log's live segments, in offset order, with its file: of each
    sealed segment only the row groups whose key statistics admit the key
    (:func:`compactlog.key_lookup.key_row_groups`), the active segment whole."""
    sealed, active = log.snapshot()
    found: list[KeyRecord] = []
    parts: list[tuple[str, pa.Table]] = []
    for segment in sealed:
        try:
            with open_parquet(segment.path if segment.source is None else segment.source) as file:
                table, _ = read_key_row_groups(file, key, KEY_COLUMNS)
        except READ_ERRORS as e:
            raise segment.corrupt(e) from e
        parts.append((segment.path, segment.verified(table)))
    batches = list(active.read_batches(active.base_offset))
    if batches:
        parts.append((active.path, pa.Table.from_batches(batches).select(KEY_COLUMNS)))
    for path, table in parts:
        rows = rows_of_key(table, key)
        name = path.rsplit("/", 1)[-1]
        for offset, timestamp, value_valid, horizon in zip(
                rows.column("offset").to_pylist(), rows.column("timestamp").to_pylist(),
                pc.is_valid(rows.column("value")).to_pylist(), rows.column("delete_horizon_ms").to_pylist(),
                strict=True):
            found.append(KeyRecord(offset, timestamp, name, not value_valid, horizon))
    return sorted(found, key=lambda r: r.offset)


def explain(store: Store, topic: str, key: bytes, partition: int) -> tuple[PartitionState, list[RecordFate]]:
    """The fates of the records of ``key`` stored in one partition (none when it holds none)."""
    config = store.topic_config(topic)
    with read_only_log(store, topic, partition) as log:
        records = key_records(log, key)
        state = planner_state(log, config, store.checkpoint.read().get((topic, partition)))
    return state, explain_key(records, state, store.clock(), config.roll_ms, config.delete_retention_ms)


def explain_topic(store: Store, topic: str, key: bytes, partitions: list[int]
                  ) -> tuple[dict[int, tuple[PartitionState, list[RecordFate]]], dict[int, str]]:
    """:func:`explain` of each of ``partitions`` (every one a key may be in:
    :func:`compactlog.key_lookup.partitions_to_search`), and why each partition that could not be searched
    could not (its log cannot be opened or a segment read): the key may be there."""
    explained, unreadable = {}, {}
    for partition in partitions:
        try:
            explained[partition] = explain(store, topic, key, partition)
        except CompactLogError as e:
            unreadable[partition] = str(e)
    return explained, unreadable


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
        count = store.partitions(args.topic)
        searched = partitions_to_search(count, args.partition, args.topic)
        explained, unreadable = explain_topic(store, args.topic, key, searched)
        now = store.clock()
        # __consumer_offsets is read whole: only when the key has a tombstone to ask about.
        has_tombstone = any(f.record.tombstone for _, fates in explained.values() for f in fates)
        positions, groups_error = read_consumer_positions(store) if has_tombstone else (ConsumerPositions({}), None)
    found = [p for p, (_, fates) in explained.items() if fates]
    behind = {p: tombstone_readers(positions, args.topic, p, fates) for p, (_, fates) in explained.items()}
    if args.json:
        print_json({"topic": args.topic, "key": args.key, "now_ms": now, "partitions_searched": searched,
                    "partitioner_hints": partitioner_hints(key, count), "found_in": found,
                    "unreadable": {str(p): why for p, why in unreadable.items()},
                    "records": [{"partition": p, **fate_dict(f, behind[p])}
                                for p in found for f in explained[p][1]]})
        return 1 if unreadable else 0
    where = partitions_text(args.topic, searched)
    scope = f"the {count} partition(s) of {args.topic}" if args.partition is None else f"{where} only (--partition)"
    print(f"Key {args.key!r}: searched {scope} at {format_ms(now)}; found in "
          f"{partitions_text(args.topic, found) if found else 'none'}. A default partitioner picks (a hint only: "
          f"a producer may choose any partition): {hints_text(args.topic, key, count)}")
    for partition in found:
        state, fates = explained[partition]
        print(f"{args.topic}-{partition}: {len(fates)} stored record(s); log [{state.log_start_offset}, "
              f"{state.log_end_offset}), cleaner checkpoint {'-' if state.checkpoint is None else state.checkpoint}")
        for fate in fates:
            print(fate_line(fate))
            if fate.record.tombstone:
                print(readers_line(fate.record.offset, behind[partition], groups_error,
                                   positions is not None and bool(topic_groups(positions, args.topic))))
    for partition, why in unreadable.items():
        print(f"{args.topic}-{partition}: UNREADABLE, not searched (the key may be stored there): {why}")
    return 1 if unreadable else 0
