"""offset.metadata.max.bytes on the wire: an OffsetCommit or TxnOffsetCommit partition whose metadata is longer
answers OFFSET_METADATA_TOO_LARGE and is not committed, the request's other partitions are; a group error
answers every partition. kafka-python's message classes over a plain socket, against a broker whose
server.properties sets the limit."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from broker import running_broker
from kafka.protocol.consumer.group import (
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
)
from kafka.protocol.producer import InitProducerIdRequest, InitProducerIdResponse
from kafka.protocol.producer.transaction import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)
from test_wire import Connection

import compactlog
from compactlog.broker.error_codes import NONE, OFFSET_METADATA_TOO_LARGE, UNKNOWN_MEMBER_ID

pytestmark = pytest.mark.integration
MAX_METADATA = 8
# Kafka counts String.length(): eight two-byte (UTF-8) characters are within a limit of 8, nine ASCII ones not.
FITS, TOO_LONG = "é" * MAX_METADATA, "x" * (MAX_METADATA + 1)
NO_OFFSET = -1


@pytest.fixture
def conn(data_dir: str) -> Iterator[Connection]:
    Path(data_dir).mkdir()
    (Path(data_dir) / "server.properties").write_text(f"offset.metadata.max.bytes={MAX_METADATA}\n")
    with compactlog.open(data_dir) as store:
        store.create_topic("t", 3)
    with running_broker(data_dir) as port:
        connection = Connection(f"127.0.0.1:{port}")
        try:
            yield connection
        finally:
            connection.close()


def commit(conn: Connection, group: str, metadata: dict[int, str], generation: int = -1,
           member: str = "") -> dict[int, int]:
    partitions = [OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
        partition_index=p, committed_offset=10 + p, committed_leader_epoch=-1, committed_metadata=m)
        for p, m in metadata.items()]
    answer = conn.call(OffsetCommitRequest(
        version=8, group_id=group, generation_id_or_member_epoch=generation, member_id=member,
        group_instance_id=None, topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name="t", partitions=partitions)]),
        OffsetCommitResponse)
    return {p.partition_index: p.error_code for t in answer.topics for p in t.partitions}


def committed(conn: Connection, group: str) -> dict[int, tuple[int, str]]:
    answer = conn.call(OffsetFetchRequest(version=8, groups=[
        OffsetFetchRequest.OffsetFetchRequestGroup(group_id=group, topics=None)], require_stable=False),
        OffsetFetchResponse)
    return {p.partition_index: (p.committed_offset, p.metadata) for g in answer.groups for t in g.topics
            for p in t.partitions if p.committed_offset != NO_OFFSET}


def test_offset_commit_refuses_only_the_partition_whose_metadata_is_too_long(conn: Connection) -> None:
    assert commit(conn, "g", {0: FITS, 1: TOO_LONG, 2: ""}) == {0: NONE, 1: OFFSET_METADATA_TOO_LARGE, 2: NONE}
    assert committed(conn, "g") == {0: (10, FITS), 2: (12, "")}
    # A group error (no such member) answers every partition, the too long one as well.
    assert commit(conn, "g", {0: "", 1: TOO_LONG}, generation=3, member="nobody") == {
        0: UNKNOWN_MEMBER_ID, 1: UNKNOWN_MEMBER_ID}


def test_txn_offset_commit_refuses_only_the_partition_whose_metadata_is_too_long(conn: Connection) -> None:
    init = conn.call(InitProducerIdRequest(version=4, transactional_id="app", transaction_timeout_ms=60_000,
                                           producer_id=-1, producer_epoch=-1), InitProducerIdResponse)
    pid, epoch = init.producer_id, init.producer_epoch
    added = conn.call(AddOffsetsToTxnRequest(version=3, transactional_id="app", producer_id=pid, producer_epoch=epoch,
                                             group_id="tg"), AddOffsetsToTxnResponse)
    assert added.error_code == NONE
    answer = conn.call(TxnOffsetCommitRequest(
        version=3, transactional_id="app", group_id="tg", producer_id=pid, producer_epoch=epoch, generation_id=-1,
        member_id="", group_instance_id=None, topics=[TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic(
            name="t", partitions=[TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic.TxnOffsetCommitRequestPartition(
                partition_index=p, committed_offset=20 + p, committed_leader_epoch=-1, committed_metadata=m)
                for p, m in ((0, FITS), (1, TOO_LONG))])]), TxnOffsetCommitResponse)
    assert {p.partition_index: p.error_code for t in answer.topics for p in t.partitions} == {
        0: NONE, 1: OFFSET_METADATA_TOO_LARGE}
    ended = conn.call(EndTxnRequest(version=3, transactional_id="app", producer_id=pid, producer_epoch=epoch,
                                    committed=True), EndTxnResponse)
    assert ended.error_code == NONE
    assert committed(conn, "tg") == {0: (20, FITS)}
