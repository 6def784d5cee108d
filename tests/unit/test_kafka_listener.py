"""The Kafka listener as a component of ``serve``: it opens the data directory only once the server holds the
data-directory lock."""

from __future__ import annotations

from pathlib import Path

import pytest

import compactlog
from compactlog.broker.listener import KafkaListener
from compactlog.coordinator.group_metadata_manager import OFFSETS_TOPIC
from compactlog.errors import DataDirectoryLockedError
from compactlog.server import DataDirectoryLock, Server

LOOPBACK = {"listeners": "PLAINTEXT://127.0.0.1:0"}


def topics(data_dir: str) -> list[str]:
    with compactlog.open(data_dir) as store:
        return store.topics()


def test_the_listener_creates_consumer_offsets_only_once_the_lock_is_held(tmp_path: Path) -> None:
    data_dir = str(tmp_path)
    compactlog.open(data_dir).close()
    other_server = DataDirectoryLock(data_dir)
    other_server.start()
    try:
        listener = KafkaListener(data_dir, LOOPBACK)
        with pytest.raises(DataDirectoryLockedError):
            Server([DataDirectoryLock(data_dir), listener]).startup()
        assert OFFSETS_TOPIC not in topics(data_dir) and listener.bound == ()
    finally:
        other_server.shutdown()
    server = Server([DataDirectoryLock(data_dir), listener])
    server.startup()
    try:
        (bound,) = listener.bound
        assert bound.port != 0 and OFFSETS_TOPIC in topics(data_dir)
    finally:
        server.shutdown()
    assert listener.bound == ()
