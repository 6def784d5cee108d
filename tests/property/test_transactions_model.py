"""Random transactional workloads against a model that applies only committed data.

Two transactional producers and one plain producer write to one compacted partition; transactions
commit or abort at random, interleaved with rolls, clock advances and cleans. After every step a
read_committed consumer never sees aborted or open-transaction data, stops at the last stable offset,
and rebuilds exactly the model's committed state.

After every clean that reports the partition cleaned up to ``end_offset`` (liveness): below it no open
transaction's data exists, no aborted data is left, only the newest committed record of each key is, and a
committed tombstone among them is gone iff a clean at least ``delete.retention.ms`` earlier covered it.
"""

from __future__ import annotations

import os
import shutil
import tempfile

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

import compactlog
from support import FakeClock, check_cleaned_below

KEYS = st.sampled_from([b"a", b"b", b"c"])
RETENTION = 5_000
WRITERS = st.sampled_from([0, 1])
TRANSACTION_TIMEOUT_MS = 10**9


class TransactionsModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="txn-model-")
        self.clock = FakeClock(1_000_000)
        # The clock runs for minutes: the broker allows a transaction timeout beyond them, so the
        # coordinator never aborts open transactions behind the model's back (timeouts are tested in
        # tests/unit/test_transactions.py).
        with open(os.path.join(self.dir, "server.properties"), "w", encoding="utf-8") as f:
            f.write(f"transaction.max.timeout.ms={TRANSACTION_TIMEOUT_MS}\n")
        self.store = compactlog.open(self.dir, clock=self.clock)
        self.store.create_topic("t", 1, {"cleanup.policy": "compact", "segment.bytes": 2000,
                                         "min.cleanable.dirty.ratio": 0.01, "delete.retention.ms": RETENTION})
        self.writers = [self.store.producer(transactional_id=f"w{i}", linger_ms=0,
                                            transaction_timeout_ms=TRANSACTION_TIMEOUT_MS)
                        for i in range(2)]
        self.plain = self.store.producer(linger_ms=0)
        self.open = [False, False]
        self.pending: list[list[int]] = [[], []]
        # offset -> [key, value, status, stamped] with status "committed" | "aborted" | "open", and stamped the
        # time of the first clean whose end offset passed it (which stamps a tombstone's horizon) or None
        self.records: dict[int, list] = {}

    def teardown(self) -> None:
        for producer in [*self.writers, self.plain]:
            producer.close()
        self.store.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    @rule(writer=WRITERS, key=KEYS, value=st.one_of(st.none(), st.binary(min_size=1, max_size=4)))
    def send_in_transaction(self, writer: int, key: bytes, value: bytes | None) -> None:
        producer = self.writers[writer]
        if not self.open[writer]:
            producer.begin_transaction()
            self.open[writer] = True
        meta = producer.send("t", key=key, value=value).result()
        self.records[meta.offset] = [key, value, "open", None]
        self.pending[writer].append(meta.offset)

    @precondition(lambda self: any(self.open))
    @rule(writer=WRITERS, commit=st.booleans())
    def end_transaction(self, writer: int, commit: bool) -> None:
        if not self.open[writer]:
            return
        producer = self.writers[writer]
        producer.commit_transaction() if commit else producer.abort_transaction()
        for offset in self.pending[writer]:
            self.records[offset][2] = "committed" if commit else "aborted"
        self.pending[writer] = []
        self.open[writer] = False

    @rule(key=KEYS, value=st.one_of(st.none(), st.binary(min_size=1, max_size=4)))
    def send_plain(self, key: bytes, value: bytes | None) -> None:
        meta = self.plain.send("t", key=key, value=value).result()
        self.plain.flush()
        self.records[meta.offset] = [key, value, "committed", None]

    @rule()
    def roll(self) -> None:
        self.store.roll("t", 0)

    @rule(ms=st.integers(0, 4_000))
    def advance(self, ms: int) -> None:
        self.clock.advance(ms)

    @rule()
    def clean(self) -> None:
        report = self.store.clean(force=True)
        assert not any(r.startswith("uncleanable") for r in report.skipped.values()), report.skipped
        cleaned = report.partition("t", 0)
        if cleaned is not None:
            self.check_cleaned_below(cleaned.end_offset, self.clock())

    @rule(key=KEYS)
    def later_round(self, key: bytes) -> None:
        """A round after delete.retention.ms with new dirty data: where stamped tombstones must go."""
        self.advance(RETENTION)
        self.send_plain(key, b"later")
        self.roll()
        self.clean()

    def check_cleaned_below(self, end_offset: int, now: int) -> None:
        present = {r.offset for r in self.store.read("t", 0, self.store.log_start_offset("t", 0))}
        check_cleaned_below(self.records, present, end_offset, now, RETENTION, status=lambda record: record[2])

    @invariant()
    def read_committed_matches_model(self) -> None:
        for producer in self.writers:
            producer.flush()
        lso = self.store.last_stable_offset("t", 0)
        open_offsets = [o for o, r in self.records.items() if r[2] == "open"]
        assert lso == (min(open_offsets) if open_offsets else self.store.log_end_offset("t", 0))
        read = list(self.store.read("t", 0, self.store.log_start_offset("t", 0), isolation_level="read_committed"))
        state: dict[bytes, bytes] = {}
        for record in read:
            assert record.offset < lso
            key, value, status, _ = self.records[record.offset]
            assert status == "committed", f"read_committed returned {status} data at {record.offset}"
            assert (record.key, record.value) == (key, value)
            if value is None:
                state.pop(key, None)
            else:
                state[key] = value
        expected: dict[bytes, bytes] = {}
        for offset in sorted(self.records):
            key, value, status, _ = self.records[offset]
            if offset >= lso or status != "committed":
                continue
            if value is None:
                expected.pop(key, None)
            else:
                expected[key] = value
        assert state == expected


TransactionsModel.TestCase.settings = settings(max_examples=20, stateful_step_count=25, deadline=None)
TestTransactionsModel = TransactionsModel.TestCase
