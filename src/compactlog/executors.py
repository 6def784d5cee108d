"""What ``Store.clean(executor=...)`` accepts, made into the cleaner's executor protocol.

The cleaner pass runs its rounds on a :class:`~compactlog.cleaner.executor.CleanerExecutor` and never
names an engine; this is the one place where the argument a user gives becomes one:

* None: the in-process executor, ``log.cleaner.threads`` rounds at a time;
* an :class:`~compactlog.cleaner.executor.OnDemandExecutor`: started only when the pass has a round to
  run, and what its ``start()`` returns is resolved here in turn;
* an object with a ``run_rounds`` method: a ``CleanerExecutor`` already, used as it is;
* anything else (a SparkSession): :class:`compactlog.spark.executor.SparkExecutor`, which checks that it
  is one. ``compactlog.spark`` is imported only then, so ``import compactlog`` and an in-process pass never
  import it (nor PySpark).

It sits above both ``cleaner/`` and ``spark/`` (only the store imports it): ``cleaner/`` imports nothing
from ``spark/``.
"""

from __future__ import annotations

from typing import Any

from .cleaner.executor import CleanerExecutor, InProcessExecutor, OnDemandExecutor


def cleaner_executor(executor: Any, threads: int) -> CleanerExecutor:
    """The executor a pass runs its rounds on, for what ``Store.clean`` was given (see the module
    docstring); ``threads`` is ``log.cleaner.threads``."""
    if executor is None:
        return InProcessExecutor(threads)
    if isinstance(executor, OnDemandExecutor):
        start = executor.start
        return OnDemandExecutor(lambda: cleaner_executor(start(), threads))
    if callable(getattr(executor, "run_rounds", None)):
        return executor
    from .spark.executor import SparkExecutor

    return SparkExecutor(executor)
