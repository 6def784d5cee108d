"""Key groups: which records of a batch share a key, found by a vectorised hash and confirmed byte for byte.

The offset map's hot loop. Arrow's ``dictionary_encode`` finds equal binary keys through a hash table it
probes one key at a time; on 5M keys that is most of a clean. Here equality is found with whole-array
numpy work:

1. Each key is cut into 64-bit *words* (the last word holds only the key's own trailing bytes,
   zero-extended), so ``(length, words)`` is the key, exactly. Keys are bucketed by word count, since keys
   of different lengths in words are never equal.
2. A 64-bit hash of ``(length, words)`` is packed above the row index into one ``uint64`` and the packed
   values are sorted (numpy's SIMD sort): rows with one hash become contiguous, ascending by row.
3. The words of adjacent sorted rows are compared. Equal hashes with different words (a collision) are
   split by exact key with a lexicographic sort of just those rows, so a collision costs time, never a
   record.

The result (:class:`KeyGroups`) lists the rows of each group together, ascending, so a group's first and
last rows are its key's first and newest record in the batch.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

_MIX = (np.uint64(0x9E3779B97F4A7C15), np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB))
_MIN_INDEX_BITS = 24  # the low bits of a packed sort key hold the row index; the hash keeps the rest
_BLOCK_ROWS = 1 << 20  # whole-array steps run in blocks of rows, spread over the CPUs
_pool: tuple[int, ThreadPoolExecutor] | None = None


def worker_threads() -> int:
    """The CPUs this process may run on (so a process pinned to one core works on one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def in_blocks(step: Callable[[int, int], None], n: int) -> None:
    """Run ``step(start, stop)`` over consecutive blocks covering ``range(n)``, on a thread per CPU: numpy
    releases the GIL in the steps' array work, so blocks run in parallel."""
    global _pool
    blocks = [(start, min(start + _BLOCK_ROWS, n)) for start in range(0, n, _BLOCK_ROWS)]
    threads = worker_threads()
    if threads == 1 or len(blocks) < 2:
        for start, stop in blocks:
            step(start, stop)
        return
    if _pool is None or _pool[0] != os.getpid():  # a forked child (a Spark worker) needs its own threads
        _pool = (os.getpid(), ThreadPoolExecutor(threads, thread_name_prefix="compactlog-keys"))
    for future in [_pool[1].submit(step, start, stop) for start, stop in blocks]:
        future.result()


@dataclass(frozen=True)
class KeyGroups:
    """Rows grouped by equal key: ``order`` lists the rows of group 0, then group 1, ..., each group's rows
    ascending; group ``g`` is ``order[starts[g]:starts[g + 1]]``."""

    order: np.ndarray  # row indices
    starts: np.ndarray  # int64 positions in ``order``
    width: int | None = None  # every key's length, when all have one
    words: tuple[np.ndarray, ...] = ()  # with ``width``: each group's key as words (see :func:`key_words`)

    def __len__(self) -> int:
        return len(self.starts)

    @property
    def sizes(self) -> np.ndarray:
        return np.diff(self.starts, append=len(self.order))

    @property
    def first_rows(self) -> np.ndarray:
        return self.order[self.starts]

    @property
    def last_rows(self) -> np.ndarray:
        return self.order[np.append(self.starts[1:], len(self.order)) - 1]


def group_keys(chunks: Sequence[pa.Array]) -> KeyGroups:
    """Group the rows of ``chunks`` (binary arrays without nulls, read as one sequence) by equal key."""
    lengths, data = _layout(chunks)
    n = len(lengths)
    if n == 0:
        empty = np.empty(0, dtype=np.int64)
        return KeyGroups(empty, empty)
    shortest, longest = int(lengths.min()), int(lengths.max())
    if shortest == longest:  # one width (ids, UUIDs, hashes): the words are strided views of the buffer
        words = _fixed_width_words(data, n, shortest)
        del data
        order, starts = _group_bucket(lengths, words, one_length=True)
        first = order[starts]
        return KeyGroups(order, starts, shortest, tuple(word[first] for word in words))
    key_starts = _key_starts(lengths)
    word_counts = (lengths + 7) >> 3
    orders: list[np.ndarray] = []
    group_starts: list[np.ndarray] = []
    placed = 0
    for count in range(int(word_counts.min()), int(word_counts.max()) + 1):
        rows = np.flatnonzero(word_counts == count)
        if len(rows) == 0:
            continue
        words = _words(data, key_starts[rows], lengths[rows], count)
        order, bucket_starts = _group_bucket(lengths[rows], words, one_length=False)
        orders.append(rows[order])
        group_starts.append(bucket_starts + placed)
        placed += len(rows)
    return KeyGroups(np.concatenate(orders), np.concatenate(group_starts))


def hash_keys(chunks: Sequence[pa.Array]) -> np.ndarray:
    """The 64-bit hash of each key of ``chunks`` (binary arrays without nulls), the one grouping uses."""
    lengths, data = _layout(chunks)
    n = len(lengths)
    hashes = np.empty(n, dtype=np.uint64)
    if n == 0:
        return hashes
    shortest, longest = int(lengths.min()), int(lengths.max())
    if shortest == longest:
        words = _fixed_width_words(data, n, shortest)
        in_blocks(lambda start, stop: _hash_block(hashes, lengths, words, start, stop), n)
        return hashes
    key_starts = _key_starts(lengths)
    word_counts = (lengths + 7) >> 3
    for count in range(int(word_counts.min()), int(word_counts.max()) + 1):
        rows = np.flatnonzero(word_counts == count)
        if len(rows):
            bucket = np.empty(len(rows), dtype=np.uint64)
            _hash_block(bucket, lengths[rows], _words(data, key_starts[rows], lengths[rows], count), 0, len(rows))
            hashes[rows] = bucket
    return hashes


def hash_words(words: Sequence[np.ndarray], width: int, n: int) -> np.ndarray:
    """:func:`hash_keys` of ``n`` keys of one ``width`` given as their words."""
    hashes = np.empty(n, dtype=np.uint64)
    lengths = np.full(n, width, dtype=np.int64)
    in_blocks(lambda start, stop: _hash_block(hashes, lengths, words, start, stop), n)
    return hashes


def words_to_keys(words: Sequence[np.ndarray], width: int, n: int) -> pa.Array:
    """The binary keys of one ``width`` whose words are ``words`` (the inverse of the word cut)."""
    if width == 0:
        return pa.array([b""] * n, pa.binary())
    count = len(words)
    stacked = np.empty((n, 8 * count), dtype=np.uint8)
    as_words = stacked.view(np.uint64)  # (n, count): word j of each key is column j
    for j, word in enumerate(words):
        as_words[:, j] = word
    # The last word holds the key's trailing bytes in its low bytes, so the key is the first ``width`` bytes.
    data = np.ascontiguousarray(stacked[:, :width]).reshape(-1)
    offsets = np.arange(0, (n + 1) * width, width, dtype=np.int64)
    if offsets[-1] < 2**31:
        return pa.BinaryArray.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets.astype(np.int32)),
                                                            pa.py_buffer(data)])
    return pa.LargeBinaryArray.from_buffers(pa.large_binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)]
                                            ).cast(pa.binary())


def _key_starts(lengths: np.ndarray) -> np.ndarray:
    """Where each key starts in the :func:`_layout` buffer."""
    starts = np.empty(len(lengths), dtype=np.int64)
    starts[0] = 8
    np.cumsum(lengths[:-1], out=starts[1:])
    starts[1:] += 8
    return starts


def _layout(chunks: Sequence[pa.Array]) -> tuple[np.ndarray, np.ndarray]:
    """Every key's length, and the keys packed end to end in one byte buffer after 8 zero bytes (so the
    8 bytes ending at any key's end can be read as one word)."""
    lengths: list[np.ndarray] = []
    pieces: list[np.ndarray] = []
    total = 8
    for chunk in chunks:
        if len(chunk) == 0:
            continue
        if chunk.null_count:
            raise ValueError("keys must not be null")
        offset_type = np.int64 if pa.types.is_large_binary(chunk.type) else np.int32
        buffers = chunk.buffers()
        offsets = np.frombuffer(buffers[1], dtype=offset_type, count=len(chunk) + 1,
                                offset=chunk.offset * np.dtype(offset_type).itemsize)
        first, end = int(offsets[0]), int(offsets[-1])
        lengths.append(np.diff(offsets).astype(np.int64, copy=False))
        if end > first:
            pieces.append(np.frombuffer(buffers[2], dtype=np.uint8, count=end - first, offset=first))
        total += end - first
    data = np.empty(total + 8, dtype=np.uint8)  # 8 spare bytes: a word can be read at every key start
    data[:8] = 0
    data[total:] = 0
    at = 8
    for piece in pieces:
        data[at:at + len(piece)] = piece
        at += len(piece)
    if not lengths:
        return np.empty(0, dtype=np.int64), data
    return (np.concatenate(lengths) if len(lengths) > 1 else lengths[0]), data


def _fixed_width_words(data: np.ndarray, n: int, width: int) -> list[np.ndarray]:
    """:func:`_words` for ``n`` keys of ``width`` bytes each, packed from byte 8: strided reads, no gather.
    The words are copied out contiguous, since they are gathered again in sorted order."""
    count = (width + 7) >> 3
    words = [np.ndarray((n,), dtype=np.uint64, buffer=data, offset=8 + 8 * j, strides=(width,)).copy()
             for j in range(count - 1)]
    if count:
        last = np.ndarray((n,), dtype=np.uint64, buffer=data, offset=width, strides=(width,)).copy()
        overlap = 8 * count - width
        if overlap:
            last >>= np.uint64(8 * overlap)
        words.append(last)
    return words


def _words(data: np.ndarray, starts: np.ndarray, lengths: np.ndarray, count: int) -> list[np.ndarray]:
    """The ``count`` 64-bit words of each key: full words from its start, then a last word read as the 8
    bytes ending at the key's end and shifted so it holds only bytes no earlier word holds."""
    if count == 0:
        return []
    every_byte = np.ndarray((len(data) - 7,), dtype=np.uint64, buffer=data, strides=(1,))
    words = [every_byte[starts + 8 * j] for j in range(count - 1)]
    last = every_byte[starts + lengths - 8]
    overlap = (8 * count - lengths).astype(np.uint64) * np.uint64(8)
    words.append(last >> overlap)
    return words


def _hash_block(out: np.ndarray, lengths: np.ndarray, words: Sequence[np.ndarray], start: int, stop: int) -> None:
    """``out[start:stop]`` = a 64-bit hash of each key's length and words (a multiply-xorshift mix)."""
    h = out[start:stop]
    h[:] = lengths[start:stop]
    h *= _MIX[0]
    for word in words:
        h ^= word[start:stop]
        h *= _MIX[1]
        h ^= h >> np.uint64(31)
    h *= _MIX[2]
    h ^= h >> np.uint64(29)


def _group_bucket(lengths: np.ndarray, words: Sequence[np.ndarray], one_length: bool) -> tuple[np.ndarray, np.ndarray]:
    """Group the rows of one word-count bucket: ``(order, starts)`` as in :class:`KeyGroups`."""
    order, new = _sort_by_hash(lengths, words)
    compared = None if one_length else lengths
    same = _adjacent_equal(order, compared, words)
    if not np.all(new[1:] | same):
        order = _split_collisions(order, new, same, lengths, words)
        new[1:] |= ~_adjacent_equal(order, compared, words)
    return order, np.flatnonzero(new)


def _sort_by_hash(lengths: np.ndarray, words: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The rows sorted by (hash, row), and where the hash changes (``new[i]``: row ``order[i]`` starts a
    run of its hash). The hash is truncated to the bits above the row index, so equal runs may still hold
    keys whose full hashes differ: the caller compares the keys."""
    n = len(lengths)
    bits = max(_MIN_INDEX_BITS, (n - 1).bit_length())
    shift = np.uint64(bits)
    row_mask = np.uint64((1 << bits) - 1)
    packed = np.empty(n, dtype=np.uint64)

    def pack(start: int, stop: int) -> None:
        _hash_block(packed, lengths, words, start, stop)
        block = packed[start:stop]
        block &= ~row_mask
        block |= np.arange(start, stop, dtype=np.uint64)

    in_blocks(pack, n)
    packed.sort()
    order = np.empty(n, dtype=np.int32 if n < 2**31 else np.int64)
    new = np.empty(n, dtype=bool)
    new[0] = True

    def unpack(start: int, stop: int) -> None:
        order[start:stop] = packed[start:stop] & row_mask
        hashes = packed[max(start - 1, 0):stop] >> shift
        np.not_equal(hashes[1:], hashes[:-1], out=new[max(start, 1):stop])

    in_blocks(unpack, n)
    return order, new


def _adjacent_equal(order: np.ndarray, lengths: np.ndarray | None, words: Sequence[np.ndarray]) -> np.ndarray:
    """Whether each row of ``order`` (from the second) has the same key as the row before it. Lengths are
    compared unless all are equal: the words of "a" and "a\\0" are equal."""
    same = np.ones(max(len(order) - 1, 0), dtype=bool)
    columns = ([lengths] if lengths is not None else []) + list(words)

    def compare(start: int, stop: int) -> None:
        rows = order[start:stop + 1]
        for column in columns:
            gathered = column[rows]
            same[start:stop] &= gathered[1:] == gathered[:-1]

    in_blocks(compare, len(same))
    return same


def _split_collisions(order: np.ndarray, new: np.ndarray, same: np.ndarray, lengths: np.ndarray,
                      words: Sequence[np.ndarray]) -> np.ndarray:
    """Reorder the hash groups that hold more than one key so each key's rows are contiguous (ascending)."""
    group = np.cumsum(new) - 1
    clashing = np.unique(group[1:][~new[1:] & ~same])
    positions = np.flatnonzero(np.isin(group, clashing))
    rows = order[positions]
    # np.lexsort sorts by its last key first: the hash group, then the key, then the row.
    keys = [rows, *(word[rows] for word in reversed(words)), lengths[rows], group[positions]]
    order = order.copy()
    order[positions] = rows[np.lexsort(keys)]
    return order
