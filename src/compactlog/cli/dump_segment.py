"""``compactlog dump-segment FILE [--print-data-log]``: a segment file's batches, offsets, timestamps,
producer ids, markers and delete horizons, as ``kafka-dump-log --files`` (:mod:`compactlog.segment_dump`);
keys and values only with ``--print-data-log``, as Kafka. Works on sealed (``.parquet``) and active
(``.log``) segments and on files in transit. Corrupt frames are reported by byte position; the exit code is
1 if there is any, else 0.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from ..segment_dump import dump_segment
from .common import UsageError


def add_parser(commands: Any) -> None:
    dump = commands.add_parser("dump-segment", help="print a segment file, as kafka-dump-log --files",
                               description=__doc__)
    dump.add_argument("file", metavar="FILE", help="a segment file (<base>.parquet or <base>.log)")
    dump.add_argument("--print-data-log", action="store_true", help="print keys and values too")
    dump.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if not os.path.isfile(args.file):
        raise UsageError(f"{args.file!r} is not a file")
    print(f"Dumping {args.file}")
    dump = dump_segment(args.file, args.print_data_log)
    for line in dump.lines:
        print(line)
    for position, problem in dump.corrupt:
        print(f"compactlog dump-segment: corrupt data at byte {position}: {problem}", file=sys.stderr)
    return 1 if dump.corrupt else 0
