"""The log against a plain list model: random sends, bulk appends, rolls, flushes, reopens and clock
advances; after every step the log must read back exactly as the model says."""

from __future__ import annotations

import shutil
import tempfile
from typing import Any

import pyarrow as pa
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import compactlog
from compactlog.producer import RecordFuture
from compactlog.record import HEADER_TYPE
from support import FakeClock

SEGMENT_MS = 10_000
START_MS = 1_700_000_000_000

keys = st.one_of(st.none(), st.sampled_from([b"a", b"b", b"c", b""]), st.binary(max_size=12))
values = st.one_of(st.none(), st.binary(max_size=200))
headers = st.lists(
    st.tuples(st.sampled_from(["h", "trace", "é"]), st.one_of(st.none(), st.binary(max_size=8))), max_size=2
)
timestamps = st.one_of(st.none(), st.integers(START_MS - 50_000, START_MS + 200_000))
records = st.tuples(keys, values, headers, timestamps)

Row = tuple[int, int, Any, Any, list]  # offset, timestamp, key, value, headers


class LogModel(RuleBasedStateMachine):
    """One single-partition topic with small segments; the model is the list of acknowledged records."""

    def __init__(self) -> None:
        super().__init__()
        self.directory = tempfile.mkdtemp(prefix="log-model-")
        self.clock = FakeClock(START_MS)
        self.model: list[Row] = []
        # Sent but not yet drained: (future, timestamp, key, value, headers).
        self.pending: list[tuple[RecordFuture, int, Any, Any, list]] = []
        self.acknowledged: list[tuple[RecordFuture, int]] = []  # drained futures and their expected offsets
        self.store = compactlog.open(self.directory, clock=self.clock)
        self.producer: Any = None

    @initialize(segment_bytes=st.sampled_from([14, 1500, 4096, 65536]))
    def create(self, segment_bytes: int) -> None:
        self.store.create_topic("t", config={"segment.bytes": segment_bytes, "segment.ms": SEGMENT_MS})
        self._new_producer()

    def _new_producer(self) -> None:
        # Large batches and no linger: records drain only on flush() or future.result(), as the model says.
        self.producer = self.store.producer(linger_ms=0, batch_size=1 << 30)

    def _drained(self) -> None:
        for future, timestamp, key, value, header in self.pending:
            self.acknowledged.append((future, len(self.model)))
            self.model.append((len(self.model), timestamp, key, value, header))
        self.pending.clear()

    # ------------------------------------------------------------------------------------------ steps

    @rule(batch=st.lists(records, min_size=1, max_size=8))
    def send(self, batch: list[tuple[Any, Any, list, Any]]) -> None:
        for key, value, header, timestamp in batch:
            future = self.producer.send(
                "t", key=key, value=value, headers=header, timestamp=timestamp, partition=0
            )
            self.pending.append(
                (future, timestamp if timestamp is not None else self.clock(), key, value, header)
            )

    @rule()
    def flush(self) -> None:
        self.producer.flush()
        self._drained()

    @precondition(lambda self: self.pending)
    @rule(data=st.data())
    def wait_for_a_future(self, data: st.DataObject) -> None:
        future = data.draw(st.sampled_from([entry[0] for entry in self.pending]))
        future.result()  # drains every pending record: they become readable
        self._drained()

    @invariant()
    def futures_report_their_offsets(self) -> None:
        for future, offset in self.acknowledged:
            assert future.done()
            assert future.result() == compactlog.RecordMetadata("t", 0, offset, self.model[offset][1])
        self.acknowledged.clear()

    @rule(
        batch=st.lists(records, max_size=20),
        with_timestamps=st.booleans(),
        with_headers=st.booleans(),
        as_strings=st.booleans(),
    )
    def bulk_append(
        self,
        batch: list[tuple[Any, Any, list, Any]],
        with_timestamps: bool,
        with_headers: bool,
        as_strings: bool,
    ) -> None:
        columns: dict[str, Any] = {
            "key": pa.array([r[0] for r in batch], pa.binary()),
            "value": pa.array([r[1] for r in batch], pa.binary()),
        }
        if as_strings:
            columns["key"] = pa.array([None if r[0] is None else r[0].hex() for r in batch], pa.string())
        if with_timestamps:
            columns["timestamp"] = pa.array([r[3] for r in batch], pa.int64())
        if with_headers:
            columns["headers"] = pa.array(
                [[{"key": k, "value": v} for k, v in r[2]] for r in batch], HEADER_TYPE
            )
        result = self.store.append("t", 0, pa.table(columns))
        assert result.base_offset == len(self.model)
        assert result.record_count == len(batch)
        for key, value, header, timestamp in batch:
            stored_key = key.hex().encode() if as_strings and key is not None else key
            stored_ts = timestamp if with_timestamps and timestamp is not None else self.clock()
            self.model.append((len(self.model), stored_ts, stored_key, value, header if with_headers else []))

    @rule()
    def roll(self) -> None:
        before = self.store.describe("t")[0].segments
        rolled = self.store.roll("t", 0)
        after = self.store.describe("t")[0].segments
        assert rolled == (before[-1].record_count > 0)
        assert len(after) == len(before) + rolled
        assert after[-1].active and after[-1].record_count == 0

    @rule(ms=st.integers(0, 2 * SEGMENT_MS))
    def advance_clock(self, ms: int) -> None:
        self.clock.advance(ms)

    @rule()
    def reopen(self) -> None:
        self.producer.close()
        self._drained()
        self.store.close()
        self.store = compactlog.open(self.directory, clock=self.clock)
        self._new_producer()

    @rule(data=st.data())
    def offset_for_time(self, data: st.DataObject) -> None:
        candidates = sorted({row[1] + d for row in self.model for d in (-1, 0, 1)}) or [START_MS]
        timestamp = data.draw(st.sampled_from(candidates))
        expected = next((row[0] for row in self.model if row[1] >= timestamp), None)
        assert self.store.offset_for_time("t", 0, timestamp) == expected

    @precondition(lambda self: self.model)
    @rule(data=st.data())
    def read_a_range(self, data: st.DataObject) -> None:
        start = data.draw(st.integers(0, len(self.model)))
        end = data.draw(st.integers(start, len(self.model) + 2))
        got = [
            (r.offset, r.timestamp, r.key, r.value, r.headers) for r in self.store.read("t", 0, start, end)
        ]
        assert got == self.model[start:end]

    # ------------------------------------------------------------------------------------- invariants

    @invariant()
    def log_reads_back_as_the_model(self) -> None:
        got = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in self.store.read("t", 0, 0)]
        assert [row[0] for row in got] == list(range(len(got)))  # strictly increasing, no gaps
        assert got == self.model
        assert self.store.log_start_offset("t", 0) == 0
        assert self.store.log_end_offset("t", 0) == len(self.model)

    @invariant()
    def read_arrow_matches_read(self) -> None:
        table = self.store.read_arrow("t", 0, 0)
        assert table.column("offset").to_pylist() == [row[0] for row in self.model]
        assert table.column("timestamp").to_pylist() == [row[1] for row in self.model]
        assert table.column("key").to_pylist() == [row[2] for row in self.model]
        assert table.column("value").to_pylist() == [row[3] for row in self.model]
        assert [
            [(h["key"], h["value"]) for h in row or []] for row in table.column("headers").to_pylist()
        ] == [row[4] for row in self.model]

    @invariant()
    def segments_cover_the_log(self) -> None:
        segments = self.store.describe("t")[0].segments
        assert sum(s.record_count for s in segments) == len(self.model)
        assert [s.active for s in segments] == [False] * (len(segments) - 1) + [True]
        bases = [s.base_offset for s in segments]
        assert bases == sorted(set(bases))
        assert segments[-1].base_offset <= len(self.model)

    def teardown(self) -> None:
        try:
            if self.producer is not None:
                self.producer.close()
            self.store.close()
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)


LogModel.TestCase.settings = settings(
    max_examples=40,
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
TestLogModel = LogModel.TestCase
