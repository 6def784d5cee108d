"""compactlog.spark.job_failure on Spark errors as PySpark 4.3 raised them (golden texts in spark_errors/,
each the ``str()`` of the exception a job raised on the driver):

* task_without_pyarrow: a ``PythonException`` from a task run by a Python without pyarrow;
* clean_without_numpy: the cleaner's probe job, its workers' Python without compactlog's dependencies;
* datasource_without_numpy: an ``AnalysisException`` (``PYTHON_DATA_SOURCE_ERROR``) from
  ``spark.read.format("compactlog").load()`` in the same Python;
* write_worker_exits / datasource_worker_exits: ``Py4JJavaError`` from a write job and a data source read
  whose workers' ``python3`` exits at once (``echo "shim python3: no pyarrow" >&2; exit 1``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from compactlog.spark.job_failure import describe, root_cause

GOLDEN = Path(__file__).parent / "spark_errors"


def golden(name: str) -> str:
    return (GOLDEN / f"{name}.txt").read_text()


@pytest.mark.parametrize(("name", "cause"), [
    ("task_without_pyarrow", "ModuleNotFoundError: No module named 'pyarrow'"),
    ("clean_without_numpy", "ModuleNotFoundError: No module named 'numpy'"),
    ("datasource_without_numpy", "ModuleNotFoundError: No module named 'numpy'"),
    ("write_worker_exits", "the Python worker exited at start: shim python3: no pyarrow"),
    ("datasource_worker_exits", "the Python worker exited at start: shim python3: no pyarrow"),
])
def test_the_root_cause_of_a_real_spark_error(name: str, cause: str) -> None:
    assert root_cause(golden(name)) == cause


def test_the_message_is_one_line_with_the_cause_and_the_executors_python() -> None:
    class PythonException(Exception):
        pass

    error = PythonException(golden("task_without_pyarrow"))
    assert str(error).splitlines()[0] == "An exception was thrown from the Python worker:"

    line = describe(error, "/usr/bin/python3")

    assert line == "ModuleNotFoundError: No module named 'pyarrow' in the executor's Python at /usr/bin/python3"


def test_the_last_traceback_wins_and_a_multi_line_message_gives_its_first_line() -> None:
    text = ("Py4JJavaError: An error occurred\nTraceback (most recent call last):\n  File \"a.py\", line 1\n"
            "ValueError: the first\n\tat org.apache.spark.Foo(Foo.scala:1)\nDriver stacktrace:\n"
            "Traceback (most recent call last):\n  File \"b.py\", line 2, in f\n    raise KeyError(k)\n"
            "compactlog.errors.CleanerError: t-0: the second\nwith more lines\n SQLSTATE: 38000")
    assert root_cause(text) == "compactlog.errors.CleanerError: t-0: the second"


def test_an_error_without_a_python_cause_keeps_its_first_line() -> None:
    error = RuntimeError("Job 3 cancelled because SparkContext was shut down\n\tat org.apache.spark.X")
    assert root_cause(str(error)) is None
    assert describe(error, "python3") == "RuntimeError: Job 3 cancelled because SparkContext was shut down"
