"""ListOffsets' searches and answer (Kafka's ``fetchOffsetForTimestamp``): the record with the largest
timestamp, the first record at or after a timestamp with its own timestamp, transaction markers never
found, and nothing at or past the last fetchable offset."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import compactlog
from compactlog.broker.fetch import EARLIEST, LATEST, MAX_TIMESTAMP, list_offsets_answer
from compactlog.log import reads
from support import FakeClock


def append(store: compactlog.Store, timestamps: list[int]) -> None:
    store.append("t", 0, pa.table({"key": [b"k%d" % t for t in timestamps], "value": [b"v"] * len(timestamps),
                                   "timestamp": pa.array(timestamps, pa.int64())}))


def test_max_timestamp_is_the_first_record_at_the_largest_timestamp_markers_left_out(tmp_path: Path) -> None:
    clock = FakeClock(now=10_000)
    with compactlog.open(tmp_path, clock=clock) as store:
        store.create_topic("t")
        log = store.log("t", 0)
        assert reads.max_timestamp_and_offset(log.snapshot, log.directory) is None
        append(store, [100, 500, 300])
        store.roll("t", 0)
        append(store, [500, 200])  # a tie in a later segment: the earlier record stays the answer
        producer = store.producer(transactional_id="tx")
        producer.begin_transaction()
        producer.send("t", key=b"x", value=b"y", timestamp=400, partition=0)
        producer.commit_transaction()  # its marker at offset 6 carries the clock's 10_000: not a record
        producer.close()
        assert store.log_end_offset("t", 0) == 7
        assert reads.max_timestamp_and_offset(log.snapshot, log.directory) == (500, 1)
        assert reads.timestamp_and_offset_for_time(log.snapshot, log.directory, 301) == (500, 1)
        assert reads.timestamp_and_offset_for_time(log.snapshot, log.directory, 501) is None  # not the marker
        append(store, [700])
        assert reads.max_timestamp_and_offset(log.snapshot, log.directory) == (700, 7)


@pytest.mark.parametrize(("timestamp", "found", "answer"), [
    (EARLIEST, None, (-1, 3)),
    (LATEST, None, (-1, 10)),
    (MAX_TIMESTAMP, (900, 7), (900, 7)),
    (MAX_TIMESTAMP, (900, 10), (-1, -1)),  # at the last fetchable offset (an open transaction's record)
    (MAX_TIMESTAMP, None, (-1, -1)),  # no records
    (250, (300, 4), (300, 4)),  # the record's own timestamp
    (250, (300, 12), (-1, -1)),
])
def test_list_offsets_answer(timestamp: int, found: tuple[int, int] | None, answer: tuple[int, int]) -> None:
    assert list_offsets_answer(timestamp, 3, 10, found) == answer
