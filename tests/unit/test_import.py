"""``import compactlog`` must work without touching PySpark (a rule of the project: Spark is optional)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow as pa

import compactlog
from support import FakeClock


def imported_modules(statement: str) -> set[str]:
    code = f"{statement}; import sys; print('\\n'.join(sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    return set(out.split())


def test_import_compactlog_does_not_import_pyspark() -> None:
    assert "pyspark" not in imported_modules("import compactlog")


def test_only_the_socket_servers_loop_imports_uvloop() -> None:
    assert "uvloop" not in imported_modules("import compactlog, compactlog.broker.listener, compactlog.cli.main")
    assert "uvloop" in imported_modules("from compactlog.network.socket_server import new_event_loop; "
                                        "new_event_loop().close()")


def test_import_compactlog_spark_does_not_start_pyspark_until_used() -> None:
    modules = imported_modules("import compactlog.spark, compactlog.spark.executor, compactlog.cli.main")
    assert "pyspark" not in modules


def test_opening_cleaning_and_reading_a_store_never_imports_pandas(tmp_path: Path) -> None:
    """pyarrow imports pandas (40 MB resident) on its numpy and scalar conversions and ``pq.read_table``;
    a process that only opens, cleans and reads a store goes without (:mod:`compactlog.columns`). Covered:
    the single-pass round, the two-pass round of a small dedupe buffer, transactions with aborts and
    tombstones removed after their horizon, and reads of sealed and active segments."""
    clock = FakeClock(1_000_000)
    for name, keys in (("single", 40), ("two", 400)):
        store = compactlog.open(tmp_path / name, clock=clock)
        store.create_topic("t", 1, {"cleanup.policy": "compact", "delete.retention.ms": 1000})
        for i in range(4):
            store.append("t", 0, pa.table({"key": [b"k%d" % (j % keys) for j in range(i, 500 + i)],
                                           "value": [None if j % 9 == 0 else b"v" for j in range(500)]}))
            store.roll("t", 0)
        store.append("t", 0, pa.table({"key": [b"k1"], "value": [b"active"]}))
        store.close()
    (tmp_path / "two" / "server.properties").write_text("log.cleaner.dedupe.buffer.size=8000\n")
    store = compactlog.open(tmp_path / "txn", clock=clock)
    store.create_topic("t", 1, {"cleanup.policy": "compact", "delete.retention.ms": 1000})
    with store.producer(transactional_id="w") as producer:
        for i in range(12):
            producer.begin_transaction()
            for j in range(10):
                producer.send("t", key=b"k%d" % (j % 4), value=None if j % 5 == 0 else b"v%d" % i)
            producer.flush()
            (producer.abort_transaction if i % 3 == 0 else producer.commit_transaction)()
            if i % 4 == 3:
                store.roll("t", 0)
    store.close()
    script = f"""
import sys, compactlog
now = [2_000_000]
for name in ("single", "two", "txn"):
    store = compactlog.open({str(tmp_path)!r} + "/" + name, clock=lambda: now[0])
    for _ in range(3):
        report = store.clean(force=True)
        assert report.partitions or all(r.startswith("nothing") for r in report.skipped.values()), report.skipped
        now[0] += 10_000
    store.read_arrow("t", 0)
    store.read_arrow("t", 0, start_offset=3, isolation_level="read_committed")
    list(store.read("t", 0))
    store.close()
print("pandas" in sys.modules, "pyarrow.dataset" in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, text=True).stdout
    assert out.split() == ["False", "False"]
