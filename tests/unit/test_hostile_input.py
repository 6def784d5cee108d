"""Hostile input through the public API: record timestamps (send and bulk append follow one rule), read
offsets and columns, long transactional ids. Each gives a CompactLogError subclass with a message, or works."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

import compactlog
from compactlog import CompactLogError, InvalidRecordError, InvalidRequestError
from compactlog.limits import LONG_MAX
from compactlog.record import timestamp_problem
from support import FakeClock


@pytest.fixture
def store(tmp_path: Path, clock: FakeClock) -> Iterator[compactlog.Store]:
    with compactlog.open(tmp_path / "data", clock=clock) as store:
        store.create_topic("t", partitions=1)
        yield store


def test_the_timestamp_rule_is_kafkas_non_negative_long() -> None:
    for good in (0, 1, LONG_MAX):
        assert timestamp_problem(good) is None
    for bad in (-1, LONG_MAX + 1, 2**70, 1.5, "1", True, None):
        assert timestamp_problem(bad) is not None


@pytest.mark.parametrize("timestamp", [2**63, 2**70])
def test_a_timestamp_past_a_long_is_refused_at_send_and_the_batch_is_appended(
        store: compactlog.Store, timestamp: int) -> None:
    with store.producer(linger_ms=0) as producer:
        good = producer.send("t", key=b"a", value=b"1")
        with pytest.raises(InvalidRecordError, match="timestamp"):
            producer.send("t", key=b"b", value=b"2", timestamp=timestamp)
    assert good.result().offset == 0
    assert [r.value for r in store.read("t", 0)] == [b"1"]


@pytest.mark.parametrize("column", [
    pa.array([5, -1], pa.int64()),
    pa.array([5, -(2**40)], pa.int64()),
    pa.array([5, 2**63], pa.uint64()),
])
def test_a_bulk_append_follows_the_same_timestamp_rule_as_send(store: compactlog.Store, column: pa.Array) -> None:
    table = pa.table({"key": [b"a", b"b"], "value": [b"1", b"2"], "timestamp": column})
    with pytest.raises(InvalidRecordError, match="timestamp"):
        store.append("t", 0, table)
    assert store.log_end_offset("t", 0) == 0
    with store.producer() as producer, pytest.raises(InvalidRecordError, match="timestamp"):
        producer.send("t", key=b"a", value=b"1", timestamp=column[1].as_py())


def test_a_bulk_append_takes_the_whole_long_range_and_null_for_now(store: compactlog.Store, clock: FakeClock) -> None:
    table = pa.table({"key": [b"a", b"b", b"c"], "value": [b"1", b"2", b"3"],
                      "timestamp": pa.array([0, LONG_MAX, None], pa.int64())})
    store.append("t", 0, table)
    assert [r.timestamp for r in store.read("t", 0)] == [0, LONG_MAX, clock.now]


@pytest.mark.parametrize("offset", ["1", None, 1.5, True, 2**64])
def test_a_read_offset_that_is_not_an_int_is_an_invalid_request(store: compactlog.Store, offset: object) -> None:
    store.append("t", 0, pa.table({"key": [b"a", b"b"], "value": [b"1", b"2"]}))
    for read in (lambda: list(store.read("t", 0, offset)),  # type: ignore[arg-type]
                 lambda: store.read_arrow("t", 0, offset),  # type: ignore[arg-type]
                 lambda: store.read_tables("t", 0, offset),  # type: ignore[arg-type]
                 lambda: store.read_arrow("t", 0, 0, end_offset=offset if offset is not None else "x")):  # type: ignore[arg-type]
        with pytest.raises(InvalidRequestError, match="offset"):
            read()


def test_a_numpy_integer_offset_reads(store: compactlog.Store) -> None:
    import numpy as np

    store.append("t", 0, pa.table({"key": [b"a", b"b"], "value": [b"1", b"2"]}))
    assert [r.value for r in store.read("t", 0, np.int64(1))] == [b"2"]  # type: ignore[arg-type]


@pytest.mark.parametrize("columns", [["nope"], ["key", "nope"], "key", [1]])
def test_an_unknown_read_column_is_an_invalid_request(store: compactlog.Store, columns: object) -> None:
    store.append("t", 0, pa.table({"key": [b"a"], "value": [b"1"]}))
    with pytest.raises(InvalidRequestError, match="column"):
        store.read_arrow("t", 0, columns=columns)  # type: ignore[arg-type]
    with pytest.raises(InvalidRequestError, match="column"):
        store.read_tables("t", 0, columns=columns)  # type: ignore[arg-type]
    assert store.read_arrow("t", 0, columns=["offset", "value"]).to_pydict() == {"offset": [0], "value": [b"1"]}


@pytest.mark.parametrize("length", [300, 5000])
def test_a_long_transactional_id_works_and_fences_like_a_short_one(store: compactlog.Store, length: int) -> None:
    transactional_id = "é" + "x" * (length - 1)
    zombie = store.producer(transactional_id=transactional_id)
    zombie.begin_transaction()
    zombie.send("t", key=b"a", value=b"old")
    successor = store.producer(transactional_id=transactional_id)  # aborts the zombie's open transaction
    with pytest.raises(CompactLogError):
        zombie.commit_transaction()
    successor.begin_transaction()
    successor.send("t", key=b"a", value=b"new")
    successor.commit_transaction()
    successor.close()
    assert [r.value for r in store.read("t", 0, isolation_level="read_committed")] == [b"new"]
    other = store.producer(transactional_id=transactional_id[:-1] + "y")  # a different long id: its own file
    assert other._producer_id != successor._producer_id
    other.close()
