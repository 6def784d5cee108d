"""``__consumer_offsets`` guarded as Kafka guards its internal topics, against a real ``serve`` with real clients:
a client's Produce to it is refused (INVALID_TOPIC_EXCEPTION) while the coordinator's commits go on, a
DeleteTopics of it is refused and the commits survive, and a record in it that cannot be decoded (written
straight into the log, as a client could before the Produce guard) is skipped at start, with a warning and a
counter, instead of keeping the broker from starting."""

from __future__ import annotations

import pyarrow as pa
import pytest
from broker import running_broker, start_broker, stop_broker
from kafka.protocol.admin import DeleteTopicsRequest, DeleteTopicsResponse
from wire_client import Connection

import compactlog
from compactlog.broker.error_codes import INVALID_TOPIC_EXCEPTION
from compactlog.coordinator.group_metadata_manager import OFFSETS_TOPIC, partition_for
from compactlog.gauges import metrics_json

kafka = pytest.importorskip("kafka")
confluent_kafka = pytest.importorskip("confluent_kafka")
admin = pytest.importorskip("confluent_kafka.admin")

pytestmark = pytest.mark.integration
TIMEOUT_S = 30
JUNK_KEY = b"\x00\x02garbage"  # a GroupMetadataKey version, then bytes that are not one
GROUP = "g"
OFFSETS_PARTITIONS = 50  # offsets.topic.num.partitions' default


def commit(broker: str, offset: int) -> None:
    """Commit ``offset`` for ``GROUP`` on t-0 (a simple consumer's commit: generation -1, no membership)."""
    consumer = kafka.KafkaConsumer(bootstrap_servers=broker, group_id=GROUP, enable_auto_commit=False)
    consumer.assign([kafka.TopicPartition("t", 0)])
    consumer.commit({kafka.TopicPartition("t", 0): kafka.OffsetAndMetadata(offset, "", -1)})
    consumer.close()


def committed(broker: str) -> int | None:
    consumer = kafka.KafkaConsumer(bootstrap_servers=broker, group_id=GROUP, enable_auto_commit=False)
    try:
        return consumer.committed(kafka.TopicPartition("t", 0))
    finally:
        consumer.close()


def offsets_end(data_dir: str, partition: int) -> int:
    with compactlog.open(data_dir) as store:
        return store.log_end_offset(OFFSETS_TOPIC, partition)


def test_a_client_cannot_produce_to_consumer_offsets_and_commits_go_on(data_dir: str, broker: str) -> None:
    with compactlog.open(data_dir) as store:
        store.create_topic("t", 1)
    outcomes: list[object] = []
    producer = confluent_kafka.Producer({"bootstrap.servers": broker, "message.send.max.retries": 0})
    producer.produce(OFFSETS_TOPIC, key=JUNK_KEY, value=b"x", partition=0,
                     on_delivery=lambda err, msg: outcomes.append(err))
    assert producer.flush(TIMEOUT_S) == 0
    assert len(outcomes) == 1 and outcomes[0] is not None, outcomes
    assert outcomes[0].code() == confluent_kafka.KafkaError.TOPIC_EXCEPTION  # INVALID_TOPIC_EXCEPTION, 17
    assert offsets_end(data_dir, 0) == 0  # nothing appended

    commit(broker, 1234)  # the coordinator's own writes go on
    assert committed(broker) == 1234
    assert offsets_end(data_dir, partition_for(GROUP, OFFSETS_PARTITIONS)) == 1


def test_delete_topics_refuses_consumer_offsets_and_the_commits_survive(data_dir: str, broker: str) -> None:
    with compactlog.open(data_dir) as store:
        store.create_topic("t", 1)
    commit(broker, 1234)
    client = admin.AdminClient({"bootstrap.servers": broker})
    with pytest.raises(confluent_kafka.KafkaException) as refused:
        client.delete_topics([OFFSETS_TOPIC], operation_timeout=TIMEOUT_S)[OFFSETS_TOPIC].result(TIMEOUT_S)
    assert refused.value.args[0].code() == confluent_kafka.KafkaError.TOPIC_EXCEPTION
    conn = Connection(broker)  # librdkafka shows no error message: v5's, over a plain socket
    try:
        answer = conn.call(DeleteTopicsRequest(version=5, topic_names=[OFFSETS_TOPIC], timeout_ms=TIMEOUT_S * 1000),
                           DeleteTopicsResponse).responses[0]
    finally:
        conn.close()
    assert (answer.error_code, answer.error_message) == (INVALID_TOPIC_EXCEPTION, (
        "Topic __consumer_offsets is a kafka internal topic and is not allowed to be marked for deletion: it holds "
        "the consumer groups' committed offsets"))
    with compactlog.open(data_dir) as store:
        assert OFFSETS_TOPIC in store.topics()
    assert committed(broker) == 1234
    commit(broker, 1235)  # OffsetCommit still works
    assert committed(broker) == 1235


def test_an_undecodable_record_in_consumer_offsets_is_skipped_and_counted_at_start(data_dir: str) -> None:
    with running_broker(data_dir) as port:
        with compactlog.open(data_dir) as store:
            store.create_topic("t", 1)
        commit(f"127.0.0.1:{port}", 1234)
    # Bricked the old way: a junk record in the group's own partition, written straight into its log.
    partition = partition_for(GROUP, OFFSETS_PARTITIONS)
    with compactlog.open(data_dir) as store:
        store.append(OFFSETS_TOPIC, partition, pa.table({"key": [JUNK_KEY], "value": [b"x"]}))
        assert store.log_end_offset(OFFSETS_TOPIC, partition) == 2  # the commit, then the junk

    proc, port = start_broker(data_dir)  # it starts (before: CorruptOffsetsRecordError, exit 1, at every start)
    try:
        assert committed(f"127.0.0.1:{port}") == 1234  # the group's offsets intact
        commit(f"127.0.0.1:{port}", 1300)  # and its partition still written and read after the junk
        assert committed(f"127.0.0.1:{port}") == 1300
        with compactlog.open(data_dir) as store:
            assert metrics_json(store)["consumer-offsets-skipped-records"] == 1
    finally:
        log = stop_broker(proc)
    assert f"{OFFSETS_TOPIC}-{partition} offset 1: record skipped while loading groups, it cannot be decoded: " \
           "GroupMetadataKey of 9 bytes cannot be decoded" in log, log
