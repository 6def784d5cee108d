"""``compactlog produce``: records from stdin, one a line, as ``kafka-console-producer`` reads them.

With ``--property``-style defaults of Kafka's console producer set to ``parse.key=true`` and
``key.separator=:``: a line ``key:value`` is a keyed record, partitioned by Kafka's murmur2 partitioner
unless ``--partition`` is given. ``--null-marker M`` makes a value equal to ``M`` a tombstone (Kafka's
``null.marker``). ``--no-key`` reads whole lines as keyless values (refused by compacted topics).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .common import UsageError, data_dir_parent, open_store


def add_parser(commands: Any) -> None:
    produce = commands.add_parser("produce", parents=[data_dir_parent()],
                                  help="append records read from stdin",
                                  description=__doc__.split("\n\n", 1)[1] if __doc__ else None)
    produce.add_argument("--topic", required=True)
    produce.add_argument("--partition", type=int, help="append every record to this partition")
    produce.add_argument("--key-separator", default=":", help="between key and value (default ':')")
    produce.add_argument("--null-marker", help="a value equal to this is a tombstone (a null value)")
    produce.add_argument("--no-key", action="store_true", help="lines are values; records have no key")
    produce.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if not args.key_separator:
        raise UsageError("--key-separator cannot be empty")
    count = 0
    with open_store(args) as store, store.producer() as producer:
        for number, raw in enumerate(sys.stdin.buffer, start=1):
            line = raw.rstrip(b"\r\n")
            if args.no_key:
                key, value = None, line
            else:
                key, sep, value = line.partition(args.key_separator.encode())
                if not sep:
                    raise UsageError(f"line {number} has no key separator {args.key_separator!r}; "
                                     "write key<separator>value, or use --no-key")
            tombstone = args.null_marker is not None and value == args.null_marker.encode()
            producer.send(args.topic, key, None if tombstone else value, partition=args.partition)
            count += 1
        producer.flush()
    print(f"Produced {count} record(s) to {args.topic}.", file=sys.stderr)
    return 0
