"""``import compactlog`` must work without touching PySpark (a rule of the project: Spark is optional)."""

from __future__ import annotations

import subprocess
import sys


def imported_modules(statement: str) -> set[str]:
    code = f"{statement}; import sys; print('\\n'.join(sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    return set(out.split())


def test_import_compactlog_does_not_import_pyspark() -> None:
    assert "pyspark" not in imported_modules("import compactlog")


def test_import_compactlog_spark_does_not_start_pyspark_until_used() -> None:
    modules = imported_modules("import compactlog.spark, compactlog.spark.executor, compactlog.cli.main")
    assert "pyspark" not in modules
