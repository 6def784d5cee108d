"""The shortcuts of a small append give what the general path gives: the producer state a batch's ends
make (``ProducerStateManager.apply_batch``) is the state its rows make (``apply``), and a frame plan
recognised from the offsets buffers (``fits_one_frame``) is the plan ``plan_frames`` makes."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest

from compactlog.active_segment import omitted_columns
from compactlog.frame_plan import fits_one_frame, plan_frames, row_sizes
from compactlog.limits import INT_MAX
from compactlog.producer_state import ProducerStateManager
from compactlog.record import SCHEMA, data_rows, producer_rows
from compactlog.segment import SegmentStats


def _rows(n: int, base_sequence: int, producer_id: int, epoch: int, transactional: bool, first_offset: int,
          first_timestamp: int) -> pa.Table:
    rows = data_rows(pa.array(np.arange(first_timestamp, first_timestamp + n, dtype=np.int64)),
                     pa.array([b"k%d" % i for i in range(n)], pa.binary()),
                     pa.array([b"v" * (i % 7) for i in range(n)], pa.binary()))
    rows = producer_rows(rows, producer_id, epoch, base_sequence, transactional)
    return rows.set_column(0, SCHEMA.field(0), pa.array(np.arange(first_offset, first_offset + n, dtype=np.int64)))


def test_apply_batch_makes_the_state_apply_makes_from_the_rows() -> None:
    rng = random.Random(7)
    by_rows, by_ends = ProducerStateManager(), ProducerStateManager()
    offset, sequences = 0, {1: 0, 2: INT_MAX - 300}
    epochs = {1: 0, 2: 3}
    for _ in range(60):
        producer_id = rng.choice([1, 2])
        n = rng.randint(1, 250)
        if rng.random() < 0.1:  # a new epoch starts at sequence 0
            epochs[producer_id] += 1
            sequences[producer_id] = 0
        transactional = rng.random() < 0.5
        first_seq = sequences[producer_id]
        rows = _rows(n, first_seq, producer_id, epochs[producer_id], transactional, offset, 1000 + offset)
        by_rows.apply(rows)
        last_seq = (first_seq + n - 1) % (INT_MAX + 1)
        by_ends.apply_batch(producer_id, epochs[producer_id], first_seq, last_seq, offset, offset + n - 1,
                            1000 + offset, 1000 + offset + n - 1, transactional)
        offset += n + rng.choice([0, 0, 3])  # now and then a gap (another producer's rows, a marker)
        sequences[producer_id] = (last_seq + 1) % (INT_MAX + 1)
        if rng.random() < 0.2:  # a marker ends the producer's transaction in both
            marker = {"offset": [offset], "timestamp": [5], "producer_id": [producer_id],
                      "producer_epoch": [epochs[producer_id]], "sequence": [-1], "is_transactional": [True],
                      "control_type": [rng.choice([0, 1])]}
            table = pa.table({name: pa.array(values, SCHEMA.field(name).type) for name, values in marker.items()})
            assert by_rows.apply(table) == by_ends.apply(table)
            offset += 1
        assert by_ends.to_snapshot() == by_rows.to_snapshot()
    assert by_rows.entries[1].batches and by_rows.first_unstable_offset() == by_ends.first_unstable_offset()


def test_fits_one_frame_only_where_plan_frames_makes_one_frame_without_a_roll() -> None:
    rng = random.Random(3)
    checked = 0
    for _ in range(400):
        n = rng.randint(1, 300)
        rows = _rows(n, 0, 1, 0, False, 0, 1_000_000 + rng.randint(0, 5000))
        omitted = omitted_columns(rows)
        timestamps = np.asarray(rows.column("timestamp").to_numpy(), np.int64)
        active = SegmentStats(0, 10, rng.choice([0, rng.randint(1, 200_000)]), 10, 1_000_000,
                              1_000_000 + rng.randint(-3000, 3000), True)
        segment_bytes, roll_ms = rng.choice([4096, 65536, 250_000, 1 << 30]), rng.choice([1000, 10_000, 10**9])
        if active.size_bytes == 0:
            active = SegmentStats(0, 0, 0, 0, -1, -1, True)
        plan = plan_frames(active, row_sizes(rows, omitted), timestamps, segment_bytes, roll_ms)
        if fits_one_frame(active, rows, omitted, int(timestamps.max()), segment_bytes, roll_ms):
            assert plan == [(0, n, False)]
            checked += 1
    assert checked > 50  # the shortcut was taken often enough to mean something


def test_check_rows_refuses_the_record_too_large_whichever_way_it_decides() -> None:
    from compactlog.errors import RecordTooLargeError
    from compactlog.record import RECORD_OVERHEAD_BYTES, check_rows

    def rows(sizes: list[int]) -> pa.Table:
        return data_rows(pa.array(np.zeros(len(sizes), np.int64)), pa.array([b"k"] * len(sizes), pa.binary()),
                         pa.array([b"v" * size for size in sizes], pa.binary()))

    limit = 1000
    fits = limit - RECORD_OVERHEAD_BYTES - 1  # the largest value whose record (key b"k") fits
    check_rows(rows([fits]), compacted=True, max_message_bytes=limit, topic="t")  # the shortcut: all fit
    check_rows(rows([fits] * 5), compacted=True, max_message_bytes=limit, topic="t")  # together too large
    for sizes in ([fits + 1], [10, fits + 1], [fits] * 3 + [fits + 1]):
        with pytest.raises(RecordTooLargeError):
            check_rows(rows(sizes), compacted=True, max_message_bytes=limit, topic="t")


def test_a_logs_producer_state_after_batches_is_the_state_its_rows_rebuild(tmp_path: object) -> None:
    """Log.append_producer_batch follows each frame with apply_batch; the state must be what the stored rows
    give when replayed (as a reopen rebuilds it), also when a batch is cut into frames across rolls."""
    import compactlog
    from compactlog.log.producers import PRODUCER_COLUMNS

    clock = [1_000_000]
    with compactlog.open(str(tmp_path), clock=lambda: clock[0]) as store:
        store.create_topic("t", 1, {"cleanup.policy": "compact", "segment.bytes": "20000"})
        log = store.log("t", 0)
        sequences = {7: 0, 8: INT_MAX - 40}  # producer 8 wraps past INT_MAX
        for i in range(12):
            producer_id = 7 if i % 3 else 8
            n = 60 + 37 * i
            rows = pa.table({"key": pa.array([b"k%d" % j for j in range(n)], pa.binary()),
                             "value": pa.array([b"v" * 20] * n, pa.binary()),
                             "timestamp": pa.array(np.arange(n, dtype=np.int64) + clock[0])})
            store.append("t", 0, rows, producer_id=producer_id, producer_epoch=1, base_sequence=sequences[producer_id],
                         transactional=producer_id == 7, flush=False)
            sequences[producer_id] = (sequences[producer_id] + n) % (INT_MAX + 1)
            clock[0] += 1000
        assert len(log.sealed_segments()) >= 2  # batches were cut into frames across rolls
        replayed = ProducerStateManager()
        for table in log.read_tables(0, columns=PRODUCER_COLUMNS, include_control=True):
            replayed.apply(table)
        state = log._producers.manager
        assert {pid: (e.epoch, list(e.batches), e.last_offset, e.last_data_offset, e.last_timestamp,
                      e.txn_first_offset, e.txn_start_ms) for pid, e in state.entries.items()} == \
            {pid: (e.epoch, list(e.batches), e.last_offset, e.last_data_offset, e.last_timestamp,
                   e.txn_first_offset, e.txn_start_ms) for pid, e in replayed.entries.items()}
