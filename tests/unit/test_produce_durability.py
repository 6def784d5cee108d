"""A Produce's response waits for its group-commit round: it is not answered before the fsync returns, and a
failed fsync answers KAFKA_STORAGE_ERROR for every partition appended (the response is a callback of the
round, not a Task)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

import compactlog
from compactlog.broker import produce
from compactlog.broker.context import BrokerContext
from compactlog.broker.error_codes import KAFKA_STORAGE_ERROR, NONE
from compactlog.errors import KafkaStorageError
from compactlog.log import Log
from compactlog.server_config import server_config
from support import FakeClock


def _request(partitions: int) -> Any:
    def batch(partition: int) -> bytes:
        builder = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 1 << 20)
        builder.append(0, 1_000, b"k%d" % partition, b"v", [])
        return bytes(builder.build())

    partition_data = [SimpleNamespace(index=p, records=batch(p)) for p in range(partitions)]
    return SimpleNamespace(acks=-1, transactional_id=None,
                           topic_data=[SimpleNamespace(name="t", partition_data=partition_data)])


def _codes(response: dict[str, Any]) -> list[tuple[int, int]]:
    return [(p["error_code"], p["base_offset"]) for t in response["responses"] for p in t["partition_responses"]]


@pytest.mark.parametrize("fails", [False, True])
def test_a_produce_is_answered_only_once_its_round_fsynced_and_a_failed_fsync_fails_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fails: bool) -> None:
    store = compactlog.open(str(tmp_path), clock=FakeClock())
    store.create_topic("t", 2)
    context = BrokerContext(store, server_config({}))
    release = threading.Event()
    flush = Log.flush

    def gated_flush(log: Log) -> None:
        assert release.wait(10)
        if fails:
            raise KafkaStorageError(f"{log.topic}-{log.partition}: fsync failed")
        flush(log)

    monkeypatch.setattr(Log, "flush", gated_flush)

    async def scenario() -> dict[str, Any]:
        answered = await produce.handle_produce(context, _request(2), 9, "PLAINTEXT")
        assert isinstance(answered, asyncio.Future)
        for _ in range(20):  # the loop turns while the fsync is held
            await asyncio.sleep(0)
        assert not answered.done()  # nothing answered before durable
        release.set()
        return await answered

    try:
        response = asyncio.run(scenario())
    finally:
        context.close()
        store.close()
    if fails:
        assert _codes(response) == [(KAFKA_STORAGE_ERROR, -1), (KAFKA_STORAGE_ERROR, -1)]
    else:
        assert _codes(response) == [(NONE, 0), (NONE, 0)]
    assert context.group_commit.rounds == (0 if fails else 1)
