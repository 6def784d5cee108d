"""The transaction coordinator's state on disk and in memory (Kafka's ``TransactionStateManager``): one
append-only state log per transactional id under ``<data-dir>/.transactions/``, and a cache of the
latest state of each id that a stat of its file validates.

Format of ``<transactional id>.state`` (the id escaped into a safe file name; a long id hashed,
:func:`file_stem`): lines, each one state of the id, the latest last::

    <CRC32 of the JSON text, 8 hex digits> <JSON of TransactionMetadata.to_json()>\\n

A change appends one line (``O_APPEND``, one ``write``); one that a machine crash must not undo is then
``fdatasync``ed (one flush of the file's data and size: no new directory entry, unlike a renamed file,
whose fsync and the directory's cost a journal commit each). Like Kafka's ``__transaction_state``, the
file is a log of the id's states compacted to its latest: once it passes :data:`COMPACT_BYTES` it is
rewritten as its last line (a temporary file fsynced, renamed over it, the directory fsynced).

Reading takes the last line whose CRC matches. A last line that does not match (or has no newline) is
the torn tail of a write a crash cut short, never answered as durable (an fsynced line is whole): it is
passed over with a warning, as Kafka's log recovery truncates a torn batch, and the next append starts on
a new line (so a torn tail never joins it). A file with no valid line is a
:class:`CorruptTransactionStateError` naming it.

Crash points: a crash during an append leaves a torn tail (above); during a compaction, a ``.tmp`` file
(removed at the next open, :meth:`TransactionStateManager.remove_killed_writes`) or, after the rename and
before the directory's fsync, the old file, which holds the same latest state. Files of the earlier format
(``<id>.json``, one state written whole and renamed) are still read; the id's first durable append
creates ``<id>.state`` (the directory fsynced) and then removes the ``.json``. While both exist, the
``.state`` file is the id's.

Cache: every write goes through this object under the ``.transactions/.lock`` ``flock``, which the store's
producers in other processes take too. Each cached state is kept with the identity of the file it came
from (inode, size, modification time): appends only grow a file and a compaction replaces it (a new
inode), so a stat that gives the same identity means no other process changed the id since; any other
answer reads the file again. Within one hold of the lock a state checked so (or written) stays checked: no
other writer can change its file before the hold ends, so a change (load, then save) stats the file once.
A lock-free reader (:meth:`TransactionStateManager.peek`) uses the cache the same way, stats at every call
and never fills it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import uuid
import zlib
from collections.abc import Iterator
from typing import NamedTuple

from .data_dir import exclusive_lock
from .errors import CorruptTransactionStateError, storage_errors
from .faults import io_fault
from .segment import fsync_path, removed_on_error
from .transaction_transitions import TopicPartition, TransactionMetadata

__all__ = ["COMPACT_BYTES", "STATE_SUFFIX", "TransactionStateManager", "file_stem", "legacy_file_name",
           "parse_state_log", "read_transaction_state", "state_record"]

_log = logging.getLogger("compactlog")

STATE_SUFFIX = ".state"
LEGACY_SUFFIX = ".json"
COMPACT_BYTES = 64 * 1024  # a state log past this is rewritten as its latest line
_SAFE_ID = re.compile(r"[^A-Za-z0-9._-]")
_NAME_MAX = 255  # the longest file name most file systems take, in bytes


def _escaped(transactional_id: str) -> str:
    return _SAFE_ID.sub(lambda m: f"%{ord(m.group()):04x}", transactional_id)


def _hashed(transactional_id: str) -> str:
    return "#" + hashlib.sha256(transactional_id.encode("utf-8", "surrogatepass")).hexdigest()


def file_stem(transactional_id: str) -> str:
    """A file name without its suffix for any transactional id: safe characters kept, the rest escaped,
    never a path. An id whose escaped name would pass the file system's name limit (``NAME_MAX``, 255
    bytes, with the longest suffix; Kafka takes ids up to 32,767 bytes) is ``#<sha-256 of the id>``
    instead: ``#`` is escaped in every other name, so the two forms never meet, and the file holds the id."""
    stem = _escaped(transactional_id)
    return stem if len(stem) + len(STATE_SUFFIX) <= _NAME_MAX else _hashed(transactional_id)


def legacy_file_name(transactional_id: str) -> str:
    """The name the earlier format gave the id's ``.json`` file (its limit counted with ``.json``)."""
    name = _escaped(transactional_id) + LEGACY_SUFFIX
    return name if len(name) <= _NAME_MAX else _hashed(transactional_id) + LEGACY_SUFFIX


_ENCODER = json.JSONEncoder(separators=(",", ":"))  # json.dumps with options builds an encoder per call
_FRAGMENTS_MAX = 4096
_fragments: dict[object, str] = {}  # a string or a partition list (as a tuple) -> its JSON text


def _fragment(value: str | tuple[TopicPartition, ...]) -> str:
    """``value``'s JSON text (as ``_ENCODER`` writes it), kept: a state's id, state name and partition lists
    repeat from one line to the next."""
    text = _fragments.get(value)
    if text is None:
        text = _ENCODER.encode(value if isinstance(value, str) else [list(p) for p in value])
        if len(_fragments) >= _FRAGMENTS_MAX:
            _fragments.clear()
        _fragments[value] = text
    return text


def state_json(meta: TransactionMetadata) -> str:
    """``meta.to_json()`` as ``_ENCODER`` writes it (the same text: tests check it), put together from kept
    fragments: encoding the whole object costs several times as much, and a transaction writes three
    lines. Integers are written as JSON writes them (``int.__repr__``)."""
    start = "null" if meta.txn_start_ms is None else int(meta.txn_start_ms)
    return (f'{{"transactional_id":{_fragment(meta.transactional_id)},"producer_id":{int(meta.producer_id)},'
            f'"epoch":{int(meta.epoch)},"partitions":{_fragment(tuple(meta.partitions))},'
            f'"state":{_fragment(meta.state)},"prepared":{_fragment(tuple(meta.prepared))},'
            f'"timeout_ms":{int(meta.timeout_ms)},"txn_start_ms":{start},'
            f'"ongoing":{_fragment(tuple(meta.ongoing))},"last_epoch":{int(meta.last_epoch)}}}')


def state_record(meta: TransactionMetadata) -> bytes:
    """One line of a state log for ``meta``."""
    text = state_json(meta).encode()
    return b"%08x %s\n" % (zlib.crc32(text), text)


def parse_state_log(data: bytes, path: str, warn: bool = True) -> tuple[TransactionMetadata, bool]:
    """The latest state a state log holds, and whether the file ends with a whole line (the next append may
    follow it directly). A torn last line is passed over, with a warning if ``warn`` (a reader without the
    lock may also see a line still being written); CorruptTransactionStateError naming ``path`` when no
    line is valid."""
    end = len(data)
    torn = False
    while end > 0:
        start = data.rfind(b"\n", 0, end - 1) + 1
        line = data[start:end]
        meta = _parse_line(line)
        if meta is not None:
            if torn and warn:
                _log.warning("%s: the torn tail of a write cut short by a crash passed over (%d bytes); "
                             "the state before it is the id's", path, len(data) - end)
            return meta, data.endswith(b"\n")
        if line.strip():
            torn = True
        end = start
    raise CorruptTransactionStateError(f"cannot read transaction state {path}: no valid state line "
                                       f"({len(data)} bytes)")


def _parse_line(line: bytes) -> TransactionMetadata | None:
    line = line.rstrip(b"\n")
    if len(line) < 10 or line[8:9] != b" ":
        return None
    text = line[9:]
    if line[:8] != b"%08x" % zlib.crc32(text):
        return None
    try:
        return TransactionMetadata.from_json(json.loads(text))
    except (ValueError, KeyError, TypeError):  # a CRC-valid line of another shape: not ours
        return None


def read_transaction_state(path: str) -> TransactionMetadata:
    """One id's state file, either format (by its suffix); FileNotFoundError if there is none,
    CorruptTransactionStateError naming the file if it cannot be read."""
    try:
        with open(path, "rb") as f:
            data = f.read()
        if path.endswith(STATE_SUFFIX):
            return parse_state_log(data, path)[0]
        return TransactionMetadata.from_json(json.loads(data))
    except (FileNotFoundError, CorruptTransactionStateError):
        raise
    except (OSError, ValueError, KeyError, TypeError) as e:  # UnicodeDecodeError and JSON errors are ValueErrors
        raise CorruptTransactionStateError(f"cannot read transaction state {path}: {type(e).__name__}: {e}") from e


def copy_metadata(meta: TransactionMetadata) -> TransactionMetadata:
    """A copy whose lists can be changed without changing ``meta`` (every field named: ``dataclasses.replace``
    costs several times as much, and a state is copied at every load and save)."""
    return TransactionMetadata(meta.transactional_id, meta.producer_id, meta.epoch, list(meta.partitions),
                               meta.state, list(meta.prepared), meta.timeout_ms, meta.txn_start_ms,
                               list(meta.ongoing), meta.last_epoch)


class _FileId(NamedTuple):
    inode: int
    size: int
    mtime_ns: int


def _file_id(st: os.stat_result) -> _FileId:
    return _FileId(st.st_ino, st.st_size, st.st_mtime_ns)


class _Cached(NamedTuple):
    file: _FileId
    meta: TransactionMetadata  # never changed once cached: readers get copies
    whole_lines: bool  # the file ends with a newline


class TransactionStateManager:
    """The ``.transactions/`` directory of one store: its lock, the ids' state logs and their cache."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self._cache: dict[str, _Cached] = {}
        self._paths: dict[str, str] = {}  # transactional id -> its state log (escaping is a regex pass)
        # The state logs whose cached state was checked against the file (or written) during the current
        # hold of the lock: no writer can change them before it ends (every writer holds the lock; each
        # hold opens the lock file anew, so the threads of this process exclude each other too).
        self._checked: set[str] = set()
        os.makedirs(directory, exist_ok=True)

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """The directory's ``flock``: every write holds it (this process's threads and other processes)."""
        with exclusive_lock(os.path.join(self.directory, ".lock")):
            self._checked.clear()  # what an earlier hold (or a write without the lock, in tests) checked
            try:
                yield
            finally:
                self._checked.clear()

    def remove_killed_writes(self) -> None:
        """Remove the ``.tmp`` files of writes killed before their rename (called under the lock, where a
        ``.tmp`` can only be a killed write's)."""
        for name in os.listdir(self.directory):
            if name.endswith(".tmp"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join(self.directory, name))

    def path(self, transactional_id: str) -> str:
        path = self._paths.get(transactional_id)
        if path is None:
            path = self._paths[transactional_id] = os.path.join(self.directory,
                                                                file_stem(transactional_id) + STATE_SUFFIX)
        return path

    # -- reads ---------------------------------------------------------------------------------------------

    def load(self, transactional_id: str) -> TransactionMetadata | None:
        """The id's latest state (a copy the caller may change), or None; under the lock."""
        cached = self._lookup(transactional_id, fill=True)
        return copy_metadata(cached.meta) if cached is not None else None

    def peek(self, transactional_id: str) -> TransactionMetadata | None:
        """The id's latest state without the lock (never to be changed): a state log only grows by whole
        appends or is replaced whole, so a read sees some state that was written."""
        cached = self._lookup(transactional_id, fill=False)
        return cached.meta if cached is not None else None

    def _lookup(self, transactional_id: str, fill: bool) -> _Cached | None:
        """``fill``: under the lock (the state found is cached, and trusted until the hold ends)."""
        path = self.path(transactional_id)
        cached = self._cache.get(path)
        if fill and cached is not None and path in self._checked:
            return cached
        try:
            st = os.stat(path)
        except FileNotFoundError:
            self._cache.pop(path, None)
            return self._legacy(transactional_id)
        if cached is not None and cached.file == _file_id(st):
            if fill:
                self._checked.add(path)
            return cached
        try:
            with open(path, "rb") as f:
                data = f.read()
                file = _file_id(os.fstat(f.fileno()))
        except FileNotFoundError:  # replaced by a compaction between the stat and the open: read again
            return self._lookup(transactional_id, fill)
        except OSError as e:
            raise CorruptTransactionStateError(f"cannot read transaction state {path}: {e}") from e
        meta, whole_lines = parse_state_log(data, path, warn=fill)
        found = _Cached(file, meta, whole_lines)
        if fill:
            self._cache[path] = found
            self._checked.add(path)
        return found

    def _legacy(self, transactional_id: str) -> _Cached | None:
        try:
            meta = read_transaction_state(os.path.join(self.directory, legacy_file_name(transactional_id)))
        except FileNotFoundError:
            return None
        return _Cached(_FileId(-1, -1, -1), meta, True)

    def all_states(self) -> tuple[list[TransactionMetadata], dict[str, str]]:
        """Every id's state that can be read (copies), and the files that cannot, with why."""
        found, unreadable = [], {}
        names = sorted(os.listdir(self.directory))
        current = {name[:-len(STATE_SUFFIX)] for name in names if name.endswith(STATE_SUFFIX)}
        for name in names:
            stem, suffix = os.path.splitext(name)
            if suffix not in (STATE_SUFFIX, LEGACY_SUFFIX) or (suffix == LEGACY_SUFFIX and stem in current):
                continue
            path = os.path.join(self.directory, name)
            try:
                found.append(read_transaction_state(path))
            except FileNotFoundError:
                continue  # removed since the listing
            except CorruptTransactionStateError as e:
                unreadable[path] = str(e)
        return found, unreadable

    # -- writes (under the lock) ------------------------------------------------------------------------

    @storage_errors("writing transaction state")
    def save(self, meta: TransactionMetadata, sync: bool = True) -> None:
        """Append ``meta`` as the id's latest state; with ``sync`` it survives a machine crash once this
        returns (the file's data fdatasynced); without, a process crash (the page cache keeps it)."""
        path = self.path(meta.transactional_id)
        cached = self._lookup(meta.transactional_id, fill=True)
        exists = cached is not None and cached.file.inode >= 0
        record = state_record(meta)
        if exists and cached is not None and not cached.whole_lines:
            record = b"\n" + record  # after a torn tail: a line of its own
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            io_fault("transaction-state.append")
            os.write(fd, record)
            if sync or not exists:
                io_fault("transaction-state.fdatasync")
                os.fdatasync(fd)
            file = _file_id(os.fstat(fd))
        finally:
            os.close(fd)
        if not exists:
            # A new file is made durable whatever ``sync`` says, its directory entry included: later
            # fdatasyncs of its appends reach its data and size, never the entry. Then the earlier format's
            # file is left behind: a crash before the unlink leaves both, and the .state file wins.
            io_fault("transaction-state.dir-fsync")
            fsync_path(self.directory)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(self.directory, legacy_file_name(meta.transactional_id)))
        self._cache[path] = _Cached(file, copy_metadata(meta), True)
        self._checked.add(path)
        if file.size > COMPACT_BYTES:
            self._compact(path, meta)

    def _compact(self, path: str, meta: TransactionMetadata) -> None:
        """Rewrite the state log as its latest line (crash points: the module docstring)."""
        tmp = f"{path}.{uuid.uuid4().hex[:8]}.tmp"
        with removed_on_error(tmp):
            with open(tmp, "wb") as f:
                io_fault("transaction-state.compact-write")
                f.write(state_record(meta))
                f.flush()
                os.fsync(f.fileno())
                file = _file_id(os.fstat(f.fileno()))
            io_fault("transaction-state.compact-rename")
            os.replace(tmp, path)
        io_fault("transaction-state.compact-dir-fsync")
        fsync_path(self.directory)
        self._cache[path] = _Cached(file, copy_metadata(meta), True)
        self._checked.add(path)

    @storage_errors("writing transaction state")
    def write_whole(self, name: str, text: str, sync: bool = True) -> None:
        """Replace ``name`` whole (a temporary file renamed over it; ``producer-ids``). With ``sync`` the new
        file survives a machine crash: its bytes are fsynced before the rename and the directory after it,
        since the rename lives in the directory and may be lost with it, bringing back the old file."""
        path = os.path.join(self.directory, name)
        tmp = f"{path}.{uuid.uuid4().hex[:8]}.tmp"
        with removed_on_error(tmp):
            with open(tmp, "w", encoding="utf-8") as f:
                io_fault("producer-ids.write")
                f.write(text)
                f.flush()
                if sync:
                    io_fault("producer-ids.fsync")
                    os.fsync(f.fileno())
            io_fault("producer-ids.rename")
            os.replace(tmp, path)
        if sync:
            io_fault("producer-ids.dir-fsync")
            fsync_path(self.directory)
