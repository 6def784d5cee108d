"""``compactlog groups`` and the consumer-aware tombstone horizon of ``topics describe``, ``explain`` and
``verify-erasure``, end to end: the installed ``compactlog`` entry point in a child process. Groups, members
and offsets are written through the GroupMetadataManager into the store, as the broker writes them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment, ConsumerProtocolSubscription

import compactlog
from compactlog.coordinator.group_metadata_manager import (
    GroupMetadataManager,
    GroupSnapshot,
    MemberSnapshot,
    OffsetAndMetadata,
    partition_for,
)
from compactlog.server_config import server_config

pytestmark = pytest.mark.timeout(300)

CLI = str(Path(sys.executable).with_name("compactlog"))
MEMBER = "consumer-1-5f1e2a9c-77"  # longer than 15 characters: the column widens
FRESH = "consumer-9-0c"
CONFIG = {"cleanup.policy": "compact", "delete.retention.ms": 86_400_000, "file.delete.delay.ms": 0}


def cli(data: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "VIRTUAL_ENV")}
    env["COMPACTLOG_DATA_DIR"] = str(data)
    return subprocess.run([CLI, *argv], env=env, capture_output=True, text=True, timeout=120, check=False)


def ok(run: subprocess.CompletedProcess[str]) -> str:
    assert run.returncode == 0, run.stderr
    return run.stdout


def assignment(topic: str, partitions: list[int]) -> bytes:
    """A member's assignment in Kafka's ConsumerProtocolAssignment v0 bytes (kafka-python's encoder)."""
    entry = ConsumerProtocolAssignment.TopicPartition(topic=topic, partitions=partitions)
    return bytes(ConsumerProtocolAssignment(version=0, assigned_partitions=[entry], user_data=b"").encode())


def subscription(topic: str) -> bytes:
    """A member's subscription in Kafka's ConsumerProtocolSubscription v0 bytes (kafka-python's encoder)."""
    return bytes(ConsumerProtocolSubscription(version=0, topics=[topic], user_data=b"").encode())


def manager_of(store: compactlog.Store) -> GroupMetadataManager:
    return GroupMetadataManager(store, server_config({"offsets.topic.num.partitions": 3}))


def commit(data: Path, group: str, offsets: dict[tuple[str, int], int]) -> None:
    with compactlog.open(data) as store:
        manager_of(store).store_offsets(group, {tp: OffsetAndMetadata(o) for tp, o in offsets.items()})


def write_groups(data: Path) -> None:
    """``users`` (2 partitions): users-0 holds a=1, b=1, a=<tombstone>, c=1, b=<tombstone> (offsets 0-4,
    sealed), users-1 two values; ``orders`` one value. Groups: ``billing`` (one member assigned both
    partitions of users; committed users-0 at 4, the tombstone of b, not read yet; users-1 at 1), ``audit``
    (no members; users-0 at 5), ``fresh`` (a member subscribed to users, assigned nothing, no offsets),
    ``late`` (offsets only, users-1 at 2: none for users-0), ``search`` (orders only)."""
    with compactlog.open(data) as store:
        store.create_topic("users", 2, CONFIG)
        store.create_topic("orders", 1, CONFIG)
        store.append("users", 0, pa.table({"key": [b"a", b"b", b"a", b"c", b"b"],
                                          "value": [b"1", b"secret", None, b"1", None]}))
        store.roll("users", 0)
        store.append("users", 1, pa.table({"key": [b"x", b"y"], "value": [b"1", b"1"]}))
        store.append("orders", 0, pa.table({"key": [b"o"], "value": [b"1"]}))
        manager = manager_of(store)
        member = MemberSnapshot(MEMBER, None, "consumer-1", "/127.0.0.1", 300_000, 45_000, subscription("users"),
                                assignment("users", [0, 1]))
        joined = MemberSnapshot(FRESH, None, "consumer-9", "/127.0.0.9", 300_000, 45_000, subscription("users"),
                                b"")
        manager.store_group(GroupSnapshot("fresh", "consumer", 1, "range", FRESH, 1_700_000_000_000, (joined,)))
        manager.store_group(GroupSnapshot("billing", "consumer", 4, "range", MEMBER, 1_700_000_000_000, (member,)))
        manager.store_offsets("billing", {("users", 0): OffsetAndMetadata(4), ("users", 1): OffsetAndMetadata(1)})
        manager.store_group(GroupSnapshot("audit", "consumer", 2, None, None, 1_700_000_000_000, ()))
        manager.store_offsets("audit", {("users", 0): OffsetAndMetadata(5)})
        manager.store_offsets("late", {("users", 1): OffsetAndMetadata(2)})
        manager.store_offsets("search", {("orders", 0): OffsetAndMetadata(1)})


@pytest.fixture
def data(tmp_path: Path) -> Path:
    write_groups(tmp_path / "data")
    return tmp_path / "data"


def test_groups_list_prints_one_group_a_line(data: Path) -> None:
    assert ok(cli(data, "groups", "list")) == "audit\nbilling\nfresh\nlate\nsearch\n"


def test_describe_prints_kafkas_table_with_the_lag_and_the_member_of_each_partition(data: Path) -> None:
    done = cli(data, "groups", "describe", "--group", "billing")

    assert done.returncode == 0 and done.stderr == ""
    assert done.stdout == (
        "\n"
        "GROUP           TOPIC           PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  LAG             "
        "CONSUMER-ID            HOST            CLIENT-ID\n"
        "billing         users           0          4               5               1               "
        "consumer-1-5f1e2a9c-77 /127.0.0.1      consumer-1\n"
        "billing         users           1          1               2               1               "
        "consumer-1-5f1e2a9c-77 /127.0.0.1      consumer-1\n")


def test_a_group_without_members_says_so_as_kafka_does_then_shows_its_offsets(data: Path) -> None:
    done = cli(data, "groups", "describe", "--group", "audit")

    assert done.returncode == 0
    assert done.stderr == "\nConsumer group 'audit' has no active members.\n"
    assert done.stdout.splitlines()[1:] == [
        "GROUP           TOPIC           PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  LAG             "
        "CONSUMER-ID     HOST            CLIENT-ID",
        "audit           users           0          5               5               0               "
        "-               -               -"]


def test_an_unknown_group_is_kafkas_error_and_a_describe_needs_a_group(data: Path) -> None:
    unknown = cli(data, "groups", "describe", "--group", "nope")
    assert unknown.returncode == 1 and unknown.stdout == ""
    assert unknown.stderr == "compactlog: UnknownGroupError: Consumer group 'nope' does not exist.\n"

    neither = cli(data, "groups", "describe")
    assert neither.returncode == 2
    assert neither.stderr.splitlines()[-1] == "compactlog groups describe: error: give --group GROUP or --all-groups"


def test_describe_members_prints_kafkas_members_table(data: Path) -> None:
    billing = cli(data, "groups", "describe", "--group", "billing", "--members")
    assert billing.returncode == 0 and billing.stderr == ""
    assert billing.stdout == (
        "\n"
        "GROUP           CONSUMER-ID            HOST            CLIENT-ID       #PARTITIONS     \n"
        "billing         consumer-1-5f1e2a9c-77 /127.0.0.1      consumer-1      2               \n")

    audit = cli(data, "groups", "describe", "--group", "audit", "--members")  # Kafka: the notice, the header
    assert audit.stderr == "\nConsumer group 'audit' has no active members.\n"
    assert audit.stdout == "\nGROUP           CONSUMER-ID     HOST            CLIENT-ID       #PARTITIONS     \n"

    with compactlog.open(data) as store:  # a static member: Kafka adds the GROUP-INSTANCE-ID column
        member = MemberSnapshot("static-1", "worker-1", "consumer-3", "/127.0.0.3", 300_000, 45_000,
                                subscription("users"), assignment("users", [1]))
        manager = manager_of(store)
        manager.store_group(GroupSnapshot("workers", "consumer", 2, "sticky", "static-1", 1_700_000_000_000,
                                          (member,)))
        manager.store_offsets("workers", {("users", 0): OffsetAndMetadata(1)})  # committed, not assigned: not counted
    assert ok(cli(data, "groups", "describe", "--group", "workers", "--members")) == (
        "\n"
        "GROUP           CONSUMER-ID     GROUP-INSTANCE-ID HOST            CLIENT-ID       #PARTITIONS     \n"
        "workers         static-1        worker-1          /127.0.0.3      consumer-3      1               \n")


def test_describe_state_prints_kafkas_state_table_with_the_configured_coordinator(data: Path) -> None:
    (data / "server.properties").write_text("advertised.listeners=PLAINTEXT://broker.example:9093\nnode.id=7\n")
    billing = cli(data, "groups", "describe", "--group", "billing", "--state")
    assert billing.returncode == 0 and billing.stderr == ""
    assert billing.stdout == (
        "\n"
        "GROUP                     COORDINATOR (ID)          ASSIGNMENT-STRATEGY  STATE           #MEMBERS\n"
        "billing                   broker.example:9093  (7)  range                Stable          1\n")

    late = cli(data, "groups", "describe", "--group", "late", "--state")  # offsets only: Empty, no strategy
    assert late.stderr == "\nConsumer group 'late' has no active members.\n"
    assert late.stdout.splitlines()[2] == (
        "late                      broker.example:9093  (7)                       Empty           0")

    both = cli(data, "groups", "describe", "--group", "billing", "--state", "--members")
    assert both.returncode == 2 and "not allowed with argument" in both.stderr


def test_describe_all_groups_and_json(data: Path) -> None:
    every = cli(data, "groups", "describe", "--all-groups")
    assert every.returncode == 0
    assert [line.split()[0] for line in every.stdout.splitlines() if line and not line.startswith("GROUP")] == [
        "audit", "billing", "billing", "fresh", "late", "search"]
    assert ("fresh           -               -          -               -               -               "
            "consumer-9-0c   /127.0.0.9      consumer-9") in every.stdout.splitlines()  # a member assigned nothing
    assert every.stderr.count("has no active members.") == 3  # audit, late and search

    described = json.loads(ok(cli(data, "groups", "describe", "--group", "billing", "--json")))
    assert described["group"] == "billing" and described["state"] == "Stable" and described["generation"] == 4
    assert described["members"] == [{"consumer_id": MEMBER, "group_instance_id": None, "client_id": "consumer-1",
                                     "host": "/127.0.0.1"}]
    assert [(p["topic"], p["partition"], p["current_offset"], p["log_end_offset"], p["lag"], p["consumer_id"])
            for p in described["partitions"]] == [("users", 0, 4, 5, 1, MEMBER), ("users", 1, 1, 2, 1, MEMBER)]
    listed = json.loads(ok(cli(data, "groups", "describe", "--all-groups", "--json")))
    assert [g["group"] for g in listed] == ["audit", "billing", "fresh", "late", "search"]


def test_metrics_show_each_groups_committed_offset_and_lag(data: Path) -> None:
    text = ok(cli(data, "metrics"))

    assert 'compactlog_consumer_group_lag{group="billing",partition="0",topic="users"} 1.0' in text
    assert 'compactlog_consumer_group_lag{group="late",partition="1",topic="users"} 0.0' in text
    assert 'compactlog_consumer_group_committed_offset{group="search",partition="0",topic="orders"} 1.0' in text
    figures = json.loads(ok(cli(data, "metrics", "--format", "json")))
    assert {"group": "billing", "topic": "users", "partition": 1, "committed-offset": 1, "lag": 1} in (
        figures["consumer-groups"])
    assert len(figures["consumer-groups"]) == 5


def test_topics_describe_counts_tombstones_and_names_the_groups_behind_the_oldest(data: Path) -> None:
    text = ok(cli(data, "topics", "describe", "--topic", "users"))
    first, second = (line for line in text.splitlines() if line.startswith("\tPartition: "))
    assert first.endswith("\tTombstones: 2\tOldestTombstone: 2\tGroupsBehindIt: fresh,late")
    assert second.endswith("\tTombstones: 0")

    described = json.loads(ok(cli(data, "topics", "describe", "--topic", "users", "--json")))
    assert [(p["tombstone_count"], p["oldest_tombstone_offset"], p["groups_behind_oldest_tombstone"])
            for p in described["partitions"]] == [(2, 2, ["fresh", "late"]), (0, None, [])]


def test_explain_names_the_groups_that_have_not_read_past_the_keys_tombstones(data: Path) -> None:
    text = ok(cli(data, "explain", "--topic", "users", "--key", "b", "--partition", "0"))
    assert "    consumer groups not past it: billing, fresh, late" in text.splitlines()

    described = json.loads(ok(cli(data, "explain", "--topic", "users", "--key", "a", "--partition", "0", "--json")))
    assert [(r["offset"], r.get("groups_not_read_past")) for r in described["records"]] == [
        (0, None), (2, ["fresh", "late"])]


def test_verify_erasure_names_the_groups_behind_the_tombstone_and_exits_3_until_they_read_past(data: Path) -> None:
    on_disk = cli(data, "verify-erasure", "--topic", "users", "--key", "b", "--partition", "0")
    assert on_disk.returncode == 1, on_disk.stdout  # the value at offset 1 is still stored
    assert "  CONSUMERS BEHIND: 3 consumer group(s) have not read past the tombstone at offset 4: billing, fresh, " \
        "late" in on_disk.stdout

    ok(cli(data, "clean", "--force", "--in-process"))  # drops the value; the tombstone stays a day
    behind = cli(data, "verify-erasure", "--topic", "users", "--key", "b", "--partition", "0")
    assert behind.returncode == 3, behind.stdout
    assert behind.stdout.splitlines()[-1] == (
        "ERASED FROM THE LOG, NOT FROM EVERY CONSUMER'S VIEW: no value of key 'b' survives in users-0, but 3 "
        "consumer group(s) have not read past its tombstone.")

    commit(data, "billing", {("users", 0): 5})
    commit(data, "late", {("users", 0): 5})
    commit(data, "fresh", {("users", 0): 5})
    erased = cli(data, "verify-erasure", "--topic", "users", "--key", "b", "--partition", "0")
    assert erased.returncode == 0, erased.stdout
    assert "CONSUMERS" not in erased.stdout and erased.stdout.splitlines()[-1].startswith("ERASED: ")
    explained = ok(cli(data, "explain", "--topic", "users", "--key", "b", "--partition", "0"))
    assert "    consumer groups: every group of the topic has read past it" in explained.splitlines()


def test_unreadable_group_offsets_leave_the_horizon_unknown_and_verify_erasure_unproven(data: Path) -> None:
    ok(cli(data, "clean", "--force", "--in-process"))  # b's value goes: the disk proof alone would hold
    damaged = partition_for("billing", 3)  # audit's and search's too; late's is another
    with compactlog.open(data) as store:  # a key of a version no Kafka writes: __consumer_offsets is unreadable
        store.append("__consumer_offsets", damaged, pa.table({"key": [b"\x00\x09junk"], "value": [b"x"]}))

    verified = cli(data, "verify-erasure", "--topic", "users", "--key", "b", "--partition", "0")
    assert verified.returncode == 3, verified.stdout
    assert "  CONSUMERS UNKNOWN: the consumer groups' offsets cannot be read: " in verified.stdout
    assert verified.stdout.splitlines()[-1].endswith("but the consumer groups' offsets cannot be read.")

    described = ok(cli(data, "topics", "describe", "--topic", "users"))
    assert "\tOldestTombstone: 2\tGroupsBehindIt: unknown" in described
    assert "Note: the consumer groups behind each tombstone are unknown: " in described
    explained = ok(cli(data, "explain", "--topic", "users", "--key", "b", "--partition", "0"))
    assert "    consumer groups: cannot be read (" in explained

    listed = cli(data, "groups", "list")
    assert listed.returncode == 1 and listed.stderr.startswith("compactlog: CorruptOffsetsRecordError: ")
    metrics = ok(cli(data, "metrics"))  # the groups of the other partitions, and every other gauge, still shown
    assert "kafka_log_log_logendoffset" in metrics
    assert 'compactlog_consumer_group_lag{group="late",partition="1",topic="users"} 0.0' in metrics
    assert 'group="billing"' not in metrics and 'group="audit"' not in metrics
    assert "compactlog_consumer_offsets_skipped_records 1.0" in metrics  # the record the broker's load skips


def test_a_data_directory_without_consumer_offsets_has_no_groups(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with compactlog.open(data) as store:
        store.create_topic("t", 1, CONFIG)
        store.append("t", 0, pa.table({"key": [b"a", b"a"], "value": [b"1", None]}))

    assert ok(cli(data, "groups", "list")) == ""
    assert ok(cli(data, "groups", "describe", "--all-groups")) == ""
    unknown = cli(data, "groups", "describe", "--group", "g")
    assert unknown.returncode == 1
    assert unknown.stderr == "compactlog: UnknownGroupError: Consumer group 'g' does not exist.\n"
    assert ok(cli(data, "topics", "describe", "--topic", "t")).splitlines()[1].endswith(
        "\tTombstones: 1\tOldestTombstone: 1\tGroupsBehindIt: -")
    assert "    consumer groups: none consumes the topic" in ok(cli(data, "explain", "--topic", "t", "--key", "a"))
    with compactlog.open(data) as store:
        assert store.topics() == ["t"]  # reading the groups created nothing
