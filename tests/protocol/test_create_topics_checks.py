"""CreateTopics' checks against a real ``serve``, before anything is written: a partition count that is not
positive or passes ``max.broker.partitions`` is INVALID_PARTITIONS, answered at once (2^31-1 partitions
once never answered and made directories without end), and a name that collides with a topic's ('.' and '_'
alike) is INVALID_TOPIC_EXCEPTION with Kafka's message naming the topic, validate-only or not."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from broker import running_broker
from kafka.protocol.admin import CreateTopicsRequest, CreateTopicsResponse
from wire_client import TIMEOUT_S, Connection

import compactlog
from compactlog.broker.error_codes import INVALID_PARTITIONS, INVALID_TOPIC_EXCEPTION, NONE

confluent_kafka = pytest.importorskip("confluent_kafka")
admin = pytest.importorskip("confluent_kafka.admin")

pytestmark = pytest.mark.integration
VERSION = 5  # error messages since v1; num_partitions -1 since v4
INT_MAX = 2**31 - 1


def create(conn: Connection, name: str, partitions: int, validate_only: bool = False) -> Any:
    topic = CreateTopicsRequest.CreatableTopic(version=VERSION, name=name, num_partitions=partitions,
                                               replication_factor=-1, assignments=[], configs=[])
    request = CreateTopicsRequest(version=VERSION, topics=[topic], timeout_ms=TIMEOUT_S * 1000,
                                  validate_only=validate_only)
    return conn.call(request, CreateTopicsResponse).topics[0]  # the socket's timeout (30 s) bounds the wait


def partition_dirs(data_dir: str, topic: str) -> list[str]:
    return [name for name in os.listdir(data_dir) if name.startswith(f"{topic}-")]


@pytest.fixture
def conn(broker: str) -> Any:
    connection = Connection(broker)
    yield connection
    connection.close()


@pytest.mark.parametrize("partitions", [INT_MAX, 0, -2])
def test_a_partition_count_out_of_range_is_refused_before_a_directory_is_made(data_dir: str, conn: Connection,
                                                                             partitions: int) -> None:
    for validate_only in (True, False):
        answer = create(conn, "huge", partitions, validate_only)
        assert answer.error_code == INVALID_PARTITIONS, answer
    assert "max.broker.partitions is 10000" in answer.error_message if partitions == INT_MAX else \
        f"number of partitions {partitions} is not a positive integer" in answer.error_message
    assert partition_dirs(data_dir, "huge") == []
    assert create(conn, "huge", 3).error_code == NONE  # the name was left free
    assert sorted(partition_dirs(data_dir, "huge")) == ["huge-0", "huge-1", "huge-2"]


def test_max_broker_partitions_counts_every_topic(tmp_path: Path) -> None:
    data_dir = str(tmp_path / "data")
    os.makedirs(data_dir)
    # 50 partitions of __consumer_offsets (made at start), 8 of "a": 2 left.
    Path(data_dir, "server.properties").write_text("max.broker.partitions=60\n")
    with compactlog.open(data_dir) as store:
        store.create_topic("a", 8)
    with running_broker(data_dir) as port:
        conn = Connection(f"127.0.0.1:{port}")
        try:
            refused = create(conn, "b", 3)
            assert (refused.error_code, refused.error_message) == (INVALID_PARTITIONS, (
                "topic 'b': 3 partitions would make 61 in this data directory, which holds 58; "
                "max.broker.partitions is 60"))
            assert create(conn, "b", 2).error_code == NONE
            assert create(conn, "c", 1).error_code == INVALID_PARTITIONS
        finally:
            conn.close()
    assert partition_dirs(data_dir, "c") == []


def test_a_colliding_name_is_refused_with_kafkas_message_naming_the_topic(data_dir: str, broker: str,
                                                                         conn: Connection) -> None:
    assert create(conn, "big.0", 1).error_code == NONE
    for validate_only in (True, False):
        answer = create(conn, "big_0", 1, validate_only)
        assert (answer.error_code, answer.error_message) == (
            INVALID_TOPIC_EXCEPTION, "Topic 'big_0' collides with existing topics: big.0")
    client = admin.AdminClient({"bootstrap.servers": broker})  # and as a real client shows it
    with pytest.raises(confluent_kafka.KafkaException) as refused:
        client.create_topics([admin.NewTopic("big_0", 1, 1)], operation_timeout=TIMEOUT_S)["big_0"].result(TIMEOUT_S)
    assert refused.value.args[0].code() == confluent_kafka.KafkaError.TOPIC_EXCEPTION
    assert "Topic 'big_0' collides with existing topics: big.0" in refused.value.args[0].str()
    assert partition_dirs(data_dir, "big_0") == []
