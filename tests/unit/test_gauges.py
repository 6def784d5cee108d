"""The data directory's gauges: the collector's exposition text (parsed back with prometheus_client's own
parser), the JSON of ``compactlog metrics``, and a damaged state file."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pyarrow as pa
import pytest
from prometheus_client.parser import text_string_to_metric_families

import compactlog
from compactlog.cleaner.state import STATE_FILE
from compactlog.cli.main import main
from compactlog.gauges import metrics_json, prometheus_text
from support import FakeClock

ISSUE_NAMES = {  # the issue's names, as the Prometheus JMX exporter writes Kafka's gauges
    "kafka_log_logcleaner_max_buffer_utilization_percent", "kafka_log_logcleaner_cleaner_recopy_percent",
    "kafka_log_logcleaner_max_clean_time_secs", "kafka_log_logcleaner_dead_thread_count",
    "kafka_log_logcleanermanager_max_dirty_percent", "kafka_log_logcleanermanager_time_since_last_run_ms",
    "kafka_log_logcleanermanager_uncleanable_partitions_count", "kafka_log_logcleanermanager_uncleanable_bytes",
    "kafka_log_logcleanermanager_max_compaction_delay_secs"}
PARTITION_NAMES = {"kafka_log_log_size", "kafka_log_log_logstartoffset", "kafka_log_log_logendoffset",
                   "kafka_log_log_numlogsegments", "kafka_log_log_dirtyratio", "kafka_log_log_compactiondelaysecs"}
COORDINATOR_NAMES = {"compactlog_consumer_offsets_skipped_records"}  # 0 without __consumer_offsets


def scrape(text: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    """name -> {labels: value} of every sample."""
    samples: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        assert family.type == "gauge", family.name
        for sample in family.samples:
            samples.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return samples


def fill(store: compactlog.Store) -> None:
    store.create_topic("t", 2, {"cleanup.policy": "compact", "segment.bytes": 14})
    for value in (b"1", b"2", b"3", b"4"):
        store.append("t", 1, pa.table({"key": [b"k"], "value": [value]}))


def test_a_data_directory_that_never_cleaned(tmp_path: Path) -> None:
    with compactlog.open(str(tmp_path), clock=FakeClock()) as store:
        fill(store)
        samples = scrape(prometheus_text(store))
    assert set(samples) == ISSUE_NAMES | PARTITION_NAMES | COORDINATOR_NAMES
    assert math.isnan(samples["kafka_log_logcleanermanager_time_since_last_run_ms"][()])  # never ran: not 0
    assert samples["kafka_log_logcleanermanager_max_dirty_percent"][()] == 0
    partition_1 = (("partition", "1"), ("topic", "t"))
    assert samples["kafka_log_log_logendoffset"] == {(("partition", "0"), ("topic", "t")): 0, partition_1: 4}
    assert samples["kafka_log_log_numlogsegments"][partition_1] == 4
    assert samples["kafka_log_log_dirtyratio"][partition_1] == 1.0


def test_the_gauges_show_the_last_pass(tmp_path: Path) -> None:
    clock = FakeClock()
    with compactlog.open(str(tmp_path), clock=clock) as store:
        fill(store)
        before = scrape(prometheus_text(store))
        report = store.clean().partition("t", 1)
        assert report is not None
    clock.advance(2500)
    with compactlog.open(str(tmp_path), clock=clock) as fresh:
        after = scrape(prometheus_text(fresh))
        as_json = metrics_json(fresh)
    partition_1 = (("partition", "1"), ("topic", "t"))
    assert after["kafka_log_logcleanermanager_time_since_last_run_ms"][()] == 2500
    assert after["kafka_log_logcleanermanager_max_dirty_percent"][()] == 100
    assert after["kafka_log_logcleaner_cleaner_recopy_percent"][()] == \
        100 * report.bytes_written // report.bytes_read
    assert after["kafka_log_logcleaner_dead_thread_count"][()] == 0
    assert after["kafka_log_logcleanermanager_uncleanable_partitions_count"] == {(("logDirectory", str(tmp_path)),): 0}
    assert after["kafka_log_log_size"][partition_1] < before["kafka_log_log_size"][partition_1]
    assert after["kafka_log_log_dirtyratio"][partition_1] == 0
    assert as_json["cleaner"]["time-since-last-run-ms"] == 2500
    assert as_json["cleaner"]["cleaner-recopy-percent"] == after["kafka_log_logcleaner_cleaner_recopy_percent"][()]
    ends = [(p["topic"], p["partition"], p["log-end-offset"]) for p in as_json["partitions"]]
    assert ends == [("t", 0, 0), ("t", 1, 4)]


def test_metrics_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with compactlog.open(str(tmp_path)) as store:
        fill(store)
    assert main(["metrics", "--data-dir", str(tmp_path), "--format", "json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["cleaner"]["time-since-last-run-ms"] is None
    assert main(["metrics", "--data-dir", str(tmp_path)]) == 0
    assert set(scrape(capsys.readouterr().out)) == ISSUE_NAMES | PARTITION_NAMES | COORDINATOR_NAMES
    (tmp_path / STATE_FILE).write_text('{"version": 1}')
    assert main(["metrics", "--data-dir", str(tmp_path)]) != 0
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "CorruptCleanerStateError" in err and STATE_FILE in err
