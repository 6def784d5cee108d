"""The cleaner's Spark work items, run in this process (no JVM): each must do exactly what the in-process
kernel does, and report failures as values."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import compactlog
from compactlog.cleaner import cleaner
from compactlog.cleaner.executor import run_in_process
from compactlog.cleaner.kernel import CleanTask, build_offset_map, groups_to_clean, map_entries
from compactlog.cleaner.plan import log_to_clean
from compactlog.cleaner.rewrite import clean_group
from compactlog.cleaner.swap import discard
from compactlog.spark.clean_tasks import (
    BinMapItem,
    BinMapOutput,
    BroadcastMap,
    RewriteItem,
    RewriteOutput,
    RoundItem,
    RoundOutput,
    TaskFailure,
)
from compactlog.spark.executor import merge_bins, split_evenly
from compactlog.spark.partial_map import merge_partial_maps, partial_map


@pytest.fixture
def store(tmp_path: Path) -> Iterator[compactlog.Store]:
    with compactlog.open(tmp_path / "data", clock=lambda: 1_700_000_000_000) as store:
        store.create_topic("t", 1, {"cleanup.policy": "compact", "segment.bytes": 1500})
        for round_ in range(4):
            store.append("t", 0, pa.table({
                "key": pa.array([f"k{(i * 3 + round_) % 23}".encode() for i in range(40)], pa.binary()),
                "value": pa.array([None if i % 9 == 0 else f"r{round_}v{i}".encode() for i in range(40)],
                                  pa.binary())}))
        store.roll("t", 0)
        yield store


def make_task(store: compactlog.Store) -> CleanTask:
    log = store.log("t", 0)
    state = cleaner.partition_state(store, log, store.checkpoint.read())
    task, _ = cleaner.make_task(store, log, log_to_clean(state, store.clock()), store.clock())
    return task


def contents(results: list[Any]) -> list[pa.Table]:
    tables = [pq.read_table(r.cleaned_path) for r in results]
    discard(results)
    return tables


def bin_maps(task: CleanTask, parts: int) -> list[BinMapOutput]:
    dirty = task.dirty_segments()
    outputs = [BinMapItem(0, task, tuple(b)).run({}) for b in split_evenly(dirty, [1] * len(dirty), parts)]
    assert all(isinstance(o, BinMapOutput) for o in outputs)
    return outputs  # type: ignore[return-value]


def test_a_whole_round_is_the_in_process_round(store: compactlog.Store) -> None:
    task = make_task(store)
    output = RoundItem(0, task).run({})
    assert isinstance(output, RoundOutput)
    ours = contents(output.results)
    mapped, results = run_in_process(task)
    assert (output.mapped.end_offset, output.mapped.offset_map.utilization) == (
        mapped.end_offset, mapped.offset_map.utilization)
    assert [t.equals(e) for t, e in zip(ours, contents(results), strict=True)] == [True] * len(results)


def test_merged_bin_maps_are_the_in_process_map(store: compactlog.Store) -> None:
    task = make_task(store)
    assert len(task.dirty_segments()) >= 3

    merged = merge_bins(task, bin_maps(task, 3))

    reference = build_offset_map(task)
    assert merged is not None
    assert merged.offset_map.to_table().equals(reference.offset_map.to_table())
    assert (merged.end_offset, merged.offset_map.latest_offset, merged.offset_map.used_bytes) == (
        reference.end_offset, reference.offset_map.latest_offset, reference.offset_map.used_bytes)
    assert (merged.records_read, merged.bytes_read) == (reference.records_read, reference.bytes_read)


def test_bins_that_overflow_the_dedupe_buffer_take_the_exact_path(store: compactlog.Store) -> None:
    # 23 keys of 2-3 bytes cost about 26 bytes each: a 300-byte map fills in the dirty section.
    task = dataclasses.replace(make_task(store), map_capacity_bytes=300, dedupe_buffer_bytes=333)

    assert merge_bins(task, bin_maps(task, 2)) is None

    exact = merge_partial_maps(task, [partial_map(task, s) for s in task.dirty_segments()])
    assert exact.end_offset == build_offset_map(task).end_offset < task.first_uncleanable_offset


def test_a_rewrite_against_the_broadcast_map_is_the_in_process_rewrite(store: compactlog.Store) -> None:
    task = make_task(store)
    mapped = build_offset_map(task)
    groups = groups_to_clean(task, mapped.end_offset)
    broadcast = SimpleNamespace(value=BroadcastMap.of(mapped.offset_map))

    output = RewriteItem(0, task, tuple(tuple(g) for g in groups)).run({0: broadcast})  # type: ignore[dict-item]

    assert isinstance(output, RewriteOutput)
    ours = contents(output.results)
    reference = [clean_group(task, group, mapped.offset_map, mapped.entries) for group in groups]
    assert [t.equals(e) for t, e in zip(ours, contents(reference), strict=True)] == [True] * len(groups)


def test_map_entries_find_what_lookup_finds(store: compactlog.Store) -> None:
    task = make_task(store)
    offset_map = build_offset_map(task).offset_map
    entries = map_entries(offset_map, task.segments)
    for segment in task.segments:
        keys = pq.read_table(segment.path, columns=["key"]).column("key")
        assert offset_map.offsets_of(entries[segment.base_offset]).tolist() == offset_map.lookup(keys).tolist()


def test_a_failing_round_reports_its_error_and_leaves_no_cleaned_files(store: compactlog.Store) -> None:
    task = make_task(store)
    with open(task.segments[-1].path, "r+b") as f:
        f.write(b"\0" * 32)

    output = RoundItem(3, task).run({})

    assert isinstance(output, TaskFailure)
    assert output.task_index == 3 and output.error is not None
    error = output.to_error(task)
    assert str(error).startswith("t-0: Spark task for the round failed on host ")
    assert error.__cause__ is output.error
    assert [n for n in os.listdir(task.directory) if n.endswith(".cleaned")] == []


def test_an_invisible_data_directory_is_reported_by_the_task(store: compactlog.Store, tmp_path: Path) -> None:
    task = dataclasses.replace(make_task(store), directory=str(tmp_path / "nowhere" / "t-0"))

    output = RoundItem(0, task).run({})

    assert isinstance(output, TaskFailure) and output.not_visible
    assert "cannot see" in str(output.to_error(task))
