"""Transactions over the wire with unmodified clients: confluent-kafka's and kafka-python's transactional
producers against the broker (InitProducerId with a transactional id, AddPartitionsToTxn, EndTxn, Produce of
transactional batches), read back by read_committed and read_uncommitted consumers."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import pytest
from broker import running_broker

import compactlog

confluent_kafka = pytest.importorskip("confluent_kafka")
admin = pytest.importorskip("confluent_kafka.admin")

pytestmark = pytest.mark.integration
TIMEOUT_S = 30


def create_topic(broker: str, name: str, partitions: int) -> None:
    topic = admin.NewTopic(name, partitions, 1, config={"cleanup.policy": "delete", "retention.ms": "-1"})
    client = admin.AdminClient({"bootstrap.servers": broker})  # kept: its futures end with it
    client.create_topics([topic])[name].result(TIMEOUT_S)


def values(broker: str, topic: str, partitions: int, isolation: str) -> list[bytes]:
    """Every record's value in the topic, partition by partition, read with ``isolation.level``."""
    consumer = confluent_kafka.Consumer({"bootstrap.servers": broker, "group.id": "reader", "enable.auto.commit": False,
                                         "enable.partition.eof": True, "isolation.level": isolation})
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                         for p in range(partitions)])
        found, ended = [], set()
        while len(ended) < partitions:
            message = consumer.poll(TIMEOUT_S)
            assert message is not None, f"no end of every partition within {TIMEOUT_S} s"
            if message.error():
                assert message.error().code() == confluent_kafka.KafkaError._PARTITION_EOF, message.error()
                ended.add(message.partition())
            else:
                found.append(message.value())
        return sorted(found)
    finally:
        consumer.close()


def transactional_producer(broker: str, transactional_id: str, **configs: object) -> object:
    producer = confluent_kafka.Producer({"bootstrap.servers": broker, "transactional.id": transactional_id,
                                         **configs})
    producer.init_transactions(TIMEOUT_S)
    return producer


def test_confluent_aborted_output_is_invisible_to_read_committed_and_committed_is_seen_once(broker: str) -> None:
    create_topic(broker, "out", 2)
    producer = transactional_producer(broker, "pipeline")
    producer.begin_transaction()
    for i in range(4):
        producer.produce("out", key=b"k%d" % i, value=b"aborted-%d" % i, partition=i % 2)
    producer.flush(TIMEOUT_S)
    producer.abort_transaction(TIMEOUT_S)
    producer.begin_transaction()
    for i in range(4):
        producer.produce("out", key=b"k%d" % i, value=b"committed-%d" % i, partition=i % 2)
    producer.commit_transaction(TIMEOUT_S)

    committed = sorted(b"committed-%d" % i for i in range(4))
    assert values(broker, "out", 2, "read_committed") == committed
    assert values(broker, "out", 2, "read_uncommitted") == sorted(committed + [b"aborted-%d" % i for i in range(4)])


def test_confluent_a_second_producer_with_the_same_transactional_id_fences_the_first(broker: str) -> None:
    create_topic(broker, "out", 1)
    first = transactional_producer(broker, "pipeline")
    first.begin_transaction()
    first.produce("out", key=b"k", value=b"zombie")
    first.flush(TIMEOUT_S)
    second = transactional_producer(broker, "pipeline")  # aborts the first's open transaction
    second.begin_transaction()
    second.produce("out", key=b"k", value=b"live")
    second.commit_transaction(TIMEOUT_S)

    with pytest.raises(confluent_kafka.KafkaException) as fenced:
        first.commit_transaction(TIMEOUT_S)
    error = fenced.value.args[0]
    assert error.fatal(), error
    assert values(broker, "out", 1, "read_committed") == [b"live"]


def test_kafka_python_transactional_producer_commits_aborts_and_is_fenced(broker: str) -> None:
    from kafka import KafkaProducer
    from kafka.errors import KafkaError

    create_topic(broker, "out", 2)
    producer = KafkaProducer(bootstrap_servers=broker, transactional_id="kp")
    producer.init_transactions()
    producer.begin_transaction()
    for i in range(4):
        producer.send("out", key=b"k%d" % i, value=b"aborted-%d" % i, partition=i % 2)
    producer.flush()
    producer.abort_transaction()
    producer.begin_transaction()
    for i in range(4):
        producer.send("out", key=b"k%d" % i, value=b"committed-%d" % i, partition=i % 2)
    producer.commit_transaction()
    committed = sorted(b"committed-%d" % i for i in range(4))
    assert values(broker, "out", 2, "read_committed") == committed
    assert values(broker, "out", 2, "read_uncommitted") == sorted(committed + [b"aborted-%d" % i for i in range(4)])

    producer.begin_transaction()
    producer.send("out", key=b"k", value=b"zombie", partition=0)
    producer.flush()
    successor = KafkaProducer(bootstrap_servers=broker, transactional_id="kp")
    successor.init_transactions()  # fences the first instance and aborts its open transaction
    with pytest.raises(KafkaError, match=r"(?i)fenced|epoch"):
        producer.commit_transaction()
    successor.close()
    producer.close(timeout=1)
    assert values(broker, "out", 2, "read_committed") == committed


def test_a_transaction_left_open_past_its_timeout_is_aborted_by_serve(data_dir: str) -> None:
    os.makedirs(data_dir)
    with open(os.path.join(data_dir, "server.properties"), "w") as f:  # the cleaner idle after its first pass
        f.write("transaction.abort.timed.out.transaction.cleanup.interval.ms=100\nlog.cleaner.backoff.ms=600000\n")
    with running_broker(data_dir) as port:
        broker = f"127.0.0.1:{port}"
        create_topic(broker, "out", 1)
        producer = transactional_producer(broker, "stalled", **{"transaction.timeout.ms": 1000})
        producer.begin_transaction()
        began = time.monotonic()  # before the transaction's AddPartitionsToTxn, which starts its timeout
        producer.produce("out", key=b"k", value=b"stalled")
        producer.flush(TIMEOUT_S)
        with compactlog.open(data_dir) as store:
            assert store.last_stable_offset("out", 0) == 0  # open: read_committed readers stop before it
            # The abort's last step is the coordinator's state (after the ABORT marker): waited for.
            while (state := store.transactions.states()[0]).state != "CompleteAbort":
                assert time.monotonic() - began < TIMEOUT_S, "the expired transaction was not aborted"
                time.sleep(0.05)
            assert time.monotonic() - began >= 1.0  # not before its transaction.timeout.ms
            assert state.epoch == 1  # its producer fenced
            assert store.last_stable_offset("out", 0) == store.log_end_offset("out", 0) == 2  # the row, the marker
        with pytest.raises(confluent_kafka.KafkaException) as fenced:
            producer.commit_transaction(TIMEOUT_S)
        assert fenced.value.args[0].fatal(), fenced.value.args[0]
        assert values(broker, "out", 1, "read_committed") == []
        assert values(broker, "out", 1, "read_uncommitted") == [b"stalled"]


def committed_offset(broker: str, group: str, topic: str) -> int:
    """The group's committed offset of ``topic``-0 (OffsetFetch), confluent_kafka.OFFSET_INVALID if none."""
    consumer = confluent_kafka.Consumer({"bootstrap.servers": broker, "group.id": group})
    try:
        (partition,) = consumer.committed([confluent_kafka.TopicPartition(topic, 0)], TIMEOUT_S)
        return partition.offset
    finally:
        consumer.close()


def transform(consumer: object, producer: object, count: int) -> list[object]:
    """Consume ``count`` records and produce each, upper-cased, into ``out``, within the open transaction."""
    taken: list[object] = []
    while len(taken) < count:
        message = consumer.poll(TIMEOUT_S)
        assert message is not None and not message.error(), message and message.error()
        taken.append(message)
        producer.produce("out", key=message.key(), value=message.value().upper())
    return taken


def test_confluent_consume_transform_produce_commits_offsets_with_the_transaction(data_dir: str) -> None:
    os.makedirs(data_dir)
    with open(os.path.join(data_dir, "server.properties"), "w") as f:
        f.write("group.initial.rebalance.delay.ms=0\n")
    with running_broker(data_dir) as port:
        broker = f"127.0.0.1:{port}"
        create_topic(broker, "in", 1)
        create_topic(broker, "out", 1)
        source = confluent_kafka.Producer({"bootstrap.servers": broker})
        for i in range(10):
            source.produce("in", key=b"k%d" % i, value=b"v%d" % i)
        source.flush(TIMEOUT_S)

        def consumer() -> object:
            c = confluent_kafka.Consumer({"bootstrap.servers": broker, "group.id": "ctp", "enable.auto.commit": False,
                                          "auto.offset.reset": "earliest", "isolation.level": "read_committed"})
            c.subscribe(["in"])
            return c

        producer = transactional_producer(broker, "ctp-app")
        first = consumer()
        producer.begin_transaction()
        transform(first, producer, 5)
        producer.send_offsets_to_transaction(first.position(first.assignment()), first.consumer_group_metadata(),
                                             TIMEOUT_S)
        producer.abort_transaction(TIMEOUT_S)
        first.close()
        assert committed_offset(broker, "ctp", "in") == confluent_kafka.OFFSET_INVALID  # aborted: not committed
        assert values(broker, "out", 1, "read_committed") == []

        second = consumer()  # starts from the beginning again: nothing was committed
        producer.begin_transaction()
        taken = transform(second, producer, 10)
        assert [m.offset() for m in taken] == list(range(10))
        producer.send_offsets_to_transaction(second.position(second.assignment()), second.consumer_group_metadata(),
                                             TIMEOUT_S)
        producer.commit_transaction(TIMEOUT_S)
        second.close()
        assert committed_offset(broker, "ctp", "in") == 10
        assert values(broker, "out", 1, "read_committed") == sorted(b"V%d" % i for i in range(10))  # once each
    with running_broker(data_dir) as port:  # the committed offsets are read back from __consumer_offsets
        assert committed_offset(f"127.0.0.1:{port}", "ctp", "in") == 10


def test_confluent_offsets_of_a_replaced_static_member_are_fenced_by_instance_id(data_dir: str) -> None:
    """A static member (group.instance.id) closes and its instance rejoins under a new member id: offsets sent
    to a transaction with the old member's group metadata are FENCED_INSTANCE_ID (abortable) and not committed."""
    os.makedirs(data_dir)
    with open(os.path.join(data_dir, "server.properties"), "w") as f:
        f.write("group.initial.rebalance.delay.ms=0\n")
    with running_broker(data_dir) as port:
        broker = f"127.0.0.1:{port}"
        create_topic(broker, "in", 1)
        create_topic(broker, "out", 1)

        def static_consumer() -> Any:
            c = confluent_kafka.Consumer({"bootstrap.servers": broker, "group.id": "static-ctp",
                                          "group.instance.id": "worker-1", "enable.auto.commit": False,
                                          "session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
            c.subscribe(["in"])
            deadline = time.monotonic() + TIMEOUT_S
            while not c.assignment():
                c.poll(0.1)
                assert time.monotonic() < deadline, "no assignment"
            return c

        first = static_consumer()
        replaced = first.consumer_group_metadata()
        first.close()  # a static member sends no LeaveGroup: its instance keeps its place
        second = static_consumer()  # the same instance under a new member id
        producer = transactional_producer(broker, "static-app")
        offsets = [confluent_kafka.TopicPartition("in", 0, 1)]
        producer.begin_transaction()
        producer.produce("out", key=b"k", value=b"zombie")
        with pytest.raises(confluent_kafka.KafkaException) as fenced:
            producer.send_offsets_to_transaction(offsets, replaced, TIMEOUT_S)
        error = fenced.value.args[0]
        assert error.code() == confluent_kafka.KafkaError.FENCED_INSTANCE_ID and error.txn_requires_abort(), error
        producer.abort_transaction(TIMEOUT_S)
        producer.begin_transaction()
        producer.produce("out", key=b"k", value=b"live")
        producer.send_offsets_to_transaction(offsets, second.consumer_group_metadata(), TIMEOUT_S)
        producer.commit_transaction(TIMEOUT_S)
        second.close()
        assert committed_offset(broker, "static-ctp", "in") == 1
        assert values(broker, "out", 1, "read_committed") == [b"live"]


def test_fencing_and_unknown_partitions_are_answered_with_each_versions_code(data_dir: str, broker: str) -> None:
    from kafka.protocol.producer import InitProducerIdRequest, InitProducerIdResponse
    from kafka.protocol.producer.transaction import (
        AddPartitionsToTxnRequest,
        AddPartitionsToTxnResponse,
        EndTxnRequest,
        EndTxnResponse,
    )
    from test_wire import Connection

    from compactlog.broker.error_codes import (
        CONCURRENT_TRANSACTIONS,
        INVALID_PRODUCER_EPOCH,
        INVALID_REQUEST,
        INVALID_TRANSACTION_TIMEOUT,
        NONE,
        OPERATION_NOT_ATTEMPTED,
        PRODUCER_FENCED,
        UNKNOWN_TOPIC_OR_PARTITION,
    )

    create_topic(broker, "out", 1)
    conn = Connection(broker)

    def init(version: int, producer_id: int = -1, epoch: int = -1, timeout_ms: int = 60_000,
             transactional_id: str = "app") -> Any:
        fields = {"producer_id": producer_id, "producer_epoch": epoch} if version >= 3 else {}
        return conn.call(InitProducerIdRequest(version=version, transactional_id=transactional_id,
                                               transaction_timeout_ms=timeout_ms, **fields), InitProducerIdResponse)

    def add(version: int, producer_id: int, epoch: int, topics: dict[str, list[int]]) -> dict[tuple[str, int], int]:
        answer = conn.call(AddPartitionsToTxnRequest(
            version=version, v3_and_below_transactional_id="app", v3_and_below_producer_id=producer_id,
            v3_and_below_producer_epoch=epoch, v3_and_below_topics=[
                AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=name, partitions=partitions)
                for name, partitions in topics.items()]), AddPartitionsToTxnResponse)
        return {(t.name, p.partition_index): p.partition_error_code
                for t in answer.results_by_topic_v3_and_below for p in t.results_by_partition}

    def end(version: int, producer_id: int, epoch: int) -> int:
        return conn.call(EndTxnRequest(version=version, transactional_id="app", producer_id=producer_id,
                                       producer_epoch=epoch, committed=True), EndTxnResponse).error_code

    try:
        assert init(4, transactional_id="").error_code == INVALID_REQUEST
        assert init(4, timeout_ms=0).error_code == INVALID_TRANSACTION_TIMEOUT
        first = init(4)
        assert (first.error_code, first.producer_epoch) == (NONE, 0)
        second = init(0)  # a new instance: the next epoch
        assert (second.error_code, second.producer_id, second.producer_epoch) == (NONE, first.producer_id, 1)
        pid = first.producer_id
        assert init(4, pid, 1).producer_epoch == 2  # v3+ naming its current epoch: bumped
        assert init(4, pid, 1).producer_epoch == 2  # the same again: a retry, answered the same
        assert init(4, pid, 0).error_code == PRODUCER_FENCED  # an older epoch
        assert init(3, pid, 0).error_code == INVALID_PRODUCER_EPOCH  # before v4, which knows PRODUCER_FENCED
        assert add(2, pid, 1, {"out": [0]}) == {("out", 0): PRODUCER_FENCED}
        assert add(1, pid, 1, {"out": [0]}) == {("out", 0): INVALID_PRODUCER_EPOCH}
        assert add(3, pid, 2, {"out": [0], "missing": [0]}) == {("out", 0): OPERATION_NOT_ATTEMPTED,
                                                               ("missing", 0): UNKNOWN_TOPIC_OR_PARTITION}
        assert add(3, pid, 2, {"out": [0, 1]}) == {("out", 0): OPERATION_NOT_ATTEMPTED,
                                                    ("out", 1): UNKNOWN_TOPIC_OR_PARTITION}
        assert add(3, pid, 2, {"out": [0]}) == {("out", 0): NONE}
        assert (end(2, pid, 1), end(1, pid, 1)) == (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH)
        assert end(3, pid, 2) == NONE
        # A producer restarting mid-transaction: Kafka aborts the Ongoing transaction under a fenced epoch
        # (3, never handed out) and answers CONCURRENT_TRANSACTIONS; the client's retry gets epoch 4.
        assert add(3, pid, 2, {"out": [0]}) == {("out", 0): NONE}
        restarted = init(4)
        assert (restarted.error_code, restarted.producer_id, restarted.producer_epoch) == (CONCURRENT_TRANSACTIONS,
                                                                                           -1, -1)
        assert end(3, pid, 2) == PRODUCER_FENCED
        retried = init(4)
        assert (retried.error_code, retried.producer_id, retried.producer_epoch) == (NONE, pid, 4)
    finally:
        conn.close()


def test_kafka_python_sends_offsets_to_its_transaction(data_dir: str, broker: str) -> None:
    from kafka import KafkaProducer
    from kafka.structs import OffsetAndMetadata, TopicPartition

    create_topic(broker, "in", 1)
    create_topic(broker, "out", 1)
    producer = KafkaProducer(bootstrap_servers=broker, transactional_id="kp-app")
    producer.init_transactions()
    for offset, commit in ((2, False), (3, True)):
        producer.begin_transaction()
        producer.send("out", key=b"k", value=b"%d" % offset)
        producer.send_offsets_to_transaction({TopicPartition("in", 0): OffsetAndMetadata(offset, "", -1)}, "kp-group")
        if commit:
            producer.commit_transaction()
        else:
            producer.abort_transaction()
            assert committed_offset(broker, "kp-group", "in") == confluent_kafka.OFFSET_INVALID
    producer.close()
    assert committed_offset(broker, "kp-group", "in") == 3
    assert values(broker, "out", 1, "read_committed") == [b"3"]


def test_aiokafka_transactions_commit_abort_and_send_offsets(broker: str) -> None:
    aiokafka = pytest.importorskip("aiokafka")
    create_topic(broker, "out", 1)

    async def pipeline() -> None:
        producer = aiokafka.AIOKafkaProducer(bootstrap_servers=broker, transactional_id="aio")
        await producer.start()
        try:
            async with producer.transaction():
                await producer.send_and_wait("out", b"committed", key=b"k")
                await producer.send_offsets_to_transaction({aiokafka.TopicPartition("out", 0): 1}, "aio-group")
            with pytest.raises(RuntimeError):
                async with producer.transaction():  # an exception in the block aborts the transaction
                    await producer.send_and_wait("out", b"aborted", key=b"k")
                    await producer.send_offsets_to_transaction({aiokafka.TopicPartition("out", 0): 2}, "aio-group")
                    raise RuntimeError("abort")
        finally:
            await producer.stop()

    asyncio.run(pipeline())
    assert values(broker, "out", 1, "read_committed") == [b"committed"]
    assert committed_offset(broker, "aio-group", "out") == 1
