"""The offset map: the newest offset of every key in the dirty section, with exact keys.

Kafka's ``SkimpyOffsetMap`` stores a 16-byte MD5 digest per key, so two keys with one digest would be
treated as one and a live record dropped. This map keeps the keys themselves (an Arrow binary array of
distinct keys) beside a numpy array of their newest offsets, so a collision can never lose a record.

Memory bound: each entry costs ``len(key) + ENTRY_OVERHEAD_BYTES``; the map accepts entries while the total
stays within ``log.cleaner.dedupe.buffer.size * log.cleaner.io.buffer.load.factor``. When a record with a
new key does not fit, the map is *full*: it holds exactly the records before that one, and
``latest_offset`` is the offset just before it, so the round cleans that far and the checkpoint advances
only that far (Kafka's rule; unlike Kafka a key already in the map never ends the round).

Stable entry numbers: a key keeps its entry number for the life of the map (new keys are appended), so
the entry numbers returned by :meth:`put_records` stay valid as later records are added; the kernel uses
them to decide dirty records without a second hash lookup.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

ENTRY_OVERHEAD_BYTES = 24  # the 8-byte offset plus the hash slot and key offset the entry needs


class OffsetMap:
    """Newest offset per key over a range of records, bounded in bytes."""

    def __init__(self, capacity_bytes: int, buffer_bytes: int | None = None) -> None:
        self.capacity_bytes = capacity_bytes
        self.buffer_bytes = buffer_bytes if buffer_bytes is not None else capacity_bytes
        self.keys: pa.Array = pa.array([], pa.binary())
        self.offsets = np.empty(0, dtype=np.int64)
        self.used_bytes = 0
        self.latest_offset = -1

    def __len__(self) -> int:
        return len(self.keys)

    @property
    def utilization(self) -> float:
        """Bytes used over the dedupe buffer (like Kafka's entries / slots, at most the load factor)."""
        return self.used_bytes / self.buffer_bytes if self.buffer_bytes else 0.0

    def update_latest_offset(self, offset: int) -> None:
        self.latest_offset = offset

    def put_records(self, keys: pa.Array | Sequence[pa.Array], offsets: np.ndarray) -> tuple[np.ndarray, int | None]:
        """Add keyed records given in offset order (``keys`` without nulls; one array or several chunks).

        Returns ``(entries, full_at)``: each record's entry number (-1 for records not added), and None when
        every record fit, else the offset of the first record whose key did not fit (nothing from it on was
        added). ``latest_offset`` advances to the last added record.
        """
        chunks = [keys] if isinstance(keys, pa.Array) else list(keys)
        n = sum(len(c) for c in chunks)
        if n == 0:
            return np.empty(0, dtype=np.int32), None
        m = len(self.keys)
        encoded = pc.dictionary_encode(pa.chunked_array([self.keys, *chunks], pa.binary()))
        # Every chunk of the result shares the final dictionary; the map's own keys come first, so old
        # entries keep their numbers and new keys follow in order of first appearance.
        dictionary = encoded.chunks[-1].dictionary if encoded.num_chunks else self.keys
        entries = np.empty(n, dtype=np.int32)
        position = -m  # the map's own keys come first in the encoded chunks and are skipped
        for chunk in encoded.chunks:
            indices = chunk.indices.to_numpy()
            start = max(0, -position)
            if start < len(indices):
                entries[position + start:position + len(indices)] = indices[start:]
            position += len(indices)
        new_count = len(dictionary) - m
        full_at: int | None = None
        if new_count:
            new_keys = dictionary.slice(m)
            lengths = pc.binary_length(new_keys).to_numpy().astype(np.int64) + ENTRY_OVERHEAD_BYTES
            cumulative = np.cumsum(lengths)
            fit = int(np.searchsorted(cumulative, self.capacity_bytes - self.used_bytes, side="right"))
            if fit < new_count:
                # New keys are numbered in order of first appearance: the first key that does not fit is
                # entry m + fit, and the map is full at that key's first record.
                cut = int(np.argmax(entries == m + fit))
                full_at = int(offsets[cut])
                entries = entries[:cut]
                offsets = offsets[:cut]
                dictionary = dictionary.slice(0, m + fit)
                new_count = fit
            self.used_bytes += int(cumulative[new_count - 1]) if new_count else 0
        latest = np.full(m + new_count, -1, dtype=np.int64)
        latest[:m] = self.offsets
        if len(entries):
            np.maximum.at(latest, entries, offsets)
            self.latest_offset = max(self.latest_offset, int(offsets[-1]))
        self.keys = dictionary
        self.offsets = latest
        if len(entries) == n:
            return entries, full_at
        result = np.full(n, -1, dtype=np.int32)
        result[: len(entries)] = entries
        return result, full_at

    def put_partial(self, keys: pa.Array, latest: np.ndarray) -> bool:
        """Merge a segment's partial map (its distinct keys in order of first appearance and their newest
        offsets) if all its new keys fit; returns False, changing nothing, when they do not (the caller
        then adds that segment's records one by one with :meth:`put_records`, which finds the cut)."""
        if len(keys) == 0:
            return True
        m = len(self.keys)
        combined = pa.concat_arrays([self.keys, keys]) if m else keys
        encoded = pc.dictionary_encode(combined)
        dictionary = encoded.dictionary
        new_bytes = 0
        if len(dictionary) > m:
            new_bytes = int(pc.sum(pc.binary_length(dictionary.slice(m))).as_py() or 0)
            new_bytes += ENTRY_OVERHEAD_BYTES * (len(dictionary) - m)
        if self.used_bytes + new_bytes > self.capacity_bytes:
            return False
        entries = encoded.indices.to_numpy()[m:]
        merged = np.full(len(dictionary), -1, dtype=np.int64)
        merged[:m] = self.offsets
        np.maximum.at(merged, entries, latest)
        self.keys = dictionary
        self.offsets = merged
        self.used_bytes += new_bytes
        self.latest_offset = max(self.latest_offset, int(latest.max()))
        return True

    def lookup(self, keys: pa.Array | pa.ChunkedArray) -> np.ndarray:
        """The newest mapped offset of each key; -1 where the key is absent or null."""
        if len(self.keys) == 0 or len(keys) == 0:
            return np.full(len(keys), -1, dtype=np.int64)
        positions = pc.index_in(keys, value_set=self.keys)
        if isinstance(positions, pa.ChunkedArray):
            positions = positions.combine_chunks()
        filled = pc.fill_null(positions, -1).to_numpy()
        found = np.where(filled >= 0, self.offsets[np.maximum(filled, 0)], -1)
        return found.astype(np.int64, copy=False)

    def to_table(self) -> pa.Table:
        return pa.table({"key": self.keys, "offset": pa.array(self.offsets, pa.int64())})

    @classmethod
    def from_table(cls, table: pa.Table, capacity_bytes: int, latest_offset: int,
                   buffer_bytes: int | None = None) -> OffsetMap:
        result = cls(capacity_bytes, buffer_bytes)
        result.keys = table.column("key").combine_chunks() if table.num_rows else pa.array([], pa.binary())
        result.offsets = table.column("offset").to_numpy().astype(np.int64)
        lengths = pc.binary_length(result.keys).to_numpy() if len(result.keys) else np.empty(0)
        result.used_bytes = int(lengths.sum()) + ENTRY_OVERHEAD_BYTES * len(result.keys)
        result.latest_offset = latest_offset
        return result
