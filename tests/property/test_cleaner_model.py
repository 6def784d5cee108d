"""The cleaner against a plain dict model (Hypothesis stateful testing, fake clock).

Random sends (updates and tombstones), rolls, clock advances, cleans (forced or not) and reopens. After
every step:

* offsets read from the log start strictly increase, and every record read is the one the model
  appended at that offset;
* the newest record of every key is readable at its original offset, unless it is a tombstone and a
  clean at least ``delete.retention.ms`` ago could have stamped it;
* no record younger than ``min.compaction.lag.ms`` at the last clean was removed;
* reading from the log start rebuilds the model's state (latest value per live key).

And after every clean that reports the partition cleaned up to ``end_offset`` (liveness: the cleaner does
its work, not only no harm): below ``end_offset`` only the newest record of each key is left, and a
tombstone among them is gone iff a clean at least ``delete.retention.ms`` earlier already covered it
(that clean stamped its horizon).
"""

from __future__ import annotations

import shutil
import tempfile

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

import compactlog
from support import FakeClock, check_cleaned_below

MIN_LAG = 3_000
RETENTION = 10_000
KEYS = st.sampled_from([b"a", b"b", b"c", b"d", b"e"])


class CleanerModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="cleaner-model-")
        self.clock = FakeClock(1_000_000)
        self.store = compactlog.open(self.dir, clock=self.clock)
        self.store.create_topic("t", 1, {
            "cleanup.policy": "compact", "segment.bytes": 3000, "min.cleanable.dirty.ratio": 0.2,
            "min.compaction.lag.ms": MIN_LAG, "delete.retention.ms": RETENTION})
        # offset -> (key, value, timestamp, time of the first clean whose end offset passed it, which stamps
        #            its horizon if it is a tombstone, or None)
        self.records: dict[int, list] = {}
        self.last_clean: int | None = None

    def teardown(self) -> None:
        self.store.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    @rule(key=KEYS, value=st.one_of(st.none(), st.binary(min_size=1, max_size=8)), count=st.integers(1, 4))
    def send(self, key: bytes, value: bytes | None, count: int) -> None:
        with self.store.producer(linger_ms=0) as producer:
            futures = [producer.send("t", key=key, value=value) for _ in range(count)]
            producer.flush()
        for future in futures:
            meta = future.result()
            assert meta.offset not in self.records
            self.records[meta.offset] = [key, value, meta.timestamp, None]

    @rule()
    def roll(self) -> None:
        self.store.roll("t", 0)

    # Steps below and beyond min.compaction.lag.ms and delete.retention.ms, so tombstones do expire.
    @rule(ms=st.sampled_from([0, 1, 1_000, 2_999, 3_000, 6_000, 9_999, 10_000, 12_000]))
    def advance(self, ms: int) -> None:
        self.clock.advance(ms)

    @rule(force=st.booleans())
    def clean(self, force: bool) -> None:
        now = self.clock()
        report = self.store.clean(force=force)
        assert not any(reason.startswith("uncleanable") for reason in report.skipped.values()), report.skipped
        self.last_clean = now
        cleaned = report.partition("t", 0)
        if cleaned is not None:
            self.check_cleaned_below(cleaned.end_offset, now)

    def check_cleaned_below(self, end_offset: int, now: int) -> None:
        present = {r.offset for r in self.store.read("t", 0)}
        check_cleaned_below(self.records, present, end_offset, now, RETENTION)

    @rule(key=KEYS)
    def later_round(self, key: bytes) -> None:
        """A round after delete.retention.ms with new dirty data: where stamped tombstones must go."""
        self.clock.advance(RETENTION)
        self.send(key, b"later", 1)
        self.roll()
        self.clock.advance(MIN_LAG)
        self.clean(force=True)

    @rule()
    def reopen(self) -> None:
        self.store.close()
        self.store = compactlog.open(self.dir, clock=self.clock)

    @invariant()
    def log_matches_model(self) -> None:
        start = self.store.log_start_offset("t", 0)
        assert start == 0  # compact-only: nothing is deleted by retention
        read = list(self.store.read("t", 0))
        offsets = [r.offset for r in read]
        assert offsets == sorted(set(offsets))
        for r in read:
            key, value, timestamp, *_ = self.records[r.offset]
            assert (r.key, r.value, r.timestamp) == (key, value, timestamp)
        present = set(offsets)
        newest: dict[bytes, int] = {}
        for offset, (key, *_) in sorted(self.records.items()):
            newest[key] = offset
        now = self.clock()
        for key, offset in newest.items():
            value, _, stamped = self.records[offset][1:]
            if offset not in present:
                assert value is None, f"newest value of {key!r} at {offset} is gone"
                assert stamped is not None and now >= stamped + RETENTION, (
                    f"tombstone of {key!r} at {offset} removed before delete.retention.ms")
        if self.last_clean is not None:
            for offset, (_, _, timestamp, *_) in self.records.items():
                if timestamp > self.last_clean - MIN_LAG:
                    assert offset in present, f"record {offset} younger than min.compaction.lag.ms was removed"
        state: dict[bytes, bytes] = {}
        for r in read:
            if r.value is None:
                state.pop(r.key, None)  # type: ignore[arg-type]
            else:
                state[r.key] = r.value  # type: ignore[index]
        expected = {k: self.records[o][1] for k, o in newest.items() if self.records[o][1] is not None}
        assert state == expected


CleanerModel.TestCase.settings = settings(max_examples=25, stateful_step_count=30, deadline=None)
TestCleanerModel = CleanerModel.TestCase
