"""Consumer groups with real clients, unmodified: kafka-python KafkaConsumers and confluent-kafka Consumers in one
group (child processes, :mod:`group_member`) share a 4-partition topic, take over the partitions of a member
that stops or is killed, and resume from their committed offsets after a broker restart, a kill -9 included: no record
lost, a record consumed again only if its offset was not yet committed (at least once)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from broker import start_broker, stop_broker

kafka = pytest.importorskip("kafka")
pytest.importorskip("confluent_kafka")

pytestmark = pytest.mark.integration
TOPIC = "events"
PARTITIONS = 4
GROUP = "readers"
WAIT_S = 30
MEMBER = str(Path(__file__).with_name("group_member.py"))


@dataclass
class Member:
    """A member child process and its journal."""

    client: str
    journal: Path
    stop_file: Path
    proc: subprocess.Popen[bytes]

    def events(self) -> list[list[str]]:
        text = self.journal.read_text(encoding="utf-8") if self.journal.exists() else ""
        return [line.split() for line in text.split("\n")[:-1]]  # complete lines only

    def assignment(self) -> set[int] | None:
        """The member's latest assignment; None before its first."""
        assigned = [e for e in self.events() if e[0] == "assigned"]
        if not assigned:
            return None
        return {int(p) for p in assigned[-1][2].split(",")} if len(assigned[-1]) > 2 else set()

    def stop(self) -> None:
        self.stop_file.touch()
        try:
            self.proc.wait(timeout=WAIT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise


@dataclass
class Group:
    tmp: Path
    bootstrap: str
    members: list[Member] = field(default_factory=list)

    def start(self, client: str) -> Member:
        name = f"{client}-{len(self.members)}"
        env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "VIRTUAL_ENV")}
        member = Member(client, self.tmp / f"{name}.journal", self.tmp / f"{name}.stop", subprocess.Popen(
            [sys.executable, MEMBER, client, self.bootstrap, GROUP, TOPIC, str(self.tmp / f"{name}.journal"),
             str(self.tmp / f"{name}.stop")], env=env))
        self.members.append(member)
        return member

    def running(self) -> list[Member]:
        return [m for m in self.members if m.proc.poll() is None and not m.stop_file.exists()]

    def events(self) -> list[list[str]]:
        return sorted((e for m in self.members for e in m.events()), key=lambda e: float(e[1]))

    def committed(self) -> dict[int, int]:
        highest: dict[int, int] = {}
        for event in self.events():
            if event[0] == "commit":
                highest[int(event[2])] = max(highest.get(int(event[2]), 0), int(event[3]))
        return highest

    def stop_all(self) -> None:
        for member in self.members:
            if member.proc.poll() is None:
                member.stop()


@pytest.fixture
def group(tmp_path: Path) -> Iterator[Callable[[str], Group]]:
    made: list[Group] = []

    def make(bootstrap: str) -> Group:
        made.append(Group(tmp_path, bootstrap))
        return made[-1]

    yield make
    for g in made:
        for member in g.members:  # every child stopped by its pid, whatever happened
            if member.proc.poll() is None:
                member.proc.kill()
                member.proc.wait()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def broker_dir(tmp_path: Path) -> str:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    (data_dir / "server.properties").write_text("group.initial.rebalance.delay.ms=0\n", encoding="utf-8")
    return str(data_dir)


def produce(bootstrap: str, per_partition: int) -> None:
    producer = kafka.KafkaProducer(bootstrap_servers=bootstrap)
    for i in range(per_partition):
        for partition in range(PARTITIONS):
            producer.send(TOPIC, key=b"k%d" % i, value=b"v%d" % i, partition=partition)
    producer.flush()
    producer.close()


def create_topic(bootstrap: str) -> None:
    admin = kafka.KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([kafka.admin.NewTopic(TOPIC, PARTITIONS, 1)])
    admin.close()


def wait_until(condition: Callable[[], bool], what: str, timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout_s} s: {what}"
        time.sleep(0.1)


def split_evenly(g: Group) -> bool:
    """Every running member has a share and together they hold each partition once."""
    shares = [m.assignment() for m in g.running()]
    if any(not share for share in shares):
        return False
    held = [p for share in shares for p in share or ()]
    return sorted(held) == list(range(PARTITIONS))


def all_committed(g: Group, end: int) -> bool:
    return g.committed() == {p: end for p in range(PARTITIONS)}


def check_at_least_once(g: Group, end: int) -> None:
    """Each partition's offsets 0..end-1 were all consumed; an offset consumed again was not yet committed
    when it was (a commit at or above offset + 1 had not been acknowledged before)."""
    seen: dict[tuple[int, int], int] = {}
    committed: dict[int, int] = {}
    for event in g.events():
        if event[0] == "commit":
            committed[int(event[2])] = max(committed.get(int(event[2]), 0), int(event[3]))
        elif event[0] == "record":
            partition, offset = int(event[2]), int(event[3])
            if (partition, offset) in seen:
                assert offset >= committed.get(partition, 0), \
                    f"partition {partition} offset {offset} consumed again after its commit"
            seen[(partition, offset)] = seen.get((partition, offset), 0) + 1
    for partition in range(PARTITIONS):
        missing = [o for o in range(end) if (partition, o) not in seen]
        assert not missing, f"partition {partition} lost offsets {missing[:10]}"


def test_kafka_python_and_confluent_members_share_partitions_and_take_over_a_stopped_or_killed_ones(
        tmp_path: Path, group: Callable[[str], Group]) -> None:
    proc, port = start_broker(broker_dir(tmp_path))
    try:
        bootstrap = f"127.0.0.1:{port}"
        create_topic(bootstrap)
        produce(bootstrap, 25)
        g = group(bootstrap)
        for client in ("kafka-python", "kafka-python", "confluent", "confluent"):
            g.start(client)
        wait_until(lambda: split_evenly(g) and len(g.running()) == 4, "4 members share 4 partitions")
        wait_until(lambda: all_committed(g, 25), "every record committed")

        stopping = g.members[0]
        orphaned = stopping.assignment()
        stopping.stop()  # LeaveGroup: its partition moves to the others
        produce(bootstrap, 25)
        wait_until(lambda: split_evenly(g) and len(g.running()) == 3, "3 members share 4 partitions")
        wait_until(lambda: all_committed(g, 50), "the records after the stop committed")
        assert orphaned and any(orphaned <= (m.assignment() or set()) for m in g.running())
        assert {m.client for m in g.running()} == {"kafka-python", "confluent"}

        crashed = next(m for m in g.running() if m.client == "confluent")
        crashed.proc.kill()  # kill -9: no LeaveGroup; its session times out (6 s) and the others take over
        crashed.proc.wait()
        produce(bootstrap, 25)
        wait_until(lambda: split_evenly(g) and len(g.running()) == 2, "2 members share 4 partitions")
        wait_until(lambda: all_committed(g, 75), "the records after the crash committed")
        check_at_least_once(g, 75)
        g.stop_all()
    finally:
        stop_broker(proc)


def test_commits_survive_a_kill_9_and_a_restart_of_the_broker(tmp_path: Path, group: Callable[[str], Group]) -> None:
    data_dir = broker_dir(tmp_path)
    port = free_port()
    listeners = ("--listeners", f"PLAINTEXT://127.0.0.1:{port}")  # the same address across restarts
    bootstrap = f"127.0.0.1:{port}"
    proc, _ = start_broker(data_dir, *listeners)
    try:
        create_topic(bootstrap)
        produce(bootstrap, 25)
        g = group(bootstrap)
        g.start("kafka-python")
        g.start("confluent")
        wait_until(lambda: all_committed(g, 25), "every record committed")

        proc.kill()  # kill -9 while the members are connected
        proc.wait()
        stop_broker(proc)
        proc, _ = start_broker(data_dir, *listeners)
        produce(bootstrap, 25)
        wait_until(lambda: all_committed(g, 50), "the members rejoin and commit the new records")
        check_at_least_once(g, 50)
        g.stop_all()

        stop_broker(proc)  # a clean restart: the offsets are read back from __consumer_offsets
        proc, _ = start_broker(data_dir, *listeners)
        admin = kafka.KafkaAdminClient(bootstrap_servers=bootstrap)
        offsets = admin.list_group_offsets(GROUP)[GROUP]
        admin.close()
        assert {tp.partition: o.offset for tp, o in offsets.items()} == {p: 50 for p in range(PARTITIONS)}
        produce(bootstrap, 5)
        resumed = group(bootstrap)
        resumed.start("confluent")
        wait_until(lambda: all_committed(resumed, 55), "a new member resumes at the committed offsets")
        firsts = {}
        for event in resumed.events():
            if event[0] == "record":
                firsts.setdefault(int(event[2]), int(event[3]))
        assert firsts == {p: 50 for p in range(PARTITIONS)}  # nothing committed is consumed again
        resumed.stop_all()
    finally:
        stop_broker(proc)


def test_a_static_member_restarting_gets_its_partitions_back_without_a_rebalance(broker: str) -> None:
    """confluent-kafka members with group.instance.id: one closes (a static member sends no LeaveGroup) and
    comes back under a new member id; the other is never revoked and both keep their partitions."""
    confluent_kafka = pytest.importorskip("confluent_kafka")
    create_topic(broker)
    revoked: list[int] = []

    def member(instance: str, on_revoke: Callable[..., None] | None = None) -> Any:
        consumer = confluent_kafka.Consumer({"bootstrap.servers": broker, "group.id": "static",
                                             "group.instance.id": instance, "session.timeout.ms": 6000,
                                             "heartbeat.interval.ms": 500})
        if on_revoke is None:
            consumer.subscribe([TOPIC])
        else:
            consumer.subscribe([TOPIC], on_revoke=on_revoke)
        return consumer

    def assignments(consumers: list[Any]) -> list[list[int]]:
        deadline = time.monotonic() + WAIT_S
        while True:
            for consumer in consumers:
                consumer.poll(0.1)
            shares = [sorted(tp.partition for tp in c.assignment()) for c in consumers]
            if sum(map(len, shares)) == PARTITIONS and all(shares):
                return shares
            assert time.monotonic() < deadline, f"no full assignment: {shares}"

    first = member("first")
    second = member("second", on_revoke=lambda consumer, partitions: revoked.append(len(partitions)))
    try:
        before = assignments([first, second])
        first.close()
        first = member("first")
        assert assignments([first, second]) == before
        assert revoked == []
    finally:
        first.close()
        second.close()
