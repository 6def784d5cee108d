"""``serve``'s broker and cleaner service share one store: the cleaner's rolls and swaps go through the Logs
the broker appends through, so neither replays the other's changes from the files."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kafka.protocol.consumer import FetchRequest, FetchResponse
from kafka.protocol.producer import InitProducerIdRequest, InitProducerIdResponse, ProduceRequest, ProduceResponse
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords
from wire_client import TIMEOUT_S, Connection

import compactlog
from compactlog.broker.error_codes import NONE
from compactlog.broker.listener import KafkaListener
from compactlog.cleaner_service import CleanerService
from compactlog.cli import serve
from compactlog.cli.main import build_parser
from compactlog.log import Log
from compactlog.log.producers import LogProducerState
from compactlog.server import Server

# Compacted at once by a pass: the idle active segment rolls (max.compaction.lag.ms 1 ms, records of 2023).
TOPIC_CONFIGS = {"cleanup.policy": "compact", "max.compaction.lag.ms": "1", "min.cleanable.dirty.ratio": "0.01"}


def produce(conn: Connection, records: list[tuple[bytes, bytes | None]], producer: tuple[int, int],
            sequence: int) -> Any:
    builder = DefaultRecordBatchBuilder(2, 0, False, producer[0], producer[1], sequence, 1 << 20)
    for i, (key, value) in enumerate(records):
        builder.append(i, 1_700_000_000_000 + i, key, value, [])
    partition = ProduceRequest.TopicProduceData.PartitionProduceData(version=9, index=0, records=bytes(builder.build()))
    request = ProduceRequest(version=9, transactional_id=None, acks=-1, timeout_ms=TIMEOUT_S * 1000, topic_data=[
        ProduceRequest.TopicProduceData(version=9, name="t", partition_data=[partition])])
    return conn.call(request, ProduceResponse).responses[0].partition_responses[0]


def fetched(conn: Connection) -> dict[int, tuple[bytes, bytes | None]]:
    partition = FetchRequest.FetchTopic.FetchPartition(version=12, partition=0, fetch_offset=0,
                                                       partition_max_bytes=1 << 20)
    request = FetchRequest(version=12, replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20,
                           isolation_level=0, session_id=0, session_epoch=-1,
                           topics=[FetchRequest.FetchTopic(version=12, topic="t", partitions=[partition])],
                           forgotten_topics_data=[], rack_id="")
    answer = conn.call(request, FetchResponse).responses[0].partitions[0]
    assert answer.error_code == NONE
    return {r.offset: (r.key, r.value) for batch in MemoryRecords(answer.records) for r in batch}


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """The Logs of ``t-0`` this process opens, the loads of their segments and producer state (an open or a
    reload after another Log's roll or swap), and the rows replayed into a producer state from frames another
    Log appended (the broker's idempotent appends update it from the batch, never from rows)."""
    seen: dict[str, Any] = {"logs": [], "loads": 0, "replayed": 0}
    init, load, apply_rows = Log.__init__, Log._open, LogProducerState.apply

    def counting_init(self: Log, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        if (self.topic, self.partition) == ("t", 0):
            seen["logs"].append(self)

    def counting_load(self: Log) -> Any:
        if (self.topic, self.partition) == ("t", 0):
            seen["loads"] += 1
        return load(self)

    def counting_apply(self: LogProducerState, rows: Any, active_base: int) -> None:
        if os.path.basename(self.directory) == "t-0":
            seen["replayed"] += rows.num_rows
        apply_rows(self, rows, active_base)

    monkeypatch.setattr(Log, "__init__", counting_init)
    monkeypatch.setattr(Log, "_open", counting_load)
    monkeypatch.setattr(LogProducerState, "apply", counting_apply)
    yield seen


def test_serves_cleaner_rolls_and_swaps_through_the_brokers_logs_and_the_next_fetch_sees_it(
        tmp_path: Path, counted: dict[str, Any]) -> None:
    data_dir = str(tmp_path)
    with compactlog.open(data_dir) as store:
        store.create_topic("t", 1, TOPIC_CONFIGS)
    args = build_parser().parse_args(["serve", "--data-dir", data_dir, "--in-process", "--metrics-address",
                                      "127.0.0.1:0", "--listeners", "PLAINTEXT://127.0.0.1:0"])
    with compactlog.open(data_dir) as store, compactlog.open(data_dir) as metrics_store:
        *_, listener, cleaner = serve.components(args, store, metrics_store)
        assert isinstance(listener, KafkaListener) and isinstance(cleaner, CleanerService)
        server = Server([listener])  # the cleaner's passes are run here, one at a time, not by its thread
        server.startup()
        try:
            conn = Connection(f"127.0.0.1:{listener.bound[0].port}")
            init = conn.call(InitProducerIdRequest(version=4, transactional_id=None, transaction_timeout_ms=60000,
                                                   producer_id=-1, producer_epoch=-1), InitProducerIdResponse)
            producer = (init.producer_id, init.producer_epoch)
            first = [(b"k1", b"v1"), (b"k2", b"v2"), (b"k1", b"v1b"), (b"k3", b"v3"), (b"k2", None)]
            assert produce(conn, first, producer, 0).error_code == NONE
            cleaner.run_pass()  # rolls the idle active segment and compacts it
            assert fetched(conn) == {2: (b"k1", b"v1b"), 3: (b"k3", b"v3"), 4: (b"k2", None)}
            assert produce(conn, [(b"k1", b"v1c"), (b"k3", b"v3b")], producer, 5).error_code == NONE
            cleaner.run_pass()
            assert fetched(conn) == {4: (b"k2", None), 5: (b"k1", b"v1c"), 6: (b"k3", b"v3b")}
            conn.sock.close()
            assert counted["replayed"] == 0  # no frame decoded again into another producer state
            assert counted["loads"] == 1  # opened once, never reloaded after a roll or a swap
            (log,) = counted["logs"]  # one Log of t-0 in the process: the broker's, which the cleaner swapped
            assert log is store.log("t", 0) and log is listener.store.log("t", 0) and len(log.sealed_segments()) >= 1
        finally:
            server.shutdown()


def test_threads_opening_one_partition_at_once_get_one_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The broker's storage threads and the cleaner's thread open partitions through one store: each partition
    gets one Log (one thread lock, one lock file open), however many threads ask for it first at once."""
    threads = 4
    all_asked, count = threading.Event(), threading.Lock()
    asked: list[int] = []
    built: list[Log] = []
    load = Log._open

    def load_once_all_asked(self: Log) -> Any:  # every thread is inside Store.log before any Log is loaded
        built.append(self)
        all_asked.wait(TIMEOUT_S)
        return load(self)

    monkeypatch.setattr(Log, "_open", load_once_all_asked)
    with compactlog.open(str(tmp_path)) as store:
        store.create_topic("t", 1)

        def open_log(results: list[Log]) -> None:
            with count:
                asked.append(1)
                if len(asked) == threads:
                    all_asked.set()
            results.append(store.log("t", 0))

        results: list[Log] = []
        workers = [threading.Thread(target=open_log, args=(results,)) for _ in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(TIMEOUT_S)
        assert len(results) == threads and len(built) == 1 and all(log is built[0] for log in results)


def test_a_stale_log_is_closed_outside_the_opening_lock(tmp_path: Path) -> None:
    """A topic deleted and created again by another store gets a new Log; the stale one is closed once the
    store's opening lock is released, so that a thread holding the stale Log (a marker being written) can
    open another partition meanwhile instead of waiting for a thread that waits for it."""
    data_dir = str(tmp_path)
    store = compactlog.open(data_dir)
    threads: list[threading.Thread] = []  # daemons: if they deadlock, the test fails instead of hanging
    try:
        store.create_topic("t", 1)
        store.create_topic("u", 1)
        stale = store.log("t", 0)
        with compactlog.open(data_dir) as other:
            other.delete_topic("t")
            other.create_topic("t", 1)
        closing, opened_other = threading.Event(), threading.Event()
        close = stale.close

        def announced_close() -> None:
            closing.set()
            close()

        stale.close = announced_close  # type: ignore[method-assign]

        def hold_stale_then_open_another() -> None:
            with stale.locked(refresh=False):
                reopening.start()
                closing.wait(TIMEOUT_S)  # the other thread is closing the stale Log, which this one holds
                store.log("u", 0)
                opened_other.set()

        results: list[Log] = []
        reopening = threading.Thread(target=lambda: results.append(store.log("t", 0)), daemon=True)
        holder = threading.Thread(target=hold_stale_then_open_another, daemon=True)
        threads += [holder, reopening]
        holder.start()
        holder.join(TIMEOUT_S)
        reopening.join(TIMEOUT_S)
        assert opened_other.is_set() and not holder.is_alive() and not reopening.is_alive()
        assert results and results[0] is not stale and results[0] is store.log("t", 0)
    finally:
        if not any(thread.is_alive() for thread in threads):  # else the close would wait for them too
            store.close()
