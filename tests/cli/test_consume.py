"""The console consumer's reads and its follow loop, in process, on a fake clock."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

import compactlog
from compactlog.cli import consume
from compactlog.cli.consume import ConsoleConsumer, consume_loop, start_positions
from compactlog.cli.message_formatter import MessageFormatter
from support import FakeClock

KEYS_AND_OFFSETS = MessageFormatter(print_offset=True, print_key=True, key_separator=":")


@pytest.fixture
def store(tmp_path: Path, clock: FakeClock) -> Iterator[compactlog.Store]:
    with compactlog.open(tmp_path / "data", clock=clock) as store:
        store.create_topic("t", 2, {"cleanup.policy": "compact", "segment.bytes": 300,
                                    "min.cleanable.dirty.ratio": 0.01})
        yield store


def append(store: compactlog.Store, partition: int, *pairs: str) -> None:
    keys, values = zip(*(pair.split(":") for pair in pairs), strict=True)
    store.append("t", partition, pa.table({"key": [k.encode() for k in keys],
                                           "value": [None if v == "-" else v.encode() for v in values]}))


def consumer(store: compactlog.Store, positions: dict[int, int], max_messages: int | None = None,
             isolation_level: str = "read_uncommitted") -> tuple[ConsoleConsumer, io.BytesIO]:
    out = io.BytesIO()
    return ConsoleConsumer(store, "t", positions, KEYS_AND_OFFSETS, out, isolation_level, max_messages), out


def test_reads_in_small_windows_across_compaction_gaps_and_stops_mid_window(
        store: compactlog.Store, monkeypatch: pytest.MonkeyPatch) -> None:
    append(store, 0, "a:1", "b:1", "a:2", "c:1", "b:2", "a:3", "d:1", "b:-")
    store.roll("t", 0)
    append(store, 0, "e:1", "a:4")
    store.clean(force=True)
    expected = [f"Offset:{r.offset}:{r.key.decode()}:{'null' if r.value is None else r.value.decode()}"
                for r in store.read("t", 0, store.log_start_offset("t", 0))]
    assert len(expected) < 10  # the clean left gaps
    monkeypatch.setattr(consume, "WINDOW_OFFSETS", 3)
    reads: list[tuple[int, int | None]] = []
    real_read = store.read_tables
    monkeypatch.setattr(store, "read_tables", lambda topic, partition, start, end, **kw: (
        reads.append((start, end)), real_read(topic, partition, start, end, **kw))[1])

    whole, out = consumer(store, {0: 0})
    assert whole.poll() == len(expected)
    assert out.getvalue().decode().splitlines() == expected
    assert all(end is not None and end - start <= 3 for start, end in reads)  # never an unbounded read

    first_two, out = consumer(store, {0: 0}, max_messages=2)
    assert first_two.poll() == 2 and first_two.done()
    assert out.getvalue().decode().splitlines() == expected[:2]
    assert first_two.positions[0] == int(expected[1].split(":")[1]) + 1  # right after the last one printed


def test_read_committed_stops_at_the_last_stable_offset(store: compactlog.Store) -> None:
    append(store, 1, "a:1")
    txn = store.producer(transactional_id="w")
    txn.begin_transaction()
    txn.send("t", b"t", b"open", partition=1)
    txn.flush()
    append(store, 1, "b:after")
    committed, out = consumer(store, {1: 0}, isolation_level="read_committed")
    assert committed.poll() == 1 and out.getvalue() == b"Offset:0:a:1\n"
    assert committed.positions[1] == 1 == store.last_stable_offset("t", 1)
    assert start_positions(store, "t", [1], "latest", False, "read_committed") == {1: 1}
    assert start_positions(store, "t", [1], None, False, "read_uncommitted") == {1: 3}
    txn.commit_transaction()
    assert committed.poll() == 2
    assert out.getvalue().decode().splitlines()[1:] == ["Offset:1:t:open", "Offset:2:b:after"]
    txn.close()


def test_follow_prints_a_record_appended_while_waiting_then_times_out(store: compactlog.Store,
                                                                     clock: FakeClock) -> None:
    append(store, 0, "a:1")
    follower, out = consumer(store, start_positions(store, "t", [0, 1], None, False, "read_uncommitted"))
    slept: list[int] = []

    def sleep(ms: int) -> None:
        slept.append(ms)
        clock.advance(ms)
        if len(slept) == 3:
            append(store, 1, "b:2")

    consume_loop(follower, follow=True, timeout_ms=1000, clock=clock, sleep=sleep, poll_interval_ms=100)

    assert out.getvalue() == b"Offset:0:b:2\n"  # started at the end: a:1 was there before
    # the record came after the third wait; the loop gave up 1000 ms after it
    assert len(slept) == 3 + 10 and follower.processed == 1


def test_without_follow_one_poll_and_max_messages_end_the_loop(store: compactlog.Store, clock: FakeClock) -> None:
    append(store, 0, "a:1", "b:1", "c:1")
    never = pytest.fail
    once, out = consumer(store, {0: 0})
    consume_loop(once, follow=False, timeout_ms=None, clock=clock, sleep=lambda ms: never("slept"))
    assert once.processed == 3
    two, out = consumer(store, {0: 0, 1: 0}, max_messages=2)
    consume_loop(two, follow=True, timeout_ms=None, clock=clock, sleep=lambda ms: never("slept"))
    assert out.getvalue() == b"Offset:0:a:1\nOffset:1:b:1\n"


def test_latest_prints_the_newest_live_record_of_each_key(store: compactlog.Store,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(consume, "WINDOW_OFFSETS", 2)
    append(store, 0, "a:1", "b:1", "a:2", "c:1", "b:-", "c:2")
    latest, out = consumer(store, {0: 0})
    latest.print_latest()
    assert out.getvalue() == b"Offset:2:a:2\nOffset:5:c:2\n"


def test_a_gap_left_by_the_cleaner_widens_the_window(store: compactlog.Store,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    append(store, 0, *[f"a:{i}" for i in range(300)])
    store.roll("t", 0)
    append(store, 0, "b:1")
    store.clean(force=True)  # keeps a:299 at offset 299 only, after a gap from the log start
    start = store.log_start_offset("t", 0)
    assert [r.offset for r in store.read("t", 0, start)] == [299, 300]
    monkeypatch.setattr(consume, "WINDOW_OFFSETS", 64)
    reads: list[int] = []
    real_read = store.read_tables
    monkeypatch.setattr(store, "read_tables", lambda *a, **kw: (reads.append(1), real_read(*a, **kw))[1])

    one, out = consumer(store, {0: start}, max_messages=1)
    one.poll()

    assert out.getvalue() == b"Offset:299:a:299\n"
    assert len(reads) <= 12  # windows of 1, 2, 4, ... 64 offsets, not 300 reads of one offset each
