"""The offset map: the newest offset of every key in the dirty section, with exact keys.

Kafka's ``SkimpyOffsetMap`` stores a 16-byte MD5 digest per key, so two keys with one digest would be
treated as one and a live record dropped. This map keeps the keys themselves (an Arrow binary array of
distinct keys) beside a numpy array of their newest offsets, so a collision can never lose a record.

Memory bound: each entry costs ``len(key) + ENTRY_OVERHEAD_BYTES``; the map accepts entries while the total
stays within ``log.cleaner.dedupe.buffer.size * log.cleaner.io.buffer.load.factor``. When a record with a
new key does not fit, the map is *full*: it holds exactly the records before that one, and
``latest_offset`` is the offset just before it, so the round cleans that far and the checkpoint advances
only that far (Kafka's rule; unlike Kafka a key already in the map never ends the round).

Finding keys: a batch of records is first grouped by equal key (:mod:`.key_groups`); each group's key is
then looked up by its 64-bit hash in the map's sorted hash index (a binary search, the searched hashes
ascending) and confirmed by comparing the key bytes. New keys are inserted into the index in one merge,
so a batch costs work in proportion to the batch, plus a copy of the index, never a pass that hashes the
map's keys again.

Stable entry numbers: a key keeps its entry number for the life of the map (new keys are appended in order
of first appearance), so the entry numbers returned by :meth:`put_records` stay valid as later records are
added; the kernel uses them to decide dirty records without a second lookup.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .key_groups import KeyGroups, group_keys, hash_keys, hash_words, words_to_keys

ENTRY_OVERHEAD_BYTES = 24  # the 8-byte offset, the 8-byte hash and the index slot and key offset


def _chunks(keys: pa.Array | pa.ChunkedArray | Sequence[pa.Array]) -> list[pa.Array]:
    if isinstance(keys, pa.ChunkedArray):
        return list(keys.chunks)
    return [keys] if isinstance(keys, pa.Array) else list(keys)


def _head(chunks: Sequence[pa.Array], count: int) -> list[pa.Array]:
    """The first ``count`` rows of ``chunks``."""
    result = []
    for chunk in chunks:
        if count <= 0:
            break
        result.append(chunk.slice(0, min(count, len(chunk))))
        count -= len(chunk)
    return result


def _take(chunks: Sequence[pa.Array], rows: np.ndarray) -> pa.Array:
    whole = chunks[0] if len(chunks) == 1 else pa.concat_arrays(list(chunks))
    return whole.take(pa.array(rows))


class OffsetMap:
    """Newest offset per key over a range of records, bounded in bytes.

    While every key has one width (the common case: ids, UUIDs, hashes), the keys are kept as 64-bit words
    (see :mod:`.key_groups`) and compared as numbers; a key of another width turns the map to an Arrow array
    of keys, compared byte for byte by Arrow."""

    def __init__(self, capacity_bytes: int, buffer_bytes: int | None = None) -> None:
        self.capacity_bytes = capacity_bytes
        self.buffer_bytes = buffer_bytes if buffer_bytes is not None else capacity_bytes
        self.used_bytes = 0
        self.latest_offset = -1
        self._count = 0
        # Per entry, in buffers that grow by doubling (so a batch costs its own size, not the map's):
        self._offsets = np.empty(0, dtype=np.int64)  # the newest offset
        self._width: int | None = None  # the keys' one width; None while empty or once widths differ
        self._words: tuple[np.ndarray, ...] = ()  # with a width: the key as words
        self._keys: pa.Array | None = pa.array([], pa.binary())  # the keys as Arrow (built lazily from words)
        # The hash index: sorted runs of (key hash, entry), merged when a run is not twice the next one's size
        # (a log-structured merge: adding a batch never rewrites the whole index).
        self._runs: list[tuple[np.ndarray, np.ndarray]] = []
        self._shared_hashes = False  # two keys of the map have one hash (then lookups check every match)

    def __len__(self) -> int:
        return self._count

    @property
    def keys(self) -> pa.Array:
        """The distinct keys, in entry order."""
        if self._keys is None:
            assert self._width is not None
            self._keys = words_to_keys([word[: self._count] for word in self._words], self._width, self._count)
        return self._keys

    @property
    def offsets(self) -> np.ndarray:
        """The newest offset of each entry."""
        return self._offsets[: self._count]

    def _reserve(self, extra: int) -> None:
        """Room for ``extra`` more entries in the per-entry buffers."""
        needed = self._count + extra
        if needed <= len(self._offsets):
            return
        # The most entries the capacity allows: reserving them costs address space, not memory, until
        # they are written (and saves copying the buffers as they grow).
        most = self.capacity_bytes // (ENTRY_OVERHEAD_BYTES + max(self._width or 0, 1))
        size = max(needed, min(most, 1 << 26), 2 * len(self._offsets), 1024)
        self._offsets = _grown(self._offsets, size, self._count)
        self._words = tuple(_grown(word, size, self._count) for word in self._words)

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
        chunks = _chunks(keys)
        n = sum(len(c) for c in chunks)
        if n == 0:
            return np.empty(0, dtype=np.int32), None
        groups = group_keys(chunks)
        first = groups.first_rows
        batch = _Batch.of(groups, chunks, self._fits_words(groups.width))
        entry = self._find(batch)
        new_groups = _by_first_appearance(np.flatnonzero(entry < 0), first, n)
        sizes = batch.lengths(new_groups) + ENTRY_OVERHEAD_BYTES
        fit = int(np.searchsorted(np.cumsum(sizes), self.capacity_bytes - self.used_bytes, side="right"))
        if fit < len(new_groups):
            # The map is full at the first record of the first key that does not fit, and holds exactly the
            # records before it.
            cut = int(first[new_groups[fit]])
            entries, _ = self.put_records(_head(chunks, cut), offsets[:cut])
            result = np.full(n, -1, dtype=np.int32)
            result[:cut] = entries
            return result, int(offsets[cut])
        m = len(self)
        entry[new_groups] = np.arange(m, m + len(new_groups))
        self._add(batch, new_groups, sizes)
        # Records come in offset order, so each group's last record is its key's newest.
        self._offsets[entry] = offsets[groups.last_rows]
        self.latest_offset = max(self.latest_offset, int(offsets[-1]))
        entries = np.empty(n, dtype=np.int32)
        entries[groups.order] = np.repeat(entry.astype(np.int32), groups.sizes)
        return entries, None

    def put_older(self, keys: pa.Array | Sequence[pa.Array], offsets: np.ndarray,
                  groups: KeyGroups | None = None) -> np.ndarray | None:
        """Add keyed records (in offset order) that are all older than every record already added (a map
        filled newest first): a key already in the map keeps its offset, a new key gets its newest record
        here. Returns each record's entry number, or None, changing nothing, when the new keys do not fit.
        ``groups`` is ``group_keys(keys)`` when the caller has it already."""
        chunks = _chunks(keys)
        n = sum(len(c) for c in chunks)
        if n == 0:
            return np.empty(0, dtype=np.int32)
        groups = groups if groups is not None else group_keys(chunks)
        batch = _Batch.of(groups, chunks, self._fits_words(groups.width))
        entry = self._find(batch)
        new = np.flatnonzero(entry < 0)
        sizes = batch.lengths(new) + ENTRY_OVERHEAD_BYTES
        if self.used_bytes + int(sizes.sum()) > self.capacity_bytes:
            return None
        m = len(self)
        entry[new] = np.arange(m, m + len(new))
        self._add(batch, new, sizes)
        self._offsets[m:m + len(new)] = offsets[groups.last_rows[new]]
        self.latest_offset = max(self.latest_offset, int(offsets[-1]))
        entries = np.empty(n, dtype=np.int32)
        entries[groups.order] = np.repeat(entry.astype(np.int32), groups.sizes)
        return entries

    def put_partial(self, keys: pa.Array, latest: np.ndarray) -> bool:
        """Merge a segment's partial map (its distinct keys in order of first appearance and their newest
        offsets) if all its new keys fit; returns False, changing nothing, when they do not (the caller
        then adds that segment's records one by one with :meth:`put_records`, which finds the cut)."""
        if len(keys) == 0:
            return True
        batch = _Batch.of_distinct(keys, self._fits_words(_one_width(keys)))
        entry = self._find(batch)
        new = np.flatnonzero(entry < 0)
        sizes = batch.lengths(new) + ENTRY_OVERHEAD_BYTES
        if self.used_bytes + int(sizes.sum()) > self.capacity_bytes:
            return False
        m = len(self)
        entry[new] = np.arange(m, m + len(new))
        self._add(batch, new, sizes)
        self._offsets[m:m + len(new)] = -1
        np.maximum.at(self._offsets, entry, latest)
        self.latest_offset = max(self.latest_offset, int(latest.max()))
        return True

    def entries_of(self, keys: pa.Array | pa.ChunkedArray | Sequence[pa.Array]) -> np.ndarray:
        """Each key's entry number in the map (int32), -1 where the key is absent or null."""
        chunks = _chunks(keys)
        n = sum(len(c) for c in chunks)
        if len(self) == 0 or n == 0:
            return np.full(n, -1, dtype=np.int32)
        valid = [c if not c.null_count else pc.fill_null(c, b"") for c in chunks]
        groups = group_keys(valid)
        entry = self._find(_Batch.of(groups, valid, groups.width is not None and groups.width == self._width))
        entries = np.empty(n, dtype=np.int32)
        entries[groups.order] = np.repeat(entry.astype(np.int32), groups.sizes)
        start = 0
        for chunk in chunks:
            if chunk.null_count:
                entries[start:start + len(chunk)][np.asarray(chunk.is_null(), dtype=bool)] = -1
            start += len(chunk)
        return entries

    def lookup(self, keys: pa.Array | pa.ChunkedArray) -> np.ndarray:
        """The newest mapped offset of each key; -1 where the key is absent or null."""
        entries = self.entries_of(keys)
        if len(self) == 0:
            return np.full(len(entries), -1, dtype=np.int64)
        return np.where(entries >= 0, self.offsets[np.maximum(entries, 0)], -1).astype(np.int64, copy=False)

    def _fits_words(self, width: int | None) -> bool:
        """Whether keys of ``width`` (None: of several widths) can join the map as words; if they cannot,
        the map turns to Arrow keys for good."""
        if width is not None and (self._width == width or (len(self) == 0 and self._width is None)):
            return True
        if self._width is not None:
            self._keys = self.keys
            self._width, self._words = None, ()
        return False

    def _find(self, batch: _Batch) -> np.ndarray:
        """The entry of each of the batch's distinct keys, -1 where absent (int64)."""
        entry = np.full(len(batch), -1, dtype=np.int64)
        if len(self) == 0 or len(batch) == 0:
            return entry
        # Ascending needles make a binary search walk the index once. A batch grouped by key_groups is
        # already in hash order (but for ties of the truncated hash), so it is searched as it comes.
        pending = np.arange(len(batch)) if batch.hash_ordered else np.argsort(batch.hashes)
        unmatched: list[np.ndarray] = []
        for hashes, slots in self._runs:
            if not len(pending):
                break
            needles = batch.hashes[pending]
            at = np.searchsorted(hashes, needles)
            hit = at < len(hashes)
            hit[hit] = hashes[at[hit]] == needles[hit]
            candidates, found = pending[hit], slots[at[hit]]
            same = self._same_keys(batch, candidates, found)
            batch.shares_a_hash = batch.shares_a_hash or not same.all()
            entry[candidates[same]] = found[same]
            unmatched.append(candidates[~same])
            pending = pending[~hit]
        if self._shared_hashes:
            # A hash two keys of the map share: the first match may have been the other key; try every one.
            for row in np.concatenate(unmatched):
                if entry[row] < 0:
                    entry[row] = self._find_slowly(batch, int(row))
        return entry

    def _same_keys(self, batch: _Batch, rows: np.ndarray, entries: np.ndarray) -> np.ndarray:
        if batch.width is not None and batch.width == self._width:
            same = np.ones(len(rows), dtype=bool)
            for mine, theirs in zip(self._words, batch.words, strict=True):
                same &= mine[entries] == theirs[rows]
            return same
        compared = pc.equal(batch.keys.take(pa.array(rows)), self.keys.take(pa.array(entries)))
        return np.asarray(compared.to_numpy(zero_copy_only=False), dtype=bool)

    def _find_slowly(self, batch: _Batch, row: int) -> int:
        key = batch.keys[row].as_py()
        for hashes, slots in self._runs:
            low = int(np.searchsorted(hashes, batch.hashes[row], side="left"))
            high = int(np.searchsorted(hashes, batch.hashes[row], side="right"))
            for slot in slots[low:high]:
                if self.keys[int(slot)].as_py() == key:
                    return int(slot)
        return -1

    def _add(self, batch: _Batch, new: np.ndarray, sizes: np.ndarray) -> None:
        """Append the batch's keys ``new`` (in entry order) as entries (offsets for the caller to set) and
        add their hashes to the index."""
        m = len(self)
        if not len(new):
            return
        by_hash = np.sort(new)  # groups in batch order, nearly by hash
        by_hash = by_hash[np.argsort(batch.hashes[by_hash], kind="stable")]
        slot_of = np.empty(len(batch), dtype=np.int64)
        slot_of[new] = np.arange(m, m + len(new))
        self._index_add(batch.hashes[by_hash], slot_of[by_hash], batch.shares_a_hash)
        if batch.width is not None and (m == 0 or batch.width == self._width):
            if m == 0:
                self._width = batch.width
                self._words = tuple(np.empty(0, dtype=np.uint64) for _ in batch.words)
            self._reserve(len(new))
            for mine, theirs in zip(self._words, batch.words, strict=True):
                mine[m:m + len(new)] = theirs[new]
            self._keys = None
        else:
            if self._width is not None:  # keys of another width: the map keeps Arrow keys from now on
                self._keys, self._width, self._words = self.keys, None, ()
            self._reserve(len(new))
            added = batch.keys.take(pa.array(new))
            self._keys = pa.concat_arrays([self.keys, added]) if m else added
        self._count += len(new)
        self.used_bytes += int(sizes.sum())

    def _index_add(self, hashes: np.ndarray, slots: np.ndarray, shares_a_hash: bool) -> None:
        """Add a run of ascending ``hashes`` (with their entries) to the index. ``shares_a_hash``: a key
        of the batch they come from had the hash of another key already in the map (seen by :meth:`_find`,
        which looked every new key's hash up)."""
        self._shared_hashes = self._shared_hashes or shares_a_hash or bool(np.any(hashes[1:] == hashes[:-1]))
        self._runs.append((hashes, slots))
        while len(self._runs) > 1 and len(self._runs[-2][0]) <= 2 * len(self._runs[-1][0]):
            newer = self._runs.pop()
            older = self._runs.pop()
            self._runs.append(_merge_runs(older, newer))

    def to_table(self) -> pa.Table:
        return pa.table({"key": self.keys, "offset": pa.array(self.offsets, pa.int64())})

    @classmethod
    def from_table(cls, table: pa.Table, capacity_bytes: int, latest_offset: int,
                   buffer_bytes: int | None = None) -> OffsetMap:
        result = cls(capacity_bytes, buffer_bytes)
        keys = table.column("key").combine_chunks() if table.num_rows else pa.array([], pa.binary())
        if len(keys):
            batch = _Batch.of_distinct(keys, result._fits_words(_one_width(keys)))
            every = np.arange(len(keys))
            result._add(batch, every, batch.lengths(every) + ENTRY_OVERHEAD_BYTES)
            result._offsets[: len(keys)] = table.column("offset").to_numpy()
        result.latest_offset = latest_offset
        return result


def _grown(array: np.ndarray, size: int, used: int) -> np.ndarray:
    grown = np.empty(size, dtype=array.dtype)
    grown[:used] = array[:used]
    return grown


def _merge_runs(older: tuple[np.ndarray, np.ndarray], newer: tuple[np.ndarray, np.ndarray]
                ) -> tuple[np.ndarray, np.ndarray]:
    """Two sorted runs of the index as one."""
    at = np.searchsorted(older[0], newer[0]) + np.arange(len(newer[0]))  # where each newer hash lands
    total = len(older[0]) + len(newer[0])
    from_older = np.ones(total, dtype=bool)
    from_older[at] = False
    hashes = np.empty(total, dtype=np.uint64)
    slots = np.empty(total, dtype=np.int64)
    hashes[at], slots[at] = newer
    hashes[from_older], slots[from_older] = older
    return hashes, slots


def _by_first_appearance(groups: np.ndarray, first_rows: np.ndarray, rows: int) -> np.ndarray:
    """``groups`` ordered by their first row (a pass over the rows instead of a sort of the groups)."""
    first = first_rows[groups]
    seen = np.zeros(rows, dtype=bool)
    seen[first] = True
    group_at = np.empty(rows, dtype=np.int64)
    group_at[first] = groups
    return group_at[np.flatnonzero(seen)]


def _one_width(keys: pa.Array) -> int | None:
    lengths = pc.binary_length(keys)
    low, high = pc.min_max(lengths).values()
    return low.as_py() if low.as_py() == high.as_py() else None


class _Batch:
    """The distinct keys of a batch of records, as the map compares them: their hashes, and either their
    words (keys of one width, when the map keeps words) or an Arrow array of them."""

    def __init__(self, hashes: np.ndarray, width: int | None, words: tuple[np.ndarray, ...],
                 keys: pa.Array | None) -> None:
        self.hashes = hashes
        self.hash_ordered = False  # the keys come (nearly) in hash order
        self.shares_a_hash = False  # one of these keys has the hash of another key of the map
        self.width = width
        self.words = words
        self._keys = keys

    def __len__(self) -> int:
        return len(self.hashes)

    @classmethod
    def of(cls, groups: KeyGroups, chunks: Sequence[pa.Array], as_words: bool) -> _Batch:
        """The distinct keys of grouped records (each group's first record's key)."""
        if as_words and groups.width is not None:
            batch = cls(hash_words(groups.words, groups.width, len(groups)), groups.width, groups.words, None)
            batch.hash_ordered = True
            return batch
        keys = _take(chunks, groups.first_rows)
        return cls(hash_keys([keys]), None, (), keys)

    @classmethod
    def of_distinct(cls, keys: pa.Array, as_words: bool) -> _Batch:
        groups = group_keys([keys]) if as_words else None
        if groups is not None and groups.width is not None and len(groups) == len(keys):
            # Put the words back in the keys' own order (grouping sorted them).
            order = np.argsort(groups.first_rows)
            words = tuple(word[order] for word in groups.words)
            return cls(hash_words(words, groups.width, len(keys)), groups.width, words, None)
        return cls(hash_keys([keys]), None, (), keys)

    @property
    def keys(self) -> pa.Array:
        if self._keys is None:
            assert self.width is not None
            self._keys = words_to_keys(self.words, self.width, len(self))
        return self._keys

    def lengths(self, rows: np.ndarray) -> np.ndarray:
        if self.width is not None:
            return np.full(len(rows), self.width, dtype=np.int64)
        return pc.binary_length(self.keys.take(pa.array(rows))).to_numpy().astype(np.int64)
