"""Fixtures shared by every test suite.

``spark`` is ONE SparkSession for the whole test session, created on first use (tests that do not ask
for it never start a JVM) and stopped at the end. Tests that use it carry ``@pytest.mark.spark``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from support import FakeClock

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """A local[2] session (UI off, 2 shuffle partitions) shared by every Spark test."""
    pytest.importorskip("pyspark")
    from compactlog.spark import session

    spark = session("local[2]", conf={"spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false"})
    yield spark
    spark.stop()


@pytest.fixture
def clock() -> FakeClock:
    """A fake clock (epoch ms) to pass as ``compactlog.open(dir, clock=clock)``; ``clock.advance(ms)``."""
    return FakeClock()
