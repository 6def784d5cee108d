"""kafka-python 3.x against the broker: KafkaAdminClient, KafkaProducer (idempotent, gzip), KafkaConsumer with
assigned partitions."""

from __future__ import annotations

import pytest
from compaction import COMPACTED, RECORDS, TOPIC_CONFIGS, clean

import compactlog

kafka = pytest.importorskip("kafka")
from kafka.admin import ConfigResource, ConfigResourceType, NewTopic  # noqa: E402
from kafka.errors import InvalidConfigurationError, InvalidReplicationFactorError  # noqa: E402

pytestmark = pytest.mark.integration
TIMEOUT_MS = 30_000


def consume_all(broker: str, topic: str) -> dict[int, tuple[bytes | None, bytes | None]]:
    consumer = kafka.KafkaConsumer(bootstrap_servers=broker, enable_auto_commit=False, group_id=None,
                                   consumer_timeout_ms=3000)
    try:
        partition = kafka.TopicPartition(topic, 0)
        consumer.assign([partition])
        consumer.seek_to_beginning(partition)
        end = consumer.end_offsets([partition])[partition]
        records = {}
        while consumer.position(partition) < end:
            for message in consumer.poll(timeout_ms=TIMEOUT_MS).get(partition, []):
                records[message.offset] = (message.key, message.value)
        return records
    finally:
        consumer.close()


def test_kafka_python_admin_producer_and_consumer(data_dir: str, broker: str) -> None:
    admin = kafka.KafkaAdminClient(bootstrap_servers=broker, request_timeout_ms=TIMEOUT_MS)
    try:
        admin.create_topics([NewTopic("changes", 1, 1, topic_configs=TOPIC_CONFIGS)])
        with pytest.raises(InvalidConfigurationError, match=r"cleanup\.policy: 'shred' is not allowed"):
            admin.create_topics([NewTopic("bad", 1, 1, topic_configs={"cleanup.policy": "shred"})])
        with pytest.raises(InvalidReplicationFactorError):
            admin.create_topics([NewTopic("replicated", 1, 2)])
        described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, "changes")])
        assert "'cleanup.policy'" in repr(described) and "'compact'" in repr(described)
        # AlterConfigs (not incremental): kafka-python sends the other overrides along, as described
        admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "changes",
                                            configs={"delete.retention.ms": "5000"})], incremental=False)
        with compactlog.open(data_dir) as store:
            config = store.topic_config("changes")
            assert (config.delete_retention_ms, config.min_cleanable_dirty_ratio, config.compact) == (5000, 0.01, True)
    finally:
        admin.close()

    producer = kafka.KafkaProducer(bootstrap_servers=broker, acks="all", enable_idempotence=True,
                                   compression_type="gzip")
    for key, value in RECORDS:
        producer.send("changes", key=key, value=value, partition=0)
    producer.flush(timeout=TIMEOUT_MS / 1000)
    producer.close()
    assert consume_all(broker, "changes") == dict(enumerate(RECORDS))
    with compactlog.open(data_dir) as store:  # idempotent: a producer id from InitProducerId, sequences from 0
        rows = store.read_arrow("changes", 0, columns=["producer_id", "sequence"]).to_pylist()
        assert rows[0]["producer_id"] >= 0 and [r["sequence"] for r in rows] == list(range(len(RECORDS)))

    clean(data_dir)
    assert consume_all(broker, "changes") == COMPACTED
    with compactlog.open(data_dir) as store:  # the same records through the Python API
        assert {r.offset: (r.key, r.value) for r in store.read("changes", 0)} == COMPACTED
