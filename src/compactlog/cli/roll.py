"""``compactlog roll``: seal the active segment of a topic's partitions now (Kafka has no such tool).

The cleaner never cleans the active segment, so on a fresh topic nothing is compacted until the segment is
sealed: at ``segment.bytes``, at the first append after ``segment.ms``, or by this command. Every partition
of ``--topic`` is rolled unless ``--partition`` names one; an empty active segment is left as it is. Each
sealed segment is printed with its offsets, records and size.
"""

from __future__ import annotations

import argparse
from typing import Any

from .common import data_dir_parent, human_bytes, open_store
from .topics import add_topic_argument, topic_name


def add_parser(commands: Any) -> None:
    roll = commands.add_parser("roll", parents=[data_dir_parent()], help="seal the active segment now",
                               description=__doc__.split("\n\n", 1)[1] if __doc__ else None)
    add_topic_argument(roll)
    roll.add_argument("--partition", type=int, help="only this partition (default: every partition)")
    roll.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    topic = topic_name(args)
    with open_store(args) as store:
        store.check_writable(f"roll {topic}")
        count = store.partitions(topic)  # an unknown topic is an error before any partition is rolled
        for partition in [args.partition] if args.partition is not None else range(count):
            log = store.log(topic, partition)
            base = log.segments_meta()[-1].base_offset
            if not store.roll(topic, partition):
                print(f"{topic}-{partition}: active segment {base} is empty; nothing to seal.")
                continue
            sealed = next(m for m in log.segments_meta() if m.base_offset == base)
            print(f"{topic}-{partition}: sealed segment {base} (offsets {base}..{sealed.next_offset - 1}, "
                  f"{sealed.record_count} records, {human_bytes(sealed.size_bytes)}); the active segment now "
                  f"starts at {sealed.next_offset}.")
    return 0
