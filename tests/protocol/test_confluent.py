"""confluent-kafka (librdkafka) against the broker: AdminClient topics and configs, the idempotent
Producer, the Consumer with assign, read_committed over transactions written through the Python API."""

from __future__ import annotations

import pytest
from compaction import COMPACTED, RECORDS, TOPIC_CONFIGS, clean

import compactlog

confluent_kafka = pytest.importorskip("confluent_kafka")
admin = pytest.importorskip("confluent_kafka.admin")

pytestmark = pytest.mark.integration
TIMEOUT_S = 30


def create(client: admin.AdminClient, topic: admin.NewTopic) -> None:
    client.create_topics([topic], operation_timeout=TIMEOUT_S)[topic.topic].result(TIMEOUT_S)


def consume_all(broker: str, topic: str, partition: int = 0, **configs: object) -> dict[int, tuple]:
    """Every record from the beginning to the end of the partition: offset -> (key, value, headers)."""
    consumer = confluent_kafka.Consumer({"bootstrap.servers": broker, "group.id": "unused", "enable.auto.commit": False,
                                         "enable.partition.eof": True, **configs})
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, partition, confluent_kafka.OFFSET_BEGINNING)])
        records: dict[int, tuple] = {}
        while True:
            message = consumer.poll(TIMEOUT_S)
            assert message is not None, f"no end of partition within {TIMEOUT_S} s"
            if message.error():
                assert message.error().code() == confluent_kafka.KafkaError._PARTITION_EOF, message.error()
                return records
            records[message.offset()] = (message.key(), message.value(), message.headers())
    finally:
        consumer.close()


def test_admin_client_creates_describes_and_alters_topics(data_dir: str, broker: str) -> None:
    client = admin.AdminClient({"bootstrap.servers": broker})
    create(client, admin.NewTopic("changes", 2, 1, config=TOPIC_CONFIGS))
    assert set(client.list_topics(timeout=TIMEOUT_S).topics["changes"].partitions) == {0, 1}

    with pytest.raises(confluent_kafka.KafkaException) as bad_policy:
        create(client, admin.NewTopic("bad", 1, 1, config={"cleanup.policy": "compacted"}))
    assert bad_policy.value.args[0].code() == confluent_kafka.KafkaError.INVALID_CONFIG
    assert "cleanup.policy: 'compacted' is not allowed" in bad_policy.value.args[0].str()
    with pytest.raises(confluent_kafka.KafkaException) as three_replicas:
        create(client, admin.NewTopic("replicated", 1, 3))
    assert three_replicas.value.args[0].code() == confluent_kafka.KafkaError.INVALID_REPLICATION_FACTOR
    with pytest.raises(confluent_kafka.KafkaException) as exists:
        create(client, admin.NewTopic("changes", 1, 1))
    assert exists.value.args[0].code() == confluent_kafka.KafkaError.TOPIC_ALREADY_EXISTS

    resource = admin.ConfigResource(admin.ResourceType.TOPIC, "changes")
    described = client.describe_configs([resource])[resource].result(TIMEOUT_S)
    assert described["cleanup.policy"].value == "compact" and not described["cleanup.policy"].is_default
    assert described["delete.retention.ms"].value == "86400000" and described["delete.retention.ms"].is_default

    change = admin.ConfigResource(admin.ResourceType.TOPIC, "changes", incremental_configs=[
        admin.ConfigEntry("delete.retention.ms", "1000", incremental_operation=admin.AlterConfigOpType.SET)])
    client.incremental_alter_configs([change])[change].result(TIMEOUT_S)
    with compactlog.open(data_dir) as store:  # the wire's topics are the store's
        assert store.partitions("changes") == 2
        assert store.topic_config("changes").delete_retention_ms == 1000
        assert store.topic_config("changes").compact and "bad" not in store.topics()
        store.create_topic("from-the-api", 3)
    assert set(client.list_topics(timeout=TIMEOUT_S).topics["from-the-api"].partitions) == {0, 1, 2}

    client.delete_topics(["from-the-api"], operation_timeout=TIMEOUT_S)["from-the-api"].result(TIMEOUT_S)
    with compactlog.open(data_dir) as store:
        assert "from-the-api" not in store.topics()


def test_idempotent_producer_and_assigned_consumer_see_the_compacted_log(data_dir: str, broker: str) -> None:
    create(admin.AdminClient({"bootstrap.servers": broker}), admin.NewTopic("changes", 1, 1, config=TOPIC_CONFIGS))
    producer = confluent_kafka.Producer({"bootstrap.servers": broker, "enable.idempotence": True, "acks": "all",
                                         "linger.ms": 5, "compression.type": "zstd"})
    for key, value in RECORDS:
        producer.produce("changes", key=key, value=value, headers=[("source", b"test")])
    assert producer.flush(TIMEOUT_S) == 0
    written = consume_all(broker, "changes")
    assert {o: (k, v) for o, (k, v, _) in written.items()} == dict(enumerate(RECORDS))
    assert all(headers == [("source", b"test")] for _, _, headers in written.values())
    with compactlog.open(data_dir) as store:  # one idempotent producer: its id and sequences were stored
        rows = store.read_arrow("changes", 0, columns=["producer_id", "sequence"]).to_pylist()
        assert rows[0]["producer_id"] >= 0 and [r["sequence"] for r in rows] == list(range(len(RECORDS)))

    clean(data_dir)
    assert {o: (k, v) for o, (k, v, _) in consume_all(broker, "changes").items()} == COMPACTED


def test_keyless_record_on_a_compacted_topic_is_refused(broker: str) -> None:
    create(admin.AdminClient({"bootstrap.servers": broker}), admin.NewTopic("changes", 1, 1, config=TOPIC_CONFIGS))
    errors = []
    producer = confluent_kafka.Producer({"bootstrap.servers": broker, "enable.idempotence": False, "retries": 0})
    producer.produce("changes", value=b"no key", on_delivery=lambda error, message: errors.append(error))
    producer.flush(TIMEOUT_S)
    assert [e.code() for e in errors] == [confluent_kafka.KafkaError.INVALID_RECORD]


def test_read_committed_consumer_skips_aborted_transactions(data_dir: str, broker: str) -> None:
    with compactlog.open(data_dir) as store:
        store.create_topic("txns", 1)
        producer = store.producer(transactional_id="writer")
        producer.begin_transaction()
        producer.send("txns", key=b"a", value=b"aborted", partition=0)
        producer.flush()
        producer.abort_transaction()
        producer.begin_transaction()
        producer.send("txns", key=b"b", value=b"committed", partition=0)
        producer.commit_transaction()
        producer.close()
    committed = consume_all(broker, "txns", **{"isolation.level": "read_committed"})
    uncommitted = consume_all(broker, "txns", **{"isolation.level": "read_uncommitted"})
    assert [v for _, v, _ in committed.values()] == [b"committed"]
    assert [v for _, v, _ in uncommitted.values()] == [b"aborted", b"committed"]
