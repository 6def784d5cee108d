"""Transactions over the wire with unmodified clients: confluent-kafka's and kafka-python's transactional
producers against the broker (InitProducerId with a transactional id, AddPartitionsToTxn, EndTxn, Produce of
transactional batches), read back by read_committed and read_uncommitted consumers."""

from __future__ import annotations

import pytest

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
