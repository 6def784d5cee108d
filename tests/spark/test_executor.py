"""The cleaner's Spark executor beyond the contract: abort on failure, data-directory visibility, several
partitions in one pass, whole and split. (What a clean keeps is the contract suite's business.)"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import compactlog
from compactlog.cleaner import cleaner
from compactlog.cleaner.executor import run_in_process
from compactlog.cleaner.kernel import CleanTask
from compactlog.cleaner.plan import log_to_clean
from compactlog.cleaner.swap import discard
from compactlog.errors import ExecutorError
from compactlog.spark import executor as spark_executor
from compactlog.spark.executor import run_many_on_spark, run_on_spark
from support import FakeClock

pytestmark = pytest.mark.spark

COMPACT = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": 0.01, "segment.bytes": 600}


@pytest.fixture(params=[("never", "all"), ("never", "one"), ("always", "all")], ids=["whole", "whole-one", "split"])
def split_policy(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run a test with whole-partition rounds (their steps on threads, or one at a time: three partitions
    fill the two slots) and with every partition split over the slots."""
    policy, threads = request.param
    monkeypatch.setattr(spark_executor, "SPLIT_POLICY", policy)
    monkeypatch.setattr(spark_executor, "ROUND_THREADS", threads)
    return str(policy)


@pytest.fixture
def store(tmp_path: Any, clock: FakeClock) -> Iterator[compactlog.Store]:
    with compactlog.open(tmp_path / "data", clock=clock) as store:
        store.create_topic("t", 3, COMPACT)
        for partition in range(3):
            for round_ in range(2):
                store.append("t", partition, pa.table({
                    "key": [f"k{i % 7}".encode() for i in range(20)],
                    "value": [f"p{partition}r{round_}v{i}".encode() for i in range(20)]}))
            store.roll("t", partition)
        yield store


def task_for(store: compactlog.Store, partition: int) -> CleanTask:
    log = store.log("t", partition)
    state = cleaner.partition_state(store, log, store.checkpoint.read())
    task, _ = cleaner.make_task(store, log, log_to_clean(state, store.clock()), store.clock())
    return task


def files(store: compactlog.Store, partition: int, suffix: str) -> list[str]:
    return sorted(n for n in os.listdir(store.log("t", partition).directory) if n.endswith(suffix))


def corrupt(path: str) -> None:
    """Overwrite a segment file in place (same inode, so the cleaner's plan still trusts it)."""
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.write(b"\0" * size)


def test_several_partitions_in_one_pass_match_the_in_process_kernel(store: compactlog.Store, spark: Any,
                                                                    split_policy: str) -> None:
    tasks = [task_for(store, p) for p in range(3)]
    assert all(len(t.segments) > 2 for t in tasks)  # several segments and groups per partition

    rounds = run_many_on_spark(spark, tasks)

    for task, outcome in zip(tasks, rounds, strict=True):
        assert not isinstance(outcome, ExecutorError)
        mapped, results = outcome
        written = [pq.read_table(r.cleaned_path) for r in results]
        discard(results)
        reference_map, reference_results = run_in_process(task)
        expected = [pq.read_table(r.cleaned_path) for r in reference_results]
        discard(reference_results)
        assert mapped.end_offset == reference_map.end_offset
        # A whole round's map stays on its executor; the driver gets its size.
        assert (mapped.offset_map.used_bytes, mapped.offset_map.latest_offset) == (
            reference_map.offset_map.used_bytes, reference_map.offset_map.latest_offset)
        if split_policy == "always":
            # The same keys and offsets (in another entry order: the in-process round fills it newest first).
            assert mapped.offset_map.to_table().sort_by("key").equals(
                reference_map.offset_map.to_table().sort_by("key"))
        assert [(r.base_offset, r.next_offset, r.source_bases, r.records_written) for r in results] == [
            (r.base_offset, r.next_offset, r.source_bases, r.records_written) for r in reference_results]
        assert [t.equals(e) for t, e in zip(written, expected, strict=True)] == [True] * len(expected)


def test_a_failed_partition_leaves_no_cleaned_files_and_spares_the_others(store: compactlog.Store, spark: Any,
                                                                         split_policy: str) -> None:
    tasks = [task_for(store, p) for p in range(3)]
    corrupt(tasks[1].dirty_segments()[-1].path)  # fails partition 1's map phase

    rounds = run_many_on_spark(spark, tasks)

    assert isinstance(rounds[1], ExecutorError)
    assert re.match(r"t-1: Spark task for (the round|segments? [0-9.]+) failed on host", str(rounds[1]))
    assert rounds[1].__cause__ is not None  # the executor's exception, pickled back
    assert files(store, 1, ".cleaned") == []
    for partition in (0, 2):
        outcome = rounds[partition]
        assert not isinstance(outcome, ExecutorError)
        written = sorted(os.path.basename(r.cleaned_path) for r in outcome[1])
        assert files(store, partition, ".cleaned") == written
        discard(outcome[1])


def test_a_failed_rewrite_task_aborts_the_whole_round(store: compactlog.Store, spark: Any,
                                                     split_policy: str) -> None:
    store.clean()  # in process: partition 0 now has a clean section of several groups
    store.append("t", 0, pa.table({"key": [b"k1"], "value": [b"new"]}))
    store.roll("t", 0)
    task = task_for(store, 0)
    clean_section = [s for s in task.segments if s.base_offset < task.first_dirty_offset]
    assert len(clean_section) >= 2
    corrupt(clean_section[-1].path)  # read by the rewrite phase only

    with pytest.raises(ExecutorError, match=r"t-0: Spark task for .* failed on host") as raised:
        run_on_spark(spark, task)

    assert raised.value.__cause__ is not None
    assert files(store, 0, ".cleaned") == []  # the groups that were written are gone too


def test_store_clean_marks_a_failing_partition_uncleanable_and_cleans_the_rest(store: compactlog.Store,
                                                                             spark: Any) -> None:
    corrupt(task_for(store, 2).dirty_segments()[0].path)
    before = store.read_arrow("t", 0)

    report = store.clean(executor=spark)

    assert sorted(p.partition for p in report.partitions) == [0, 1]
    assert report.skipped[("t", 2)].startswith("uncleanable: t-2: Spark task for ")
    assert store.read_arrow("t", 0).num_rows < before.num_rows
    assert files(store, 2, ".cleaned") == []


def test_a_data_directory_the_executors_cannot_see_is_a_clear_error(store: compactlog.Store, spark: Any,
                                                                   tmp_path: Any) -> None:
    task = dataclasses.replace(task_for(store, 0), directory=str(tmp_path / "elsewhere" / "t-0"))

    with pytest.raises(ExecutorError, match=r"executor on host .* cannot see .*elsewhere/t-0: the data "
                                            r"directory must be at the same path on every executor"):
        run_on_spark(spark, task)


def test_every_task_checks_the_data_directory_even_after_a_probe(store: compactlog.Store, spark: Any,
                                                                tmp_path: Any,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    # An executor that joined after the probe: the probe is skipped (cached), the task itself notices.
    directory = tmp_path / "elsewhere" / "t-0"
    monkeypatch.setattr(spark_executor, "_VISIBLE",
                        {(spark.sparkContext.applicationId, str(directory.parent))})
    task = dataclasses.replace(task_for(store, 0), directory=str(directory))

    with pytest.raises(ExecutorError, match="cannot see"):
        run_on_spark(spark, task)
