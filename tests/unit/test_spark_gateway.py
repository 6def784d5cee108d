"""compactlog.spark.gateway's filter of the JVM's stderr (no JVM started)."""

from __future__ import annotations

import io
import os

from compactlog.spark.gateway import forward

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
