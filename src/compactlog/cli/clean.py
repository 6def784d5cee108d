"""``compactlog clean``: one maintenance pass over the data directory (:mod:`compactlog.maintenance`):
idle rolls, transaction expiry, compaction of ``compact`` topics and retention of ``delete`` ones, on Spark
(``local[*]``) by default.

``--topic T`` (repeatable) limits the pass to those topics. ``--force`` is "compact now": it rolls the
active segments of the compacted topics and ignores ``min.cleanable.dirty.ratio``, but segments holding a
record younger than ``min.compaction.lag.ms`` still wait. ``--dry-run`` changes nothing and prints, per
partition, what would be rolled, cleaned (with an estimate of records and bytes freed, from key
statistics) and deleted by retention, and why not. ``--spark-master URL`` picks another master (else
``$COMPACTLOG_SPARK_MASTER``, else ``local[*]``); ``--in-process`` runs the kernel in this process without
Spark. Spark starts only when the pass has a partition to clean, and a standalone master that cannot be
reached is an error at once. The report lists every cleaned partition and every skipped one with its
reason; ``--json`` prints the same as JSON. Progress shows on a terminal (stderr), plain log lines
otherwise. The exit code is 1 when a partition was left uncleanable (the pass failed there), else 0.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.util
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from ..errors import ExecutorError
from ..maintenance import PartitionPlan, PassReport, plan_pass, plan_transaction_expiry, run_pass
from .common import UsageError, add_executor_options, data_dir_parent, human_bytes, open_store, print_json

if TYPE_CHECKING:
    from ..cleaner.cleaner import CleanReport


def add_parser(commands: Any) -> None:
    clean = commands.add_parser("clean", parents=[data_dir_parent()], help="run one cleaner pass",
                                description=__doc__.split("\n\n", 1)[1] if __doc__ else None)
    clean.add_argument("--topic", action="append", help="only this topic (repeatable; default: every topic)")
    clean.add_argument("--partition", type=int, help="only this partition of --topic")
    clean.add_argument("--force", action="store_true",
                       help="compact now: roll active segments and ignore the dirty ratio (not the min lag)")
    clean.add_argument("--dry-run", action="store_true",
                       help="change nothing; print what would be done, why, and an estimate of what is freed")
    add_executor_options(clean, "run in this process, without Spark")
    clean.add_argument("--json", action="store_true", help="machine-readable output")
    clean.set_defaults(run=run)


def report_dict(report: CleanReport, rolled: dict[tuple[str, int], str]) -> dict[str, Any]:
    return {
        "cleaned": [dataclasses.asdict(p) for p in report.partitions],
        "skipped": [{"topic": t, "partition": p, "reason": reason}
                    for (t, p), reason in sorted(report.skipped.items())],
        "rolled": [{"topic": t, "partition": p, "reason": rolled.get((t, p), "max.compaction.lag.ms: idle")}
                   for t, p in sorted(set(report.rolled) | set(rolled))],
        "retention_bytes_removed": [{"topic": t, "partition": p, "bytes": n}
                                    for (t, p), n in sorted(report.retention_bytes_removed.items())],
    }


def print_report(report: CleanReport, rolled: dict[tuple[str, int], str], executor_name: str) -> None:
    print(f"Cleaner pass ({executor_name}): {len(report.partitions)} partition(s) cleaned, "
          f"{len(report.skipped)} skipped")
    for (topic, partition), why in sorted(rolled.items()):
        print(f"  rolled {topic}-{partition}: {why}")
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
    topics: list[str] | None = args.topic
    if args.partition is not None and (topics is None or len(topics) != 1):
        raise UsageError("--partition needs --topic, exactly one")
    if args.dry_run and args.json:
        raise UsageError("--dry-run prints text; --json is for a pass")
    with open_store(args) as store, progress_reporter() as progress:
        if args.dry_run:
            plans = plan_pass(store, topics, force=args.force, partition=args.partition, progress=progress)
            expired = plan_transaction_expiry(store)
        else:
            store.check_writable("clean")  # before a Spark session is started for nothing
            if args.in_process:
                result = run_pass(store, topics, force=args.force, partition=args.partition, progress=progress)
                executor_name = "in process"
            else:
                result, executor_name = _clean_on_spark(store, args, progress)
    if args.dry_run:
        print_plans(plans, args.force)
        print(f"  transactions: would abort {len(expired)} expired: {', '.join(expired)}" if expired else
              "  transactions: none open longer than its transaction.timeout.ms")
        return 1 if any(p.error for p in plans) else 0
    report = result.clean
    if args.json:
        print_json(report_dict(report, result.rolled))
    else:
        print_report(report, result.rolled, executor_name)
    uncleanable = any(reason.startswith("uncleanable:") for reason in report.skipped.values())
    return 1 if uncleanable else 0


def print_plans(plans: list[PartitionPlan], force: bool) -> None:
    """The dry run's report: one block per partition."""
    cleaned = sum(p.clean for p in plans)
    print(f"Dry run{' (--force)' if force else ''}: nothing changed. {cleaned} of {len(plans)} partition(s) "
          "would be cleaned.")
    for plan in plans:
        name = f"{plan.topic}-{plan.partition}"
        if plan.error:
            print(f"  {name}: cannot be planned: {plan.error}")
            continue
        print(f"  {name} (cleanup.policy={plan.cleanup_policy}):")
        if plan.roll:
            print(f"    would roll the active segment: {plan.roll}")
        if plan.clean and plan.estimate is not None:
            e = plan.estimate
            print(f"    would clean offsets [{plan.first_dirty_offset}, {plan.first_uncleanable_offset}) "
                  f"(dirty ratio {plan.dirty_ratio:.2f}): {plan.reason}")
            print(f"    estimate: {e.records} of {e.records_read} record(s) freed, about "
                  f"{human_bytes(e.bytes)} of {human_bytes(e.bytes_read)} ({e.superseded} superseded, "
                  f"{e.expired_tombstones} expired tombstone(s), {e.keyless} keyless)")
        elif plan.reason:
            print(f"    would not clean: {plan.reason}")
        if plan.retention_segments:
            print(f"    retention would delete {len(plan.retention_segments)} segment(s), "
                  f"{human_bytes(plan.retention_bytes)}: {'; '.join(sorted(set(plan.retention_reasons)))}")
        elif "delete" in plan.cleanup_policy.split(","):
            print("    retention would delete nothing")


@contextlib.contextmanager
def progress_reporter() -> Iterator[Callable[[str], None]]:
    """Progress of a pass: a tqdm status line (the step and the time taken) on a terminal (stderr), plain
    log lines otherwise."""
    if not sys.stderr.isatty():
        yield lambda step: print(f"compactlog clean: {step}", file=sys.stderr, flush=True)
        return
    from tqdm import tqdm

    with tqdm(total=None, bar_format="{desc} [{elapsed}]", desc="starting", file=sys.stderr, leave=False) as bar:
        yield lambda step: bar.set_description_str(step)


def _clean_on_spark(store: Any, args: argparse.Namespace, progress: Callable[[str], None]) -> tuple[PassReport, str]:
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
        report = run_pass(store, args.topic, force=args.force, partition=args.partition,
                          executor=OnDemandExecutor(start), progress=progress)
        name = f"Spark {started[0][0].sparkContext.master}" if started else f"Spark {master}, not started"
    finally:
        for spark, fresh in started:
            if fresh:
                spark.stop()
    return report, name
