"""``serve``'s ``/metrics`` shows consumer group lag: the installed entry point in a child process; offsets
committed through the GroupMetadataManager in this process while it runs (as another writer of the data
directory), each new commit in the next scrape (the collector reads ``__consumer_offsets`` again when it
moved), the lag following the log end."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pyarrow as pa
import pytest
from test_serve import COMPACTLOG, LogLines, child_env, free_port, scrape

import compactlog
from compactlog.coordinator.group_metadata_manager import GroupMetadataManager, OffsetAndMetadata
from compactlog.server_config import server_config

pytestmark = pytest.mark.integration

LABELS = (("group", "g"), ("partition", "0"), ("topic", "t"))


def commit(data: Path, offset: int) -> None:
    with compactlog.open(data) as store:
        manager = GroupMetadataManager(store, server_config({"offsets.topic.num.partitions": 2}))
        manager.store_offsets("g", {("t", 0): OffsetAndMetadata(offset)})


def test_serve_metrics_follow_commits_and_the_log_end(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with compactlog.open(data) as store:
        store.create_topic("t", 1, {"cleanup.policy": "compact"})
        store.append("t", 0, pa.table({"key": [b"a", b"b", b"c"], "value": [b"1", b"2", b"3"]}))
    commit(data, 1)
    port = free_port()
    serve = subprocess.Popen([COMPACTLOG, "serve", "--data-dir", str(data), "--metrics-address",
                              f"127.0.0.1:{port}", "--in-process", "--listeners", "PLAINTEXT://127.0.0.1:0"],
                             env=child_env(), stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        LogLines(serve).wait_for("server started")
        first = scrape(port)
        assert first["compactlog_consumer_group_committed_offset"][LABELS] == 1
        assert first["compactlog_consumer_group_lag"][LABELS] == 2

        commit(data, 3)
        committed = scrape(port)
        assert committed["compactlog_consumer_group_committed_offset"][LABELS] == 3
        assert committed["compactlog_consumer_group_lag"][LABELS] == 0

        with compactlog.open(data) as store:
            store.append("t", 0, pa.table({"key": [b"d"], "value": [b"4"]}))
        assert scrape(port)["compactlog_consumer_group_lag"][LABELS] == 1
    finally:
        serve.send_signal(signal.SIGTERM)
        try:
            serve.wait(timeout=30)
        finally:
            if serve.poll() is None:
                os.kill(serve.pid, signal.SIGKILL)
                serve.wait()
