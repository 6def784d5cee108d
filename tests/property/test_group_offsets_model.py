"""Random workloads of the group metadata manager against a plain-dict model of committed offsets.

Commits, offset deletions, group deletions, group metadata, and transactional offsets of two producers whose
transactions commit or abort (markers written as EndTxn writes them, or aborted without telling the
manager, as a timeout in another process would), interleaved with restarts. After every
step the manager's cache equals the model (liveness: nothing acknowledged is missing, nothing aborted or
still pending shows); after every restart, and at the end, a fresh manager loading the topic equals it
too (safety: what is on disk is exactly what was acknowledged).

The model states the rules of :mod:`compactlog.coordinator.committed_offsets` with a global write counter
for log offsets (one group's records share one partition, so within a key the counter orders them as the
log does): a transaction's commit applies its offsets, in order, where they are newer than the key's
current one; a tombstone drops the key and its pending transactional offsets.
"""

from __future__ import annotations

import shutil
import tempfile

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

import compactlog
from compactlog.coordinator.group_metadata_manager import (
    OFFSETS_TOPIC,
    GroupMetadataManager,
    GroupSnapshot,
    OffsetAndMetadata,
)
from compactlog.server_config import server_config
from support import FakeClock

GROUPS = st.sampled_from(["g0", "g1", "g2"])  # over 2 partitions: some share one
PARTITIONS = st.sampled_from([("t", 0), ("t", 1), ("u", 0)])
PRODUCERS = st.sampled_from([7, 8])
OFFSETS = st.integers(0, 1_000)
CONFIG = server_config({"offsets.topic.num.partitions": "2"})
Key = tuple[str, tuple[str, int]]


class GroupOffsetsModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="group-offsets-model-")
        self.clock = FakeClock()
        self.manager = GroupMetadataManager(compactlog.open(self.dir, clock=self.clock), CONFIG)
        self.writes = 0  # the model's log offsets
        self.committed: dict[Key, tuple[int, int]] = {}  # key -> (write, offset)
        self.pending: dict[int, list[tuple[int, Key, int]]] = {}  # producer -> [(write, key, offset)]
        self.generations: dict[str, int] = {}

    def teardown(self) -> None:
        try:  # safety at the end too: a fresh manager loads what the model holds
            self.check_loaded(GroupMetadataManager(compactlog.open(self.dir, clock=self.clock), CONFIG).load())
        finally:
            self.manager.store.close()
            shutil.rmtree(self.dir, ignore_errors=True)

    def _write(self) -> int:
        self.writes += 1
        return self.writes

    def _tombstone(self, key: Key) -> None:
        self._write()
        del self.committed[key]
        for producer, records in self.pending.items():
            self.pending[producer] = [r for r in records if r[1] != key]

    def expected(self, group: str) -> dict[tuple[str, int], int]:
        return {tp: offset for (g, tp), (_, offset) in self.committed.items() if g == group}

    # -- rules -------------------------------------------------------------------------------------------------

    @rule(group=GROUPS, offsets=st.dictionaries(PARTITIONS, OFFSETS, min_size=1, max_size=3))
    def commit(self, group: str, offsets: dict[tuple[str, int], int]) -> None:
        self.manager.store_offsets(group, {tp: OffsetAndMetadata(o, commit_timestamp=1) for tp, o in offsets.items()})
        for tp, offset in offsets.items():
            self.committed[(group, tp)] = (self._write(), offset)

    @rule(group=GROUPS, partitions=st.lists(PARTITIONS, max_size=3))
    def delete_offsets(self, group: str, partitions: list[tuple[str, int]]) -> None:
        self.manager.delete_offsets(group, partitions)
        for tp in dict.fromkeys(partitions):
            if (group, tp) in self.committed:
                self._tombstone((group, tp))

    @rule(group=GROUPS)
    def store_group(self, group: str) -> None:
        self.generations[group] = self.generations.get(group, 0) + 1
        self.manager.store_group(GroupSnapshot(group, "consumer", self.generations[group], "range", None, 1, ()))
        self._write()

    @rule(group=GROUPS)
    def delete_group(self, group: str) -> None:
        self.manager.delete_group(group)
        for key in sorted(k for k in self.committed if k[0] == group):
            self._tombstone(key)
        self.generations.pop(group, None)

    @rule(producer=PRODUCERS, group=GROUPS, offsets=st.dictionaries(PARTITIONS, OFFSETS, min_size=1, max_size=2))
    def txn_offsets(self, producer: int, group: str, offsets: dict[tuple[str, int], int]) -> None:
        self.manager.store_txn_offsets(group, producer, 0,
                                       {tp: OffsetAndMetadata(o, commit_timestamp=1) for tp, o in offsets.items()})
        for tp, offset in offsets.items():
            self.pending.setdefault(producer, []).append((self._write(), (group, tp), offset))

    @rule(producer=PRODUCERS, commit=st.booleans())
    def end_txn(self, producer: int, commit: bool) -> None:
        store = self.manager.store
        for partition in range(store.partitions(OFFSETS_TOPIC)):  # EndTxn: a marker where it is open
            if store.log(OFFSETS_TOPIC, partition).open_transaction(producer) is not None:
                store.write_marker(OFFSETS_TOPIC, partition, producer, 0, commit)
        self.manager.complete_txn(producer, commit)
        for write, key, offset in self.pending.pop(producer, []) if commit else []:
            if key not in self.committed or self.committed[key][0] < write:
                self.committed[key] = (write, offset)
        self.pending.pop(producer, None)

    @rule(producer=PRODUCERS)
    def abort_unseen(self, producer: int) -> None:
        """ABORT markers written behind the manager's back (a timeout, another process): complete_txn is not
        called, and the producer's next transaction must not commit these offsets."""
        store = self.manager.store
        for partition in range(store.partitions(OFFSETS_TOPIC)):
            if store.log(OFFSETS_TOPIC, partition).open_transaction(producer) is not None:
                store.write_marker(OFFSETS_TOPIC, partition, producer, 0, commit=False)
        self.pending.pop(producer, None)

    @rule()
    def restart(self) -> None:
        self.manager.store.close()
        self.manager = GroupMetadataManager(compactlog.open(self.dir, clock=self.clock), CONFIG)
        self.check_loaded(self.manager.load())

    # -- checks ------------------------------------------------------------------------------------------------

    def check_loaded(self, loaded: dict) -> None:
        groups = {g for g, _ in self.committed} | set(self.generations)
        assert set(loaded) == groups
        for group in groups:
            assert {tp: o.offset for tp, o in loaded[group].offsets.items()} == self.expected(group)
            snapshot = loaded[group].snapshot
            assert (snapshot.generation if snapshot else None) == self.generations.get(group)

    @invariant()
    def cache_equals_model(self) -> None:
        for group in ("g0", "g1", "g2"):
            assert {tp: o.offset for tp, o in self.manager.committed(group).items()} == self.expected(group)


GroupOffsetsModel.TestCase.settings = settings(max_examples=50, stateful_step_count=30, deadline=None)
TestGroupOffsetsModel = GroupOffsetsModel.TestCase
