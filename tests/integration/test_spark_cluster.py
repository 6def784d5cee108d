"""compactlog on a real Spark standalone cluster: a master and two workers on 127.0.0.1, started from the
pip-installed PySpark (``$SPARK_HOME/bin/spark-class``), and a driver in a subprocess of its own (the test
session's Spark fixture is a local JVM; a JVM holds one SparkContext).

Through the cluster: a clean (compared record for record with an in-process clean of an identical copy), a
DataFrame write and a read through the ``compactlog`` data source (compared with the store's own view).
Only the processes this test starts are stopped (terminate, then kill after a bounded wait).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

import compactlog
from compactlog.partitioner import partitions_for_keys
from compactlog.record import SCHEMA

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(180)]

pyspark = pytest.importorskip("pyspark")
SPARK_HOME = os.path.dirname(os.path.abspath(pyspark.__file__))
SPARK_CLASS = os.path.join(SPARK_HOME, "bin", "spark-class")
HOST = "127.0.0.1"
REGISTER_TIMEOUT_S = 60
DRIVER_TIMEOUT_S = 150
STOP_TIMEOUT_S = 15
WRITE_ROWS = 300


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def stop(process: subprocess.Popen[bytes]) -> None:
    """Terminate a process this test started and every process it started, then kill what is left."""
    import psutil

    try:
        family = [psutil.Process(process.pid), *psutil.Process(process.pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        family = []
    for member in family:
        with contextlib.suppress(psutil.NoSuchProcess):
            member.terminate()
    _, alive = psutil.wait_procs(family, timeout=STOP_TIMEOUT_S)
    for member in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            member.kill()
    psutil.wait_procs(alive, timeout=STOP_TIMEOUT_S)
    process.wait(timeout=STOP_TIMEOUT_S)


def alive_workers(web_port: int) -> int:
    with contextlib.suppress(OSError, ValueError), \
            urllib.request.urlopen(f"http://{HOST}:{web_port}/json/", timeout=2) as response:
        return int(json.load(response).get("aliveworkers", 0))
    return 0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A standalone master and two 1-core workers on 127.0.0.1; yields the master URL."""
    if not os.access(SPARK_CLASS, os.X_OK):
        pytest.skip(f"{SPARK_CLASS} is not executable")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("no Java")
    root = tmp_path_factory.mktemp("spark-cluster")
    env = {**os.environ, "SPARK_HOME": SPARK_HOME, "SPARK_LOCAL_IP": HOST,
           "SPARK_LOG_DIR": str(root / "logs"), "SPARK_PID_DIR": str(root / "pids"),
           "SPARK_WORKER_DIR": str(root / "work"), "SPARK_CONF_DIR": str(root / "conf")}
    for name in ("logs", "pids", "work", "conf"):
        (root / name).mkdir()
    master_port, master_web = free_port(), free_port()
    url = f"spark://{HOST}:{master_port}"
    processes: list[subprocess.Popen[bytes]] = []

    def start(name: str, *args: str) -> None:
        log = open(root / "logs" / f"{name}.out", "wb")  # noqa: SIM115 (closed with the process)
        processes.append(subprocess.Popen([SPARK_CLASS, *args], env=env, stdout=log, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, cwd=root))
        log.close()

    try:
        start("master", "org.apache.spark.deploy.master.Master", "--host", HOST, "--port", str(master_port),
              "--webui-port", str(master_web))
        for i in range(2):
            start(f"worker-{i}", "org.apache.spark.deploy.worker.Worker", url, "--host", HOST,
                  "--cores", "1", "--memory", "1g", "--webui-port", str(free_port()),
                  "--work-dir", str(root / "work" / str(i)))
        deadline = time.monotonic() + REGISTER_TIMEOUT_S
        while alive_workers(master_web) < 2:
            exited = [p.args for p in processes if p.poll() is not None]
            if exited or time.monotonic() > deadline:
                outs = sorted((root / "logs").glob("*.out"))
                logs = "\n".join(f.read_text(errors="replace")[-2000:] for f in outs)
                pytest.fail(f"the cluster did not come up (exited: {exited}); logs:\n{logs}")
            time.sleep(0.5)
        yield url
    finally:
        for process in reversed(processes):
            stop(process)


DRIVER = textwrap.dedent("""
    import json, sys
    import compactlog
    from compactlog.spark import session

    master, clean_dir, write_dir, rows_path, out_path = sys.argv[1:6]
    spark = session(master, conf={"spark.executor.memory": "512m", "spark.cores.max": "2",
                                  "spark.executor.cores": "1", "spark.driver.host": "127.0.0.1"},
                    log_level="ERROR")
    result = {}
    # Wait for both executors, so that the work is spread over the two workers.
    import time
    deadline = time.monotonic() + 60
    while spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() < 3 and time.monotonic() < deadline:
        time.sleep(0.2)
    result["executors"] = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1
    with compactlog.open(clean_dir) as store:
        report = store.clean(topic="cdc", executor=spark)
        result["cleaned"] = [p.partition for p in report.partitions]
        result["skipped"] = {f"{t}-{p}": r for (t, p), r in report.skipped.items()}
    from compactlog.spark import write
    with open(rows_path) as f:
        rows = json.load(f)
    df = spark.createDataFrame([(k, v) for k, v in rows], "k string, v string").repartition(2)
    written = write(df, write_dir, "written", key="k", value="v")
    result["appended"] = sum(a.record_count for a in written.appends)
    read = (spark.read.format("compactlog").option("path", write_dir).option("topic", "written").load()
            .select("partition", "offset", "key", "value").collect())
    result["read"] = sorted([r.partition, r.offset, r.key.decode(), r.value.decode()] for r in read)
    latest = (spark.read.format("compactlog").option("path", clean_dir).option("topic", "cdc")
              .option("mode", "latest").load().select("partition", "offset", "key").collect())
    result["latest"] = sorted([r.partition, r.offset, r.key.decode()] for r in latest)
    spark.stop()
    with open(out_path, "w") as f:
        json.dump(result, f)
""")


def build_change_stream(data_dir: Path) -> None:
    """A compacted topic of 3 partitions with updates and tombstones over several segments per partition."""
    with compactlog.open(data_dir, clock=lambda: 1_700_000_000_000) as store:
        store.create_topic("cdc", 3, {"cleanup.policy": "compact", "segment.bytes": 4000,
                                      "min.cleanable.dirty.ratio": 0.01})
        store.create_topic("written", 3, {"cleanup.policy": "compact"})
        for partition in range(3):
            for round_ in range(6):
                keys = [f"p{partition}-k{(i * 7 + round_) % 40}".encode() for i in range(60)]
                values = [None if (i + round_) % 11 == 0 else f"r{round_}-{i}".encode() for i in range(60)]
                store.append("cdc", partition, pa.table({"key": pa.array(keys, pa.binary()),
                                                         "value": pa.array(values, pa.binary())}))
            store.roll("cdc", partition)


def every_row(store: compactlog.Store, topic: str, partition: int) -> pa.Table:
    log = store.log(topic, partition)
    tables = list(log.read_tables(log.log_start_offset, include_control=True))
    return pa.concat_tables(tables) if tables else SCHEMA.empty_table()


def test_clean_write_and_read_through_a_standalone_cluster(cluster: str, tmp_path: Path) -> None:
    on_cluster, in_process = tmp_path / "on-cluster", tmp_path / "in-process"
    build_change_stream(on_cluster)
    shutil.copytree(on_cluster, in_process)
    rows = [[f"user-{i % 97}", f"value-{i}"] for i in range(WRITE_ROWS)]
    (tmp_path / "rows.json").write_text(json.dumps(rows))
    (tmp_path / "driver.py").write_text(DRIVER)
    out = tmp_path / "result.json"
    env = {**os.environ, "SPARK_LOCAL_IP": HOST}
    env.pop("COMPACTLOG_SPARK_MASTER", None)

    driver = subprocess.run(
        [sys.executable, str(tmp_path / "driver.py"), cluster, str(on_cluster), str(on_cluster),
         str(tmp_path / "rows.json"), str(out)],
        env=env, capture_output=True, text=True, timeout=DRIVER_TIMEOUT_S, cwd=tmp_path)

    assert driver.returncode == 0, driver.stderr[-5000:]
    result = json.loads(out.read_text())
    assert result["executors"] == 2
    assert result["skipped"] == {} and sorted(result["cleaned"]) == [0, 1, 2]
    with compactlog.open(in_process, clock=lambda: 1_700_000_000_000) as reference:
        reference.clean(topic="cdc")
        with compactlog.open(on_cluster) as cleaned:
            for partition in range(3):
                # The cluster's clean ran on the wall clock: tombstone horizons differ; nothing else may.
                ours = every_row(cleaned, "cdc", partition).drop_columns(["delete_horizon_ms"])
                theirs = every_row(reference, "cdc", partition).drop_columns(["delete_horizon_ms"])
                assert ours.equals(theirs), f"partition {partition} differs"
            assert result["appended"] == WRITE_ROWS
            # Kafka's partitioner: every key in the partition murmur2 gives it; each partition's records in
            # the store are the ones the data source read, offset for offset.
            stored = sorted([p, r.offset, r.key.decode(), r.value.decode()]
                            for p in range(3) for r in cleaned.read("written", p))
            assert result["read"] == stored
            keys = pa.array([k.encode() for k, _ in rows], pa.binary())
            expected = {(k, int(p)) for (k, _), p in zip(rows, partitions_for_keys(keys, 3), strict=True)}
            assert {(k, p) for p, _, k, _ in result["read"]} == expected
            assert sorted(v for *_, v in result["read"]) == sorted(v for _, v in rows)
            latest = {(p, r.key.decode()): r for p in range(3) for r in cleaned.read("cdc", p)}
            live = sorted([p, r.offset, k] for (p, k), r in latest.items() if r.value is not None)
            assert result["latest"] == live
