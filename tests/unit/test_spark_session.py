"""compactlog.spark.session's decisions, without starting a JVM: the master and the default settings."""

from __future__ import annotations

import os
import sys

import pytest

from compactlog.errors import ExecutorError
from compactlog.spark.session import (
    LOG4J_CONFIG,
    default_conf,
    executor_python,
    local_cores,
    resolve_master,
    session,
    standalone_addresses,
)


def test_the_master_comes_from_the_argument_then_the_environment_then_local(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COMPACTLOG_SPARK_MASTER", raising=False)
    assert resolve_master() == "local[*]"
    monkeypatch.setenv("COMPACTLOG_SPARK_MASTER", "spark://h:7077")
    assert resolve_master() == "spark://h:7077"
    assert resolve_master("local[2]") == "local[2]"


@pytest.mark.parametrize(("master", "cores"), [
    ("local", 1), ("local[3]", 3), ("local[3,2]", 3), ("local-cluster[2, 2, 1024]", 4),
    ("spark://127.0.0.1:7077", None), ("yarn", None)])
def test_local_cores(master: str, cores: int | None) -> None:
    assert local_cores(master) == cores


def test_executors_run_the_users_python_else_pyspark_python_else_this_one() -> None:
    assert executor_python({}, {}) == sys.executable
    assert executor_python({}, {"PYSPARK_PYTHON": "/opt/env/bin/python"}) == "/opt/env/bin/python"
    assert executor_python({"spark.pyspark.python": "/opt/user/bin/python"},
                           {"PYSPARK_PYTHON": "/opt/env/bin/python"}) == "/opt/user/bin/python"
    assert executor_python({}, {"PYSPARK_PYTHON": ""}) == sys.executable


def test_session_sets_pyspark_python_before_spark_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    """PySpark reads $PYSPARK_PYTHON (never the conf key) when the SparkContext starts: it must be set by
    then. The builder here fails at getOrCreate, so no JVM starts."""
    pytest.importorskip("pyspark")
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    seen: list[str | None] = []

    def refuse(self: object) -> None:
        seen.append(os.environ.get("PYSPARK_PYTHON"))
        raise RuntimeError("no JVM in a unit test")

    monkeypatch.setattr(SparkContext, "_active_spark_context", None)
    monkeypatch.setattr(SparkSession.Builder, "getOrCreate", refuse)
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    with pytest.raises(ExecutorError, match="no JVM in a unit test"):
        session("local[1]")
    monkeypatch.setenv("PYSPARK_PYTHON", "/opt/env/bin/python")
    with pytest.raises(ExecutorError):
        session("local[1]")
    with pytest.raises(ExecutorError):
        session("local[1]", conf={"spark.pyspark.python": "/opt/user/bin/python"})
    assert seen == [sys.executable, "/opt/env/bin/python", "/opt/user/bin/python"]


def test_defaults_are_quiet_and_sized_to_the_master(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    monkeypatch.delenv("PYSPARK_DRIVER_PYTHON", raising=False)
    conf = default_conf("local[2]", {})
    assert conf["spark.pyspark.python"] == conf["spark.pyspark.driver.python"] == sys.executable
    assert conf["spark.ui.enabled"] == "false"
    assert conf["spark.sql.execution.arrow.pyspark.enabled"] == "true"
    assert conf["spark.sql.shuffle.partitions"] == "2"
    assert conf["spark.speculation"] == "false"
    assert conf["spark.driver.extraJavaOptions"] == f"-Dlog4j2.configurationFile=file:{LOG4J_CONFIG}"
    assert "spark.sql.shuffle.partitions" not in default_conf("spark://h:7077", {})


def test_the_users_settings_are_never_overridden(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    monkeypatch.delenv("PYSPARK_DRIVER_PYTHON", raising=False)
    user = {"spark.ui.enabled": "true", "spark.driver.extraJavaOptions": "-Xss4m",
            "spark.pyspark.python": "/opt/py/bin/python"}
    conf = default_conf("local[2]", user)
    assert "spark.ui.enabled" not in conf
    assert "spark.pyspark.python" not in conf
    # Java options are extended, not replaced; a user's own log4j configuration wins.
    assert conf["spark.driver.extraJavaOptions"].startswith("-Xss4m -Dlog4j2.configurationFile=")
    own = default_conf("local[2]", {"spark.driver.extraJavaOptions": "-Dlog4j2.configurationFile=x"})
    assert "spark.driver.extraJavaOptions" not in own


@pytest.mark.parametrize(("master", "addresses"), [
    ("spark://h:7077", [("h", 7077)]),
    ("spark://h1:7077,h2:7078", [("h1", 7077), ("h2", 7078)]),
    ("spark://[::1]:7077", [("::1", 7077)]),
    ("spark://h", []), ("local[2]", []), ("yarn", []), ("k8s://https://h:443", [])])
def test_standalone_addresses(master: str, addresses: list[tuple[str, int]]) -> None:
    assert standalone_addresses(master) == addresses
