"""``topics describe --plot PATH`` and ``--html PATH``: a picture of a topic's log (see :mod:`compactlog.log_picture`).

The describe command adds these options with :func:`add_arguments` and calls :func:`write_pictures` with its
open store; the picture needs one topic. matplotlib is imported only when ``--plot`` is given.
"""

from __future__ import annotations

import argparse
import sys

import compactlog
from compactlog.errors import ReportWriteError
from compactlog.log_picture import topic_picture

from .common import UsageError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--plot", metavar="PATH",
                        help="draw the topic's log as a PNG: a row per partition, a box per segment coloured by "
                             "section (clean, dirty, held back, uncleanable, active), the cleaner checkpoint")
    parser.add_argument("--html", metavar="PATH", help="the same picture as a self-contained HTML page")


def write_pictures(args: argparse.Namespace, store: compactlog.Store, topic: str | None) -> None:
    """Write the ``--plot`` and ``--html`` files of ``topic`` asked for, if any (a note on stderr for each)."""
    if not (args.plot or args.html):
        return
    if not topic:
        raise UsageError("--plot and --html draw one topic: name it")
    picture = topic_picture(store, topic)
    for path, kind in ((args.plot, "png"), (args.html, "html")):
        if not path:
            continue
        try:
            if kind == "png":
                from .log_picture_png import write_png

                write_png(picture, path)
            else:
                from .log_picture_html import write_html

                write_html(picture, path)
        except OSError as e:
            raise ReportWriteError(f"cannot write {path}: {e.strerror or e}") from e
        print(f"Wrote the picture of topic {topic} to {path}.", file=sys.stderr)
