"""``compactlog clean``: one cleaner pass over the data directory, on Spark (``local[*]``) by default.

``--spark-master URL`` picks another master (else ``$COMPACTLOG_SPARK_MASTER``, else ``local[*]``);
``--in-process`` runs the kernel in this process without Spark. Spark starts only when the pass has a
partition to clean, and a standalone master that cannot be reached is an error at once. The report lists
every cleaned partition and every skipped one with its reason; ``--json`` prints the same as JSON. The
exit code is 1 when a partition was left uncleanable (the pass failed there), else 0.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
from typing import TYPE_CHECKING, Any

from ..errors import ExecutorError
from .common import UsageError, data_dir_parent, human_bytes, open_store, print_json

if TYPE_CHECKING:
    from ..cleaner.cleaner import CleanReport


def add_parser(commands: Any) -> None:
    clean = commands.add_parser("clean", parents=[data_dir_parent()], help="run one cleaner pass",
                                description=__doc__.split("\n\n", 1)[1] if __doc__ else None)
    clean.add_argument("--topic", help="only this topic (default: every compacted topic)")
    clean.add_argument("--partition", type=int, help="only this partition of --topic")
    clean.add_argument("--force", action="store_true",
                       help="clean every partition with anything cleanable, whatever its dirty ratio")
    where = clean.add_mutually_exclusive_group()
    where.add_argument("--in-process", action="store_true", help="run in this process, without Spark")
    where.add_argument("--spark-master", metavar="URL",
                       help="Spark master (default: $COMPACTLOG_SPARK_MASTER, else local[*])")
    clean.add_argument("--json", action="store_true", help="machine-readable output")
    clean.set_defaults(run=run)


def report_dict(report: CleanReport) -> dict[str, Any]:
    return {
        "cleaned": [dataclasses.asdict(p) for p in report.partitions],
        "skipped": [{"topic": t, "partition": p, "reason": reason}
                    for (t, p), reason in sorted(report.skipped.items())],
        "rolled": [{"topic": t, "partition": p} for t, p in report.rolled],
        "retention_bytes_removed": [{"topic": t, "partition": p, "bytes": n}
                                    for (t, p), n in sorted(report.retention_bytes_removed.items())],
    }


def print_report(report: CleanReport, executor_name: str) -> None:
    print(f"Cleaner pass ({executor_name}): {len(report.partitions)} partition(s) cleaned, "
          f"{len(report.skipped)} skipped")
    for p in report.partitions:
        print(f"  cleaned {p.topic}-{p.partition}: dirty offsets [{p.first_dirty_offset}, {p.end_offset}) "
              f"read {p.records_read} records ({human_bytes(p.bytes_read)}), wrote {p.records_written} "
              f"({human_bytes(p.bytes_written)}) in {p.groups} segment(s); "
              f"{p.tombstones_stamped} tombstone(s) stamped, {p.invalid_records} keyless dropped; "
              f"map {p.map_utilization:.1%}; {p.duration_ms} ms")
    for (topic, partition), reason in sorted(report.skipped.items()):
        print(f"  skipped {topic}-{partition}: {reason}")
    for (topic, partition), freed in sorted(report.retention_bytes_removed.items()):
        print(f"  retention {topic}-{partition}: removed {human_bytes(freed)}")


def run(args: argparse.Namespace) -> int:
    if args.partition is not None and args.topic is None:
        raise UsageError("--partition needs --topic")
    with open_store(args) as store:
        store.check_writable("clean")  # before a Spark session is started for nothing
        if args.topic is not None:
            store.partitions(args.topic)  # an unknown topic is an error, not an empty pass
        if args.in_process:
            report = store.clean(force=args.force, topic=args.topic, partition=args.partition)
            executor_name = "in process"
        else:
            report, executor_name = _clean_on_spark(store, args)
    if args.json:
        print_json(report_dict(report))
    else:
        print_report(report, executor_name)
    uncleanable = any(reason.startswith("uncleanable:") for reason in report.skipped.values())
    return 1 if uncleanable else 0


def _clean_on_spark(store: Any, args: argparse.Namespace) -> tuple[CleanReport, str]:
    """The pass plans first; Spark starts only when it has a round to run (a start takes seconds, and
    imports PySpark). An unreachable standalone master is refused at once, whether or not there is work."""
    if importlib.util.find_spec("pyspark") is None:
        raise ExecutorError("PySpark is not installed; install compactlog[spark], or use --in-process")
    from ..cleaner.executor import OnDemandExecutor
    from ..spark.session import check_master_reachable, resolve_master

    master = resolve_master(args.spark_master)
    check_master_reachable(master)
    started: list[tuple[Any, bool]] = []  # (session, whether this command started it)

    def start() -> Any:
        from pyspark import SparkContext

        from ..spark.session import session

        fresh = SparkContext._active_spark_context is None  # stop only a session this command started
        started.append((session(master), fresh))
        return started[-1][0]

    try:
        report = store.clean(force=args.force, topic=args.topic, partition=args.partition,
                             executor=OnDemandExecutor(start))
        name = f"Spark {started[0][0].sparkContext.master}" if started else f"Spark {master}, not started"
    finally:
        for spark, fresh in started:
            if fresh:
                spark.stop()
    return report, name
