"""The offset map: the newest offset of every key in the dirty section, with exact keys.

Kafka's ``SkimpyOffsetMap`` stores a 16-byte MD5 digest per key, so two keys with one digest would be
treated as one and a live record dropped. This map keeps the keys themselves, and a key is found by its
hash and confirmed by comparing its bytes, so a collision can never lose a record.

The table lives in C (``_key_table.c``): the entries are records (offset, key length, key) appended to one
arena, found through an open-addressing hash index. Finding or adding a key costs two cache misses (the
index slot, the record), asked for a block of keys ahead: the map is on a round's critical path, where
sorts, searches and gathers over numpy arrays of entries cost several times as much. Every loop runs
without the GIL, so Arrow decodes and writes on other threads meanwhile.

Memory bound: each entry costs ``len(key) + ENTRY_OVERHEAD_BYTES``; the map accepts entries while the
total stays within ``log.cleaner.dedupe.buffer.size * log.cleaner.io.buffer.load.factor``. When a record
with a new key does not fit, the map is *full*: it holds exactly the records before that one, and
``latest_offset`` is the offset just before it, so the round cleans that far and the checkpoint advances
only that far (Kafka's rule; unlike Kafka a key already in the map never ends the round).

Stable entries: a key's entry (an opaque handle, int32) is fixed for the life of the map, so the entries
returned when records are added stay valid as later records are added; the two-pass kernel keeps them to
decide dirty records later with :meth:`OffsetMap.offsets_of`, without a second lookup. A map filled newest
first needs no entries: :meth:`OffsetMap.put_older` gives each record its key's newest offset at once,
read from the entry its put has just touched.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence
from typing import TypeAlias

import numpy as np
import pyarrow as pa

from ..columns import from_numpy, is_null, to_numpy
from ..limits import INT_MAX
from ._key_table import KeyTable

# Per entry beyond its key: the record's offset and key length (12 bytes), its alignment to 8 bytes (0-7),
# and its share of an index kept at most half full (16).
ENTRY_OVERHEAD_BYTES = 32

Keys: TypeAlias = "pa.Array | pa.ChunkedArray | Sequence[pa.Array]"


def _chunks(keys: Keys) -> list[pa.Array]:
    if isinstance(keys, pa.ChunkedArray):
        return list(keys.chunks)
    return [keys] if isinstance(keys, pa.Array) else list(keys)


def _buffers(keys: pa.Array) -> tuple[np.ndarray, pa.Buffer | bytes]:
    """The offsets (one more than the rows) and data of a binary (or large binary) array, without copying."""
    if keys.type == pa.binary():
        width: type[np.integer] = np.int32
    elif keys.type == pa.large_binary():
        width = np.int64
    else:
        keys, width = keys.cast(pa.binary()), np.int32
    buffers = keys.buffers()
    offsets = np.frombuffer(buffers[1], dtype=width, count=len(keys) + 1, offset=keys.offset * width().itemsize) \
        if buffers[1] is not None else np.zeros(len(keys) + 1, dtype=width)
    return offsets, buffers[2] if buffers[2] is not None else b""


def _one_array(keys: Keys) -> pa.Array:
    chunks = _chunks(keys)
    if len(chunks) == 1:
        return chunks[0]
    return pa.concat_arrays(chunks) if chunks else pa.nulls(0, pa.binary())


class OffsetMap:
    """Newest offset per key over a range of records, bounded in bytes."""

    _hash_mask = 2**64 - 1  # tests narrow it to make keys collide

    def __init__(self, capacity_bytes: int, buffer_bytes: int | None = None) -> None:
        self.capacity_bytes = capacity_bytes
        self.buffer_bytes = buffer_bytes if buffer_bytes is not None else capacity_bytes
        self.used_bytes = 0
        self.latest_offset = -1
        # A random seed per map: no fixed set of keys collides in every map (hash flooding).
        self._table = KeyTable(secrets.randbits(64), self._hash_mask)
        self._exported: tuple[pa.Array, np.ndarray] | None = None

    def __len__(self) -> int:
        return len(self._table)

    def __getstate__(self) -> dict[str, object]:
        # Pickled (to and from Spark executors) as the table's arena: entries keep their handles.
        state = {k: v for k, v in self.__dict__.items() if k not in ("_table", "_exported")}
        state["arena"] = self._table.arena()
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        arena = state.pop("arena")
        self.__dict__.update(state)
        self._table = KeyTable(secrets.randbits(64), self._hash_mask)
        self._table.restore(arena)
        self._exported = None

    def _export(self) -> tuple[pa.Array, np.ndarray]:
        if self._exported is None:
            starts, data, offsets = self._table.export()
            keys = pa.LargeBinaryArray.from_buffers(pa.large_binary(), len(self),
                                                   [None, pa.py_buffer(starts), pa.py_buffer(data)])
            if len(data) <= INT_MAX:
                keys = keys.cast(pa.binary())
            self._exported = keys, np.frombuffer(offsets, dtype=np.int64)
        return self._exported

    @property
    def keys(self) -> pa.Array:
        """The distinct keys, in order of insertion (a copy)."""
        return self._export()[0]

    @property
    def offsets(self) -> np.ndarray:
        """The newest offset of each key of :attr:`keys` (a read-only copy)."""
        return self._export()[1]

    def offsets_of(self, entries: np.ndarray) -> np.ndarray:
        """The newest offset of each entry (int64), -1 where the entry is negative (no entry)."""
        found = np.empty(len(entries), dtype=np.int64)
        self._table.offsets_of(np.ascontiguousarray(entries, dtype=np.int32), found)
        return found

    @property
    def utilization(self) -> float:
        """Bytes used over the dedupe buffer (like Kafka's entries / slots, at most the load factor)."""
        return self.used_bytes / self.buffer_bytes if self.buffer_bytes else 0.0

    def update_latest_offset(self, offset: int) -> None:
        self.latest_offset = offset

    def _room(self) -> int:
        return max(self.capacity_bytes - self.used_bytes, 0)

    def _changed(self) -> None:
        self.used_bytes = self._table.key_bytes + ENTRY_OVERHEAD_BYTES * len(self._table)
        self._exported = None

    def _put(self, put: Callable[..., int], keys: pa.Array, offsets: np.ndarray, entries: np.ndarray) -> int:
        """One of the table's puts of ``keys`` within the room left; the map's size follows the table even
        when the put fails."""
        key_offsets, data = _buffers(keys)
        try:
            return put(key_offsets, data, offsets, entries, self._room(), ENTRY_OVERHEAD_BYTES)
        finally:
            self._changed()

    def put_records(self, keys: Keys, offsets: np.ndarray) -> tuple[np.ndarray, int | None]:
        """Add keyed records given in offset order (``keys`` without nulls; one array or several chunks).

        Returns ``(entries, full_at)``: each record's entry (-1 for records not added), and None when
        every record fit, else the offset of the first record whose key did not fit (nothing from it on was
        added). ``latest_offset`` advances to the last added record.
        """
        offsets = np.ascontiguousarray(offsets, dtype=np.int64)
        entries = np.full(len(offsets), -1, dtype=np.int32)
        start = 0
        full_at: int | None = None
        for chunk in _chunks(keys):
            n = len(chunk)
            if n == 0:
                continue
            taken = self._put(self._table.put_latest, chunk, offsets[start:start + n], entries[start:start + n])
            start += taken
            if taken < n:
                full_at = int(offsets[start])
                break
        if start:
            self.latest_offset = max(self.latest_offset, int(offsets[start - 1]))
        return entries, full_at

    def put_older(self, keys: Keys, offsets: np.ndarray) -> np.ndarray | None:
        """Add keyed records (in offset order) that are all older than every record already added (a map
        filled newest first): a key already in the map keeps its offset, a new key gets its newest record
        here. Returns the newest offset of each record's key (int64; a record is its key's newest exactly
        when this is its own offset), or None, changing nothing, when the new keys do not fit."""
        offsets = np.ascontiguousarray(offsets, dtype=np.int64)
        newest = np.empty(len(offsets), dtype=np.int64)
        if not len(offsets):
            return newest
        if self._put(self._table.put_older, _one_array(keys), offsets, newest) < 0:
            return None
        self.latest_offset = max(self.latest_offset, int(offsets[-1]))
        return newest

    def put_partial(self, keys: pa.Array, latest: np.ndarray) -> bool:
        """Merge a segment's partial map (its distinct keys and their newest offsets) if all its new keys
        fit; returns False, changing nothing, when they do not (the caller then adds that segment's records
        one by one with :meth:`put_records`, which finds the cut)."""
        if len(keys) == 0:
            return True
        latest = np.ascontiguousarray(latest, dtype=np.int64)
        if self._put(self._table.put_max, keys, latest, np.empty(len(keys), dtype=np.int32)) < 0:
            return False
        self.latest_offset = max(self.latest_offset, int(latest.max()))
        return True

    def _find(self, find: Callable[..., None], keys: Keys, dtype: type[np.integer]) -> np.ndarray:
        chunks = _chunks(keys)
        found = np.empty(sum(len(c) for c in chunks), dtype=dtype)
        start = 0
        for chunk in chunks:
            n = len(chunk)
            key_offsets, data = _buffers(chunk)
            find(key_offsets, data, found[start:start + n])
            if chunk.null_count:
                found[start:start + n][is_null(chunk)] = -1
            start += n
        return found

    def entries_of(self, keys: Keys) -> np.ndarray:
        """Each key's entry in the map (int32), -1 where the key is absent or null."""
        return self._find(self._table.find, keys, np.int32)

    def lookup(self, keys: Keys) -> np.ndarray:
        """The newest mapped offset of each key (int64); -1 where the key is absent or null."""
        return self._find(self._table.lookup, keys, np.int64)

    def to_table(self) -> pa.Table:
        keys, offsets = self._export()
        return pa.table({"key": keys, "offset": from_numpy(offsets, pa.int64())})

    @classmethod
    def from_table(cls, table: pa.Table, capacity_bytes: int, latest_offset: int,
                   buffer_bytes: int | None = None) -> OffsetMap:
        """A map of the entries ``to_table`` gave (distinct keys), whatever its capacity."""
        result = cls(capacity_bytes, buffer_bytes)
        if table.num_rows:
            keys = table.column("key").combine_chunks()
            key_offsets, data = _buffers(keys)
            offsets = np.ascontiguousarray(to_numpy(table.column("offset")), dtype=np.int64)
            entries = np.empty(len(keys), dtype=np.int32)
            result._table.put_max(key_offsets, data, offsets, entries, 2**62, ENTRY_OVERHEAD_BYTES)
            result._changed()
        result.latest_offset = latest_offset
        return result
