"""Every broker setting does what its doc says, or its doc and ``describe`` say it has no effect here, and why:
log.cleaner.enable, the scope of log.cleaner.dedupe.buffer.size, and the settings accepted only for Kafka's
sake (log.cleaner.threads, log.cleaner.io.buffer.size, log.cleaner.backoff.ms)."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import compactlog
from compactlog.cleaner import cleaner as cleaner_module
from compactlog.cli.main import main
from compactlog.config import BROKER_CONFIGS, PRODUCER_CONFIGS, TOPIC_CONFIGS, describe_configs
from support import FakeClock

DAY = 86_400_000
NO_EFFECT = "Accepted for Kafka compatibility, no effect here: "


def open_store(path: Path, clock: FakeClock, server_properties: str) -> compactlog.Store:
    path.mkdir(parents=True, exist_ok=True)
    (path / "server.properties").write_text(server_properties)
    return compactlog.open(str(path), clock=clock)


def fill(store: compactlog.Store, topic: str, policy: str) -> None:
    """Three sealed segments of one key, so compaction and retention both have something to remove."""
    store.create_topic(topic, 1, {"cleanup.policy": policy, "segment.bytes": 14, "retention.ms": DAY,
                                  "min.cleanable.dirty.ratio": 0.01})
    for value in (b"1", b"2", b"3"):
        store.append(topic, 0, pa.table({"key": [b"k"], "value": [value]}))


def count(store: compactlog.Store, topic: str) -> int:
    return len(list(store.read(topic, 0, store.log_start_offset(topic, 0))))


# -- the audit: which settings have no effect, and that describe says so ------------------------------------

def test_exactly_the_audited_settings_are_marked_without_effect() -> None:
    marked = {d.name for d in (*TOPIC_CONFIGS, *BROKER_CONFIGS, *PRODUCER_CONFIGS) if d.no_effect}
    assert marked == {"log.cleaner.threads", "log.cleaner.io.buffer.size", "log.cleaner.backoff.ms"}
    for scope in ("topic", "broker", "producer"):
        for name, _, _, doc in describe_configs(scope):  # type: ignore[arg-type]
            assert (NO_EFFECT in doc) == (name in marked), name
    docs = {name: doc for name, _, _, doc in describe_configs("broker")}
    assert docs["log.cleaner.backoff.ms"].endswith(NO_EFFECT + "no cleaner loop exists yet: store.clean() and "
                                                   "compactlog clean run one pass when called.")


def test_topics_describe_names_the_settings_that_have_no_effect(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data"
    with open_store(data, FakeClock(), "log.cleaner.threads=4\nlog.cleaner.backoff.ms=15000\n") as store:
        store.create_topic("users", 1)
    assert main(["topics", "describe", "users", "--data-dir", str(data)]) == 0
    notes = [line for line in capsys.readouterr().out.splitlines() if line.startswith("Note:")]
    # backoff.ms is set to its default: nothing differs from a store without the line
    assert notes == [f"Note: log.cleaner.threads=4 (server.properties): Number of cleaner threads. {NO_EFFECT}"
                     "in process a pass cleans its partitions one after another (each round spreads its own "
                     "steps over threads); on Spark the session's task slots decide how many rounds run at once."]
    assert main(["topics", "describe", "users", "--json", "--data-dir", str(data)]) == 0
    described = json.loads(capsys.readouterr().out)
    assert list(described["broker_configs_without_effect"]) == ["log.cleaner.threads=4"]
    (data / "server.properties").write_text("")
    assert main(["topics", "describe", "users", "--data-dir", str(data)]) == 0
    assert "Note:" not in capsys.readouterr().out


# -- log.cleaner.enable ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("enabled", [True, False])
def test_a_disabled_cleaner_neither_compacts_nor_retention_cleans(tmp_path: Path, enabled: bool) -> None:
    clock = FakeClock()
    store = open_store(tmp_path, clock, f"log.cleaner.enable={str(enabled).lower()}\n")
    fill(store, "compacted", "compact")
    fill(store, "both", "compact,delete")
    fill(store, "deleted", "delete")
    clock.advance(2 * DAY)  # every segment is past retention.ms
    removed = store.enforce_retention()
    report = store.clean(force=True)
    if enabled:
        assert ("both", 0) in removed and count(store, "both") == 0
        assert [(p.topic, p.partition) for p in report.partitions] == [("compacted", 0)]
        assert count(store, "compacted") == 2  # k=1 is gone; k=3 is in the active segment
    else:  # not even forced: force waives the dirty ratio, not the setting
        assert report.partitions == [] and not report.retention_bytes_removed and not report.rolled
        assert report.skipped == {("compacted", 0): cleaner_module.CLEANER_DISABLED,
                                  ("both", 0): cleaner_module.CLEANER_DISABLED}
        assert count(store, "compacted") == 3 and count(store, "both") == 3
        assert store.checkpoint.read() == {}
        assert ("both", 0) not in removed
    assert ("deleted", 0) in removed and count(store, "deleted") == 0  # delete-only: retention as ever


def test_the_cli_clean_of_a_disabled_cleaner_changes_nothing(tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data"
    with open_store(data, FakeClock(), "log.cleaner.enable=false\n") as store:
        fill(store, "compacted", "compact")
    assert main(["clean", "--in-process", "--force", "--data-dir", str(data)]) == 0
    out = capsys.readouterr().out
    assert "0 partition(s) cleaned" in out and "log.cleaner.enable=false" in out
    with compactlog.open(str(data)) as store:
        assert count(store, "compacted") == 3


# -- log.cleaner.dedupe.buffer.size: what it bounds ---------------------------------------------------------

def test_in_process_rounds_run_one_at_a_time_each_with_the_whole_dedupe_buffer(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The doc's statement: one round's map is bounded by the buffer (tests/unit/test_cleaner.py), and in
    process no two rounds run at once, so the buffer bounds the cleaner's maps in total."""
    store = open_store(tmp_path, FakeClock(), "log.cleaner.dedupe.buffer.size=8192\n")
    for topic in ("a", "b", "c"):
        fill(store, topic, "compact")
    running, most, buffers = 0, 0, []
    lock = threading.Lock()
    real = cleaner_module.run_in_process

    def counted(task: Any, one_core: bool = False) -> Any:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        buffers.append(task.dedupe_buffer_bytes)
        try:
            return real(task, one_core)
        finally:
            with lock:
                running -= 1

    monkeypatch.setattr(cleaner_module, "run_in_process", counted)
    assert len(store.clean(force=True).partitions) == 3
    assert most == 1 and buffers == [8192, 8192, 8192]
