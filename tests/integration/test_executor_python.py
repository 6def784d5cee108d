"""Spark's workers run the driver's Python on a machine whose ``python3`` cannot run them.

A fresh machine's ``python3`` has no pyarrow, and PySpark starts its workers with ``$PYSPARK_PYTHON``, else
``python3`` from PATH. The driver here runs in a child process from this test's interpreter (the project's
virtual environment), with no ``PYSPARK_PYTHON`` or ``VIRTUAL_ENV`` and a PATH whose first ``python3`` is a
shim that fails as such a Python would. A task must report the driver's interpreter, and a read through
the ``compactlog`` Python data source (which the JVM runs with ``$PYSPARK_PYTHON``) must work.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import compactlog

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(300)]

DRIVER_TIMEOUT_S = 240
SHIM = '#!/bin/sh\necho "shim python3: no pyarrow" >&2\nexit 1\n'

DRIVER = textwrap.dedent("""
    import json, sys
    from compactlog.spark import session

    data_dir, out_path = sys.argv[1:3]
    spark = session("local[1]")  # warnings on, as a user's session

    def where(_):
        import sys
        yield (sys.executable, sys.prefix)

    result = {"driver": [sys.executable, sys.prefix]}
    result["task"] = spark.sparkContext.parallelize([0], 1).mapPartitions(where).collect()[0]
    rows = (spark.read.format("compactlog").option("path", data_dir).option("topic", "t")
            .option("mode", "latest").load().select("key", "value").collect())
    result["read"] = sorted([r.key.decode(), r.value.decode()] for r in rows)
    spark.stop()
    with open(out_path, "w") as f:
        json.dump(result, f)
""")


def newcomer_env(shim_dir: Path) -> dict[str, str]:
    """The environment of a fresh shell: a failing ``python3`` first on PATH, then the system's
    directories and Java's; no virtual environment and no PySpark Python chosen."""
    java = shutil.which("java")
    path = [str(shim_dir), "/usr/local/bin", "/usr/bin", "/bin"]
    if java is not None:
        path.append(os.path.dirname(os.path.realpath(java)))
    env = {key: value for key, value in os.environ.items()
           if key not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "VIRTUAL_ENV", "PYTHONPATH",
                          "COMPACTLOG_SPARK_MASTER")}
    env["PATH"] = os.pathsep.join(path)
    return env


def test_workers_run_the_drivers_python_when_python3_on_path_cannot(tmp_path: Path) -> None:
    shim_dir = tmp_path / "bin"
    shim_dir.mkdir()
    (shim_dir / "python3").write_text(SHIM)
    (shim_dir / "python3").chmod(0o755)
    env = newcomer_env(shim_dir)
    # The shim is what a worker started as "python3" would run.
    assert subprocess.run(["python3", "-c", "pass"], env=env, capture_output=True).returncode == 1
    data_dir = tmp_path / "data"
    with compactlog.open(data_dir) as store:
        store.create_topic("t", 1, {"cleanup.policy": "compact"})
        with store.producer() as producer:
            for i in range(6):
                producer.send("t", key=f"k{i % 2}".encode(), value=f"v{i}".encode())
            producer.flush()
    (tmp_path / "driver.py").write_text(DRIVER)
    out = tmp_path / "result.json"

    driver = subprocess.run([sys.executable, str(tmp_path / "driver.py"), str(data_dir), str(out)],
                            env=env, capture_output=True, text=True, timeout=DRIVER_TIMEOUT_S, cwd=tmp_path)

    assert driver.returncode == 0, driver.stderr[-5000:]
    # Quiet by default: not even the JVM's "WARNING: Using incubator modules" (compactlog.spark.gateway).
    assert driver.stderr == ""
    result = json.loads(out.read_text())
    assert result["task"] == result["driver"] == [sys.executable, sys.prefix]
    assert result["read"] == [["k0", "v4"], ["k1", "v5"]]
