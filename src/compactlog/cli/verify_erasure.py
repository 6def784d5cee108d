"""``compactlog verify-erasure --topic T --key K [--partition P]``: prove that no value of a deleted key
survives anywhere in its topic's partition directories (:mod:`compactlog.erasure`): live segments,
``.cleaned``, ``.swap`` and ``.deleted`` files, producer snapshots and every other file.

Every partition of the topic is searched, as a producer may have put the key in any of them (its
partitioner's choice or its own: :mod:`compactlog.key_lookup`); ``--partition`` narrows the search to one.
The partitions the default partitioners would pick are printed as hints, and where the key was found. A
sealed segment whose key statistics exclude the key is not read (the active segment always is).

Beyond the disk, the consumers (:mod:`compactlog.consumer_horizon`): the consumer groups of the topic (those
with a committed offset in ``__consumer_offsets`` for any of its partitions, or whose members subscribe to it)
that have not read past the key's tombstone are named. Such a group may still hold the value it read
before: the key is not gone from every consumer's view until it reads the tombstone.

Exit codes, decided for each partition searched, the worst deciding (1, then 3, then 0): 0 only when the
key's newest record in the partition is a tombstone (or no record of the key is left there at all), no older
value of it survives in any file, and every group of the topic has read past the tombstone; 1 when a value
survives (each is listed with its file and when the rules will remove it), when the key is live, or when a
file cannot be read, whatever the consumers did; 3 when nothing survives on disk but a group has not read
past the tombstone, or the groups' offsets cannot be read. With no record of the key left, the tombstone's
offset is unknown and the disk alone decides. The files are scanned before any partition is
opened, and each is opened read-only: the proof changes nothing.

A key of which nothing at all is stored passes (exit 0) with its own verdict, ``NOTHING STORED``: "no
record of this key is stored" is true and provable, and it is the end state of every erasure once the
tombstone has passed ``delete.retention.ms``; but a key never written, or misspelt, reads the same, so the
verdict says so rather than claiming the key was erased. Under ``--partition`` a verdict of 0 says that the
other partitions were not searched. An unknown topic or partition is an error (exit 1).
"""

from __future__ import annotations

import argparse
from typing import Any

from ..consumer_horizon import (
    EXIT_ERASED,
    EXIT_GROUPS_BEHIND,
    EXIT_SURVIVES_ON_DISK,
    ConsumerPositions,
    erasure_exit_code,
    groups_behind,
    worst_exit_code,
)
from ..erasure import ErasureScan, FoundRecord, scan_topic, transit_fate
from ..errors import CompactLogError
from ..key_history import KeyRecord, explain_key, format_ms
from ..key_lookup import hints_text, partitions_text, partitions_to_search
from ..partition_view import planner_state, read_only_log
from ..store import Store
from .common import data_dir_parent, open_store
from .consumer_positions import read_consumer_positions


def add_parser(commands: Any) -> None:
    verify = commands.add_parser("verify-erasure", parents=[data_dir_parent()],
                                 help="prove no value of a deleted key survives on disk",
                                 description=__doc__.split("\n\n", 1)[1] if __doc__ else None)
    verify.add_argument("--topic", required=True)
    verify.add_argument("--key", required=True, help="the key (UTF-8 text)")
    verify.add_argument("--partition", type=int,
                        help="search only this partition (default: every partition of the topic)")
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


def _found(scan: ErasureScan) -> bool:
    """Anything of the key in the partition, or a file there that could hide it."""
    return not scan.nothing_stored


def _scanned_line(name: str, key: str, scan: ErasureScan) -> str:
    skipped = (f" ({len(scan.skipped)} sealed segment file(s) not read: their key statistics exclude it)"
               if scan.skipped else "")
    return f"Scanned {len(scan.files)} file(s) of {name} for key {key!r}: {len(scan.records)} record(s) found{skipped}."


def _report_partition(topic: str, partition: int, key: str, scan: ErasureScan, fates: dict[int, str],
                      delay: int, positions: ConsumerPositions | None,
                      groups_error: str | None) -> tuple[int, list[str] | None]:
    """Print what the scan of one partition found; its exit code and the groups behind its tombstone (None:
    unknown)."""
    newest = scan.newest
    print(_scanned_line(f"{topic}-{partition}", key, scan))
    behind: list[str] | None = []
    if newest is None:
        print("  no record of the key is left here (its tombstone, if any, has been removed too; or it was "
              "never written here): which consumer groups read its tombstone cannot be told")
    elif newest.tombstone:
        horizon = "" if newest.delete_horizon_ms < 0 else f", delete horizon {format_ms(newest.delete_horizon_ms)}"
        print(f"  newest record: tombstone at {_where(newest)}{horizon}")
        behind = None if positions is None else groups_behind(positions, topic, partition, newest.offset)
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
    return erasure_exit_code(scan.erased, behind), behind


def run(args: argparse.Namespace) -> int:
    key = args.key.encode()
    with open_store(args) as store:
        count = store.partitions(args.topic)
        searched = partitions_to_search(count, args.partition, args.topic)
        scans = scan_topic(store.data_dir, args.topic, searched, key)  # before anything opens a partition
        fates = {p: live_fates(store, args.topic, p, scan) for p, scan in scans.items() if scan.records}
        delay = store.topic_config(args.topic).file_delete_delay_ms
        # __consumer_offsets is read whole: only when there is a tombstone to ask about.
        asked = any(scan.newest is not None and scan.newest.tombstone for scan in scans.values())
        positions, groups_error = read_consumer_positions(store) if asked else (None, None)
    where = partitions_text(args.topic, searched)
    scope = f"the {count} partition(s) of {args.topic}" if args.partition is None else f"{where} only (--partition)"
    print(f"Searching {scope} for key {args.key!r}; a default partitioner picks (a hint only: a producer may "
          f"choose any partition): {hints_text(args.topic, key, count)}")
    codes: dict[int, int] = {}
    behind: dict[int, list[str] | None] = {}
    for partition, scan in scans.items():
        if _found(scan):
            codes[partition], behind[partition] = _report_partition(
                args.topic, partition, args.key, scan, fates.get(partition, {}), delay, positions, groups_error)
    empty = [p for p, scan in scans.items() if not _found(scan)]
    if empty:
        skipped = sum(len(scans[p].skipped) for p in empty)
        print(f"Nothing of key {args.key!r} in {partitions_text(args.topic, empty)}: "
              f"{sum(len(scans[p].files) for p in empty)} file(s) scanned"
              + (f", {skipped} sealed segment file(s) not read: their key statistics exclude it." if skipped else "."))
    if codes:
        print(f"Found in {partitions_text(args.topic, sorted(codes))}.")
    else:
        print("  no record of the key is left (its tombstone, if any, has been removed too; or it was never "
              "written): which consumer groups read its tombstone cannot be told")
    code = worst_exit_code(codes.values())
    narrowed = "" if args.partition is None or count == 1 else (
        f" Only {where} was searched (--partition): the key may be stored in another partition.")
    if not codes:
        print(f"NOTHING STORED: no record of key {args.key!r} was found in {where}: nothing stored, nothing to "
              f"erase (a key never written, or misspelt, reads the same: check the key and topic).{narrowed}")
    elif code == EXIT_ERASED:
        print(f"ERASED: no value of key {args.key!r} survives in {where}.{narrowed}")
    elif code == EXIT_GROUPS_BEHIND:
        late = [p for p, c in codes.items() if c == EXIT_GROUPS_BEHIND]
        groups = [behind[p] for p in late]
        in_partitions = "" if len(searched) == 1 else f" in {partitions_text(args.topic, late)}"
        why = ("the consumer groups' offsets cannot be read" if any(g is None for g in groups) else
               f"{len({name for g in groups for name in g or ()})} consumer group(s) have not read past its "
               f"tombstone{in_partitions}")
        print(f"ERASED FROM THE LOG, NOT FROM EVERY CONSUMER'S VIEW: no value of key {args.key!r} survives in "
              f"{where}, but {why}.")
    else:
        failed = sorted(p for p, c in codes.items() if c == EXIT_SURVIVES_ON_DISK)
        live = [p for p in failed if (newest := scans[p].newest) is not None and not newest.tombstone]
        survives = [p for p in failed if p not in live]
        how = [f"{verb} in {partitions_text(args.topic, parts)}"
               for verb, parts in (("survives", survives), ("is live", live)) if parts]
        print(f"NOT ERASED: key {args.key!r} {' and '.join(how)}.")
    return code
