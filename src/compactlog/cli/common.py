"""What every command shares: the data directory option, opening the store, printing sizes and JSON.

Rules: the data directory is ``--data-dir``, else ``$COMPACTLOG_DATA_DIR``, else ``./data``. Commands that
only read (or clean) refuse a data directory that does not exist instead of creating an empty one, so a
typo is an error, not an empty listing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

import compactlog
from compactlog.errors import DataDirectoryError

ENV_DATA_DIR = "COMPACTLOG_DATA_DIR"
DEFAULT_DATA_DIR = "data"


class UsageError(Exception):
    """A command line that cannot run as given (printed with the usage; exit code 2, as argparse's)."""


def data_dir_parent() -> argparse.ArgumentParser:
    """The ``--data-dir`` option, shared by every command: it may follow the command as well as precede it
    (``compactlog --data-dir D``). Unset here leaves the value given before the command in place."""
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument("--data-dir", metavar="DIR", default=argparse.SUPPRESS,
                        help=f"the data directory (default: ${ENV_DATA_DIR}, else ./{DEFAULT_DATA_DIR})")
    return parent


def data_dir(args: argparse.Namespace) -> str:
    return getattr(args, "data_dir", None) or os.environ.get(ENV_DATA_DIR) or DEFAULT_DATA_DIR


def open_store(args: argparse.Namespace, create: bool = False) -> compactlog.Store:
    """The store of ``--data-dir``; it must exist unless ``create`` (else DataDirectoryError, as for a path
    that is not a data directory)."""
    path = data_dir(args)
    if not create and not os.path.lexists(path):
        raise DataDirectoryError(f"data directory {path!r} does not exist (use --data-dir or ${ENV_DATA_DIR})")
    return compactlog.open(path)


def add_executor_options(parser: argparse.ArgumentParser, in_process_help: str) -> None:
    """Where cleaner rounds run: ``--in-process`` or ``--spark-master URL`` (one or neither)."""
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--in-process", action="store_true", help=in_process_help)
    where.add_argument("--spark-master", metavar="URL",
                       help="Spark master (default: $COMPACTLOG_SPARK_MASTER, else local[*])")


def human_bytes(size: int) -> str:
    value = float(size)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(value) < 1000 or unit == "TB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1000
    return f"{size} B"


def print_json(value: Any) -> None:
    json.dump(value, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")


def parse_config_pairs(pairs: list[str] | None) -> dict[str, str]:
    """``["k=v", "a=b,c"]`` (the last value may hold commas, as ``cleanup.policy=compact,delete``)."""
    config: dict[str, str] = {}
    for pair in pairs or []:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise UsageError(f"--config takes NAME=VALUE, got {pair!r}")
        config[name.strip()] = value.strip()
    return config
