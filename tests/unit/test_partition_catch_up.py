"""How often a partition catches up with its directory (lists it, stats its segments: what other processes
changed) on the broker's write path: once per partition of a Produce request and once per marker of an
EndTxn, never for the fsync of a file this process appended to; and the fsync still finds the frames when
another process rolled the segment meanwhile."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import compactlog
from compactlog.broker.produce import _append_all
from compactlog.log import log as log_module
from compactlog.protocol.record_batch import encode_batches
from compactlog.record import SCHEMA, to_rows
from support import FakeClock

ROWS = pa.table({"key": [b"k"], "value": [b"v"]})


def produced_batch(producer_id: int, epoch: int, base_sequence: int, n: int) -> bytes:
    """One transactional v2 batch of ``n`` records, as a client sends it."""
    rows = to_rows(pa.table({"key": [b"k%d" % i for i in range(n)], "value": [b"v"] * n}), 1)
    for name, values in (("offset", pa.array(range(n), pa.int64())),
                         ("producer_id", pa.array([producer_id] * n, pa.int64())),
                         ("producer_epoch", pa.array([epoch] * n, pa.int16())),
                         ("sequence", pa.array(range(base_sequence, base_sequence + n), pa.int32())),
                         ("is_transactional", pa.array([True] * n))):
        index = SCHEMA.get_field_index(name)
        rows = rows.set_column(index, SCHEMA.field(index), values)
    return encode_batches(rows)


@pytest.fixture
def listings(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every catching up of a partition with its directory, by directory."""
    seen: list[str] = []
    real = log_module.live_segments
    monkeypatch.setattr(log_module, "live_segments", lambda directory: (seen.append(directory), real(directory))[1])
    return seen


def test_a_transactions_requests_catch_up_once_a_partition_each(tmp_path: Path, listings: list[str]) -> None:
    store = compactlog.open(str(tmp_path), clock=FakeClock())
    store.create_topic("out", 2, {"cleanup.policy": "delete"})
    coordinator = store.transactions
    pid, epoch = coordinator.init_producer("app", 60_000)
    partitions = [("out", 0), ("out", 1)]
    for topic, partition in partitions:
        store.log(topic, partition)  # opened before counting
    coordinator.add_to_transaction("app", pid, epoch, partitions)
    listings.clear()
    work = [("out", p, produced_batch(pid, epoch, 0, 5)) for p in (0, 1)]
    results, logs = _append_all(store, work, "app")
    assert [r["error_code"] for r in results] == [0, 0], [r["error_message"] for r in results]
    assert [r["base_offset"] for r in results] == [0, 0]
    assert len(listings) == 2
    listings.clear()
    for log in logs:
        log.flush()
    assert listings == []  # the files appended to are still the active segments: nothing to catch up with
    coordinator.end_ongoing_transaction("app", pid, epoch, commit=True)
    assert len(listings) == 2  # the open-transaction check and the marker of a partition together
    assert [r.value for r in store.read("out", 0, isolation_level="read_committed")] == [b"v"] * 5


def test_a_flush_after_another_process_rolled_the_segment_catches_up_and_succeeds(tmp_path: Path) -> None:
    store = compactlog.open(str(tmp_path), clock=FakeClock())
    store.create_topic("out", 1, {"cleanup.policy": "delete"})
    store.append("out", 0, ROWS, flush=False)
    with compactlog.open(str(tmp_path), clock=FakeClock()) as other:  # another process's view
        assert other.log("out", 0).roll()
    store.log("out", 0).flush()  # the file appended to is sealed away: its roll fsynced it
    store.append("out", 0, ROWS)
    assert [r.offset for r in store.read("out", 0)] == [0, 1]
