"""The transaction coordinator's state survives a machine crash where its rules need it to: a state line
appended to the id's state log and fdatasynced (a new state log's directory entry fsynced too), and
``producer-ids`` renamed with its directory fsynced, before anything that depends on it happens."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import compactlog
from compactlog import transaction_state_manager
from compactlog.log import Log
from compactlog.transaction_state_manager import read_transaction_state
from support import FakeClock

ROWS = pa.table({"key": [b"k"], "value": [b"v"]})


def _state_file(fd: int) -> str | None:
    target = os.readlink(f"/proc/self/fd/{fd}")
    return target if target.endswith(".state") else None


def record_state_writes(monkeypatch: pytest.MonkeyPatch, events: list[str]) -> None:
    """Record each state line written (``appended <state>``) and each fdatasync of a state log."""
    real_write, real_fdatasync = os.write, os.fdatasync

    def write(fd: int, data: Any) -> int:
        written = real_write(fd, data)
        path = _state_file(fd)
        if path is not None:
            events.append("appended " + read_transaction_state(path).state)
        return written

    def fdatasync(fd: int) -> None:
        real_fdatasync(fd)
        if _state_file(fd) is not None:
            events.append("fdatasynced")

    monkeypatch.setattr(transaction_state_manager.os, "write", write)
    monkeypatch.setattr(transaction_state_manager.os, "fdatasync", fdatasync)


def test_the_commit_decision_is_appended_and_fdatasynced_before_any_marker(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = compactlog.open(str(tmp_path), clock=FakeClock())
    store.create_topic("out", 2, {"cleanup.policy": "delete"})
    coordinator = store.transactions
    pid, epoch = coordinator.init_producer("app", 60_000)
    partitions = [("out", 0), ("out", 1)]
    coordinator.add_to_transaction("app", pid, epoch, partitions)
    for _, partition in partitions:
        store.append("out", partition, ROWS, producer_id=pid, producer_epoch=epoch, transactional=True)
    events: list[str] = []
    record_state_writes(monkeypatch, events)
    append_marker = Log.append_marker_if_open

    def recorded_marker(log: Log, *args: Any, **kwargs: Any) -> bool:
        events.append("marker")
        return append_marker(log, *args, **kwargs)

    monkeypatch.setattr(Log, "append_marker_if_open", recorded_marker)
    coordinator.end_ongoing_transaction("app", pid, epoch, commit=True)
    assert events[:4] == ["appended PrepareCommit", "fdatasynced", "marker", "marker"]
    # the state after the markers is not fsynced: the markers are durable, and a lost Complete state only
    # leaves an EndTxn that finds nothing left to mark
    assert events[4:] == ["appended CompleteCommit"]


def test_a_new_id_a_partition_new_to_it_and_a_producer_id_are_durable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = compactlog.open(str(tmp_path), clock=FakeClock())
    store.create_topic("out", 1, {"cleanup.policy": "delete"})
    coordinator = store.transactions
    events: list[str] = []
    record_state_writes(monkeypatch, events)
    real_fsync_path = transaction_state_manager.fsync_path

    def fsync_path(path: str) -> None:
        real_fsync_path(path)
        events.append("fsynced directory" if path == coordinator.directory else f"fsynced {path}")

    monkeypatch.setattr(transaction_state_manager, "fsync_path", fsync_path)
    pid, epoch = coordinator.init_producer(None, 60_000)  # producer-ids: renamed, the directory fsynced
    assert events == ["fsynced directory"]
    pid, epoch = coordinator.init_producer("app", 60_000)  # producer-ids, then the id's new state log
    assert events[1:] == ["fsynced directory", "appended Ready", "fdatasynced", "fsynced directory"]
    del events[:]
    coordinator.add_to_transaction("app", pid, epoch, [("out", 0)])  # a partition new to the id
    assert events == ["appended Ongoing", "fdatasynced"]
    coordinator.end_ongoing_transaction("app", pid, epoch, commit=False)
    del events[:]
    coordinator.add_to_transaction("app", pid, epoch, [("out", 0)])  # known: a process crash keeps it
    assert events == ["appended Ongoing"]
