"""The data directory's gauges, read from disk on each call: the cleaner's (from ``cleaner-state.json``, the
last pass of any process) and each partition's (from its log), as JSON and as Prometheus metrics.

Prometheus names are those the Prometheus JMX exporter gives Kafka's MBeans (``kafka.log:type=LogCleaner,
name=max-buffer-utilization-percent`` -> ``kafka_log_logcleaner_max_buffer_utilization_percent``); the
exposition text is prometheus_client's, produced by :class:`DataDirectoryCollector`, a custom collector that
reads the directory on every scrape (no global gauge is ever set). Kafka tags ``uncleanable-partitions-count``
and ``uncleanable-bytes`` with the log directory; so do these (``logDirectory``). Per partition (labels
``topic``, ``partition``): Kafka's ``Log`` gauges ``Size``, ``LogStartOffset``, ``LogEndOffset`` and
``NumLogSegments``, and two of compactlog's in the same style, ``kafka_log_log_dirtyratio`` (the cleanable
dirty ratio) and ``kafka_log_log_compactiondelaysecs`` (how long the oldest dirty record has waited past
``max.compaction.lag.ms``). A partition whose log cannot be opened has offsets -1 (see ``describe``); a
topic whose metadata cannot be read is left out and logged.

``time-since-last-run-ms`` of a data directory where no pass has run is null in JSON and NaN in Prometheus
(Kafka's reads the time since its cleaner started; 0 would claim a pass just now). ``dead-thread-count`` is
the number of dead cleaner threads of the process asking (``serve``'s cleaner service); a process without a
cleaner thread (``compactlog metrics``) reports 0.

Consumer groups (labels ``group``, ``topic``, ``partition``), from their offsets committed in
``__consumer_offsets`` (replayed as :mod:`compactlog.consumer_groups` reads it):
``compactlog_consumer_group_committed_offset`` and ``compactlog_consumer_group_lag``, the partition's log end
offset minus the committed offset (the lag ``kafka-consumer-groups`` shows; the Kafka lag exporter's
``kafka_consumergroup_lag``). A committed offset of a partition that no longer exists, or whose log cannot be
opened, has no lag gauge; the groups of a ``__consumer_offsets`` partition that cannot be read are left out
(and logged) until it is written again. Reading committed offsets means replaying ``__consumer_offsets``,
so the collector keeps each of its partitions' groups (a group's records all live in one partition) until
that partition's log start or end offset moves (every commit and every expiry appends; compaction leaves
the offsets as they were): a scrape replays only the partitions written since the last one. The same replay
counts the records of ``__consumer_offsets`` that cannot be decoded, which the broker's load skips (with a
warning, :mod:`compactlog.coordinator.committed_offsets`): ``compactlog_consumer_offsets_skipped_records``
(JSON ``consumer-offsets-skipped-records``), 0 unless something other than the coordinator wrote there; the
groups of a partition holding one are left out of the lag gauges (their offsets are not known).
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector, CollectorRegistry

from .cleaner.metrics import cleaner_metrics
from .cleaner.state import read_cleaner_state
from .consumer_groups import offsets_by_group, replayed
from .coordinator.group_metadata_manager import OFFSETS_TOPIC
from .errors import CompactLogError

if TYPE_CHECKING:
    from .store import Store

_log = logging.getLogger("compactlog")

# (Kafka's gauge name, its MBean type, what it measures). The Prometheus name is
# kafka_log_<type lower-cased>_<name with dashes as underscores>.
CLEANER_GAUGES: tuple[tuple[str, str, str], ...] = (
    ("max-buffer-utilization-percent", "LogCleaner",
     "Largest offset-map fill of the last pass's rounds, percent of the map"),
    ("cleaner-recopy-percent", "LogCleaner", "Bytes written as a percent of bytes read by the last pass's rounds"),
    ("max-clean-time-secs", "LogCleaner", "Longest round of the last pass that cleaned, seconds"),
    ("dead-thread-count", "LogCleaner", "Cleaner threads that died of an unexpected error"),
    ("max-dirty-percent", "LogCleanerManager", "Largest cleanable dirty ratio of the last selection, percent"),
    ("time-since-last-run-ms", "LogCleanerManager", "Milliseconds since the last cleaner pass (NaN: none ran)"),
    ("uncleanable-partitions-count", "LogCleanerManager", "Partitions whose last round failed"),
    ("uncleanable-bytes", "LogCleanerManager", "Cleanable bytes of the uncleanable partitions"),
    ("max-compaction-delay-secs", "LogCleanerManager",
     "Longest wait of a dirty record past max.compaction.lag.ms in the last selection, seconds"),
)
PER_LOG_DIRECTORY = ("uncleanable-partitions-count", "uncleanable-bytes")  # Kafka tags these logDirectory=


@dataclass(frozen=True)
class PartitionGauges:
    topic: str
    partition: int
    size: int
    log_start_offset: int
    log_end_offset: int
    num_log_segments: int
    dirty_ratio: float
    compaction_delay_secs: int


# (Prometheus name, PartitionGauges field, help)
PARTITION_GAUGES: tuple[tuple[str, str, str], ...] = (
    ("kafka_log_log_size", "size", "Bytes of the partition's segments"),
    ("kafka_log_log_logstartoffset", "log_start_offset", "The partition's log start offset"),
    ("kafka_log_log_logendoffset", "log_end_offset", "The partition's log end offset"),
    ("kafka_log_log_numlogsegments", "num_log_segments", "Segments of the partition, the active one included"),
    ("kafka_log_log_dirtyratio", "dirty_ratio", "Cleanable dirty bytes over cleanable bytes (compacted topics)"),
    ("kafka_log_log_compactiondelaysecs", "compaction_delay_secs",
     "Wait of the oldest dirty record past max.compaction.lag.ms, seconds"),
)


@dataclass(frozen=True)
class GroupLagGauges:
    group: str
    topic: str
    partition: int
    committed_offset: int
    lag: int | None  # None: the partition does not exist or its log cannot be opened


# (Prometheus name, GroupLagGauges field, help)
GROUP_GAUGES: tuple[tuple[str, str, str], ...] = (
    ("compactlog_consumer_group_committed_offset", "committed_offset",
     "The group's committed offset: the next offset it reads from the partition"),
    ("compactlog_consumer_group_lag", "lag", "The partition's log end offset minus the group's committed offset"),
)

GroupOffsets = dict[str, dict[tuple[str, int], int]]  # group -> (topic, partition) -> committed offset
SKIPPED_RECORDS_GAUGE = ("compactlog_consumer_offsets_skipped_records",
                         "Records of __consumer_offsets that cannot be decoded, skipped when groups are loaded")


def prometheus_name(kafka_name: str, mbean_type: str) -> str:
    return f"kafka_log_{mbean_type.lower()}_{kafka_name.replace('-', '_')}"


def cleaner_gauges(store: Store, dead_threads: int = 0) -> dict[str, int | float | None]:
    """Kafka's cleaner gauges by their Kafka names, from the state file the last pass wrote (raises
    CorruptCleanerStateError if it is damaged)."""
    state = read_cleaner_state(store.data_dir)
    gauges = cleaner_metrics(state.last_stats, state.max_dirty_ratio, state.max_compaction_delay_ms,
                             state.uncleanable_bytes, store.clock(), state.last_run_ms)
    return {**gauges, "dead-thread-count": dead_threads}


def partition_gauges(store: Store) -> list[PartitionGauges]:
    gauges = []
    for topic in store.topics():
        try:
            described = store.describe(topic)
        except CompactLogError as e:  # a damaged .topics/<topic>.json: the other topics are still reported
            _log.warning("gauges: topic %s left out: %s", topic, e)
            continue
        for info in described:
            gauges.append(PartitionGauges(topic, info.partition, info.size_bytes, info.log_start_offset,
                                          info.log_end_offset, len(info.segments), info.dirty_ratio,
                                          max(info.max_compaction_delay_ms, 0) // 1000))
    return gauges


def group_lag_gauges(committed: Mapping[str, Mapping[tuple[str, int], int]],
                     partitions: list[PartitionGauges]) -> list[GroupLagGauges]:
    """Each group's committed offset and lag per partition, by group, topic and partition."""
    log_end = {(g.topic, g.partition): g.log_end_offset for g in partitions}
    gauges = []
    for group in sorted(committed):
        for (topic, partition), offset in sorted(committed[group].items()):
            end = log_end.get((topic, partition))
            lag = None if end is None or end < 0 else end - offset  # -1: the partition's log cannot be opened
            gauges.append(GroupLagGauges(group, topic, partition, offset, lag))
    return gauges


def replayed_offsets(store: Store, partition: int) -> tuple[GroupOffsets, int]:
    """The committed offsets of the groups of one ``__consumer_offsets`` partition, and how many of its records
    cannot be decoded; with any such record its groups are left out (logged): their offsets are not known."""
    state = replayed(store, [partition], skip_undecodable=True)
    if state.skipped:
        first = state.skipped[0]
        _log.warning("gauges: the groups of %s-%d left out: %d record(s) cannot be decoded, the first at offset %d: "
                     "%s", OFFSETS_TOPIC, partition, len(state.skipped), first.offset, first.reason)
        return {}, len(state.skipped)
    offsets = offsets_by_group(state)
    return {group: committed for group, committed in offsets.items() if committed}, 0


class CommittedOffsetsCache:
    """The committed offsets of every group, each ``__consumer_offsets`` partition replayed again only when
    its log start or end offset moved (module docstring)."""

    def __init__(self) -> None:
        # partition -> (its log start and end offsets, its groups, its records that cannot be decoded)
        self._partitions: dict[int, tuple[tuple[int, int], GroupOffsets, int]] = {}

    def get(self, store: Store, partitions: list[PartitionGauges]) -> GroupOffsets:
        current = {g.partition: (g.log_start_offset, g.log_end_offset) for g in partitions if g.topic == OFFSETS_TOPIC}
        self._partitions = {p: cached for p, cached in self._partitions.items() if p in current}
        for partition, ends in sorted(current.items()):
            cached = self._partitions.get(partition)
            if cached is not None and cached[0] == ends:
                continue
            try:
                self._partitions[partition] = (ends, *replayed_offsets(store, partition))
            except CompactLogError as e:  # the other groups are still reported; this one's once it is written
                _log.warning("gauges: the groups of %s-%d left out: %s", OFFSETS_TOPIC, partition, e)
                self._partitions[partition] = (ends, {}, 0)
        return {group: offsets for _, groups, _ in self._partitions.values() for group, offsets in groups.items()}

    @property
    def skipped_records(self) -> int:
        """The records that cannot be decoded in the partitions of the last :meth:`get`."""
        return sum(skipped for _, _, skipped in self._partitions.values())


def metrics_json(store: Store, dead_threads: int = 0) -> dict[str, Any]:
    """What ``compactlog metrics --format json`` prints."""
    gauges = partition_gauges(store)
    partitions = [{"topic": g.topic, "partition": g.partition, "size": g.size,
                   "log-start-offset": g.log_start_offset, "log-end-offset": g.log_end_offset,
                   "num-log-segments": g.num_log_segments, "dirty-ratio": g.dirty_ratio,
                   "compaction-delay-secs": g.compaction_delay_secs} for g in gauges]
    committed = CommittedOffsetsCache()
    groups = [{"group": g.group, "topic": g.topic, "partition": g.partition, "committed-offset": g.committed_offset,
               "lag": g.lag} for g in group_lag_gauges(committed.get(store, gauges), gauges)]
    return {"log-directory": store.data_dir, "cleaner": cleaner_gauges(store, dead_threads),
            "partitions": partitions, "consumer-groups": groups,
            "consumer-offsets-skipped-records": committed.skipped_records}


class DataDirectoryCollector(Collector):
    """A prometheus_client collector of one store's gauges, read on every scrape. Scrapes are serialised (the
    HTTP server answers each on its own thread; a store is not shared between threads otherwise)."""

    def __init__(self, store: Store, dead_threads: Callable[[], int] = lambda: 0) -> None:
        self._store = store
        self._dead_threads = dead_threads
        self._lock = threading.Lock()
        self._committed = CommittedOffsetsCache()

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            cleaner = cleaner_gauges(self._store, self._dead_threads())
            partitions = partition_gauges(self._store)
            groups = group_lag_gauges(self._committed.get(self._store, partitions), partitions)
            skipped = self._committed.skipped_records
        for kafka_name, mbean_type, doc in CLEANER_GAUGES:
            value = cleaner[kafka_name]
            number = math.nan if value is None else float(value)
            if kafka_name in PER_LOG_DIRECTORY:
                family = GaugeMetricFamily(prometheus_name(kafka_name, mbean_type), doc, labels=["logDirectory"])
                family.add_metric([self._store.data_dir], number)
            else:
                family = GaugeMetricFamily(prometheus_name(kafka_name, mbean_type), doc, value=number)
            yield family
        for name, attribute, doc in PARTITION_GAUGES:
            family = GaugeMetricFamily(name, doc, labels=["topic", "partition"])
            for g in partitions:
                family.add_metric([g.topic, str(g.partition)], float(getattr(g, attribute)))
            yield family
        for name, attribute, doc in GROUP_GAUGES:
            family = GaugeMetricFamily(name, doc, labels=["group", "topic", "partition"])
            for lag in groups:
                value = getattr(lag, attribute)
                if value is not None:
                    family.add_metric([lag.group, lag.topic, str(lag.partition)], float(value))
            yield family
        yield GaugeMetricFamily(*SKIPPED_RECORDS_GAUGE, value=float(skipped))


def registry_of(collector: Collector) -> CollectorRegistry:
    """A registry holding only ``collector`` (never prometheus_client's global one, which also holds the
    process's own metrics)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry


def prometheus_text(store: Store, dead_threads: int = 0) -> str:
    """What ``compactlog metrics`` prints: the exposition text of one scrape."""
    return generate_latest(registry_of(DataDirectoryCollector(store, lambda: dead_threads))).decode("utf-8")
