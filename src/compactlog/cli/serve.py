"""``compactlog serve``: the one long-running process of a data directory (:class:`compactlog.server.Server`):
a cleaner pass every ``log.cleaner.backoff.ms`` with everything ``clean`` does (retention, transaction
expiry, idle rolls, compaction; ``log.cleaner.enable`` honoured), and Prometheus metrics on
``--metrics-address`` (default 127.0.0.1:9404, ``GET /metrics``), and a Kafka-protocol listener that makes it
a single-node broker for unmodified Kafka clients: ``--listeners`` (Kafka's syntax, default the
``listeners`` of ``server.properties``, else PLAINTEXT://127.0.0.1:9092) and ``--advertised-listeners``.
Once every endpoint listens it prints ``listening on NAME://host:port`` on stdout, one line a listener (a
port 0 replaced by the port bound). One line a cleaner pass on stderr. The listener and the cleaner work on
one store, whose Logs the broker appends through and the cleaner swaps and rolls (:func:`components`).

Passes run on Spark (``local[*]``, or ``--spark-master URL``, else ``$COMPACTLOG_SPARK_MASTER``) as
``clean``'s do: the session starts when a pass first has a partition to clean and lives until the server
stops. ``--in-process`` runs them in this process without Spark. SIGTERM or SIGINT stops the server: a pass
under way finishes (or, after 8 s, is abandoned, which the swap protocol makes safe), and the exit code is 0.
A second ``serve`` on the same data directory is refused.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import logging
from typing import TYPE_CHECKING, Any

from ..broker.listener import KafkaListener
from ..cleaner.executor import OnDemandExecutor
from ..cleaner_service import CleanerService
from ..errors import ExecutorError
from ..metrics_endpoint import DEFAULT_ADDRESS, MetricsEndpoint, parse_address
from ..server import Component, DataDirectoryLock, Server
from .common import add_executor_options, data_dir, data_dir_parent, open_store

if TYPE_CHECKING:
    from ..store import Store


def add_parser(commands: Any) -> None:
    serve = commands.add_parser("serve", parents=[data_dir_parent()],
                                help="run the cleaner as a service, with Prometheus metrics",
                                description=__doc__.split("\n\n", 1)[1] if __doc__ else None)
    serve.add_argument("--metrics-address", metavar="HOST:PORT", default=DEFAULT_ADDRESS,
                       help=f"where /metrics listens (default {DEFAULT_ADDRESS})")
    serve.add_argument("--listeners", metavar="LISTENERS",
                       help="Kafka's listeners, e.g. PLAINTEXT://127.0.0.1:9092 (default: server.properties' "
                            "listeners, else PLAINTEXT://127.0.0.1:9092)")
    serve.add_argument("--advertised-listeners", metavar="LISTENERS",
                       help="what Metadata tells clients to connect to (default: the listeners as bound)")
    add_executor_options(serve, "clean in this process, without Spark")
    serve.set_defaults(run=run)


class SparkSessionComponent:
    """The Spark session of the cleaner's passes: started by the first pass with a round to run (through
    an OnDemandExecutor), stopped at shutdown if this process started it."""

    name = "spark session"

    def __init__(self, master: str | None) -> None:
        self.master = master
        self._session: Any = None
        self._fresh = False

    def start(self) -> None:
        if importlib.util.find_spec("pyspark") is None:
            raise ExecutorError("PySpark is not installed; install compactlog[spark], or use --in-process")
        from ..spark.session import check_master_reachable, resolve_master

        self.master = resolve_master(self.master)
        check_master_reachable(self.master)

    def session(self) -> Any:
        if self._session is None:
            from pyspark import SparkContext

            from ..spark.session import session

            self._fresh = SparkContext._active_spark_context is None
            self._session = session(self.master)
        return self._session

    def shutdown(self) -> None:
        if self._session is not None and self._fresh:
            self._session.stop()
        self._session = None


def components(args: argparse.Namespace, store: Store, metrics_store: Store) -> list[Component]:
    """The server's components, in start order (:class:`Server` stops them in reverse): the Spark session
    (unless ``--in-process``), the metrics endpoint, the Kafka listener, the cleaner service.

    The listener and the cleaner share ``store``: one Log per partition in this process, so that the
    cleaner's swaps, rolls, retention and producer expiry go through the Logs the broker appends through,
    ordered by their thread locks (the partitions' ``flock`` still orders them with other processes). A
    store each would have every cleaner pass re-read and decode into its own producer state each frame the
    broker appended since the last pass, and the broker reload (segments and producer state, from the
    files) each partition the cleaner rolled or swapped. What they share is safe from several
    threads: the store opens each Log once under a lock, a Log locks every method, the transaction
    coordinator's changes hold its directory's ``flock`` (an open of its own per hold, so threads exclude
    one another), and a Spark round reads files on the workers and swaps on this driver, through the Log.
    The store is closed after every component has stopped (the listener does not close a store it was
    given); a pass abandoned at shutdown meets a closed Log, fails, and leaves its files in transit to the
    next open of the partition, as an abandoned pass always did (:mod:`compactlog.log.swap`).

    The endpoint reads through a store of its own, ``metrics_store``: scrapes run on the HTTP server's
    threads and read the cleaner state the files hold. It starts before the cleaner, so that a shutdown
    stops the cleaner first (at once: the endpoint's own stop waits up to half a second for its serving
    loop)."""
    from ..gauges import DataDirectoryCollector  # prometheus_client: imported only by this command

    spark_session: list[Component] = []
    executor: Any = None
    if not args.in_process:
        spark = SparkSessionComponent(args.spark_master)
        spark_session.append(spark)
        executor = OnDemandExecutor(spark.session)
    cleaner = CleanerService(store, executor)
    overrides = {key: value for key, value in (("listeners", args.listeners),
                                               ("advertised.listeners", args.advertised_listeners)) if value}
    listener = KafkaListener(store.data_dir, overrides, store)
    endpoint = MetricsEndpoint(DataDirectoryCollector(metrics_store, cleaner.dead_thread_count), args.metrics_address)
    return [*spark_session, endpoint, listener, cleaner]


def run(args: argparse.Namespace) -> int:
    # compactlog's lines at INFO; other libraries' (py4j, Spark's gateway) at WARNING.
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("compactlog").setLevel(logging.INFO)
    parse_address(args.metrics_address)  # a bad address is an error before anything starts
    with contextlib.ExitStack() as held:
        # The lock before any store: opening a writable store removes stale temporary files and finishes
        # interrupted topic deletions, which a second serve must not do to a directory another one serves.
        # Released last, once the stores are closed.
        lock = DataDirectoryLock(data_dir(args))
        lock.start()
        held.callback(lock.shutdown)
        store = held.enter_context(open_store(args, create=True))
        metrics_store = held.enter_context(open_store(args))
        store.check_writable("serve")
        started = components(args, store, metrics_store)
        listener = next(c for c in started if isinstance(c, KafkaListener))

        def announce() -> None:
            for bound in listener.bound:
                print(f"listening on {bound}", flush=True)

        Server(started).run_until_signalled(on_started=announce)
    return 0
