"""``compactlog consume``: print a topic's records, as ``kafka-console-consumer --property print.key=true``.

Each record prints as ``key:value`` (``null`` for a missing key or a tombstone's value, as Kafka prints
them), partitions in order, each partition in offset order. The console consumer starts at the log end
unless told ``--from-beginning``; this command has no follow mode, so it reads from the log start by
default (``--from-beginning`` is accepted for Kafka's sake) or from ``--offset N`` of ``--partition``.
``--latest`` prints the compacted view instead: the newest value of every live key, as a consumer that read
the whole partition and kept a table would see it (tombstoned keys absent).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..store import Store
from .common import UsageError, data_dir_parent, open_store


def add_parser(commands: Any) -> None:
    consume = commands.add_parser("consume", parents=[data_dir_parent()], help="print a topic's records",
                                  description=__doc__.split("\n\n", 1)[1] if __doc__ else None)
    consume.add_argument("--topic", required=True)
    consume.add_argument("--partition", type=int, help="only this partition (default: all)")
    start = consume.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true", help="from the log start (the default)")
    start.add_argument("--offset", type=int, help="from this offset (needs --partition)")
    consume.add_argument("--latest", action="store_true", help="the newest value of every live key only")
    consume.add_argument("--max-messages", type=int, help="stop after this many records")
    consume.add_argument("--key-separator", default=":", help="between key and value (default ':')")
    consume.add_argument("--print-offset", action="store_true",
                         help="prefix each record with partition/offset")
    consume.set_defaults(run=run)


def _text(value: bytes | None) -> str:
    return "null" if value is None else value.decode("utf-8", errors="backslashreplace")


def latest_per_key(table: pa.Table) -> pa.Table:
    """The newest record of every key whose newest record is not a tombstone, in offset order."""
    if table.num_rows == 0:
        return table
    keyed = table.filter(pc.is_valid(table.column("key")))
    indices = pa.table({"key": keyed.column("key"), "i": pa.array(range(keyed.num_rows), pa.int64())})
    newest = indices.group_by("key", use_threads=False).aggregate([("i", "max")]).column("i_max")
    latest = keyed.take(np.sort(newest.to_numpy()))
    return latest.filter(pc.is_valid(latest.column("value")))


def run(args: argparse.Namespace) -> int:
    if args.offset is not None and args.partition is None:
        raise UsageError("--offset needs --partition")
    printed = 0
    with open_store(args) as store:
        count = store.partitions(args.topic)
        partitions = [args.partition] if args.partition is not None else list(range(count))
        for partition in partitions:
            table = _read(store, args.topic, partition, args.offset)
            if args.latest:
                table = latest_per_key(table)
            offsets = table.column("offset").to_pylist()
            keys = table.column("key").to_pylist()
            values = table.column("value").to_pylist()
            for offset, key, value in zip(offsets, keys, values, strict=True):
                if args.max_messages is not None and printed >= args.max_messages:
                    return 0
                prefix = f"{partition}/{offset}\t" if args.print_offset else ""
                sys.stdout.write(f"{prefix}{_text(key)}{args.key_separator}{_text(value)}\n")
                printed += 1
    return 0


def _read(store: Store, topic: str, partition: int, offset: int | None) -> pa.Table:
    start = store.log_start_offset(topic, partition) if offset is None else offset
    return store.read_arrow(topic, partition, start, columns=["offset", "key", "value"])
