"""How often a partition catches up with its directory (lists it, stats its segments: what other processes
changed) on the broker's write path: once per partition of a Produce request and once per marker of an
EndTxn, never for the fsync of a file this process appended to; and the fsync still finds the frames when
another process rolled the segment meanwhile. A directory unchanged since a settled listing (its stamp,
:mod:`compactlog.log.directory`) is not listed again, and still every change of another process is seen."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pytest

import compactlog
from compactlog.broker.produce import _append_all
from compactlog.log import directory as directory_module
from compactlog.log.directory import SETTLED_NS, stamp_settled
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
    real = directory_module.live_segments
    monkeypatch.setattr(directory_module, "live_segments",
                        lambda directory: (seen.append(directory), real(directory))[1])
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


def age(directory: str, by_ns: int = 2 * SETTLED_NS) -> int:
    """Set the directory's modification time ``by_ns`` back (as if nothing had changed in it since); returns it."""
    mtime = os.stat(directory).st_mtime_ns - by_ns
    os.utime(directory, ns=(mtime, mtime))
    return mtime


def test_a_stamp_stands_for_its_listing_only_once_the_directory_has_settled() -> None:
    assert stamp_settled((1, 0), SETTLED_NS)
    assert not stamp_settled((1, 0), SETTLED_NS - 1)  # a change in the same tick could keep this stamp


def test_a_settled_unchanged_directory_is_not_listed_again_and_other_processes_changes_are_seen(
        tmp_path: Path, listings: list[str]) -> None:
    store = compactlog.open(str(tmp_path), clock=FakeClock())
    store.create_topic("out", 1, {"cleanup.policy": "delete"})
    log = store.log("out", 0)
    store.append("out", 0, ROWS)
    age(log.directory)
    store.append("out", 0, ROWS)  # listed: the stamp is settled now
    listings.clear()
    store.append("out", 0, ROWS)
    assert listings == []  # nothing created, renamed or removed since: the listing stands
    with compactlog.open(str(tmp_path), clock=FakeClock()) as other:  # another process's view
        other.append("out", 0, ROWS)  # grows the active file only
        listings.clear()
        assert log.log_end_offset == 4 and listings == []
        assert other.log("out", 0).roll()  # a new active file: the directory's stamp changes
        listings.clear()
    assert len(log.sealed_segments()) == 1 and listings  # the changed stamp: listed, the roll taken in
    store.append("out", 0, ROWS)
    assert [r.offset for r in store.read("out", 0)] == [0, 1, 2, 3, 4]


def test_a_change_in_the_same_tick_as_a_listing_is_not_missed(tmp_path: Path) -> None:
    store = compactlog.open(str(tmp_path), clock=FakeClock())
    store.create_topic("out", 1, {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01"})
    log = store.log("out", 0)
    store.append("out", 0, pa.table({"key": [b"k", b"k"], "value": [b"old", b"new"]}))
    assert log.roll()
    store.append("out", 0, ROWS)
    seen = os.stat(log.directory).st_mtime_ns  # the directory changed just now: this listing is not settled
    store.append("out", 0, ROWS)
    with compactlog.open(str(tmp_path), clock=FakeClock()) as other:  # another process cleans: a swap
        other.clean(force=True)
    os.utime(log.directory, ns=(seen, seen))  # a coarse clock: the swap left the stamp as the listing saw it
    assert [r.value for r in store.read("out", 0)] == [b"new", b"v", b"v"]  # listed again all the same
