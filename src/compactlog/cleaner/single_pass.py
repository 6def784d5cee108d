"""The single-pass round: read newest first, decide each record as it is read.

Kafka's cleaner reads the dirty section twice: once to build the offset map (oldest first, until the map
fills), once more, with every other column, to rewrite the segments. When every key of the dirty section
fits in the map, one read is enough, newest first: the first record of a key met is the key's newest, so
by the time any record is reached the map already holds its key's newest offset, and the record rule
(:func:`.rewrite.retain_mask`) decides it there and then. The outcome is the two-pass round's, record for
record: the same map, the same end offset (the end of the dirty section), the same rule.

Order of work: the groups of a round (:func:`.kernel.groups_to_clean`) newest first, and in each group
batches of row groups newest first. Each batch's records enter the map with :meth:`.OffsetMap.put_older`
(records of the clean section, older than the whole dirty section, are only looked up). A batch's
surviving rows go straight to the group's ``.cleaned`` file, whose row groups are therefore written newest
first; closing it reverses the footer's list of row groups (:mod:`compactlog.parquet_footer`), so the file
reads oldest first like any segment. Nothing is spilled and nothing is written twice.

When the keys do not fit, the round is given up (its ``.cleaned`` files removed) and the caller runs the
two-pass kernel, which fills the map oldest first as Kafka does and cleans as far as it reached. The map
is full before anything is installed, so giving up loses nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Generator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from ..columns import from_numpy, is_null
from .kernel import CleanTask, GroupResult, MapResult, SegmentFile, groups_to_clean, map_rows, prefetched
from .offset_map import OffsetMap
from .rewrite import GroupWriter, rewrite_rows
from .swap import discard

BATCH_ROWS = 1 << 16  # rows of a group read together (newest first) and put into the map in one step
# Row groups read ahead of the one being mapped: with one, the reader idles whenever it is a row group ahead
# while the map works, and only the map's thread runs; two keep the reader busy, for one row group more.
READ_AHEAD = 2


class MapFull(Exception):
    """The dirty section's keys do not fit in the offset map: the round needs the two-pass kernel."""


def clean_newest_first(task: CleanTask, one_core: bool = False) -> tuple[MapResult, list[GroupResult]] | None:
    """The whole round in one read, or None (nothing written) when the dirty section's keys do not fit.

    A group's ``.cleaned`` file is closed (its last row group encoded, its footer written and reversed, the
    file fsynced) on a thread of its own while the next (older) group is read. ``one_core``: every step
    waited for as soon as it is handed over, so one thread works at a time (for a round that shares the
    machine with as many other rounds as there are cores: its threads would only compete)."""
    dirty = task.dirty_segments()
    if not dirty:
        return None
    end_offset = min(dirty[-1].next_offset, task.first_uncleanable_offset)
    offset_map = OffsetMap(task.map_capacity_bytes, task.dedupe_buffer_bytes)
    # The map will cover the whole dirty section (or the round is given up): no record is beyond it.
    offset_map.update_latest_offset(end_offset - 1)
    written: list[Future[GroupResult]] = []
    with ThreadPoolExecutor(1, thread_name_prefix="compactlog-finish") as finisher:
        try:
            for group in reversed(groups_to_clean(task, end_offset)):
                cleaning = _clean_group(task, group, offset_map, one_core)
                written.append(finisher.submit(cleaning.close))
                if one_core:
                    written[-1].result()
            results = [future.result() for future in reversed(written)]
        except MapFull:
            discard(_finished(written))
            return None
        except BaseException:
            discard(_finished(written))
            raise
    return MapResult(offset_map, end_offset), results


def _finished(futures: Sequence[Future[GroupResult]]) -> list[GroupResult]:
    """The groups written without error, once every write has ended."""
    return [future.result() for future in futures if future.exception() is None]


@dataclass(frozen=True)
class _Batch:
    """Consecutive rows of a group, with what the map needs of them."""

    table: pa.Table
    offsets: np.ndarray
    keys: pa.Array  # the keys of every row
    positions: np.ndarray  # the rows that enter the map (keyed data records of the dirty section)


def _batches(task: CleanTask, group: Sequence[SegmentFile], one_core: bool) -> Generator[_Batch, None, None]:
    """The group's rows newest first, as batches of about BATCH_ROWS consecutive rows in offset order."""
    pending: list[pa.Table] = []
    rows = 0

    def batch() -> _Batch:
        table = pa.concat_tables(reversed(pending))
        offsets, keys, eligible = map_rows(table, task)
        positions = np.flatnonzero(eligible)
        return _Batch(table, offsets, keys, positions)

    for _, _, table in prefetched(group, ahead=READ_AHEAD, newest_first=True, one_core=one_core):
        pending.append(table)
        rows += table.num_rows
        if rows >= BATCH_ROWS:
            yield batch()
            pending, rows = [], 0
    if pending:
        yield batch()


def _newest(task: CleanTask, batch: _Batch, offset_map: OffsetMap) -> np.ndarray:
    """The newest offset of each row's key once the batch's dirty records have joined the map (-1: the key
    is not in the map)."""
    offsets, keys, positions = batch.offsets, batch.keys, batch.positions
    if len(positions) == len(offsets):  # every row a keyed data record of the dirty section
        return _put_older(offset_map, keys, offsets)
    found = np.full(len(offsets), -1, dtype=np.int64)
    if len(positions):
        found[positions] = _put_older(offset_map, keys.take(from_numpy(positions)), offsets[positions])
    # Keyed records of the clean section (older than every dirty record): looked up, never added.
    clean = np.flatnonzero((offsets < task.first_dirty_offset) & ~is_null(keys))
    if len(clean) and len(offset_map):
        found[clean] = offset_map.lookup(keys.take(from_numpy(clean)))
    return found


def _put_older(offset_map: OffsetMap, keys: pa.Array, offsets: np.ndarray) -> np.ndarray:
    newest = offset_map.put_older(keys, offsets)
    if newest is None:
        raise MapFull
    return newest


def _clean_group(task: CleanTask, group: Sequence[SegmentFile], offset_map: OffsetMap, one_core: bool) -> GroupWriter:
    """Read the group newest first and write what survives. Four threads share the work of a batch: one
    reads it (:func:`.kernel.prefetched`), this one puts it into the map, a third decides its rows while
    this one maps the next batch (putting a batch gives each row its key's newest offset, which later,
    older batches never change, so deciding a batch needs nothing of the batches after it), and the
    writer's own thread encodes them."""
    cleaning = GroupWriter.open(task, group, background=not one_core, newest_first=True)
    try:
        with ThreadPoolExecutor(1, thread_name_prefix="compactlog-rewrite") as rewriter, \
                contextlib.closing(_batches(task, group, one_core)) as batches:

            def rewrite(batch: _Batch, found: np.ndarray) -> None:
                cleaning.write(batch.table.num_rows, rewrite_rows(task, batch.table, offset_map, None, found))

            in_flight: Future[None] | None = None
            try:
                for batch in batches:
                    # The batch's newest offsets are found here: the rewriter never reads the map that
                    # this thread adds to.
                    found = _newest(task, batch, offset_map)
                    if in_flight is not None:
                        in_flight.result()
                    in_flight = rewriter.submit(rewrite, batch, found)
                    if one_core:
                        in_flight.result()
                    del batch
            finally:
                if in_flight is not None:
                    in_flight.result()
    except BaseException:
        cleaning.writer.abort()
        raise
    return cleaning
