"""One partition's log: its segment set, append, roll, read, retention and crash recovery.

The partition directory ``<data-dir>/<topic>-<partition>/`` holds the sealed Parquet segments and exactly
one active segment (see :mod:`compactlog.segment` for the file formats). The log end offset is the active
segment's next offset; the log start offset is the first segment's base offset.

Concurrency: every change to the directory (append, roll, retention, the cleaner's swap) happens under the
partition lock: a thread lock plus an exclusive ``flock`` on ``<partition-dir>/.lock`` (shared by a read-only
log, which writes nothing, not even recovery: :mod:`compactlog.data_dir`), so several processes can produce to
one partition; each re-reads the directory when it takes the lock. Readers lock only to snapshot the segment
list, then read files without it; a vanished file (rolled or replaced) makes them re-snapshot.

Crash points and their recovery (``_recover``, run when the log is opened):

* torn or corrupt tail of the active segment: truncated at the last whole, checksummed frame;
* roll: ``<base>.parquet.sealing`` is written and fsynced, renamed to ``<base>.parquet``, the next
  ``.log`` created, the old ``.log`` removed. A leftover ``.sealing`` file is deleted (the ``.log`` still
  holds the data); a ``.log`` beside a ``.parquet`` of the same base is deleted (the roll completed);
  an older ``.log`` without its ``.parquet`` is sealed again;
* the cleaner's swap (``.cleaned`` -> ``.swap`` -> live, old files -> ``.deleted``): as Kafka's loader,
  ``.swap`` files at or above the lowest ``.cleaned`` offset and every ``.cleaned`` file are deleted (the
  swap had not started), the remaining ``.swap`` files replace the segments in their offset range (the
  swap had started, so it is completed). Skipped while a live cleaner holds ``.cleaner.lock``;
* ``.deleted`` files: removed;
* producer-state snapshot: written to ``<offset>.snapshot.tmp``, fsynced, renamed ``<offset>.snapshot``; a
  leftover ``.snapshot.tmp`` is deleted (the older snapshot and the log rebuild the state).
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import os
import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from .active_segment import ActiveSegment, encode_stored, omitted_columns, stored_columns
from .cleaner.plan import SegmentStats, idle_roll_due
from .columns import from_numpy, repeat, to_numpy
from .data_dir import check_recovered, open_partition_lock
from .errors import CorruptSegmentError, OffsetOutOfRangeError
from .faults import fault_point
from .frame_plan import plan_frames, row_sizes
from .limits import INT_MAX
from .producer_state import AbortedTxn, ProducerStateManager
from .record import CONTROL_ABORT, CONTROL_NONE, NO_DELETE_HORIZON, NO_SEQUENCE, SCHEMA
from .sealed_segment import SealedSegment, write_sealed
from .segment import (
    ACTIVE_SUFFIX,
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    SEALED_SUFFIX,
    SEALING_SUFFIX,
    SWAP_SUFFIX,
    SegmentMeta,
    fsync_path,
    is_segment_name,
    offset_from_name,
    segment_name,
)

READ_RETRIES = 5
# The columns producer state is rebuilt from.
PRODUCER_COLUMNS = ["offset", "timestamp", "producer_id", "producer_epoch", "sequence", "is_transactional",
                    "control_type"]
SNAPSHOT_SUFFIX = ".snapshot"
_TMP_SUFFIX = ".tmp"
# The columns offset_for_time reads.
_TIME_COLUMNS = ("offset", "timestamp", "control_type")


def fsync_dir(path: str) -> None:
    """Make a directory's renames and creations durable (a directory fsyncs like a file)."""
    fsync_path(path)


# A frame encoded by the helper thread (header, payload), or the error it raised instead.
_Encoded = tuple[tuple[bytes, pa.Buffer] | None, BaseException | None]


def _encode_ahead(batches: list[pa.RecordBatch], omitted: int) -> Iterator[tuple[bytes, pa.Buffer]]:
    """:func:`encode_stored` of each batch, in order. With several batches a helper thread encodes one
    frame ahead: serialising and the CRC release the GIL, so they overlap the write of the previous frame."""
    if len(batches) < 2:
        for batch in batches:
            yield encode_stored(batch, omitted)
        return
    ready: queue.Queue[_Encoded] = queue.Queue(maxsize=2)
    stop = threading.Event()

    def encode() -> None:
        for batch in batches:
            if stop.is_set():
                return
            try:
                item: _Encoded = (encode_stored(batch, omitted), None)
            except BaseException as e:  # handed to the consumer, which raises it
                item = (None, e)
            while not stop.is_set():
                try:
                    ready.put(item, timeout=0.05)
                    break
                except queue.Full:
                    continue
            if item[1] is not None:
                return

    worker = threading.Thread(target=encode, name="compactlog-encode", daemon=True)
    worker.start()
    try:
        for _ in batches:
            parts, error = ready.get()
            if error is not None:
                raise error
            assert parts is not None
            yield parts
    finally:
        stop.set()
        worker.join()


def _int64s(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """An integer column without nulls as a numpy int64 array."""
    return to_numpy(column).astype(np.int64, copy=False)


class Log:
    """One partition of a topic."""

    def __init__(self, directory: str, topic: str, partition: int, config: Callable[[], Any],
                 clock: Callable[[], int], read_only: bool = False) -> None:
        self.directory, self.topic, self.partition, self.read_only = directory, topic, partition, read_only
        self._config, self._clock = config, clock
        self._thread_lock = threading.RLock()
        self._lock_fd, self._lock_mode = open_partition_lock(directory, read_only)
        self._sealed: list[SealedSegment] = []
        self._active: ActiveSegment | None = None
        self._pending_deletes: list[tuple[int, str]] = []
        self._lock_depth = 0
        self._producers = ProducerStateManager()
        self._active_aborted: list[AbortedTxn] = []  # the active segment's transaction index
        self.recovered_bytes = 0
        with self.locked(refresh=False):
            self._recover()
            self._load()

    # -- locking and the on-disk view -------------------------------------------------------------

    @contextlib.contextmanager
    def locked(self, refresh: bool = True) -> Iterator[Log]:
        """Hold the partition lock (this process's threads and other processes)."""
        with self._thread_lock:
            if self._lock_depth:  # re-entered by this thread: the lock is held and the view fresh
                self._lock_depth += 1
                try:
                    yield self
                finally:
                    self._lock_depth -= 1
                return
            fcntl.flock(self._lock_fd, self._lock_mode)
            self._lock_depth = 1
            try:
                if refresh:
                    self._refresh()
                yield self
            finally:
                self._lock_depth = 0
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    def close(self) -> None:
        with self._thread_lock:
            if self._lock_fd >= 0:
                os.close(self._lock_fd)
                self._lock_fd = -1

    def _listing(self) -> tuple[dict[int, str], dict[int, str]]:
        sealed: dict[int, str] = {}
        active: dict[int, str] = {}
        for name in os.listdir(self.directory):
            if not is_segment_name(name):
                continue
            if name.endswith(SEALED_SUFFIX) and name.count(".") == 1:
                sealed[offset_from_name(name)] = name
            elif name.endswith(ACTIVE_SUFFIX) and name.count(".") == 1:
                active[offset_from_name(name)] = name
        return sealed, active

    def _recover(self) -> None:
        names = [n for n in os.listdir(self.directory) if is_segment_name(n)]
        if self.read_only:
            return check_recovered(self.directory, names)  # nothing may be written: refuse what needs it
        for name in names:
            if name.endswith((DELETED_SUFFIX, SEALING_SUFFIX, SNAPSHOT_SUFFIX + _TMP_SUFFIX)):
                os.unlink(os.path.join(self.directory, name))
        if self._cleaner_is_live():
            return
        names = [n for n in os.listdir(self.directory) if is_segment_name(n)]
        cleaned = [n for n in names if n.endswith(CLEANED_SUFFIX)]
        swaps = [n for n in names if n.endswith(SWAP_SUFFIX)]
        if cleaned:
            min_cleaned = min(offset_from_name(n) for n in cleaned)
            for name in swaps:
                if offset_from_name(name) >= min_cleaned:
                    os.unlink(os.path.join(self.directory, name))
            swaps = [n for n in swaps if offset_from_name(n) < min_cleaned]
            for name in cleaned:
                os.unlink(os.path.join(self.directory, name))
        if swaps:
            opened = [SealedSegment.open(os.path.join(self.directory, n)) for n in swaps]
            low = min(s.base_offset for s in opened)
            high = max(s.next_offset for s in opened)
            for name in os.listdir(self.directory):
                if (is_segment_name(name) and name.endswith(SEALED_SUFFIX) and name.count(".") == 1
                        and low <= offset_from_name(name) < high):
                    os.unlink(os.path.join(self.directory, name))
            for name in swaps:
                os.replace(os.path.join(self.directory, name),
                           os.path.join(self.directory, name[: -len(SWAP_SUFFIX)]))
        sealed, active = self._listing()
        for base, name in sorted(active.items()):
            path = os.path.join(self.directory, name)
            if base in sealed:
                os.unlink(path)
            elif base != max(active):
                segment, _ = ActiveSegment.open(path, base, truncate=True)
                self._seal(segment)
                os.unlink(path)
        fsync_dir(self.directory)

    def _cleaner_is_live(self) -> bool:
        fd = os.open(os.path.join(self.directory, ".cleaner.lock"), os.O_CREAT | os.O_RDWR, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)
        return False

    def _load(self) -> None:
        sealed, active = self._listing()
        self._sealed = [SealedSegment.open(os.path.join(self.directory, sealed[b]), b)
                        for b in sorted(sealed)]
        for before, after in itertools.pairwise(self._sealed):
            if before.next_offset > after.base_offset:
                raise CorruptSegmentError(
                    f"{self.directory}: segment {before.base_offset} ends at {before.next_offset}, "
                    f"past the next segment's base {after.base_offset}")
        end = self._sealed[-1].next_offset if self._sealed else 0
        active_bases = [b for b in active if b not in sealed]
        if active_bases:
            base = max(active_bases)
            self._active, self.recovered_bytes = ActiveSegment.open(
                os.path.join(self.directory, active[base]), base, truncate=not self.read_only)
        else:
            path = os.path.join(self.directory, segment_name(end, ACTIVE_SUFFIX))
            self._active = ActiveSegment(path, end) if self.read_only else ActiveSegment.create(path, end)
            fsync_dir(self.directory)
        self._rebuild_producer_state()

    def _rebuild_producer_state(self) -> None:
        """The newest usable snapshot, then every row after it (Kafka's producer-state recovery)."""
        end = self.active.next_offset
        state: ProducerStateManager | None = None
        for offset, path in sorted(self._snapshots(), reverse=True):
            if offset > end:
                continue
            try:
                with open(path, "rb") as f:
                    state = ProducerStateManager.from_snapshot(f.read())
                break
            except (OSError, ValueError, KeyError, TypeError):
                continue  # a damaged snapshot: an older one, or the log itself, rebuilds the state
        start = state.next_offset if state is not None else 0
        self._producers = state or ProducerStateManager()
        self._active_aborted = []
        for rows in self._rows_from(start, PRODUCER_COLUMNS):
            self._apply_rows(rows)

    def _snapshots(self) -> list[tuple[int, str]]:
        return [(offset_from_name(n), os.path.join(self.directory, n)) for n in os.listdir(self.directory)
                if n.endswith(SNAPSHOT_SUFFIX) and is_segment_name(n) and n.count(".") == 1]

    def _write_snapshot(self) -> None:
        """Producer state as of the active segment's base, written at every roll; older snapshots but
        the previous one are removed."""
        path = os.path.join(self.directory, segment_name(self._producers.next_offset, SNAPSHOT_SUFFIX))
        tmp = path + _TMP_SUFFIX
        with open(tmp, "wb") as f:
            f.write(self._producers.to_snapshot())
            f.flush()
            os.fsync(f.fileno())
        fault_point("log.snapshot-tmp-written")
        os.replace(tmp, path)
        for _, old in sorted(self._snapshots())[:-2]:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(old)

    def _rows_from(self, start: int, columns: list[str]) -> Iterator[pa.Table]:
        """Rows from ``start`` on, markers included, read directly (the caller holds the lock)."""
        for segment in self._sealed:
            if segment.next_offset > start:
                table = segment.read(start, None, columns=columns)
                if table.num_rows:
                    yield table
        for batch in self.active.read_batches(max(start, self.active.base_offset)):
            if batch.num_rows:
                yield pa.Table.from_batches([batch]).select(columns)

    def _apply_rows(self, rows: pa.Table) -> None:
        for aborted in self._producers.apply(rows):
            if aborted.last_offset >= self.active.base_offset:
                self._active_aborted.append(aborted)

    def _refresh(self) -> None:
        """Catch up with changes made by other processes (called under the lock)."""
        sealed, active = self._listing()
        known = {s.base_offset: s for s in self._sealed}
        changed = set(sealed) != set(known)
        if not changed:
            for base, segment in known.items():
                try:
                    if os.stat(os.path.join(self.directory, sealed[base])).st_ino != segment.inode:
                        changed = True
                        break
                except FileNotFoundError:
                    changed = True
                    break
        current = self._active
        assert current is not None
        base = current.base_offset
        if not changed and max(active, default=-1) == base and base not in sealed:
            growth = current.growth_on_disk()
            if growth == 0:
                return
            if growth is not None:  # appends by another process: verify and take them in
                before = current.next_offset
                current.scan(truncate=not self.read_only)
                for batch in current.read_batches(before):
                    if batch.num_rows:
                        self._apply_rows(pa.Table.from_batches([batch]).select(PRODUCER_COLUMNS))
                return
        # Rolled, swapped, retention-deleted or replaced (a topic deleted and created again) elsewhere.
        self._recover()
        self._load()

    @property
    def active(self) -> ActiveSegment:
        assert self._active is not None
        return self._active

    def sealed_segments(self) -> list[SealedSegment]:
        return list(self._sealed)

    def snapshot(self) -> tuple[list[SealedSegment], ActiveSegment]:
        with self.locked():
            return list(self._sealed), self.active

    # -- offsets and metadata --------------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        with self.locked():
            return self._sealed[0].base_offset if self._sealed else self.active.base_offset

    @property
    def log_end_offset(self) -> int:
        with self.locked():
            return self.active.next_offset

    def segments_meta(self) -> list[SegmentMeta]:
        with self.locked():
            return [s.meta for s in self._sealed] + [self.active.meta()]

    # -- append and roll ---------------------------------------------------------------------------------

    def append(self, rows: pa.RecordBatch | pa.Table, flush: bool = True) -> tuple[int, int]:
        """Append rows (SCHEMA without meaningful offsets: they are assigned here), in order, under the lock.
        Each frame is all or nothing; rows spanning several frames may keep a prefix after a crash.

        Returns ``(first_offset, append_time_ms)``. With ``flush`` the rows are fsynced before returning.

        The rows go into frames of the active segment, rolling it first when a frame would take it past
        ``segment.bytes``, or when the frame's newest timestamp is more than the roll time (``segment.ms``;
        for compacted topics at most ``max.compaction.lag.ms``) after the segment's first timestamp
        (Kafka's ``LogSegment.shouldRoll``: so loading old data does not roll at every append).
        """
        table = rows if isinstance(rows, pa.Table) else pa.Table.from_batches([rows])
        with self.locked():
            now = self._clock()
            config = self._config()
            n = table.num_rows
            if config.message_timestamp_type == "LogAppendTime":
                table = table.set_column(1, SCHEMA.field(1), repeat(now, pa.int64(), n))
            first_offset = self.active.next_offset
            omitted = omitted_columns(table)
            frames = plan_frames(SegmentStats.from_meta(self.active.meta()), row_sizes(table, omitted),
                                 _int64s(table.column(1)), config.segment_bytes, config.roll_ms)
            stored = table.select(stored_columns(omitted)[1])
            batches = []
            for start, end, _ in frames:
                offsets = np.arange(first_offset + start, first_offset + end, dtype=np.int64)
                chunk = stored.slice(start, end - start).set_column(0, SCHEMA.field(0), pa.array(offsets))
                batches.append(chunk.combine_chunks().to_batches()[0])
            for (_, _, roll_first), batch, (header, payload) in zip(
                    frames, batches, _encode_ahead(batches, omitted), strict=True):
                if roll_first:
                    self._roll()
                self.active.append_encoded(header, payload, batch)
                fault_point("log.frame-appended")
                rows = table.slice(batch.column(0)[0].as_py() - first_offset, batch.num_rows)
                self._apply_rows(rows.select(PRODUCER_COLUMNS).set_column(0, SCHEMA.field(0), batch.column(0)))
            if flush:
                self.active.flush()
            return first_offset, now

    def append_producer_batch(self, rows: pa.Table, producer_id: int, epoch: int, base_sequence: int,
                              transactional: bool = False, flush: bool = True) -> tuple[int, int, bool]:
        """Append an idempotent producer's batch: ``(first_offset, append_time, duplicate)``. A retried
        batch (same producer, epoch and sequences) is not appended again: its original offsets come back."""
        n = rows.num_rows
        last_sequence = (base_sequence + n - 1) % (INT_MAX + 1)
        with self.locked():
            duplicate = self._producers.check_batch(producer_id, epoch, base_sequence, last_sequence)
            if duplicate is not None:
                return duplicate.first_offset, self._clock(), True
            sequences = (base_sequence + np.arange(n, dtype=np.int64)) % (INT_MAX + 1)
            for name, values in (("producer_id", repeat(producer_id, pa.int64(), n)),
                                 ("producer_epoch", repeat(epoch, pa.int16(), n)),
                                 ("sequence", from_numpy(sequences.astype(np.int32))),
                                 ("is_transactional", repeat(transactional, pa.bool_(), n))):
                index = SCHEMA.get_field_index(name)
                rows = rows.set_column(index, SCHEMA.field(index), values)
            first, now = self.append(rows, flush=flush)
            return first, now, False

    def append_marker(self, producer_id: int, epoch: int, control_type: int, flush: bool = True) -> int:
        """Append a transaction marker (COMMIT or ABORT control row) for a producer; returns its offset."""
        with self.locked():
            self._producers.check_epoch(producer_id, epoch)
            first, _ = self.append(marker_rows(producer_id, epoch, control_type, self._clock()), flush=flush)
            return first

    # -- producer state and transactions -------------------------------------------------------------------

    @property
    def last_stable_offset(self) -> int:
        """The first offset of the oldest open transaction, else the log end offset."""
        with self.locked():
            unstable = self._producers.first_unstable_offset()
            return unstable if unstable is not None else self.active.next_offset

    def aborted_transactions(self, start_offset: int, end_offset: int | None = None) -> list[AbortedTxn]:
        """Aborted transactions that may hold data in ``[start_offset, end_offset)``, from the segments'
        transaction indexes (wherever their ABORT markers lie)."""
        with self.locked():
            entries = [a for s in self._sealed for a in s.aborted] + list(self._active_aborted)
        return [a for a in entries
                if a.last_offset >= start_offset and (end_offset is None or a.first_offset < end_offset)]

    def open_transaction(self, producer_id: int) -> tuple[int, int] | None:
        """``(first offset, start timestamp)`` of the producer's open transaction here, if any."""
        with self.locked():
            return self._producers.open_transaction(producer_id)

    def producer_last_offsets(self, now_ms: int, expiration_ms: int) -> set[int]:
        """Offsets of the last records of producers that have not expired (the cleaner keeps them)."""
        with self.locked():
            self._producers.expire(now_ms, expiration_ms)
            return set(self._producers.last_offsets_of_active_producers(now_ms, expiration_ms).values())

    def flush(self) -> None:
        with self.locked():
            self.active.flush()

    def roll(self) -> bool:
        """Seal the active segment now; a no-op when it is empty. Returns whether a segment was sealed."""
        with self.locked():
            if not self.active.size:
                return False
            self._roll()
            return True

    def maybe_roll_idle(self, now: int, max_age_ms: int) -> bool:
        """Roll a non-empty active segment whose first record is older than ``max_age_ms``."""
        with self.locked():
            if idle_roll_due(SegmentStats.from_meta(self.active.meta()), now, max_age_ms):
                self._roll()
                return True
            return False

    def _seal(self, segment: ActiveSegment, aborted: list[AbortedTxn] | None = None) -> SealedSegment:
        """Write ``segment`` as ``<base>.parquet`` (via ``.sealing``); the caller removes the ``.log``."""
        final = os.path.join(self.directory, segment_name(segment.base_offset, SEALED_SUFFIX))
        sealing = final + SEALING_SUFFIX
        if aborted is None:  # an orphaned .log found by recovery: derive its transaction index from it
            aborted = _aborted_in(segment)
        write_sealed(sealing, segment.to_table(), segment.base_offset, segment.next_offset,
                     self._compression(), aborted)
        os.replace(sealing, final)
        fsync_dir(self.directory)
        return SealedSegment.open(final, segment.base_offset)

    def _compression(self) -> str:
        return str(getattr(self._config(), "parquet_compression", "snappy"))

    def _roll(self) -> None:
        old = self.active
        sealed = self._seal(old, self._active_aborted)
        fault_point("log.roll-sealed")
        self._active = ActiveSegment.create(
            os.path.join(self.directory, segment_name(old.next_offset, ACTIVE_SUFFIX)), old.next_offset)
        os.unlink(old.path)
        fsync_dir(self.directory)
        self._sealed.append(sealed)
        self._active_aborted = []
        self._producers.next_offset = max(self._producers.next_offset, old.next_offset)
        self._write_snapshot()

    # -- reads ---------------------------------------------------------------------------------------------

    def check_offset(self, offset: int) -> None:
        start, end = self.log_start_offset, self.log_end_offset
        if offset < start or offset > end:
            raise OffsetOutOfRangeError(
                f"offset {offset} is out of range for {self.topic}-{self.partition}: "
                f"log start {start}, log end {end}")

    def read_tables(self, start_offset: int, end_offset: int | None = None, columns: list[str] | None = None,
                    include_control: bool = False) -> Iterator[pa.Table]:
        """Tables of rows in ``[start_offset, end_offset)`` in offset order, one or more per segment."""
        position = start_offset
        for _ in range(READ_RETRIES):
            sealed, active = self.snapshot()
            try:
                for segment in sealed:
                    if segment.next_offset <= position:
                        continue
                    if end_offset is not None and segment.base_offset >= end_offset:
                        return
                    controls = segment.meta.control_count
                    # control_type is read only to drop markers: not at all when the segment has none.
                    plain = controls == 0 or include_control
                    read_columns = columns if plain else _with_filter_columns(columns)
                    table = segment.read(position, end_offset, columns=read_columns)
                    position = segment.next_offset
                    if table.num_rows:
                        yield _finish(table, columns, include_control, controls)
                if end_offset is not None and end_offset <= position:
                    return
                for batch in active.read_batches(position, end_offset):
                    table = pa.Table.from_batches([batch])
                    position = batch.column(0)[-1].as_py() + 1 if batch.num_rows else position
                    if table.num_rows:
                        yield _finish(table, columns, include_control, active.control_count)
                return
            except FileNotFoundError:
                continue  # a roll or swap replaced a file under us: re-snapshot and go on from `position`
        raise CorruptSegmentError(f"{self.directory}: segments kept changing during a read")

    def offset_for_time(self, timestamp_ms: int) -> int | None:
        """Kafka's offsetsForTimes: the first offset whose timestamp is >= ``timestamp_ms``.

        Only the first segment whose newest timestamp reaches ``timestamp_ms`` can hold it (every earlier
        record is older), and inside it only the row groups (or frames) whose newest timestamp does."""
        for _ in range(READ_RETRIES):
            sealed, active = self.snapshot()
            try:
                for segment in sealed:
                    if segment.meta.max_timestamp < timestamp_ms or not segment.meta.record_count:
                        continue
                    for table in segment.read_from_time(timestamp_ms, list(_TIME_COLUMNS)):
                        found = _first_at_or_after(table, timestamp_ms)
                        if found is not None:
                            return found
                for frame in active.frames_from_time(timestamp_ms):
                    rows = pa.Table.from_batches([active.read_frame(frame)])
                    found = _first_at_or_after(rows, timestamp_ms)
                    if found is not None:
                        return found
                return None
            except FileNotFoundError:
                continue  # a roll or swap replaced a file under us: look again
        raise CorruptSegmentError(f"{self.directory}: segments kept changing during a search")

    # -- deletion of whole segments (retention) and of replaced files ---------------------------------------

    def delete_segments(self, bases: list[int], delay_ms: int) -> int:
        """Remove sealed segments (retention). They are renamed ``.deleted`` and removed after ``delay_ms``.
        Returns the bytes removed."""
        removed = 0
        with self.locked():
            keep = []
            for segment in self._sealed:
                if segment.base_offset in bases:
                    removed += segment.meta.size_bytes
                    self.schedule_delete(segment.path, delay_ms)
                else:
                    keep.append(segment)
            self._sealed = keep
            fsync_dir(self.directory)
        return removed

    def schedule_delete(self, path: str, delay_ms: int) -> None:
        """Rename ``path`` to ``.deleted`` and remove it once ``delay_ms`` has passed (Kafka's async
        delete)."""
        deleted = path + DELETED_SUFFIX
        os.replace(path, deleted)
        self._pending_deletes.append((self._clock() + delay_ms, deleted))
        self.delete_expired_files()

    def delete_expired_files(self) -> None:
        now = self._clock()
        due = [p for deadline, p in self._pending_deletes if deadline <= now]
        self._pending_deletes = [(d, p) for d, p in self._pending_deletes if d > now]
        for path in due:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)

    def replace_sealed(self, sealed: list[SealedSegment]) -> None:
        """Install a new sealed segment list (the cleaner's swap, under the lock)."""
        self._sealed = sorted(sealed, key=lambda s: s.base_offset)


def marker_rows(producer_id: int, epoch: int, control_type: int, now_ms: int) -> pa.Table:
    """One transaction marker as a row: a control row of the producer, no key, value or headers."""
    return pa.table([
        pa.array([0], pa.int64()), pa.array([now_ms], pa.int64()), pa.nulls(1, pa.binary()),
        pa.nulls(1, pa.binary()), pa.nulls(1, SCHEMA.field("headers").type), pa.array([producer_id], pa.int64()),
        pa.array([epoch], pa.int16()), pa.array([NO_SEQUENCE], pa.int32()), pa.array([True]),
        pa.array([control_type], pa.int8()), pa.array([NO_DELETE_HORIZON], pa.int64())], schema=SCHEMA)


def _aborted_in(segment: ActiveSegment) -> list[AbortedTxn]:
    """The aborted transactions whose markers lie in ``segment``, from its rows alone (the data's first
    offset is the producer's first transactional offset seen in the segment, or the segment's base)."""
    table = segment.to_table().select(PRODUCER_COLUMNS)
    found = ProducerStateManager().apply(table)
    abort = to_numpy(table.column("control_type")) == CONTROL_ABORT
    known = {a.last_offset for a in found}
    pairs = zip(to_numpy(table.column("offset"))[abort].tolist(), to_numpy(table.column("producer_id"))[abort].tolist(),
                strict=True)
    for offset, pid in pairs:
        if offset not in known:
            found.append(AbortedTxn(pid, segment.base_offset, offset))
    return found


def _with_filter_columns(columns: list[str] | None) -> list[str] | None:
    if columns is None:
        return None
    return columns if "control_type" in columns else [*columns, "control_type"]


def _finish(table: pa.Table, columns: list[str] | None, include_control: bool,
            control_count: int) -> pa.Table:
    if not include_control and control_count:
        table = table.filter(from_numpy(to_numpy(table.column("control_type")) == CONTROL_NONE))
    return table.select(columns) if columns is not None else table


def _first_at_or_after(table: pa.Table, timestamp_ms: int) -> int | None:
    hits = np.flatnonzero((to_numpy(table.column("timestamp")) >= timestamp_ms)
                          & (to_numpy(table.column("control_type")) == CONTROL_NONE))
    return int(to_numpy(table.column("offset"))[hits[0]]) if len(hits) else None
