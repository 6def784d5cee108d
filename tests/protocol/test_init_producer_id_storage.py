"""InitProducerId on a full disk answers KAFKA_STORAGE_ERROR on a connection that stays open, and leaves no
``producer-ids`` temporary file (once it closed the connection with an internal error and left an empty
``producer-ids.*.tmp`` each time). The broker runs in this process, so that its ``producer-ids`` writes can fail
as a full disk fails them (an fsync that raises ENOSPC)."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse
from kafka.protocol.producer import InitProducerIdRequest, InitProducerIdResponse
from wire_client import Connection

import compactlog
from compactlog.broker.error_codes import KAFKA_STORAGE_ERROR, NONE
from compactlog.broker.listener import KafkaListener
from compactlog.server import DataDirectoryLock, Server
from compactlog.transactions import TXN_DIR

pytestmark = pytest.mark.integration


@pytest.fixture
def full_disk(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every fsync of a ``producer-ids`` temporary file fails with ENOSPC; yields the paths it failed on."""
    failed: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        path = os.readlink(f"/proc/self/fd/{fd}")
        if os.path.basename(path).startswith("producer-ids.") and path.endswith(".tmp"):
            failed.append(path)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    yield failed


@pytest.mark.parametrize("transactional_id", [None, "tx"])
def test_init_producer_id_on_a_full_disk_answers_kafka_storage_error(
        tmp_path: Path, full_disk: list[str], monkeypatch: pytest.MonkeyPatch, transactional_id: str | None) -> None:
    compactlog.open(tmp_path).close()
    listener = KafkaListener(str(tmp_path), {"listeners": "PLAINTEXT://127.0.0.1:0"})
    server = Server([DataDirectoryLock(str(tmp_path)), listener])
    server.startup()
    try:
        conn = Connection(f"127.0.0.1:{listener.bound[0].port}")
        init = InitProducerIdRequest(version=4, transactional_id=transactional_id, transaction_timeout_ms=60_000,
                                     producer_id=-1, producer_epoch=-1)
        answer = conn.call(init, InitProducerIdResponse)
        assert (answer.error_code, answer.producer_id) == (KAFKA_STORAGE_ERROR, -1)
        assert full_disk and [n for n in os.listdir(tmp_path / TXN_DIR) if n.endswith(".tmp")] == []
        assert conn.call(ApiVersionsRequest(version=0), ApiVersionsResponse).error_code == NONE  # still open
        monkeypatch.undo()  # room again
        answer = conn.call(init, InitProducerIdResponse)
        assert (answer.error_code, answer.producer_id, answer.producer_epoch) == (NONE, 0, 0)
        conn.close()
    finally:
        server.shutdown()
