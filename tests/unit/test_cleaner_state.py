"""The cleaner's state file: what a pass writes, what a fresh store and ``metrics`` read back, and damage."""

from __future__ import annotations

import json
import logging
import os
import zlib
from pathlib import Path

import pyarrow as pa
import pytest

import compactlog
from compactlog.cleaner import cleaner as cleaner_module
from compactlog.cleaner.metrics import CleanerStats
from compactlog.cleaner.state import (
    STATE_FILE,
    CleanerState,
    load_cleaner_state,
    read_cleaner_state,
    write_cleaner_state,
)
from compactlog.errors import CorruptCleanerStateError
from compactlog.log import Log
from support import FakeClock


def sample_state() -> CleanerState:
    state = CleanerState(last_stats=[CleanerStats(3, 2, 900, 600, 1, 0.25, 1000, 3500)], last_run_ms=1000,
                         max_dirty_ratio=0.75, max_compaction_delay_ms=4200)
    state.mark_uncleanable(("bad", 2), "bad-2/00000000000000000000.parquet: not a Parquet file", 1234)
    return state


def fields_of(state: CleanerState) -> tuple[object, ...]:
    return (state.uncleanable, state.uncleanable_bytes, state.last_stats, state.last_run_ms,
            state.max_dirty_ratio, state.max_compaction_delay_ms)


def test_the_state_file_round_trips(tmp_path: Path) -> None:
    assert fields_of(read_cleaner_state(str(tmp_path))) == fields_of(CleanerState())  # no file: empty
    write_cleaner_state(str(tmp_path), sample_state())
    assert fields_of(read_cleaner_state(str(tmp_path))) == fields_of(sample_state())
    assert sorted(os.listdir(tmp_path)) == [STATE_FILE, STATE_FILE + ".lock"]  # no .tmp left


@pytest.mark.parametrize("damage", ["truncated", "flipped", "not json", "wrong shape"])
def test_a_damaged_state_file_is_an_error_for_metrics_and_an_empty_state_for_the_store(
        tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture) -> None:
    write_cleaner_state(str(tmp_path), sample_state())
    path = tmp_path / STATE_FILE
    data = path.read_bytes()
    if damage == "truncated":
        data = data[: len(data) // 2]
    elif damage == "flipped":  # still JSON, a figure changed: only the checksum tells
        data = data.replace(b'"stuck_bytes": 1234', b'"stuck_bytes": 1235')
        assert b"1235" in data
    elif damage == "not json":
        data = b"\xff\xfe garbage"
    else:  # a checksum that matches a state of another shape
        document = json.loads(data)
        document["state"]["last_stats"] = [{"records_read": 1}]
        document["crc32"] = zlib.crc32(json.dumps(document["state"], sort_keys=True, separators=(",", ":")).encode())
        data = json.dumps(document).encode()
    path.write_bytes(data)
    with pytest.raises(CorruptCleanerStateError, match=str(path)):
        read_cleaner_state(str(tmp_path))
    with caplog.at_level(logging.WARNING, logger="compactlog"):
        state = load_cleaner_state(str(tmp_path), remove_tmp=True)
    assert fields_of(state) == fields_of(CleanerState())
    assert str(path) in caplog.text


def test_a_killed_write_leaves_the_old_state_and_its_tmp_is_removed_on_open(tmp_path: Path) -> None:
    write_cleaner_state(str(tmp_path), sample_state())
    (tmp_path / (STATE_FILE + ".tmp")).write_bytes(b'{"half a wri')
    state = load_cleaner_state(str(tmp_path), remove_tmp=True)
    assert fields_of(state) == fields_of(sample_state())
    assert not (tmp_path / (STATE_FILE + ".tmp")).exists()


def compacted_topics(store: compactlog.Store) -> None:
    """Topics ``t`` and ``bad``, each with two superseded values in sealed segments."""
    for topic in ("t", "bad"):
        store.create_topic(topic, 1, {"cleanup.policy": "compact", "segment.bytes": 14})
        for value in (b"1", b"2", b"3"):
            store.append(topic, 0, pa.table({"key": [b"k"], "value": [value]}))


def fail_rounds_of(monkeypatch: pytest.MonkeyPatch, topic: str) -> None:
    """Rounds of ``topic`` fail (as a disk error would) while its log still opens and reads."""
    real = cleaner_module.make_task

    def make_task(store: object, log: Log, ltc: object, now: int) -> object:
        if log.topic == topic:
            raise OSError(5, "Input/output error", os.path.join(log.directory, "00000000000000000000.parquet"))
        return real(store, log, ltc, now)  # type: ignore[arg-type]

    monkeypatch.setattr(cleaner_module, "make_task", make_task)


def test_a_fresh_store_shows_the_last_pass_of_another(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()
    with compactlog.open(str(tmp_path), clock=clock) as store:
        compacted_topics(store)
        fail_rounds_of(monkeypatch, "bad")
        report = store.clean()
        assert report.partition("t", 0) is not None and report.skipped[("bad", 0)].startswith("uncleanable")
        ran_at = clock()
        before = store.cleaner_metrics()
    monkeypatch.undo()
    clock.advance(7000)
    with compactlog.open(str(tmp_path), clock=clock) as fresh:
        assert "Input/output error" in str(fresh.describe("bad")[0].uncleanable_reason)
        assert fresh.describe("t")[0].uncleanable_reason is None
        after = fresh.cleaner_metrics()
    assert after["time-since-last-run-ms"] == 7000 and before["time-since-last-run-ms"] == 0
    assert after["uncleanable-partitions-count"] == 1 and after["uncleanable-bytes"] > 0
    assert {k: v for k, v in after.items() if k != "time-since-last-run-ms"} == \
        {k: v for k, v in before.items() if k != "time-since-last-run-ms"}
    assert after["cleaner-recopy-percent"] > 0 and after["max-dirty-percent"] == 100
    assert read_cleaner_state(str(tmp_path)).last_run_ms == ran_at


def test_a_store_that_never_cleaned_reports_no_last_run(tmp_path: Path) -> None:
    with compactlog.open(str(tmp_path), clock=FakeClock()) as store:
        assert store.cleaner_metrics()["time-since-last-run-ms"] is None


def test_a_damaged_state_file_does_not_stop_the_cleaner(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with compactlog.open(str(tmp_path), clock=FakeClock()) as store:
        compacted_topics(store)
        fail_rounds_of(monkeypatch, "bad")
        store.clean()
    (tmp_path / STATE_FILE).write_bytes(b"{")
    with compactlog.open(str(tmp_path), clock=FakeClock()) as store:
        assert store.describe("bad")[0].uncleanable_reason is None  # started from an empty state
        store.clean()  # and its pass rewrote the file
    assert ("bad", 0) in read_cleaner_state(str(tmp_path)).uncleanable
