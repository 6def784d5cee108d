"""aiokafka against the broker: AIOKafkaProducer (lz4) and AIOKafkaConsumer with an assigned partition."""

from __future__ import annotations

import asyncio

import pytest
from compaction import COMPACTED, RECORDS, TOPIC_CONFIGS, clean

import compactlog

aiokafka = pytest.importorskip("aiokafka")

pytestmark = pytest.mark.integration
TIMEOUT_S = 30


async def produce(broker: str) -> None:
    producer = aiokafka.AIOKafkaProducer(bootstrap_servers=broker, acks="all", enable_idempotence=True,
                                         compression_type="lz4")
    await producer.start()
    try:
        for key, value in RECORDS:
            await producer.send_and_wait("changes", key=key, value=value, partition=0)
    finally:
        await producer.stop()


async def consume_all(broker: str) -> dict[int, tuple[bytes | None, bytes | None]]:
    consumer = aiokafka.AIOKafkaConsumer(bootstrap_servers=broker, enable_auto_commit=False, group_id=None)
    await consumer.start()
    try:
        partition = aiokafka.TopicPartition("changes", 0)
        consumer.assign([partition])
        await consumer.seek_to_beginning(partition)
        end = (await consumer.end_offsets([partition]))[partition]
        records = {}
        while await consumer.position(partition) < end:
            batches = await consumer.getmany(partition, timeout_ms=TIMEOUT_S * 1000)
            for message in batches.get(partition, []):
                records[message.offset] = (message.key, message.value)
        return records
    finally:
        await consumer.stop()


def test_aiokafka_producer_and_consumer(data_dir: str, broker: str) -> None:
    with compactlog.open(data_dir) as store:
        store.create_topic("changes", 1, TOPIC_CONFIGS)
    asyncio.run(asyncio.wait_for(produce(broker), TIMEOUT_S))
    assert asyncio.run(asyncio.wait_for(consume_all(broker), TIMEOUT_S)) == dict(enumerate(RECORDS))
    clean(data_dir)
    assert asyncio.run(asyncio.wait_for(consume_all(broker), TIMEOUT_S)) == COMPACTED
