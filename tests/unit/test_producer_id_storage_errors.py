"""A producer id given on a full disk: the ``producer-ids`` write failing with ENOSPC is a KafkaStorageError
(KAFKA_STORAGE_ERROR over the wire: tests/protocol/test_init_producer_id_storage.py) and leaves no ``.tmp``
file; once the disk has room the next id is given as if nothing had happened."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

import compactlog
from compactlog.broker.error_codes import KAFKA_STORAGE_ERROR, error_code
from compactlog.errors import KafkaStorageError
from compactlog.transactions import TXN_DIR


@pytest.fixture
def full_disk(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every fsync of a ``producer-ids`` temporary file fails with ENOSPC (its bytes never reach the disk);
    yields the paths it failed on."""
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


def temporary_files(data_dir: Path) -> list[str]:
    return [name for name in os.listdir(data_dir / TXN_DIR) if name.endswith(".tmp")]


@pytest.mark.parametrize("transactional_id", [None, "tx"])
def test_a_producer_id_on_a_full_disk_is_a_storage_error_and_leaves_no_temporary_file(
        tmp_path: Path, full_disk: list[str], monkeypatch: pytest.MonkeyPatch, transactional_id: str | None) -> None:
    with compactlog.open(tmp_path) as store:
        with pytest.raises(KafkaStorageError, match=r"writing transaction state failed: .*No space left") as raised:
            store.transactions.init_producer(transactional_id, 60_000)
        assert error_code(raised.value) == KAFKA_STORAGE_ERROR
        assert full_disk and temporary_files(tmp_path) == []
        monkeypatch.undo()  # the disk has room again
        assert store.transactions.init_producer(transactional_id, 60_000) == (0, 0)  # no id was used up
