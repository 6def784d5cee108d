"""One partition's log (Kafka's ``UnifiedLog``): the segment list, append and roll, locking and the
cross-process refresh, and the entry points through which retention and the cleaner change the segments.

The partition directory ``<data-dir>/<topic>-<partition>/`` holds the sealed Parquet segments and exactly
one active segment (see :mod:`compactlog.segment` for the file formats). The log end offset is the active
segment's next offset; the log start offset is the first segment's base offset.

Concurrency: every change to the directory (append, roll, retention, the cleaner's swap) happens under the
partition lock: a thread lock plus an exclusive ``flock`` on ``<partition-dir>/.lock`` (shared by a read-only
log, which writes nothing, not even recovery: :mod:`compactlog.data_dir`), so several processes can produce to
one partition; each re-reads the directory when it takes the lock. Every public method takes the lock
itself; :meth:`Log.locked` holds it across several calls. Readers lock only to snapshot the segment list,
then read files without it (:mod:`.reads`).

Opening recovers the directory from a crash at any point (:mod:`.loader`); the cleaner installs its output
only through :meth:`Log.swap_cleaned` (:mod:`.swap`), retention removes segments through
:meth:`Log.delete_segments`, and the producer state follows every appended row (:mod:`.producers`).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa

from ..active_segment import ActiveSegment, encode_stored, sync_and_close
from ..columns import repeat
from ..data_dir import open_partition_lock
from ..errors import KafkaStorageError
from ..faults import fault_point, io_fault
from ..frame_plan import PlannedFrames, batch_frames, table_frames
from ..limits import INT_MAX
from ..producer_state import AbortedTxn
from ..record import (
    NO_EPOCH,
    NO_PRODUCER_ID,
    SCHEMA,
    RecordColumns,
    record_columns,
)
from ..sealed_segment import SealedSegment
from ..segment import ACTIVE_SUFFIX, SegmentMeta, SegmentStats, segment_name, truncate_file
from ..segment_roll import idle_roll_due, should_roll
from . import loader, reads, swap
from .deleted_files import DeletedFiles
from .directory import directory_stamp, fsync_dir, listing_stamp, segments_changed
from .frame_encoder import encode_ahead
from .marker_frame import MARKER_FRAME_BYTES, marker_frame
from .producers import PRODUCER_COLUMNS, LogProducerState

_SEQUENCES = INT_MAX + 1  # sequences wrap past INT_MAX to 0, as Kafka's


class Log:
    """One partition of a topic."""

    def __init__(self, directory: str, topic: str, partition: int, config: Callable[[], Any],
                 clock: Callable[[], int], read_only: bool = False) -> None:
        self.directory, self.topic, self.partition, self.read_only = directory, topic, partition, read_only
        self._config, self._clock = config, clock
        self._thread_lock = threading.RLock()
        self._lock_fd, self._lock_mode = open_partition_lock(directory, read_only)
        self._deleted = DeletedFiles(clock)  # segments renamed .deleted, removed after file.delete.delay.ms
        self._lock_depth = 0
        self._producers = LogProducerState(directory)
        self._listed: tuple[int, int] | None = None  # the directory's stamp when its segments were last listed
        self.recovered_bytes = 0
        with self.locked(refresh=False):
            self._sealed, self._active = self._open()

    # -- locking and the on-disk view -------------------------------------------------------------

    @contextlib.contextmanager
    def locked(self, refresh: bool = True) -> Iterator[Log]:
        """Hold the partition lock (this process's threads and other processes) across several calls."""
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

    def _open(self) -> tuple[list[SealedSegment], ActiveSegment]:
        """Recover the directory, load its segments and rebuild the producer state (under the lock); an I/O
        error of the recovery is a KafkaStorageError."""
        try:
            loader.recover(self.directory, self.read_only, self._compression())
            sealed, active, recovered = loader.load(self.directory, self.read_only)
        except OSError as e:
            raise KafkaStorageError(f"{self.topic}-{self.partition}: opening the log failed: {e}") from e
        if recovered is not None:
            self.recovered_bytes = recovered
        self._producers.rebuild(active.next_offset, active.base_offset,
                                lambda start: reads.rows_from(sealed, active, start, PRODUCER_COLUMNS))
        return sealed, active

    def _refresh(self) -> None:
        """Catch up with changes made by other processes (called under the lock). The directory is listed
        again only when its stamp changed since it was listed (a file created, renamed or removed: a roll, a
        swap, retention); an append by another process only grows the active file."""
        if self._listed is None or directory_stamp(self.directory) != self._listed:
            listed = listing_stamp(self.directory)
            if segments_changed(self.directory, {s.base_offset: s.inode for s in self._sealed},
                                self._active.base_offset):  # rolled, swapped, retention-deleted or replaced
                self._sealed, self._active = self._open()
                self._listed = listed
                return
            self._listed = listed
        self._take_in_growth()

    def _take_in_growth(self) -> None:
        """Take in the frames other processes appended to the active segment since this log last looked."""
        current = self._active
        growth = current.growth_on_disk()
        if growth == 0:
            return
        if growth is None:  # cut short or replaced elsewhere (an undone append): load the directory again
            self._listed = listing_stamp(self.directory)
            self._sealed, self._active = self._open()
            return
        before = current.next_offset  # verified as they are scanned
        current.scan(truncate=not self.read_only)
        for batch in current.read_batches(before):
            if batch.num_rows:
                self._producers.apply(pa.Table.from_batches([batch]).select(PRODUCER_COLUMNS), current.base_offset)

    @property
    def active(self) -> ActiveSegment:
        with self.locked():
            return self._active

    def sealed_segments(self) -> list[SealedSegment]:
        with self.locked():
            return list(self._sealed)

    def snapshot(self, start_offset: int = 0,
                 end_offset: int | None = None) -> tuple[list[SealedSegment], ActiveSegment]:
        """The segment list as of now for a read of ``[start_offset, end_offset)``: the sealed segments that
        hold offsets there, each pinned (:meth:`SealedSegment.pinned`) under the lock, so a swap or retention
        after this cannot change what the read sees in them; and the active segment."""
        with self.locked():
            return [s.pinned() for s in self._sealed if s.next_offset > start_offset
                    and (end_offset is None or s.base_offset < end_offset)], self._active

    # -- offsets and metadata --------------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        with self.locked():
            return self._sealed[0].base_offset if self._sealed else self._active.base_offset

    @property
    def log_end_offset(self) -> int:
        with self.locked():
            return self._active.next_offset

    def segments_meta(self) -> list[SegmentMeta]:
        with self.locked():
            return [s.meta for s in self._sealed] + [self._active.meta()]

    # -- append and roll ---------------------------------------------------------------------------------

    def append(self, rows: pa.RecordBatch | pa.Table | RecordColumns, flush: bool = True) -> tuple[int, int]:
        """Append rows (SCHEMA without meaningful offsets: they are assigned here; or one batch's
        :class:`~compactlog.record.RecordColumns`, data records without a producer id), in order, under the
        lock. Each frame is all or nothing; rows spanning several frames may keep a prefix after a crash. An
        I/O error raises :class:`~compactlog.errors.KafkaStorageError` and cuts the append's frames from the
        active segment (a prefix sealed by a roll part-way stays, as after a crash).

        Returns ``(first_offset, append_time_ms)``. With ``flush`` the rows are fsynced before returning.

        The rows go into frames of the active segment, rolling it first when a frame would take it past
        ``segment.bytes``, or when the frame's newest timestamp is more than the roll time (``segment.ms``;
        for compacted topics at most ``max.compaction.lag.ms``) after the segment's first timestamp
        (Kafka's ``LogSegment.shouldRoll``: so loading old data does not roll at every append).
        """
        if isinstance(rows, RecordColumns):
            with self.locked():
                return self._append_records(rows, None, flush)
        table = rows if isinstance(rows, pa.Table) else pa.Table.from_batches([rows])
        with self.locked():
            now = self._clock()
            config = self._config()
            if config.message_timestamp_type == "LogAppendTime":
                table = table.set_column(1, SCHEMA.field(1), repeat(now, pa.int64(), table.num_rows))
            first_offset = self._active.next_offset
            planned = table_frames(SegmentStats.from_meta(self._active.meta()), table, first_offset,
                                   config.segment_bytes, config.roll_ms)

            def apply(start: int, batch: pa.RecordBatch) -> None:
                rows = table.slice(start, batch.num_rows)
                self._producers.apply(rows.select(PRODUCER_COLUMNS).set_column(0, SCHEMA.field(0), batch.column(0)),
                                      self._active.base_offset)

            self._write_frames(planned, encode_ahead(planned.batches, planned.omitted), apply, flush,
                               f"append of {table.num_rows} rows at offset {first_offset}")
            return first_offset, now

    def _append_records(self, columns: RecordColumns, producer: tuple[int, int, int, bool] | None,
                        flush: bool) -> tuple[int, int]:
        """:meth:`append` of one batch's records, of a producer ``(id, epoch, base sequence,
        transactional)`` or of none: the same frames, rolls and producer state as for its rows in SCHEMA
        (:func:`~compactlog.record.producer_rows`), the stored columns built from the batch's own
        (:func:`~compactlog.frame_plan.batch_frames`) and the producer state following each frame from its
        ends. The caller holds the lock."""
        now = self._clock()
        config = self._config()
        if config.message_timestamp_type == "LogAppendTime":
            columns = columns._replace(timestamp=repeat(now, pa.int64(), len(columns.key)), min_timestamp=now,
                                       max_timestamp=now)
        first_offset = self._active.next_offset
        planned = batch_frames(SegmentStats.from_meta(self._active.meta()), columns, producer, first_offset,
                               config.segment_bytes, config.roll_ms)
        producer_id, epoch, base_sequence, transactional = producer or (NO_PRODUCER_ID, NO_EPOCH, 0, False)
        timestamps = planned.timestamps

        def apply(start: int, batch: pa.RecordBatch) -> None:
            last = start + batch.num_rows - 1
            self._producers.apply_batch(producer_id, epoch, (base_sequence + start) % _SEQUENCES,
                                        (base_sequence + last) % _SEQUENCES, first_offset + start,
                                        first_offset + last, int(timestamps[start]), int(timestamps[last]),
                                        transactional)

        n = len(columns.key)
        encoded: Iterable[tuple[bytes, pa.Buffer]]
        if len(planned.batches) == 1:  # its bounds are known: not read back from its columns
            encoded = [encode_stored(planned.batches[0], planned.omitted,
                                     (first_offset, first_offset + n - 1, int(timestamps[0]), planned.max_timestamp))]
        else:
            encoded = encode_ahead(planned.batches, planned.omitted)
        self._write_frames(planned, encoded, apply, flush, f"append of {n} rows at offset {first_offset}")
        return first_offset, now

    def _write_frames(self, planned: PlannedFrames, encoded: Iterable[tuple[bytes, pa.Buffer]],
                      apply: Callable[[int, pa.RecordBatch], None], flush: bool, what: str) -> None:
        """Write an append's encoded frames, rolling where planned, ``apply`` each to the producer state once
        written, then fsync with ``flush``. An I/O error cuts the append's frames (:meth:`_failing`)
        and is a KafkaStorageError (the caller holds the lock)."""
        with self._written(what, flush):
            for (start, _, roll_first), batch, (header, payload) in zip(planned.frames, planned.batches, encoded,
                                                                        strict=True):
                if roll_first:
                    self._roll()
                self._append_frame(header, payload, batch)
                apply(start, batch)

    @contextlib.contextmanager
    def _written(self, what: str, flush: bool) -> Iterator[None]:
        """Around the writes of one append or marker: fsynced at the end with ``flush``; an I/O error cuts what
        they wrote (:meth:`_failing`; the caller holds the lock)."""
        with self._failing(f"{what} failed and is not acknowledged", (self._active, self._active.size)):
            yield
            if flush:
                sync_and_close(self._active.open_for_sync())

    @contextlib.contextmanager
    def _failing(self, what: str, cut: tuple[ActiveSegment, int] | None = None) -> Iterator[None]:
        """Around a change of the partition's files (the caller holds the lock): an I/O error part-way is a
        KafkaStorageError, after ``cut`` (an append's active segment and its size before: its frames and a
        frame's torn bytes are cut, unless it rolled meanwhile, when the sealed prefix stays as after a crash).
        The view is left as it is: the next hold of the lock finds the files changed (the directory's stamp,
        the active segment's size) and loads it again, its recovery finishing or removing what was left."""
        try:
            yield
        except OSError as e:
            if cut is not None and self._active is cut[0]:
                try:
                    truncate_file(cut[0].path, cut[1])
                except OSError as again:  # the frames stay, unacknowledged (as after a crash before the fsync)
                    raise KafkaStorageError(f"{self.topic}-{self.partition}: {what}: {e}; cutting its frames "
                                            f"failed too: {again}") from e
            raise KafkaStorageError(f"{self.topic}-{self.partition}: {what}: {e}") from e

    def _append_frame(self, header: bytes, payload: pa.Buffer, batch: pa.RecordBatch | None,
                      controls: int | None = None) -> None:
        """Write one encoded frame to the active segment (the I/O fault point before, the crash point after:
        every append's and every marker's frames pass here; ``batch`` and ``controls``: as
        :meth:`ActiveSegment.append_encoded` takes them)."""
        io_fault("log.frame-write")
        self._active.append_encoded(header, payload, batch, controls)
        fault_point("log.frame-appended")

    def append_producer_batch(self, rows: pa.Table | RecordColumns, producer_id: int, epoch: int, base_sequence: int,
                              transactional: bool = False, flush: bool = True) -> tuple[int, int, bool]:
        """Append an idempotent producer's batch (data rows in SCHEMA, of which only the timestamp, key, value
        and headers are read, or its :class:`~compactlog.record.RecordColumns`): ``(first_offset, append_time,
        duplicate)``. A retried batch (same producer, epoch and sequences) is not appended again: its original
        offsets come back."""
        columns = rows if isinstance(rows, RecordColumns) else record_columns(rows)
        last_sequence = (base_sequence + len(columns.key) - 1) % _SEQUENCES
        with self.locked():
            duplicate = self._producers.manager.check_batch(producer_id, epoch, base_sequence, last_sequence)
            if duplicate is not None:
                return duplicate.first_offset, self._clock(), True
            first, now = self._append_records(columns, (producer_id, epoch, base_sequence, transactional), flush)
            return first, now, False

    def append_marker(self, producer_id: int, epoch: int, control_type: int, flush: bool = True) -> int:
        """Append a transaction marker (COMMIT or ABORT control row) for a producer; returns its offset.

        What :meth:`append` does with :func:`marker_rows`, for a row whose shape never changes: its frame
        built from a template (:mod:`.marker_frame`), the roll decided by the same plan, the producer state
        updated from the values rather than read back. Same frame bytes, same crash behaviour: the frame is
        one write, all or nothing, and an I/O error cuts it as :meth:`_failing` does."""
        with self.locked():
            return self._append_marker(producer_id, epoch, control_type, flush)

    def append_marker_if_open(self, producer_id: int, epoch: int, control_type: int) -> bool:
        """:meth:`append_marker`, unflushed, when the producer has a transaction open here (one hold of the
        lock for the check and the marker); False, with nothing written, when it has none (ended here
        already: a completed commit being finished again)."""
        with self.locked():
            if self._producers.manager.open_transaction(producer_id) is None:
                return False
            self._append_marker(producer_id, epoch, control_type, flush=False)
            return True

    def _append_marker(self, producer_id: int, epoch: int, control_type: int, flush: bool) -> int:
        """:meth:`append_marker` (the caller holds the lock)."""
        self._producers.manager.check_epoch(producer_id, epoch)
        now = self._clock()
        config = self._config()
        roll_first = should_roll(SegmentStats.from_meta(self._active.meta()), MARKER_FRAME_BYTES, now,
                                 segment_bytes=config.segment_bytes, roll_ms=config.roll_ms)
        with self._written("append of a transaction marker", flush):
            if roll_first:
                self._roll()
            offset = self._active.next_offset
            header, payload = marker_frame(producer_id, epoch, control_type, now, offset)
            self._append_frame(header, payload, None, controls=1)  # a marker is one control row
            self._producers.apply_marker(producer_id, epoch, control_type, offset, now, self._active.base_offset)
        return offset

    # -- producer state and transactions -------------------------------------------------------------------

    @property
    def last_stable_offset(self) -> int:
        """The first offset of the oldest open transaction, else the log end offset."""
        with self.locked():
            unstable = self._producers.manager.first_unstable_offset()
            return unstable if unstable is not None else self._active.next_offset

    def aborted_transactions(self, start_offset: int, end_offset: int | None = None) -> list[AbortedTxn]:
        """Aborted transactions that may hold data in ``[start_offset, end_offset)``, from the segments'
        transaction indexes (wherever their ABORT markers lie)."""
        with self.locked():
            entries = [a for s in self._sealed for a in s.aborted] + list(self._producers.active_aborted)
        return [a for a in entries
                if a.last_offset >= start_offset and (end_offset is None or a.first_offset < end_offset)]

    def open_transaction(self, producer_id: int) -> tuple[int, int] | None:
        """``(first offset, start timestamp)`` of the producer's open transaction here, if any."""
        with self.locked():
            return self._producers.manager.open_transaction(producer_id)

    def producer_last_offsets(self, now_ms: int, expiration_ms: int) -> set[int]:
        """Offsets of the last records of producers that have not expired (the cleaner keeps them)."""
        with self.locked():
            return set(self._producers.manager.last_offsets_of_active_producers(now_ms, expiration_ms).values())

    def expire_producers(self, now_ms: int, expiration_ms: int) -> None:
        """Forget producers idle for ``expiration_ms`` (``producer.id.expiration.ms``) outside a transaction."""
        with self.locked():
            self._producers.manager.expire(now_ms, expiration_ms)

    def flush(self) -> None:
        """Fsync the frames appended before this call; an I/O error is a KafkaStorageError. The lock is held
        only to open the file: appends go on during the fsync (a roll meanwhile fsyncs its own frames)."""
        with self.locked(refresh=False):  # no listing of the directory while the file is the one appended to
            fd = self._active.open_for_sync_if_same()
        if fd is None:  # rolled or replaced by another process since (a roll fsyncs our frames): catch up
            with self.locked():
                fd = self._active.open_for_sync()
        try:
            sync_and_close(fd)
        except OSError as e:
            raise KafkaStorageError(f"{self.topic}-{self.partition}: fsync failed: {e}") from e

    def roll(self) -> bool:
        """Seal the active segment now; a no-op when it is empty. Returns whether a segment was sealed."""
        with self.locked():
            if not self._active.size:
                return False
            with self._failing("roll failed"):
                self._roll()
            return True

    def maybe_roll_idle(self, now: int, max_age_ms: int) -> bool:
        """Roll a non-empty active segment whose first record is older than ``max_age_ms``."""
        with self.locked():
            if idle_roll_due(SegmentStats.from_meta(self._active.meta()), now, max_age_ms):
                with self._failing("roll failed"):
                    self._roll()
                return True
            return False

    def _compression(self) -> str:
        return str(getattr(self._config(), "parquet_compression", "snappy"))

    def _roll(self) -> None:
        """Seal the active segment and start the next (the roll's crash points: :mod:`.loader`)."""
        old = self._active
        sealed = loader.seal(self.directory, old, self._compression(), self._producers.active_aborted)
        fault_point("log.roll-sealed")
        self._active = ActiveSegment.create(
            os.path.join(self.directory, segment_name(old.next_offset, ACTIVE_SUFFIX)), old.next_offset)
        os.unlink(old.path)
        fsync_dir(self.directory)
        self._sealed.append(sealed)
        self._producers.rolled(old.next_offset)

    # -- reads (:mod:`.reads`) ------------------------------------------------------------------------------

    def check_offset(self, offset: int, end_offset: int | None = None) -> None:
        """Raise :class:`~compactlog.errors.OffsetOutOfRangeError` unless ``offset`` is in ``[log start, log end]``
        (:class:`~compactlog.errors.InvalidRequestError` unless it and ``end_offset``, if given, are ints)."""
        if end_offset is not None:
            reads.check_offset_type(end_offset, "end_offset")
        with self.locked():
            start, end = self.log_start_offset, self.log_end_offset
        reads.check_offset(offset, start, end, f"{self.topic}-{self.partition}")

    def read_tables(self, start_offset: int, end_offset: int | None = None, columns: list[str] | None = None,
                    include_control: bool = False) -> Iterator[pa.Table]:
        """Tables of rows in ``[start_offset, end_offset)`` in offset order, one or more per segment."""
        return reads.read_tables(self.snapshot, self.directory, start_offset, end_offset, columns, include_control)

    def offset_for_time(self, timestamp_ms: int) -> int | None:
        """Kafka's offsetsForTimes: the first offset whose timestamp is >= ``timestamp_ms``."""
        return reads.offset_for_time(self.snapshot, self.directory, timestamp_ms)

    # -- removal of whole segments: retention and the cleaner's swap ----------------------------------------

    def delete_segments(self, bases: list[int], delay_ms: int) -> int:
        """Remove sealed segments (retention). They are renamed ``.deleted`` and removed after ``delay_ms``.
        Returns the bytes removed."""
        removed = 0
        with self.locked(), self._failing("retention failed"):
            keep = []
            for segment in self._sealed:
                if segment.base_offset in bases:
                    removed += segment.meta.size_bytes
                    self._deleted.schedule(segment.path, delay_ms)
                else:
                    keep.append(segment)
            self._sealed = keep
            fsync_dir(self.directory)
        return removed

    def swap_cleaned(self, cleaned: Sequence[swap.CleanedFile], source_inodes: Mapping[int, int], delay_ms: int,
                     hook: swap.SwapHook | None = None) -> list[SealedSegment]:
        """Install a cleaner round's cleaned files in place of their source segments, whose inodes the round
        read were ``source_inodes`` (Kafka's ``.cleaned`` -> ``.swap`` -> live protocol, :func:`.swap.install`,
        under the lock); the replaced files are removed after ``delay_ms``. Returns the installed segments;
        raises :class:`~compactlog.errors.CleanerError`, with nothing installed, if a source changed."""
        if not cleaned:
            return []
        with self.locked(), self._failing("the cleaner's swap failed"):
            live = {s.base_offset: s for s in self._sealed}
            replaced, installed = swap.install(self.directory, cleaned, live, source_inodes,
                                               lambda path: self._deleted.schedule(path, delay_ms), hook)
            keep = [s for base, s in live.items() if base not in replaced]
            self._sealed = sorted(keep + installed, key=lambda s: s.base_offset)
            return installed

    def delete_expired_files(self) -> None:
        """Remove the ``.deleted`` files whose ``file.delete.delay.ms`` has passed."""
        with self.locked(refresh=False):
            self._deleted.remove_due()

