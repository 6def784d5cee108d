"""``compactlog metrics``: the cleaner's gauges and each partition's, as of the last cleaner pass of any
process, and each consumer group's committed offset and lag per partition, read from the data directory
(:mod:`compactlog.gauges`).

``--format prometheus`` (the default) prints the Prometheus exposition text that ``serve`` answers on
``/metrics``, under the names the Prometheus JMX exporter gives Kafka's gauges; ``--format json`` prints the
same figures by Kafka's gauge names. ``time-since-last-run-ms`` is null (NaN in Prometheus) when no pass has
run. A damaged ``cleaner-state.json`` is an error naming it.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from .common import data_dir_parent, open_store, print_json


def add_parser(commands: Any) -> None:
    metrics = commands.add_parser("metrics", parents=[data_dir_parent()], help="print the cleaner's gauges",
                                  description=__doc__.split("\n\n", 1)[1] if __doc__ else None)
    metrics.add_argument("--format", choices=("prometheus", "json"), default="prometheus",
                         help="exposition format (default prometheus)")
    metrics.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from ..gauges import metrics_json, prometheus_text  # prometheus_client: imported only by this command

    with open_store(args) as store:
        if args.format == "json":
            print_json(metrics_json(store))
        else:
            sys.stdout.write(prometheus_text(store))
    return 0
