"""Every config does what its doc says, or its doc and ``describe`` say it has no effect here, and why. Here:
log.cleaner.enable, log.cleaner.threads and the dedupe buffer it shares out, the load factor,
compression.type, enable.idempotence, and the settings accepted only for Kafka's sake
(log.cleaner.io.buffer.size). The other configs' effects are tested with the code
that honours them (test_plan, test_log, test_store, test_producer, test_cleaner, test_transactions)."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import compactlog
from compactlog.cleaner import cleaner as cleaner_module
from compactlog.cleaner import executor as executor_module
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
    # log.cleaner.backoff.ms has its effect in serve's cleaner service (tests/unit/test_server.py).
    assert marked == {"log.cleaner.io.buffer.size"}
    for scope in ("topic", "broker", "producer"):
        for name, _, _, doc in describe_configs(scope):  # type: ignore[arg-type]
            assert (NO_EFFECT in doc) == (name in marked), name


def test_topics_describe_names_the_settings_that_have_no_effect(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data"
    with open_store(data, FakeClock(), "log.cleaner.io.buffer.size=1024\nlog.cleaner.backoff.ms=15000\n") as store:
        store.create_topic("users", 1)
    assert main(["topics", "describe", "users", "--data-dir", str(data)]) == 0
    notes = [line for line in capsys.readouterr().out.splitlines() if line.startswith("Note:")]
    # backoff.ms is set to its default: nothing differs from a store without the line
    assert notes == [f"Note: log.cleaner.io.buffer.size=1024 (server.properties): I/O buffers of all cleaner "
                     f"threads. {NO_EFFECT}pyarrow reads and writes the Parquet segments (a row group at a time) "
                     "with its own buffers."]
    assert main(["topics", "describe", "users", "--json", "--data-dir", str(data)]) == 0
    described = json.loads(capsys.readouterr().out)
    assert list(described["broker_configs_without_effect"]) == ["log.cleaner.io.buffer.size=1024"]
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


# -- log.cleaner.threads and log.cleaner.dedupe.buffer.size ---------------------------------------------------

def watch_rounds(monkeypatch: pytest.MonkeyPatch, meet: int) -> dict[str, Any]:
    """Wraps the in-process kernel: records the most rounds running at once and each round's dedupe buffer;
    the first ``meet`` rounds wait for one another (a round left waiting alone fails after 30 s)."""
    seen: dict[str, Any] = {"running": 0, "most": 0, "buffers": [], "capacities": []}
    lock = threading.Lock()
    barrier = threading.Barrier(meet, timeout=30)
    real = executor_module.run_in_process

    def watched(task: Any, one_core: bool = False) -> Any:
        with lock:
            seen["running"] += 1
            seen["most"] = max(seen["most"], seen["running"])
            seen["buffers"].append(task.dedupe_buffer_bytes)
            seen["capacities"].append(task.map_capacity_bytes)
            first = len(seen["buffers"]) <= meet
        try:
            if first and meet > 1:
                barrier.wait()
            return real(task, one_core)
        finally:
            with lock:
                seen["running"] -= 1

    monkeypatch.setattr(executor_module, "run_in_process", watched)
    return seen


@pytest.mark.parametrize(("threads", "share"), [(1, 8192), (2, 4096)])
def test_in_process_a_pass_cleans_log_cleaner_threads_partitions_at_once_sharing_the_dedupe_buffer(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, threads: int, share: int) -> None:
    """One round's map is bounded by its dedupe buffer (tests/unit/test_cleaner.py); at most threads rounds
    run at once, each with buffer / threads, so the buffer bounds the cleaner's maps in total."""
    store = open_store(tmp_path, FakeClock(), f"log.cleaner.threads={threads}\nlog.cleaner.dedupe.buffer.size=8192\n")
    for topic in ("a", "b", "c"):
        fill(store, topic, "compact")
    seen = watch_rounds(monkeypatch, meet=threads)
    report = store.clean(force=True)
    assert [p.topic for p in report.partitions] == ["a", "b", "c"] and not report.skipped
    assert seen["most"] == threads and seen["buffers"] == [share] * 3
    assert all(count(store, topic) == 2 for topic in ("a", "b", "c"))
    assert store.checkpoint.read() == {(topic, 0): 2 for topic in ("a", "b", "c")}


def test_a_failed_round_among_concurrent_ones_costs_only_its_partition(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    store = open_store(tmp_path, FakeClock(), "log.cleaner.threads=2\n")
    for topic in ("a", "b"):
        fill(store, topic, "compact")
    real = executor_module.run_in_process

    def failing(task: Any, one_core: bool = False) -> Any:
        if task.topic == "a":
            raise compactlog.CleanerError("disk on fire")
        return real(task, one_core)

    monkeypatch.setattr(executor_module, "run_in_process", failing)
    report = store.clean(force=True)
    assert [p.topic for p in report.partitions] == ["b"]
    assert report.skipped == {("a", 0): "uncleanable: disk on fire"}


def test_each_cleaner_thread_needs_its_share_of_the_dedupe_buffer() -> None:
    with pytest.raises(compactlog.ConfigError, match="512 bytes per cleaner thread"):
        compactlog.BrokerConfig.from_properties({"log.cleaner.threads": 4, "log.cleaner.dedupe.buffer.size": 2048})
    assert compactlog.BrokerConfig.from_properties(
        {"log.cleaner.threads": 2, "log.cleaner.dedupe.buffer.size": 2048}).log_cleaner_threads == 2


def test_the_load_factor_limits_how_full_a_round_fills_its_map(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    store = open_store(tmp_path, FakeClock(), "log.cleaner.threads=2\nlog.cleaner.dedupe.buffer.size=8192\n"
                       "log.cleaner.io.buffer.load.factor=0.5\n")
    fill(store, "a", "compact")
    seen = watch_rounds(monkeypatch, meet=1)
    store.clean(force=True)
    assert seen["capacities"] == [2048]  # 8192 / 2 threads * 0.5


# -- compression.type, enable.idempotence ---------------------------------------------------------------------

@pytest.mark.parametrize(("codec", "parquet"), [("producer", "SNAPPY"), ("gzip", "GZIP"), ("zstd", "ZSTD"),
                                                ("uncompressed", "UNCOMPRESSED")])
def test_compression_type_is_the_codec_of_sealed_and_cleaned_segments(tmp_path: Path, codec: str,
                                                                      parquet: str) -> None:
    store = compactlog.open(str(tmp_path), clock=FakeClock())
    store.create_topic("t", 1, {"cleanup.policy": "compact", "compression.type": codec,
                                "min.cleanable.dirty.ratio": 0.01})
    store.append("t", 0, pa.table({"key": [b"k", b"k", b"j"], "value": [b"1", b"2", b"3"]}))
    store.roll("t", 0)
    store.append("t", 0, pa.table({"key": [b"k"], "value": [b"4"]}))

    def codecs() -> set[str]:
        found = set()
        for segment in store.log("t", 0).sealed_segments():
            metadata = pq.ParquetFile(segment.path).metadata
            found |= {metadata.row_group(g).column(c).compression
                      for g in range(metadata.num_row_groups) for c in range(metadata.num_columns)}
        return found

    assert codecs() == {parquet}
    assert len(store.clean(force=True).partitions) == 1
    assert codecs() == {parquet}


@pytest.mark.parametrize("idempotent", [True, False])
def test_enable_idempotence_numbers_batches_with_a_producer_id(tmp_path: Path, idempotent: bool) -> None:
    store = compactlog.open(str(tmp_path), clock=FakeClock())
    store.create_topic("t", 1)
    with store.producer(enable_idempotence=idempotent) as producer:
        producer.send("t", key=b"k", value=b"v")
    log = store.log("t", 0)
    rows = pa.concat_tables(list(log.read_tables(0, columns=["producer_id", "sequence"])))
    assert bool(pc.all(pc.greater_equal(rows.column("producer_id"), 0)).as_py()) is idempotent
