"""compactlog on Apache Spark (PySpark): the session, the cleaner's Spark executor, DataFrame I/O.

* :func:`session`: a SparkSession for compactlog (master from the argument, ``$COMPACTLOG_SPARK_MASTER``
  or ``local[*]``), with the ``compactlog`` data source registered;
* ``store.clean(executor=spark)``: the log cleaner with its kernel on Spark executors
  (:mod:`compactlog.spark.executor`);
* :func:`write` / :func:`read`: a DataFrame into / out of a topic (:mod:`compactlog.spark.io`).

Every executor must see the data directory at the same path as the driver: the local disk in local mode,
a shared filesystem (NFS, a cluster filesystem mount) on a cluster. A task that cannot see it fails the
job with :class:`~compactlog.errors.ExecutorError`.

``import compactlog`` never imports this package; importing this package imports PySpark only when
:func:`write` or :func:`read` is first used, or a session is made.
"""

from __future__ import annotations

from typing import Any

from .session import session

__all__ = ["read", "session", "write"]


def __getattr__(name: str) -> Any:
    # DataFrame I/O lives in .io, which imports PySpark; load it on first use.
    if name in ("read", "write"):
        from . import io

        return getattr(io, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
