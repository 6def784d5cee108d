"""The single-pass round (newest first) keeps exactly what the two-pass round keeps, and gives up cleanly
when the dirty section's keys do not fit the offset map."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import compactlog
from compactlog import sealed_segment as segment_module
from compactlog.cleaner import executor, single_pass
from support import FakeClock

RUN_IN_PROCESS = executor.run_in_process  # the real one (tests replace the module's for a while)
KEY = st.sampled_from([b"a", b"b", b"cc", b"ddd", None])
RECORD = st.tuples(KEY, st.booleans())  # (key, tombstone)
ROUNDS = st.lists(st.lists(st.lists(RECORD, min_size=1, max_size=12), min_size=1, max_size=3), min_size=1,
                  max_size=3)


def fill(store: compactlog.Store, segments: list[list[tuple[bytes | None, bool]]], start: int) -> None:
    for n, segment in enumerate(segments):
        store.append("t", 0, pa.table({
            "key": pa.array([k for k, _ in segment], pa.binary()),
            "value": pa.array([None if t else b"v%d" % (start + n) for _, t in segment], pa.binary())}))
        store.roll("t", 0)


def snapshot(store: compactlog.Store) -> list[dict[str, Any]]:
    return store.read_arrow("t", 0).to_pylist()  # every column, delete horizons included


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ROUNDS, st.integers(1, 4), st.booleans(), st.sampled_from([1, 2, 5, 1 << 17]), st.sampled_from([1, 3, 1 << 16]))
def test_single_pass_keeps_what_two_passes_keep(tmp_path_factory: Any, monkeypatch: pytest.MonkeyPatch,
                                               rounds: list[list[list[tuple[bytes | None, bool]]]],
                                               group_size: int, one_core: bool, row_group_rows: int,
                                               batch_rows: int) -> None:
    """Also with every step of a round on one thread (``one_core``, for rounds side by side on Spark), and
    with row groups and batches of a few rows (cleaned files of many row groups, written newest first).
    ``group_size`` 4: segments of up to 1 MiB, so a group holds several segments and survivors."""
    monkeypatch.setattr(executor, "run_in_process", lambda task: RUN_IN_PROCESS(task, one_core))
    monkeypatch.setattr(segment_module, "ROW_GROUP_ROWS", row_group_rows)
    monkeypatch.setattr(single_pass, "BATCH_ROWS", batch_rows)
    clock = FakeClock(1_000_000)
    stores = []
    for name in ("single", "double"):
        store = compactlog.open(str(tmp_path_factory.mktemp(name)), clock=clock)
        store.create_topic("t", 1, {"cleanup.policy": "delete", "min.cleanable.dirty.ratio": 0.01,
                                    "segment.bytes": 300 * group_size if group_size < 4 else 1 << 20,
                                    "delete.retention.ms": 5_000})
        stores.append(store)
    single, double = stores
    for n, segments in enumerate(rounds):
        for store in stores:  # keyless records get in only while the topic is not compacted
            store.alter_topic_config("t", {"cleanup.policy": "delete"})
            fill(store, segments, 10 * n)
            store.alter_topic_config("t", {"cleanup.policy": "compact"})
        clock.advance(3_000)
        used: list[Any] = []

        def spy(task: Any, one_core: bool = False, used: list[Any] = used,
                real: Any = single_pass.clean_newest_first) -> Any:
            used.append(task)
            return real(task, one_core)

        monkeypatch.setattr(executor, "clean_newest_first", spy)
        first = single.clean(force=True)
        assert used, "the single pass was not used"
        monkeypatch.setattr(executor, "clean_newest_first", lambda task, one_core=False: None)
        second = double.clean(force=True)
        assert snapshot(single) == snapshot(double)
        ends = [(p.end_offset, p.records_written, p.invalid_records, p.tombstones_stamped) for p in first.partitions]
        assert ends == [(p.end_offset, p.records_written, p.invalid_records, p.tombstones_stamped)
                        for p in second.partitions]


def test_keys_beyond_the_map_fall_back_to_two_passes(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "server.properties").write_text("log.cleaner.dedupe.buffer.size=2048\n")
    store = compactlog.open(str(tmp_path))
    store.create_topic("t", 1, {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": 0.01})
    keys = [b"key-%04d" % i for i in np.random.default_rng(3).integers(0, 120, 400)]
    store.append("t", 0, pa.table({"key": keys, "value": [b"v%d" % i for i in range(400)]}))
    store.roll("t", 0)
    outcomes = []
    real = single_pass.clean_newest_first

    def spy(task: Any, one_core: bool = False) -> Any:
        outcomes.append(real(task, one_core))
        return outcomes[-1]

    monkeypatch.setattr(executor, "clean_newest_first", spy)
    while store.clean(force=True).partitions:
        pass
    assert outcomes[0] is None  # gave up: 120 keys do not fit in 2 KiB
    assert not [n for n in os.listdir(tmp_path / "t-0") if n.endswith(".cleaned")]
    latest = {k: v for k, v in zip(keys, [b"v%d" % i for i in range(400)], strict=True)}
    assert {r.key: r.value for r in store.read("t", 0)} == latest
    assert len(list(store.read("t", 0))) == len(latest)
