"""The cleaner's memory between passes: uncleanable partitions, the last round's statistics, the last run, and
the file ``<data-dir>/cleaner-state.json`` that keeps it across processes.

Kafka keeps the uncleanable set in memory until a restart; compactlog keeps it per store and retries those
partitions on every pass (a success clears the mark), so a transient I/O error never quarantines a
partition for good.

Every pass ends by writing the state to ``cleaner-state.json`` (:func:`write_cleaner_state`), so that a
fresh process (``compactlog metrics``, ``topics describe``) shows the last pass's figures. Format, JSON::

    {"version": 1, "crc32": <CRC-32 of the canonical JSON of "state">, "state": {
        "last_run_ms": <epoch ms, or null: no pass has run>,
        "max_dirty_ratio": <0..1>, "max_compaction_delay_ms": <ms>,
        "last_stats": [{CleanerStats' fields}, ...],           # each round of the last pass that cleaned
        "uncleanable": [{"topic", "partition", "reason", "stuck_bytes"}, ...]}}

The canonical JSON is ``json.dumps(state, sort_keys=True, separators=(",", ":"))``. A write goes to
``cleaner-state.json.tmp`` (fsynced), is renamed over the file, and the directory is fsynced; writers of
several processes serialise on an ``flock`` of ``cleaner-state.json.lock``, which a store opening also takes
to remove a ``.tmp`` a killed writer left. The last pass to finish wins: a pass of one process replaces the
figures a pass of another wrote.

Reading is strict for ``metrics`` (:func:`read_cleaner_state`: a damaged file is a CorruptCleanerStateError
naming it) and lenient for the store (:func:`load_cleaner_state`: the cleaner never stops for it; it starts
from an empty state, logs a warning, and its next pass writes a good file).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import zlib
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from ..data_dir import exclusive_lock
from ..errors import CorruptCleanerStateError, storage_errors
from ..faults import io_fault
from ..segment import fsync_path
from .metrics import CleanerStats

TopicPartition = tuple[str, int]
STATE_FILE = "cleaner-state.json"
FORMAT_VERSION = 1
_log = logging.getLogger("compactlog")


@dataclass
class CleanerState:
    uncleanable: dict[TopicPartition, str] = field(default_factory=dict)
    uncleanable_bytes: dict[TopicPartition, int] = field(default_factory=dict)
    last_stats: list[CleanerStats] = field(default_factory=list)
    last_run_ms: int | None = None
    max_dirty_ratio: float = 0.0
    max_compaction_delay_ms: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def mark_uncleanable(self, tp: TopicPartition, reason: str, stuck_bytes: int) -> None:
        self.uncleanable[tp] = reason
        self.uncleanable_bytes[tp] = stuck_bytes

    def clear_uncleanable(self, tp: TopicPartition) -> None:
        self.uncleanable.pop(tp, None)
        self.uncleanable_bytes.pop(tp, None)


def state_path(data_dir: str) -> str:
    return os.path.join(data_dir, STATE_FILE)


def state_to_dict(state: CleanerState) -> dict[str, Any]:
    return {
        "last_run_ms": state.last_run_ms,
        "max_dirty_ratio": state.max_dirty_ratio,
        "max_compaction_delay_ms": state.max_compaction_delay_ms,
        "last_stats": [asdict(s) for s in state.last_stats],
        "uncleanable": [{"topic": t, "partition": p, "reason": reason,
                         "stuck_bytes": state.uncleanable_bytes.get((t, p), 0)}
                        for (t, p), reason in sorted(state.uncleanable.items())],
    }


def state_from_dict(value: dict[str, Any]) -> CleanerState:
    """The state a :func:`state_to_dict` value holds; raises KeyError, TypeError or ValueError on a value of
    another shape."""
    stat_fields = {f.name for f in fields(CleanerStats)}
    stats = []
    for entry in value["last_stats"]:
        if set(entry) != stat_fields:
            raise ValueError(f"a last_stats entry has fields {sorted(entry)}")
        stats.append(CleanerStats(**entry))
    last_run = value["last_run_ms"]
    state = CleanerState(last_stats=stats, last_run_ms=None if last_run is None else _int(last_run),
                         max_dirty_ratio=float(value["max_dirty_ratio"]),
                         max_compaction_delay_ms=_int(value["max_compaction_delay_ms"]))
    for entry in value["uncleanable"]:
        state.mark_uncleanable((str(entry["topic"]), _int(entry["partition"])), str(entry["reason"]),
                               _int(entry["stuck_bytes"]))
    return state


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected an integer, got {value!r}")
    return value


def _canonical(state: dict[str, Any]) -> bytes:
    return json.dumps(state, sort_keys=True, separators=(",", ":")).encode("utf-8")


def encode_state(state: CleanerState) -> bytes:
    payload = state_to_dict(state)
    return json.dumps({"version": FORMAT_VERSION, "crc32": zlib.crc32(_canonical(payload)), "state": payload},
                      sort_keys=True).encode("utf-8")


def decode_state(data: bytes, source: str) -> CleanerState:
    """The state in a file's bytes; CorruptCleanerStateError naming ``source`` if they are not one."""
    try:
        document = json.loads(data.decode("utf-8"))
        payload = document["state"]
        if document["version"] != FORMAT_VERSION:
            raise ValueError(f"format version {document['version']!r}, expected {FORMAT_VERSION}")
        if document["crc32"] != zlib.crc32(_canonical(payload)):
            raise ValueError("checksum mismatch")
        return state_from_dict(payload)
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
        raise CorruptCleanerStateError(f"{source}: damaged cleaner state file ({type(e).__name__}: {e}); "
                                       "the next cleaner pass rewrites it") from e


def read_cleaner_state(data_dir: str) -> CleanerState:
    """The state the last pass wrote (empty if no pass has written one); raises CorruptCleanerStateError."""
    path = state_path(data_dir)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return CleanerState()
    return decode_state(data, path)


def load_cleaner_state(data_dir: str, remove_tmp: bool) -> CleanerState:
    """The state a store starts from: :func:`read_cleaner_state`, or an empty state (logged) if the file is
    damaged. ``remove_tmp`` (a writable store) also removes the ``.tmp`` of a write a kill interrupted."""
    if remove_tmp:
        with exclusive_lock(state_path(data_dir) + ".lock"), contextlib.suppress(FileNotFoundError):
            os.unlink(state_path(data_dir) + ".tmp")
    try:
        return read_cleaner_state(data_dir)
    except CorruptCleanerStateError as e:
        _log.warning("starting from an empty cleaner state: %s", e)
        return CleanerState()


@storage_errors("writing cleaner-state.json")
def write_cleaner_state(data_dir: str, state: CleanerState) -> None:
    """Replace ``cleaner-state.json`` atomically (see the module docstring)."""
    path = state_path(data_dir)
    tmp = path + ".tmp"
    data = encode_state(state)
    with exclusive_lock(state_path(data_dir) + ".lock"):
        try:
            with open(tmp, "wb") as f:
                io_fault("cleaner-state.write")
                f.write(data)
                f.flush()
                io_fault("cleaner-state.fsync")
                os.fsync(f.fileno())
            io_fault("cleaner-state.rename")
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    io_fault("cleaner-state.dir-fsync")
    fsync_path(data_dir)
