"""``compactlog``: the command line's entry point (the ``compactlog`` console script).

Exit codes: 0 success; 1 a command that ran but reports a failure (a partition left uncleanable);
2 a usage error or any :class:`~compactlog.errors.CompactLogError` (its message on stderr).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ..errors import CompactLogError
from . import clean, consume, metrics, produce, serve, topics
from .common import UsageError

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_ERROR = 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="compactlog",
        description="Kafka's topic compaction on a local data directory: topics, produce, consume, clean.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in (topics, produce, consume, clean, metrics, serve):
        module.add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns the exit code (the console script exits with it)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help, or argparse's usage error (code 2)
        return int(e.code or 0) if not isinstance(e.code, str) else EXIT_ERROR
    try:
        return int(args.run(args))
    except UsageError as e:
        print(f"{parser.prog} {args.command}: error: {e}", file=sys.stderr)
        return EXIT_ERROR
    except CompactLogError as e:
        print(f"{parser.prog}: {type(e).__name__}: {e}", file=sys.stderr)
        return EXIT_ERROR
    except BrokenPipeError:  # `compactlog consume ... | head`
        sys.stderr.close()
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
