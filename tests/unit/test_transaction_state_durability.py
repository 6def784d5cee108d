"""The transaction coordinator's state files survive a machine crash where its rules need them to: the new
file fsynced, renamed, and the ``.transactions/`` directory fsynced after the rename (the rename lives in
the directory), before anything that depends on it happens."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import compactlog
from compactlog import transactions
from compactlog.log import Log
from support import FakeClock

ROWS = pa.table({"key": [b"k"], "value": [b"v"]})


def test_the_commit_decision_is_renamed_and_its_directory_fsynced_before_any_marker(
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
    real_replace, real_fsync_path, append_marker = os.replace, transactions.fsync_path, Log.append_marker

    def recorded_replace(source: str, target: str) -> None:
        real_replace(source, target)
        if target.endswith(".json"):
            with open(target, encoding="utf-8") as f:
                events.append("renamed " + json.load(f)["state"])

    def recorded_fsync_path(path: str) -> None:
        real_fsync_path(path)
        events.append("fsynced directory" if path == coordinator.directory else f"fsynced {path}")

    def recorded_marker(log: Log, *args: Any, **kwargs: Any) -> int:
        events.append("marker")
        return append_marker(log, *args, **kwargs)

    monkeypatch.setattr(transactions.os, "replace", recorded_replace)
    monkeypatch.setattr(transactions, "fsync_path", recorded_fsync_path)
    monkeypatch.setattr(Log, "append_marker", recorded_marker)
    coordinator.end_ongoing_transaction("app", pid, epoch, commit=True)
    assert events[:4] == ["renamed PrepareCommit", "fsynced directory", "marker", "marker"]
    # the state after the markers is not fsynced: the markers are durable, and a lost Complete state only
    # leaves an EndTxn that finds nothing left to mark
    assert events[4:] == ["renamed CompleteCommit"]


def test_a_partition_new_to_the_id_and_a_producer_id_are_renamed_durably(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = compactlog.open(str(tmp_path), clock=FakeClock())
    store.create_topic("out", 1, {"cleanup.policy": "delete"})
    coordinator = store.transactions
    synced: list[str] = []
    real_fsync_path = transactions.fsync_path
    monkeypatch.setattr(transactions, "fsync_path", lambda path: (synced.append(path), real_fsync_path(path))[1])
    pid, epoch = coordinator.init_producer(None, 60_000)  # producer-ids
    assert synced == [coordinator.directory]
    pid, epoch = coordinator.init_producer("app", 60_000)  # producer-ids, then the id's state
    assert synced == [coordinator.directory] * 3
    coordinator.add_to_transaction("app", pid, epoch, [("out", 0)])  # a partition new to the id
    assert synced == [coordinator.directory] * 4
    coordinator.end_ongoing_transaction("app", pid, epoch, commit=False)
    coordinator.add_to_transaction("app", pid, epoch, [("out", 0)])  # known: a process crash keeps it
    assert synced == [coordinator.directory] * 4
