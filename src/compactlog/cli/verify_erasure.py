"""``compactlog verify-erasure --topic T --key K``: prove that no value of a deleted key survives anywhere in
its partition's directory (:mod:`compactlog.erasure`): live segments, ``.cleaned``, ``.swap`` and
``.deleted`` files, producer snapshots and every other file.

Beyond the disk, the consumers (:mod:`compactlog.consumer_horizon`): the consumer groups of the topic (those
with a committed offset in ``__consumer_offsets`` for any of its partitions, or whose members subscribe to it)
that have not read past the key's tombstone are named. Such a group may still hold the value it read
before: the key is not gone from every consumer's view until it reads the tombstone.

Exit codes: 0 only when the key's newest record is a tombstone (or no record of the key is left at all), no
older value of it survives in any file, and every group of the topic has read past the tombstone; 1 when a
value survives (each is listed with its file and when the rules will remove it), when the key is live, or
when a file cannot be read, whatever the consumers did; 3 when nothing survives on disk but a group has not
read past the tombstone, or the groups' offsets cannot be read. With no record of the key left, the
tombstone's offset is unknown and the disk alone decides. The files are scanned before the partition is
opened, and it is opened read-only: the proof changes nothing.

A key of which nothing at all is stored passes (exit 0) with its own verdict, ``NOTHING STORED``: "no
record of this key is stored" is true and provable, and it is the end state of every erasure once the
tombstone has passed ``delete.retention.ms``; but a key never written, or misspelt, reads the same, so the
verdict says so rather than claiming the key was erased. An unknown topic or partition is an error (exit 1).
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from ..consumer_horizon import EXIT_ERASED, EXIT_GROUPS_BEHIND, erasure_exit_code, groups_behind
from ..erasure import ErasureScan, FoundRecord, scan_partition, transit_fate
from ..errors import CompactLogError, UnknownTopicOrPartitionError
from ..key_history import KeyRecord, explain_key, format_ms
from ..partition_view import planner_state, read_only_log
from ..store import Store
from .common import data_dir_parent, open_store
from .consumer_positions import read_consumer_positions
from .explain import key_partition


def add_parser(commands: Any) -> None:
    verify = commands.add_parser("verify-erasure", parents=[data_dir_parent()],
                                 help="prove no value of a deleted key survives on disk",
                                 description=__doc__.split("\n\n", 1)[1] if __doc__ else None)
    verify.add_argument("--topic", required=True)
    verify.add_argument("--key", required=True, help="the key (UTF-8 text)")
    verify.add_argument("--partition", type=int, help="default: the key's partition by murmur2")
    verify.set_defaults(run=run)


def live_fates(store: Store, topic: str, partition: int, scan: ErasureScan) -> dict[int, str]:
    """offset -> why a value still in a live segment is there and when it may go (the explain rules)."""
    config = store.topic_config(topic)
    live = sorted({r.offset: r for r in scan.records if r.live_file}.values(), key=lambda r: r.offset)
    records = [KeyRecord(r.offset, r.timestamp, r.file, r.tombstone, r.delete_horizon_ms) for r in live]
    try:
        with read_only_log(store, topic, partition) as log:
            state = planner_state(log, config, store.checkpoint.read().get((topic, partition)))
    except CompactLogError as e:
        return {r.offset: f"cannot tell: the partition cannot be opened read-only ({e})" for r in records}
    fates = explain_key(records, state, store.clock(), config.roll_ms, config.delete_retention_ms)
    return {f.record.offset: f.reason + ("" if f.removable_at_ms is None else
                                         f"; may go from {format_ms(f.removable_at_ms)}") for f in fates}


def _where(record: FoundRecord) -> str:
    return f"offset {record.offset} ({format_ms(record.timestamp)}) in {record.file}"


def run(args: argparse.Namespace) -> int:
    key = args.key.encode()
    with open_store(args) as store:
        partition = key_partition(store, args.topic, key, args.partition)
        if partition not in range(store.partitions(args.topic)):
            raise UnknownTopicOrPartitionError(f"topic {args.topic!r} has no partition {partition}")
        directory = os.path.join(store.data_dir, f"{args.topic}-{partition}")
        scan = scan_partition(directory, key)  # before anything opens the partition
        fates = live_fates(store, args.topic, partition, scan) if scan.records else {}
        delay = store.topic_config(args.topic).file_delete_delay_ms
        # __consumer_offsets is read whole: only when there is a tombstone to ask about.
        asked = scan.newest is not None and scan.newest.tombstone
        positions, groups_error = read_consumer_positions(store) if asked else (None, None)
    name = f"{args.topic}-{partition}"
    newest = scan.newest
    print(f"Scanned {len(scan.files)} file(s) of {name} for key {args.key!r}: {len(scan.records)} record(s) found.")
    behind: list[str] | None = []
    if newest is None:
        print("  no record of the key is left (its tombstone, if any, has been removed too; or it was never "
              "written): which consumer groups read its tombstone cannot be told")
    elif newest.tombstone:
        horizon = "" if newest.delete_horizon_ms < 0 else f", delete horizon {format_ms(newest.delete_horizon_ms)}"
        print(f"  newest record: tombstone at {_where(newest)}{horizon}")
        behind = None if positions is None else groups_behind(positions, args.topic, partition, newest.offset)
    else:
        print(f"  LIVE: the newest record is a value, at {_where(newest)}")
    for record in scan.surviving_values:
        fate = fates.get(record.offset, "") if record.live_file else transit_fate(record.file, delay)
        print(f"  SURVIVES: value at {_where(record)}: {fate}")
    for file, position in scan.key_bytes:
        print(f"  SURVIVES: the key's bytes in {file} at byte {position}")
    for file, why in scan.unreadable.items():
        print(f"  UNREADABLE: {file}: {why} (nothing can be proven about it)")
    if behind is None:
        print(f"  CONSUMERS UNKNOWN: the consumer groups' offsets cannot be read: {groups_error}")
    elif behind and newest is not None:
        print(f"  CONSUMERS BEHIND: {len(behind)} consumer group(s) have not read past the tombstone at offset "
              f"{newest.offset}: {', '.join(behind)} (each may still hold the value it read; it learns of the "
              "deletion when it reads the tombstone)")
    code = erasure_exit_code(scan.erased, behind)
    if code == EXIT_ERASED and scan.nothing_stored:
        print(f"NOTHING STORED: no record of key {args.key!r} was found in {name}: nothing stored, nothing to "
              "erase (a key never written, or misspelt, reads the same: check the key and topic).")
    elif code == EXIT_ERASED:
        print(f"ERASED: no value of key {args.key!r} survives in {name}.")
    elif code == EXIT_GROUPS_BEHIND:
        why = ("the consumer groups' offsets cannot be read" if behind is None else
               f"{len(behind)} consumer group(s) have not read past its tombstone")
        print(f"ERASED FROM THE LOG, NOT FROM EVERY CONSUMER'S VIEW: no value of key {args.key!r} survives in "
              f"{name}, but {why}.")
    else:
        live = newest is not None and not newest.tombstone
        print(f"NOT ERASED: key {args.key!r} {'is live' if live else 'survives'} in {name}.")
    return code
