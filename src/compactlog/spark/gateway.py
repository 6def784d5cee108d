"""The driver's JVM (PySpark's Py4J gateway), started by compactlog with its stderr passed through a filter.

Spark's launcher adds ``--add-modules=jdk.incubator.vector`` to every JVM it starts (its
``JavaModuleOptions``, with no setting to leave it out), and java.base itself then prints ``WARNING: Using
incubator modules: jdk.incubator.vector`` at every start; no JVM option silences it (``-Xlog:disable``
and ``-XX:-PrintWarnings`` do not: they govern HotSpot's own messages). So :func:`start` launches the
JVM as PySpark would (:func:`pyspark.java_gateway.launch_gateway`, the same ``spark-submit`` command and
settings) but with its stderr on a pipe, and a daemon thread copies every line to this process's stderr
(file descriptor 2, where the JVM would have written) except the lines :func:`is_noise` names.
"""

from __future__ import annotations

import os
import subprocess
import threading
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark import SparkConf

# Lines the JVM prints that a user can neither act on nor silence otherwise.
NOISE_PREFIXES = (b"WARNING: Using incubator modules: ",)


def is_noise(line: bytes) -> bool:
    return line.startswith(NOISE_PREFIXES)


def forward(source: IO[bytes], fd: int = 2) -> None:
    """Copy ``source`` line by line to ``fd`` as the lines come, without the noise, until it closes."""
    with source:
        for line in iter(source.readline, b""):
            if not is_noise(line):
                os.write(fd, line)


def start(conf: SparkConf) -> None:
    """Launch the JVM for ``conf`` (which must hold the master and every launch setting, as the
    SparkContext's will) unless this process has one; the SparkContext made next uses it."""
    from pyspark import SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None:
        return
    gateway = launch_gateway(conf, popen_kwargs={"stderr": subprocess.PIPE})
    # No process of its own when PySpark joins a JVM that started this Python ($PYSPARK_GATEWAY_PORT).
    process = getattr(gateway, "proc", None)
    if process is not None and process.stderr is not None:
        threading.Thread(target=forward, args=(process.stderr,), name="compactlog-jvm-stderr",
                         daemon=True).start()
    SparkContext._ensure_initialized(gateway=gateway, conf=conf)
