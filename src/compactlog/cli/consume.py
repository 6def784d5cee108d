"""``compactlog consume``: print a topic's records, as ``kafka-console-consumer`` does.

Records print through Kafka's DefaultMessageFormatter, set with ``--property NAME=VALUE`` (below): by
default the value only, one record a line; ``print.key=true`` etc. add fields. Partitions are read in turn,
each in offset order. As Kafka's, it starts at the log end, so it prints only records produced while it
follows, unless told ``--from-beginning`` or ``--offset earliest|latest|N`` (a number needs
``--partition``). Without ``--follow`` it prints up to the log end as it was when it started, and exits;
``--follow`` polls for new records until interrupted (Ctrl-C exits 0) or, with ``--timeout-ms``, until no
new record came for that long (``--timeout-ms`` alone implies ``--follow``). ``--max-messages N`` stops
after N records. ``--isolation-level read_committed`` stops at the last stable offset (the first offset of
the oldest open transaction) and hides the records of aborted transactions. At the end it prints
"Processed a total of N messages" on stderr, as Kafka's does.

Memory: a partition is read in windows of ``WINDOW_OFFSETS`` offsets, never whole; a window reads at most
the row groups (or active-segment frames, 65,536 records each at most) that hold its offsets, of only the
columns the formatter prints. ``--latest`` prints the compacted view instead: the newest record of every
live key (tombstoned keys absent), by two passes over the same windows; its memory grows with the number
of distinct keys (a dict of key to newest offset, as the cleaner's offset map), never with the values.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import IO, Any

import pyarrow as pa
import pyarrow.compute as pc

from ..log.reads import ISOLATION_LEVELS
from ..sealed_segment import ROW_GROUP_ROWS
from ..store import Store
from .common import UsageError, data_dir_parent, open_store
from .console_properties import describe, parse_properties
from .message_formatter import FORMATTER_PROPERTIES, MessageFormatter

# A read window: one row group's worth of offsets, so that a window reads each row group at most twice
# and a full read costs little more than one pass, while memory stays within a row group or two.
WINDOW_OFFSETS = ROW_GROUP_ROWS
FORMAT_ROWS = 4096  # rows turned into Python objects at a time when printing
POLL_INTERVAL_MS = 100  # between two polls of --follow: a new record shows within a tenth of a second


def add_parser(commands: Any) -> None:
    consume = commands.add_parser("consume", parents=[data_dir_parent()], help="print a topic's records",
                                  formatter_class=argparse.RawDescriptionHelpFormatter,
                                  description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
                                  epilog="properties (--property NAME=VALUE):\n" + describe(FORMATTER_PROPERTIES))
    consume.add_argument("--topic", required=True)
    consume.add_argument("--partition", type=int, help="only this partition (default: all)")
    start = consume.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true", help="start at the log start")
    start.add_argument("--offset", help="earliest, latest (the default) or an offset (needs --partition)")
    consume.add_argument("--max-messages", type=int, help="stop after this many records")
    consume.add_argument("--timeout-ms", type=int,
                         help="with --follow (implied), exit once no new record came for this long")
    consume.add_argument("--isolation-level", choices=ISOLATION_LEVELS, default="read_uncommitted",
                         help="read_committed: stop at the last stable offset, hide aborted records")
    consume.add_argument("--follow", action="store_true", help="wait for new records until interrupted")
    consume.add_argument("--property", action="append", default=[], metavar="NAME=VALUE",
                         help="a formatter property (repeatable; listed below)")
    consume.add_argument("--latest", action="store_true",
                         help="the newest record of every live key only (from the log start by default)")
    consume.add_argument("--key-separator", help="same as --property key.separator=SEPARATOR")
    consume.set_defaults(run=run)


class ConsoleConsumer:
    """Reads partitions of a topic from given positions and writes their records, formatted, to ``out``.

    Each :meth:`poll` prints every partition's records from its position up to its end as of that poll (the
    log end, or the last stable offset for ``read_committed``), in windows, and moves the positions there.
    """

    def __init__(self, store: Store, topic: str, positions: dict[int, int], formatter: MessageFormatter,
                 out: IO[bytes], isolation_level: str = "read_uncommitted", max_messages: int | None = None) -> None:
        self.store = store
        self.topic = topic
        self.positions = dict(positions)
        self.formatter = formatter
        self.out = out
        self.isolation_level = isolation_level
        self.max_messages = max_messages
        self.timestamp_type = store.topic_config(topic).message_timestamp_type
        self.processed = 0
        self.stopped = False

    def stop(self) -> None:
        """End the reads after the batch being printed (a signal handler calls this: Ctrl-C, SIGTERM)."""
        self.stopped = True

    def done(self) -> bool:
        return self.stopped or (self.max_messages is not None and self.processed >= self.max_messages)

    def end_offset(self, partition: int) -> int:
        """Where a read of ``partition`` stops: its log end, or its last stable offset for read_committed."""
        if self.isolation_level == "read_committed":
            return self.store.last_stable_offset(self.topic, partition)
        return self.store.log_end_offset(self.topic, partition)

    def poll(self) -> int:
        """Print what each partition holds past its position; returns how many records were printed."""
        before = self.processed
        for partition in sorted(self.positions):
            end = self.end_offset(partition)
            # Retention may have removed what lay below the position: go on from the log start.
            position = max(self.positions[partition], self.store.log_start_offset(self.topic, partition))
            window = self._window()
            while position < end and not self.done():
                window_end = min(end, position + window)
                printed = self.processed
                for table in self.store.read_tables(self.topic, partition, position, window_end,
                                                    columns=self.formatter.columns(),
                                                    isolation_level=self.isolation_level):
                    position = self._print(table, partition) or position
                    if self.done():  # the position is right after the last record printed
                        break
                else:
                    position = window_end
                if self.processed == printed:  # a gap the cleaner (or an abort) left: a wider window
                    window = min(WINDOW_OFFSETS, 2 * window)
            self.positions[partition] = position
            if self.done():
                break
        self.out.flush()
        return self.processed - before

    def _window(self) -> int:
        """The first window's offsets: no more than the records still to print (a gap widens it)."""
        if self.max_messages is None:
            return WINDOW_OFFSETS
        return max(1, min(WINDOW_OFFSETS, self.max_messages - self.processed))

    def _print(self, table: pa.Table, partition: int) -> int:
        """Print the table's records (up to --max-messages); returns the offset after the last printed."""
        if self.max_messages is not None:
            table = table.slice(0, self.max_messages - self.processed)
        after_last = 0
        for batch in table.to_batches(max_chunksize=FORMAT_ROWS):
            if self.stopped or not batch.num_rows:
                break
            self.out.write(b"".join(self.formatter.format_table(batch, partition, self.timestamp_type)))
            self.processed += batch.num_rows
            after_last = int(batch.column("offset")[-1].as_py()) + 1
        return after_last

    def print_latest(self) -> None:
        """Print the newest record of every live key of each partition from its position (the compacted
        view): a first pass finds each key's newest offset, a second prints those that are not tombstones."""
        columns = sorted({*self.formatter.columns(), "key", "value"})
        for partition in sorted(self.positions):
            end = self.end_offset(partition)
            newest: dict[bytes, int] = {}
            for table in self._windows(partition, self.positions[partition], end, ["offset", "key"]):
                for offset, key in zip(table.column("offset").to_pylist(), table.column("key").to_pylist(),
                                       strict=True):
                    if key is not None:
                        newest[key] = offset
            for table in self._windows(partition, self.positions[partition], end, columns):
                offsets = pa.array([newest.get(k) for k in table.column("key").to_pylist()], pa.int64())
                live = pc.and_(pc.equal(offsets, table.column("offset")), table.column("value").is_valid())
                self._print(table.filter(live.fill_null(False)), partition)
                if self.done():
                    break
            self.positions[partition] = end
            if self.done():
                break
        self.out.flush()

    def _windows(self, partition: int, start: int, end: int, columns: list[str]) -> Iterator[pa.Table]:
        position = start
        while position < end:
            window_end = min(end, position + WINDOW_OFFSETS)
            yield from self.store.read_tables(self.topic, partition, position, window_end, columns=columns,
                                              isolation_level=self.isolation_level)
            position = window_end


def consume_loop(consumer: ConsoleConsumer, follow: bool, timeout_ms: int | None, clock: Callable[[], int],
                 sleep: Callable[[int], None], poll_interval_ms: int = POLL_INTERVAL_MS) -> None:
    """Poll once; with ``follow``, poll again every ``poll_interval_ms`` (``sleep`` waits, ``clock`` tells
    epoch ms) until the consumer is done or, with ``timeout_ms``, no record came for that long."""
    last_record = clock()
    while True:
        if consumer.poll():
            last_record = clock()
        if consumer.done() or not follow:
            return
        if timeout_ms is not None and clock() - last_record >= timeout_ms:
            return
        sleep(poll_interval_ms)


def start_positions(store: Store, topic: str, partitions: list[int], offset: str | None, from_beginning: bool,
                    isolation_level: str) -> dict[int, int]:
    """Each partition's first offset to read: the log start (``--from-beginning``, ``--offset earliest``),
    the given offset, or the end (the default, ``--offset latest``: the log end, or the last stable offset
    for read_committed, as Kafka's ListOffsets answers for that isolation level)."""
    positions = {}
    for partition in partitions:
        if from_beginning or offset == "earliest":
            positions[partition] = store.log_start_offset(topic, partition)
        elif offset is None or offset == "latest":
            positions[partition] = (store.last_stable_offset(topic, partition) if isolation_level == "read_committed"
                                    else store.log_end_offset(topic, partition))
        else:
            store.log(topic, partition).check_offset(int(offset))
            positions[partition] = int(offset)
    return positions


def _check_args(args: argparse.Namespace) -> None:
    if args.offset is not None and args.offset not in ("earliest", "latest"):
        if not args.offset.isdigit():
            raise UsageError(f"--offset takes earliest, latest or a non-negative offset, got {args.offset!r}")
        if args.partition is None:
            raise UsageError("--offset needs --partition")
    if args.max_messages is not None and args.max_messages < 0:
        raise UsageError("--max-messages cannot be negative")
    if args.timeout_ms is not None and args.timeout_ms < 0:
        raise UsageError("--timeout-ms cannot be negative")
    if args.latest and (args.follow or args.timeout_ms is not None):
        raise UsageError("--latest prints a snapshot; it cannot --follow")


@contextlib.contextmanager
def _stopped_by_signals(consumer: ConsoleConsumer) -> Iterator[None]:
    """Ctrl-C (SIGINT) and SIGTERM end the consumer as its own end would: after the batch being printed,
    with the count on stderr and exit code 0, as Kafka's console consumer's shutdown hook does. A handler that
    raised instead (KeyboardInterrupt) could land between a write and its count."""
    if threading.current_thread() is not threading.main_thread():  # only the main thread may set handlers
        yield
        return
    previous = {number: signal.signal(number, lambda signum, frame: consumer.stop())
                for number in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def run(args: argparse.Namespace) -> int:
    _check_args(args)
    given = {} if args.key_separator is None else {"key.separator": args.key_separator}
    formatter = MessageFormatter.from_properties(parse_properties(args.property, FORMATTER_PROPERTIES, given))
    with open_store(args) as store:
        count = store.partitions(args.topic)
        partitions = [args.partition] if args.partition is not None else list(range(count))
        from_beginning = args.from_beginning or (args.latest and args.offset is None)
        positions = start_positions(store, args.topic, partitions, args.offset, from_beginning,
                                    args.isolation_level)
        consumer = ConsoleConsumer(store, args.topic, positions, formatter, sys.stdout.buffer,
                                   args.isolation_level, args.max_messages)
        with _stopped_by_signals(consumer):
            if args.latest:
                consumer.print_latest()
            else:
                consume_loop(consumer, args.follow or args.timeout_ms is not None, args.timeout_ms, store.clock,
                             lambda ms: time.sleep(ms / 1000))
    print(f"Processed a total of {consumer.processed} messages", file=sys.stderr)
    return 0
