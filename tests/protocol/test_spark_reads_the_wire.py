"""Records produced over the wire by confluent-kafka (librdkafka), read back through the Spark data source
(``spark.read.format("compactlog")``): the same records at the same offsets, before and after a clean."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from broker import running_broker
from compaction import TOPIC_CONFIGS, clean
from test_confluent import consume_all, create

confluent_kafka = pytest.importorskip("confluent_kafka")
admin = pytest.importorskip("confluent_kafka.admin")

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.integration]
TIMEOUT_S = 30
BASE_MS = 1_700_000_000_000

# (partition, key, value, headers, timestamp ms): overwrites, a tombstone (None), headers with a null value,
# several headers with one key, timestamps out of order.
PRODUCED: list[tuple[int, bytes, bytes | None, list[tuple[str, bytes | None]], int]] = [
    (0, b"k1", b"v1", [("source", b"test")], BASE_MS + 5),
    (0, b"k2", b"v2", [], BASE_MS + 1),
    (1, b"k3", b"v3", [("h", b"1"), ("h", b"2")], BASE_MS + 2),
    (0, b"k1", b"v1b", [("nothing", None)], BASE_MS + 3),
    (0, b"k2", None, [("deleted-by", b"test")], BASE_MS + 9),
    (1, b"k4", b"\x00\xff" * 50, [], BASE_MS + 7),
    (0, b"k1", b"v1c", [], BASE_MS + 8),
]


def spark_rows(spark: SparkSession, data_dir: str) -> dict[tuple[int, int], tuple[Any, ...]]:
    """(partition, offset) -> (key, value, headers, timestamp ms) as the data source reads them."""
    df = (spark.read.format("compactlog").option("path", data_dir).option("topic", "changes").load()
          .selectExpr("partition", "offset", "key", "value", "headers", "unix_millis(timestamp) AS ms"))
    return {(row.partition, row.offset): (
        bytes(row.key), None if row.value is None else bytes(row.value),
        [(h.key, None if h.value is None else bytes(h.value)) for h in row.headers or []], row.ms)
        for row in df.collect()}


def test_records_produced_by_confluent_kafka_read_back_through_spark(spark: SparkSession, data_dir: str) -> None:
    # serve's own cleaner waits an hour after its first pass (at start, before the topic exists): only the
    # clean below compacts, after the first read.
    Path(data_dir).mkdir(parents=True)
    (Path(data_dir) / "server.properties").write_text("log.cleaner.backoff.ms=3600000\n")
    with running_broker(data_dir) as port:
        produce_clean_and_read(spark, data_dir, f"127.0.0.1:{port}")


def produce_clean_and_read(spark: SparkSession, data_dir: str, broker: str) -> None:
    create(admin.AdminClient({"bootstrap.servers": broker}), admin.NewTopic("changes", 2, 1, config=TOPIC_CONFIGS))
    producer = confluent_kafka.Producer({"bootstrap.servers": broker, "enable.idempotence": True, "acks": "all",
                                         "linger.ms": 5, "compression.type": "lz4"})
    delivered: dict[int, tuple[int, int]] = {}  # index in PRODUCED -> (partition, offset)

    def on_delivery(index: int) -> Any:
        def report(error: Any, message: Any) -> None:
            assert error is None, error
            delivered[index] = (message.partition(), message.offset())
        return report

    for i, (partition, key, value, headers, ms) in enumerate(PRODUCED):
        producer.produce("changes", key=key, value=value, headers=headers, timestamp=ms, partition=partition,
                         on_delivery=on_delivery(i))
    assert producer.flush(TIMEOUT_S) == 0
    expected = {delivered[i]: (key, value, headers, ms) for i, (_, key, value, headers, ms) in enumerate(PRODUCED)}
    assert sorted(expected) == [(0, 0), (0, 1), (0, 2), (0, 3), (0, 4), (1, 0), (1, 1)]
    assert spark_rows(spark, data_dir) == expected

    clean(data_dir)  # compacted: the latest value per key at its original offset, the tombstone kept
    compacted = spark_rows(spark, data_dir)
    over_the_wire = {(p, offset): (k, v) for p in (0, 1) for offset, (k, v, _) in
                     consume_all(broker, "changes", partition=p).items()}
    assert {at: (k, v) for at, (k, v, _, _) in compacted.items()} == over_the_wire
    assert sorted(compacted) == [(0, 3), (0, 4), (1, 0), (1, 1)]
    assert all(compacted[at] == expected[at] for at in compacted)
