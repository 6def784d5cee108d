"""compactlog.spark.gateway: the filter of the JVM's stderr, and joining a JVM that exists (no JVM started)."""

from __future__ import annotations

import io
import os
from types import SimpleNamespace

import pytest

from compactlog.spark.gateway import forward, start

JVM_STDERR = (b"WARNING: Using incubator modules: jdk.incubator.vector\n"
              b"26/11/25 14:00:10 ERROR Executor: Exception in task 0.0\n"
              b"  WARNING: Using incubator modules: quoted, not the JVM's own line\n"
              b"last line without a newline")


def test_the_jvms_stderr_passes_whole_without_the_incubator_warning() -> None:
    read_end, write_end = os.pipe()
    try:
        forward(io.BytesIO(JVM_STDERR), write_end)
    finally:
        os.close(write_end)
    with os.fdopen(read_end, "rb") as passed:
        assert passed.read() == JVM_STDERR.split(b"\n", 1)[1]


def test_a_jvm_that_started_this_python_is_joined_without_a_filter(monkeypatch: pytest.MonkeyPatch) -> None:
    """With $PYSPARK_GATEWAY_PORT, PySpark connects to the JVM that launched it: there is no process, no
    stderr to filter, and the gateway is used as it is (no JVM is started here)."""
    pytest.importorskip("pyspark")
    import pyspark.java_gateway
    from pyspark import SparkConf, SparkContext

    joined = SimpleNamespace(proc=None)
    used: list[object] = []
    monkeypatch.setattr(SparkContext, "_gateway", None)
    monkeypatch.setattr(pyspark.java_gateway, "launch_gateway", lambda conf, popen_kwargs: joined)
    monkeypatch.setattr(SparkContext, "_ensure_initialized", lambda gateway, conf: used.append(gateway))

    start(SparkConf(loadDefaults=False))

    assert used == [joined]
