"""The SparkSession compactlog runs on: which master, and the settings every compactlog job relies on.

:func:`session` resolves the master (argument, else ``$COMPACTLOG_SPARK_MASTER``, else ``local[*]``),
starts or reuses the process's SparkSession for it and registers the ``compactlog`` data source. Its
defaults, each overridable through ``conf``:

* executors run this process's Python (``sys.executable``) unless the user chose one, through
  ``spark.pyspark.python`` in ``conf`` or the ``PYSPARK_PYTHON`` variable, and see the same ``compactlog``
  (its source directory is put on the executors' ``PYTHONPATH``), so a virtual environment works without
  being activated and a source checkout works without being installed. PySpark reads only the
  ``PYSPARK_PYTHON`` variable (for its workers, and the JVM it starts reads it for Python data sources),
  never the conf key, so :func:`session` sets that variable in this process before Spark starts;
* quiet logs: warnings and errors only (:file:`log4j2.properties` beside this module), no console
  progress bar, no web UI, and the JVM's stderr without the line it prints for Spark's incubator module
  (:mod:`compactlog.spark.gateway`);
* Arrow for pandas conversions; for a ``local`` master, as many shuffle partitions as cores (Spark's
  default of 200 makes every small shuffle slow on one machine);
* ``spark.speculation`` stays off: the cleaner's rewrite tasks write files at fixed names (see
  :mod:`compactlog.spark.executor`), and two attempts of one task must never run at once.

A JVM holds one SparkContext: asking for another master while a session is running is an
:class:`~compactlog.errors.ExecutorError`, never a silent reuse of the wrong cluster. A standalone master
(``spark://host:port``, or ``spark://h1:p1,h2:p2`` for masters with standby) that accepts no connection
within :data:`MASTER_CONNECT_TIMEOUT_S` is an :class:`~compactlog.errors.ExecutorError` before Spark starts:
Spark itself would retry its registration for a minute and log every attempt.
"""

from __future__ import annotations

import importlib
import os
import re
import socket
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..errors import ExecutorError
from . import gateway
from .job_failure import first_line

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ENV_MASTER = "COMPACTLOG_SPARK_MASTER"
DEFAULT_MASTER = "local[*]"
APP_NAME = "compactlog"
LOG4J_CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "log4j2.properties")
LOG_LEVELS = ("ALL", "DEBUG", "ERROR", "FATAL", "INFO", "OFF", "TRACE", "WARN")

# How long a standalone master may take to accept a TCP connection before it counts as unreachable.
MASTER_CONNECT_TIMEOUT_S = 3.0

# local, local[4], local[*], local[4,2] (2 = task retries), local[*,2]
_LOCAL = re.compile(r"^local(?:\[(\*|\d+)(?:,\s*\d+)?\])?$")
# local-cluster[workers, cores per worker, memory per worker in MiB]
_LOCAL_CLUSTER = re.compile(r"^local-cluster\[\s*(\d+)\s*,\s*(\d+)\s*,\s*\d+\s*\]$")


def resolve_master(master: str | None = None) -> str:
    """The master to use: ``master``, else ``$COMPACTLOG_SPARK_MASTER``, else ``local[*]``."""
    if master:
        return master
    return os.environ.get(ENV_MASTER) or DEFAULT_MASTER


def local_cores(master: str) -> int | None:
    """How many task slots a local master has (None for a cluster master, whose size Spark reports)."""
    match = _LOCAL.match(master)
    if match:
        count = match.group(1)
        if count is None:
            return 1
        return os.cpu_count() or 1 if count == "*" else max(int(count), 1)
    match = _LOCAL_CLUSTER.match(master)
    if match:
        return int(match.group(1)) * int(match.group(2))
    return None


def standalone_addresses(master: str) -> list[tuple[str, int]]:
    """The (host, port) of every master in a standalone URL (``spark://h:7077``, ``spark://h1:7077,h2:7077``,
    ``spark://[::1]:7077``); [] for any other master. A URL without a port is Spark's to refuse."""
    if not master.startswith("spark://"):
        return []
    addresses = []
    for address in master[len("spark://"):].split(","):
        host, sep, port = address.strip().rpartition(":")
        if not sep or not port.isdigit() or not host:
            return []
        addresses.append((host.strip("[]"), int(port)))
    return addresses


def check_master_reachable(master: str, timeout_s: float = MASTER_CONNECT_TIMEOUT_S) -> None:
    """Raise ExecutorError when ``master`` is a standalone master none of whose addresses accepts a TCP
    connection within ``timeout_s`` (every other master passes: Spark starts it or reports it)."""
    addresses = standalone_addresses(master)
    failures = []
    for host, port in addresses:
        try:
            socket.create_connection((host, port), timeout=timeout_s).close()
            return
        except OSError as e:
            failures.append(f"{host}:{port} ({e.strerror or type(e).__name__})")
    if failures:
        raise ExecutorError(f"Spark master {master} cannot be reached: no connection to {', '.join(failures)}; "
                            "is the master running and the URL right?")


def _conf_value(value: object) -> str:
    """Spark conf values are strings; Python booleans become Spark's ``true``/``false``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def executor_python(user: Mapping[str, str], environ: Mapping[str, str]) -> str:
    """The Python that Spark's workers run: the user's ``spark.pyspark.python``, else ``$PYSPARK_PYTHON``,
    else this process's interpreter (never ``python3`` from PATH, which may lack pyarrow)."""
    return user.get("spark.pyspark.python") or environ.get("PYSPARK_PYTHON") or sys.executable


def default_conf(master: str, user: Mapping[str, str]) -> dict[str, str]:
    """compactlog's defaults for ``master``, leaving out every key the user set in ``user``."""
    defaults: dict[str, str] = {
        "spark.app.name": APP_NAME,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.speculation": "false",
    }
    cores = local_cores(master)
    if cores is not None:
        defaults["spark.sql.shuffle.partitions"] = str(cores)
    defaults["spark.pyspark.python"] = executor_python(user, os.environ)
    if "PYSPARK_DRIVER_PYTHON" not in os.environ:
        defaults["spark.pyspark.driver.python"] = sys.executable
    # The executors import compactlog from where this process does (harmless when it is installed).
    package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    python_path = [package_root, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    defaults["spark.executorEnv.PYTHONPATH"] = os.pathsep.join(dict.fromkeys(python_path))
    java_options = user.get("spark.driver.extraJavaOptions", "")
    own_log4j = "log4j2.configurationFile" in java_options or "log4j.configuration" in java_options
    if not own_log4j and os.path.exists(LOG4J_CONFIG):
        defaults["spark.driver.extraJavaOptions"] = (
            f"{java_options} -Dlog4j2.configurationFile=file:{LOG4J_CONFIG}".strip())
    return {key: value for key, value in defaults.items()
            if key not in user or key == "spark.driver.extraJavaOptions"}


def session(master: str | None = None, conf: Mapping[str, Any] | None = None, *, log_level: str = "WARN",
            **options: Any) -> SparkSession:
    """A SparkSession for compactlog (see the module docstring for what it sets).

    Spark settings come as ``conf={"spark.executor.memory": "4g"}`` or as keyword arguments with their
    dotted names, ``session(**{"spark.executor.memory": "4g"})``; keyword arguments win over ``conf``.
    ``log_level`` is the driver's log level (``WARN`` by default; ``ERROR`` for silence).
    An active session with the same master is reused (Spark's ``getOrCreate``), with ``conf`` applied
    to it as far as a running session allows.
    """
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession

    resolved = resolve_master(master)
    level = log_level.upper()
    if level not in LOG_LEVELS:
        raise ExecutorError(f"log_level {log_level!r} is not a log4j level; allowed: {', '.join(LOG_LEVELS)}")
    user = {str(key): _conf_value(value) for key, value in {**(conf or {}), **options}.items()}
    active = SparkContext._active_spark_context
    if active is not None and active.master != resolved:
        raise ExecutorError(
            f"a SparkSession for master {active.master!r} is already running in this process and a JVM "
            f"holds one SparkContext; stop it (spark.stop()) before asking for master {resolved!r}")
    if active is None:
        check_master_reachable(resolved)
    # PySpark starts its workers with $PYSPARK_PYTHON (else "python3" from PATH) and ignores the conf key;
    # the JVM launched below inherits the variable too. Set before the first SparkContext of the process.
    os.environ["PYSPARK_PYTHON"] = executor_python(user, os.environ)
    # default_conf leaves out the user's keys, except the driver's Java options it extends.
    settings = {"spark.master": resolved, **user, **default_conf(resolved, user)}
    builder = SparkSession.builder
    for key, value in settings.items():
        builder = builder.config(key, value)
    try:
        gateway.start(SparkConf().setAll(list(settings.items())))  # the JVM, its stderr without noise
        spark = builder.getOrCreate()
    except Exception as e:  # no Java, a bad setting: say which master failed, in one line (the cause keeps all)
        raise ExecutorError(f"could not start Spark for master {resolved!r}: {first_line(e)}") from e
    spark.sparkContext.setLogLevel(level)
    register_data_source(spark)
    return spark


def register_data_source(spark: SparkSession) -> bool:
    """Register the ``compactlog`` Python data source with ``spark`` if :mod:`compactlog.spark.datasource`
    is present; returns whether it was registered."""
    try:
        datasource = importlib.import_module(f"{__package__}.datasource")
    except ModuleNotFoundError as e:
        if e.name in ("compactlog.spark.datasource", "pyspark.sql.datasource"):
            return False  # not built yet, or a PySpark without the Python data source API
        raise
    register = getattr(datasource, "register", None)
    if callable(register):
        register(spark)
        return True
    source = getattr(datasource, "CompactLogDataSource", None)
    if source is None:
        return False
    spark.dataSource.register(source)
    return True
