"""Keyed records sent through the producer land on the partition Kafka's Java producer picks.

The expected partitions are published values of the Java client's default partitioner (see
tests/unit/test_partitioner.py for their sources); here they go through ``producer.send`` end to end,
one batch with every key, so the vectorised path is the one checked.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import compactlog

JAVA_PARTITIONS = {
    1000: {b"": 681, b"a": 524, b"ab": 434, b"abc": 107, b"123456789": 566, b"\x00 ": 742},
    12: {
        b"1039-36302-36840-2-9f138052": 4,
        b"1182-07205-22440-2-0ad4507d": 9,
        b"1388-20023-36900-2-c9985f66": 0,
        b"1010-98110-23700-2-295bfb4c": 10,
        b"1175-03505-36600-2-126dd9ca": 1,
        b"1137-01302-23820-2-d560d49a": 4,
        b"1011-98208-36480-2-9eef750a": 8,
        b"599999": 3,
        b"233-75504-36900-2-609151bd": 10,
    },
}


@pytest.mark.parametrize("num_partitions", sorted(JAVA_PARTITIONS))
def test_producer_partitions_keys_as_the_java_producer(tmp_path: Path, num_partitions: int) -> None:
    expected = JAVA_PARTITIONS[num_partitions]
    with compactlog.open(tmp_path) as store:
        store.create_topic("t", partitions=num_partitions, config={"cleanup.policy": "compact"})
        with store.producer(linger_ms=0, batch_size=1_000_000) as producer:
            futures = {key: producer.send("t", key=key, value=b"v") for key in expected}
        assert {key: f.result().partition for key, f in futures.items()} == expected
        for key, partition in expected.items():
            assert key in [r.key for r in store.read("t", partition)]


def test_a_key_sent_alone_lands_where_it_does_in_a_batch(tmp_path: Path) -> None:
    keys = list(JAVA_PARTITIONS[12])
    with compactlog.open(tmp_path) as store:
        store.create_topic("t", partitions=12)
        with store.producer(linger_ms=0, batch_size=0) as producer:  # one record per batch
            alone = {key: producer.send("t", key=key, value=b"v").result().partition for key in keys}
    assert alone == JAVA_PARTITIONS[12]
