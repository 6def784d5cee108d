"""``compactlog``: the command line's entry point (the ``compactlog`` console script).

``compactlog [--data-dir DIR] [--version] COMMAND ...``: ``--data-dir`` may come before the command or after
it (also after a sub-action: ``topics create --data-dir DIR``); it defaults to ``$COMPACTLOG_DATA_DIR``, else
``./data`` (:mod:`.common`).

Exit codes and what stderr shows (never a traceback):

* 0: success (for ``verify-erasure``, also a key of which nothing is stored: its ``NOTHING STORED`` verdict);
* 1: a failure: a :class:`~compactlog.errors.CompactLogError` or any other exception, one line
  ``compactlog: <ErrorType>: <message>``; or a command that ran and reports a failure (a partition left
  uncleanable, a topic that cannot be described, a partition ``explain`` cannot read);
* 2: a usage error: the command's usage on one line, then ``compactlog <command>: error: <message>``;
* 3: ``verify-erasure`` only: no value of the key is left on disk, but a consumer group has not read past
  its tombstone (:mod:`.verify_erasure`);
* 130: interrupted (Ctrl-C).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, NoReturn

import compactlog

from . import clean, consume, dump_segment, explain, groups, metrics, produce, roll, serve, topics, verify_erasure
from .common import DEFAULT_DATA_DIR, ENV_DATA_DIR, UsageError

if TYPE_CHECKING:
    from _typeshed import SupportsWrite

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


def one_line(text: str) -> str:
    """``text`` with its lines joined by spaces: an error is reported on one line of stderr."""
    return " ".join(line.strip() for line in text.splitlines() if line.strip())


class CommandLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors print the usage on one line and the error on the next.

    ``add_subparsers`` makes every command's parser of this class too (it takes the class of its parent)."""

    def print_usage(self, file: SupportsWrite[str] | None = None) -> None:
        (file or sys.stderr).write(one_line(self.format_usage()) + "\n")

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {one_line(message)}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = CommandLineParser(
        prog="compactlog",
        description="Kafka's topic compaction on a local data directory: topics, produce, consume, roll, clean.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {compactlog.__version__}")
    parser.add_argument("--data-dir", metavar="DIR",
                        help=f"the data directory (default: ${ENV_DATA_DIR}, else ./{DEFAULT_DATA_DIR}); "
                        "also accepted after the command")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in (topics, produce, consume, roll, clean, explain, verify_erasure, dump_segment, metrics, serve,
                   groups):
        module.add_parser(commands)
    return parser


def chosen_parser(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The parser of the command (and sub-action) ``args`` was parsed for: ``topics create``'s for
    ``compactlog topics create ...``; its usage is the one a usage error shows."""
    current = parser
    while True:
        sub = next((a for a in current._actions if isinstance(a, argparse._SubParsersAction)), None)
        name = getattr(args, sub.dest, None) if sub is not None else None
        if sub is None or name not in sub.choices:
            return current
        current = sub.choices[name]


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns the exit code (the console script exits with it)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help and --version (0), or argparse's usage error (2)
        return e.code if isinstance(e.code, int) else EXIT_USAGE
    try:
        code = int(args.run(args))
        sys.stdout.flush()  # a closed pipe shows here, not at exit
        return code
    except UsageError as e:
        command = chosen_parser(parser, args)
        command.print_usage(sys.stderr)
        print(f"{command.prog}: error: {one_line(str(e))}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:  # `compactlog consume ... | head`: the reader has what it wanted
        # Python flushes stdout again at exit; point it at /dev/null so that flush cannot fail (a stdout
        # without a file descriptor, as a test's capture, has nothing to point).
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except KeyboardInterrupt:
        print(f"{parser.prog}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as e:  # CompactLogError or not: one line naming the type, never a traceback
        print(f"{parser.prog}: {type(e).__name__}: {one_line(str(e))}", file=sys.stderr)
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
