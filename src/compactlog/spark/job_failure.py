"""A failed Spark job in one line: the Python error that caused it and the Python that raised it.

A Spark error names its cause far from its first line: a ``PythonException`` opens with "An exception was
thrown from the Python worker:" and a ``Py4JJavaError`` with the Java method that was called; the cause
is inside the text, after pages of Java stack frames. :func:`root_cause` finds it, by these rules:

* a Python traceback (``Traceback (most recent call last):``) ends with its exception line, the first
  line after the traceback's frames that is not indented, e.g. ``ModuleNotFoundError: No module named
  'pyarrow'``. Spark repeats a task's traceback (the task, the stage, the driver's stack trace): the last
  traceback in the text is taken, and only the first line of a multi-line message;
* a Python worker that did not start at all (its interpreter is missing or exits at once) has no
  traceback: Spark prints what the process wrote to stderr between ``Error from python worker:`` and
  ``PYTHONPATH was:``;
* anything else has no Python cause (a lost executor, a killed job): the first line of the error is all
  there is.

:func:`describe` adds the executor's Python interpreter, which is the usual suspect: PySpark runs its
workers with ``$PYSPARK_PYTHON``, else ``python3`` from PATH (see :mod:`compactlog.spark.session`).
"""

from __future__ import annotations

import os
import re
from typing import Any

TRACEBACK = "Traceback (most recent call last):"
# What Spark prints when a Python worker process failed before it could report an exception.
_WORKER_STDERR = re.compile(r"Error from python worker:\n(.*?)\nPYTHONPATH was:", re.DOTALL)


def root_cause(text: str) -> str | None:
    """The Python error a Spark error's text carries (see the module docstring), or None."""
    start = text.rfind(TRACEBACK)
    if start >= 0:
        for line in text[start + len(TRACEBACK):].splitlines():
            if line.strip() and not line[0].isspace():
                return line.strip()
    started = _WORKER_STDERR.findall(text)
    if started:
        lines = [line.strip() for line in started[-1].splitlines() if line.strip()]
        return f"the Python worker exited at start: {'; '.join(lines) or 'it printed nothing'}"
    return None


def first_line(error: BaseException) -> str:
    """``Type: first line of the message`` (a Py4J error carries the whole JVM stack trace)."""
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0] if lines else ''}"


def worker_python(spark: Any) -> str:
    """The interpreter a session's Python workers run: what PySpark read when the SparkContext started."""
    context = getattr(spark, "sparkContext", spark)
    return str(getattr(context, "pythonExec", None) or os.environ.get("PYSPARK_PYTHON") or "python3")


def describe(error: BaseException, python: str) -> str:
    """One line for a failed Spark job: the Python cause and the executor's ``python`` when the text
    carries a cause, else the error's first line."""
    cause = root_cause(str(error))
    if cause is None:
        return first_line(error)
    return f"{cause} in the executor's Python at {python}"
