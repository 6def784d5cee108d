"""Group administration over the wire with real clients: kafka-python's and confluent-kafka's admin clients list,
describe and delete groups and offsets; OffsetFetch v8 batches groups (kafka-python's message classes over a
plain socket); aiokafka's group consumer commits and resumes."""

from __future__ import annotations

import asyncio
import time

import pytest
from kafka.protocol.consumer.group import OffsetFetchRequest, OffsetFetchResponse
from test_wire import Connection

from compactlog.broker.error_codes import GROUP_ID_NOT_FOUND, GROUP_SUBSCRIBED_TO_TOPIC, NON_EMPTY_GROUP, NONE

kafka = pytest.importorskip("kafka")
confluent_kafka = pytest.importorskip("confluent_kafka")
aiokafka = pytest.importorskip("aiokafka")
from confluent_kafka.admin import AdminClient  # noqa: E402 (after its importorskip)

pytestmark = pytest.mark.integration
WAIT_S = 20
TP = kafka.TopicPartition


def produce(bootstrap: str, topic: str, partitions: int, per_partition: int) -> None:
    producer = kafka.KafkaProducer(bootstrap_servers=bootstrap)
    for i in range(per_partition):
        for partition in range(partitions):
            producer.send(topic, b"v%d" % i, partition=partition)
    producer.flush()
    producer.close()


def error_of(result: object) -> int:
    """A kafka-python admin result's Kafka error code: it answers "OK", an error class's name or the class."""
    if result == "OK":
        return NONE
    if isinstance(result, str):
        return int(getattr(kafka.errors, result).errno)
    return int(result.errno)  # type: ignore[attr-defined]


def test_admin_clients_list_describe_and_delete_groups_and_offsets(broker: str) -> None:
    admin = kafka.KafkaAdminClient(bootstrap_servers=broker)
    admin.create_topics([kafka.admin.NewTopic("t", 2, 1), kafka.admin.NewTopic("u", 1, 1)])
    produce(broker, "t", 2, 3)
    produce(broker, "u", 1, 3)

    simple = kafka.KafkaConsumer(bootstrap_servers=broker, group_id="simple", enable_auto_commit=False)
    simple.assign([TP("u", 0)])
    simple.commit({TP("u", 0): kafka.OffsetAndMetadata(2, "", -1)})  # generation -1: no membership needed
    simple.close()

    live = kafka.KafkaConsumer("t", bootstrap_servers=broker, group_id="live", enable_auto_commit=False,
                               auto_offset_reset="earliest")
    deadline = time.monotonic() + WAIT_S
    while len(live.assignment()) < 2:
        assert time.monotonic() < deadline, "no assignment"
        live.poll(200)
    live.commit({TP("t", 0): kafka.OffsetAndMetadata(1, "m", -1), TP("u", 0): kafka.OffsetAndMetadata(3, "", -1)})

    listed = {g["group_id"]: g for g in admin.list_groups()}
    assert (listed["simple"]["protocol_type"], listed["simple"]["group_state"]) == ("", "Empty")
    assert (listed["live"]["protocol_type"], listed["live"]["group_state"]) == ("consumer", "Stable")
    described = admin.describe_groups(["live"])["live"]
    assert described["group_state"] == "Stable" and described["protocol_data"] == "range"
    [member] = described["members"]
    assert member["member_assignment"]["assigned_partitions"] == [{"topic": "t", "partitions": [0, 1]}]
    assert member["member_metadata"]["topics"] == ["t"]

    confluent = AdminClient({"bootstrap.servers": broker})
    description = confluent.describe_consumer_groups(["live"])["live"].result(WAIT_S)
    assert description.state == confluent_kafka.ConsumerGroupState.STABLE
    assert sorted(tp.partition for tp in description.members[0].assignment.topic_partitions) == [0, 1]
    offsets = confluent.list_consumer_group_offsets([confluent_kafka.ConsumerGroupTopicPartitions("live")])
    assert {(tp.topic, tp.partition, tp.offset) for tp in offsets["live"].result(WAIT_S).topic_partitions} == {
        ("t", 0, 1), ("u", 0, 3)}

    deleted = admin.delete_groups(["live", "simple", "missing"])
    assert {g: error_of(r) for g, r in deleted.items()} == {
        "live": NON_EMPTY_GROUP, "simple": NONE, "missing": GROUP_ID_NOT_FOUND}
    removed = admin.delete_group_offsets("live", [TP("t", 0), TP("u", 0)])
    assert {tp: error_of(e) for tp, e in removed.items()} == {
        TP("t", 0): GROUP_SUBSCRIBED_TO_TOPIC, TP("u", 0): NONE}

    connection = Connection(broker)
    batched = connection.call(OffsetFetchRequest(version=8, groups=[
        OffsetFetchRequest.OffsetFetchRequestGroup(group_id="live", topics=None),
        OffsetFetchRequest.OffsetFetchRequestGroup(group_id="simple", topics=None)], require_stable=False),
        OffsetFetchResponse)
    answers = {g.group_id: {(t.name, p.partition_index): p.committed_offset for t in g.topics for p in t.partitions}
               for g in batched.groups}
    assert answers == {"live": {("t", 0): 1}, "simple": {}}  # u's offset deleted, the simple group deleted

    live.close()  # LeaveGroup: the group is empty and may go
    assert error_of(admin.delete_groups(["live"])["live"]) == NONE
    assert "live" not in {g["group_id"] for g in admin.list_groups()}
    admin.close()


def test_aiokafka_group_consumer_commits_and_a_new_one_resumes(broker: str) -> None:
    admin = kafka.KafkaAdminClient(bootstrap_servers=broker)
    admin.create_topics([kafka.admin.NewTopic("a", 2, 1)])
    admin.close()
    produce(broker, "a", 2, 5)

    async def consume(expected: int) -> list[tuple[int, int]]:
        consumer = aiokafka.AIOKafkaConsumer("a", bootstrap_servers=broker, group_id="aio", enable_auto_commit=False,
                                             auto_offset_reset="earliest")
        await consumer.start()
        seen: list[tuple[int, int]] = []
        try:
            deadline = time.monotonic() + WAIT_S
            while len(seen) < expected:
                assert time.monotonic() < deadline, f"{len(seen)} of {expected} records"
                batches = await consumer.getmany(timeout_ms=200)
                seen += [(tp.partition, r.offset) for tp, records in batches.items() for r in records]
            await consumer.commit()
        finally:
            await consumer.stop()
        return seen

    assert sorted(asyncio.run(consume(10))) == [(p, o) for p in range(2) for o in range(5)]
    produce(broker, "a", 2, 2)
    assert sorted(asyncio.run(consume(4))) == [(p, o) for p in range(2) for o in (5, 6)]  # from the commits
