"""``compactlog produce``: records from stdin, one a line, as ``kafka-console-producer`` reads them.

A line is parsed by Kafka's LineMessageReader, set with ``--property NAME=VALUE`` (below); by default a
line is ``key:value`` (``parse.key=true``, ``key.separator=:``). Keyed records are partitioned by Kafka's
murmur2 partitioner unless ``--partition`` is given. A bad line (a missing separator, a keyless record on
a compacted topic, a record over ``max.message.bytes``) stops the command with exit code 1: the records of
the lines before it are flushed (durable) first, and the message says how many they were; nothing after
it is produced. On a terminal (stderr a tty, stdin not) a progress bar shows the lines read.
``--key-separator S``, ``--null-marker M`` and ``--no-key`` are the older spellings of
``--property key.separator=S``, ``null.marker=M`` and ``parse.key=false``; ``--property`` wins over them.
"""

from __future__ import annotations

import argparse
import os
import stat
import sys
from collections.abc import Iterable, Iterator
from typing import IO, Any

from ..errors import InvalidRecordError
from ..producer import Producer
from .common import data_dir_parent, open_store
from .console_properties import describe, parse_properties
from .line_message_reader import READER_PROPERTIES, LineMessageReader

CONSOLE_LINGER_MS = 1000
CONSOLE_BATCH_BYTES = 1 << 20
EXIT_BAD_LINE = 1
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a command stopped by Ctrl-C


def add_parser(commands: Any) -> None:
    produce = commands.add_parser("produce", parents=[data_dir_parent()],
                                  help="append records read from stdin",
                                  formatter_class=argparse.RawDescriptionHelpFormatter,
                                  description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
                                  epilog="properties (--property NAME=VALUE):\n" + describe(READER_PROPERTIES))
    produce.add_argument("--topic", required=True)
    produce.add_argument("--partition", type=int, help="append every record to this partition")
    produce.add_argument("--property", action="append", default=[], metavar="NAME=VALUE",
                         help="a line reader property (repeatable; listed below)")
    produce.add_argument("--key-separator", help="same as --property key.separator=SEPARATOR")
    produce.add_argument("--null-marker", help="same as --property null.marker=MARKER")
    produce.add_argument("--no-key", action="store_true", help="same as --property parse.key=false")
    produce.set_defaults(run=run)


def reader_of(args: argparse.Namespace) -> LineMessageReader:
    """The line reader of the command line: defaults, then the older flags, then ``--property``."""
    given: dict[str, bool | str | None] = {}
    if args.key_separator is not None:
        given["key.separator"] = args.key_separator
    if args.null_marker is not None:
        given["null.marker"] = args.null_marker
    if args.no_key:
        given["parse.key"] = False
    return LineMessageReader.from_properties(parse_properties(args.property, READER_PROPERTIES, given))


def lines(stream: Iterable[bytes]) -> Iterator[bytes]:
    """Each line without its ending (``\\n`` or ``\\r\\n``; a last line need not end)."""
    for raw in stream:
        if raw.endswith(b"\n"):
            raw = raw[:-2] if raw.endswith(b"\r\n") else raw[:-1]
        elif raw.endswith(b"\r"):
            raw = raw[:-1]
        yield raw


class LineProducer:
    """Sends the records of lines to one topic (or one partition of it), counting what it sent."""

    def __init__(self, producer: Producer, topic: str, partition: int | None, reader: LineMessageReader) -> None:
        self.producer = producer
        self.topic = topic
        self.partition = partition
        self.reader = reader
        self.sent = 0

    def send_lines(self, stream: Iterable[bytes]) -> None:
        """Send every line's record. A bad line raises InvalidRecordError naming its line number; the
        records before it are sent (buffered, flushed by the caller) and counted in :attr:`sent`."""
        for number, line in enumerate(stream, start=1):
            record = self.reader.read_line(line, number)
            try:
                self.producer.send(self.topic, record.key, record.value, headers=record.headers or None,
                                   partition=self.partition)
            except InvalidRecordError as e:
                raise InvalidRecordError(f"line {number}: {e}") from e
            self.sent += 1


def _with_progress(stdin: IO[bytes]) -> Iterable[bytes]:
    """stdin's lines, through a tqdm progress bar on stderr when it is a terminal and stdin is not (someone
    typing lines sees no bar); in bytes of the whole file when stdin is a regular file, else in lines."""
    if not sys.stderr.isatty() or stdin.isatty():
        return stdin
    from tqdm import tqdm

    info = os.fstat(stdin.fileno())
    if stat.S_ISREG(info.st_mode):
        return _bytes_progress(stdin, tqdm(total=info.st_size - stdin.tell(), unit="B", unit_scale=True,
                                           desc="produced", file=sys.stderr, leave=False))
    return tqdm(stdin, unit=" lines", desc="produced", file=sys.stderr, leave=False)


def _bytes_progress(stdin: IO[bytes], bar: Any) -> Iterator[bytes]:
    with bar:
        for raw in stdin:
            bar.update(len(raw))
            yield raw


def run(args: argparse.Namespace) -> int:
    reader = reader_of(args)  # a usage error before the store is opened
    bad: InvalidRecordError | None = None
    interrupted = False
    with open_store(args) as store:
        store.partitions(args.topic)  # an unknown topic fails before stdin is read
        if args.partition is not None:
            store.log(args.topic, args.partition)  # so does a partition outside the topic
        # linger.ms 1000 is Kafka's console producer's (its --timeout); batch.size is larger than its 16 kB
        # because each append here costs a frame in the active segment, so fewer, larger ones go faster.
        with store.producer(linger_ms=CONSOLE_LINGER_MS, batch_size=CONSOLE_BATCH_BYTES) as producer:
            sender = LineProducer(producer, args.topic, args.partition, reader)
            try:
                sender.send_lines(lines(_with_progress(sys.stdin.buffer)))
            except InvalidRecordError as e:
                bad = e
            except KeyboardInterrupt:
                interrupted = True
            producer.flush()  # every record sent is durable before the command reports it
    sent = sender.sent
    if bad is not None:
        print(f"compactlog produce: {bad}; stopped there: the {sent} record(s) before it were produced and are "
              "durable", file=sys.stderr)
        return EXIT_BAD_LINE
    if interrupted:
        print(f"compactlog produce: interrupted; the {sent} record(s) read were produced and are durable",
              file=sys.stderr)
        return EXIT_INTERRUPTED
    print(f"Produced {sent} record(s) to {args.topic}.", file=sys.stderr)
    return 0

