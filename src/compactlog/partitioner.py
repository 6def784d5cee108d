"""Which partition a record goes to: Kafka's murmur2 key hash and its sticky choice for keyless records.

This module owns the record -> partition mapping of Kafka's Java producer, bit for bit, so that data
written through compactlog lands where a Kafka producer would have put it:

* keyed records: ``toPositive(murmur2(key)) % numPartitions`` (``BuiltInPartitioner.partitionForKey``,
  formerly ``DefaultPartitioner``), one key at a time (:func:`partition_for_key`) or for a whole Arrow
  column at once with numpy (:func:`partitions_for_keys`);
* keyless records: the sticky partitioner of KIP-480 (:class:`StickyPartitioner`), which keeps one
  partition per topic until a batch is completed and then moves to another one at random.

Compacted topics refuse keyless records, so the sticky partitioner only serves ordinary topics.
"""

from __future__ import annotations

import random
import struct
import threading

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from compactlog.errors import ConfigError, InvalidRecordError

__all__ = [
    "StickyPartitioner",
    "murmur2",
    "murmur2_array",
    "partition_for_key",
    "partitions_for_keys",
    "to_positive",
    "to_signed32",
]

# Kafka's Utils.murmur2 constants. The seed is a Java int literal (0x9747b28c, negative as a signed int);
# all arithmetic is Java int arithmetic, i.e. modulo 2**32, and every right shift is the logical >>>.
_SEED = 0x9747B28C
_M = 0x5BD1E995
_R = 24
_MASK32 = 0xFFFFFFFF

# The vectorised hash runs one numpy pass per 4-byte block index over the keys that still have that
# block. When only a handful of keys are left (at most _SCALAR_TAIL_KEYS) with many passes to go (more than
# _SCALAR_TAIL_MIN_PASSES), those few long keys are finished by the scalar code: a numpy pass over a few
# elements costs more than hashing them in pure Python.
_SCALAR_TAIL_KEYS = 32
_SCALAR_TAIL_MIN_PASSES = 16

# Tail handling, indexed by key length % 4: the mask keeping the 0..3 trailing bytes of a 4-byte read, and
# the factor applied after xor-ing them in (Kafka multiplies by m only when there is a tail).
_TAIL_MASK = np.array([0, 0xFF, 0xFFFF, 0xFFFFFF], dtype=np.uint32)
_TAIL_MUL = np.array([1, _M, _M, _M], dtype=np.uint32)


def _check_num_partitions(num_partitions: int) -> None:
    # Same rule as a topic's partition count: a positive int (bool is an int in Python, but not a count).
    if isinstance(num_partitions, bool) or not isinstance(num_partitions, int) or num_partitions < 1:
        raise ConfigError(f"num_partitions must be a positive int, got {num_partitions!r}")


def to_signed32(n: int) -> int:
    """Reinterpret the low 32 bits of ``n`` as a Java (two's complement) ``int``."""
    n &= _MASK32
    return n - 0x1_0000_0000 if n & 0x8000_0000 else n


def murmur2(data: bytes | bytearray | memoryview) -> int:
    """Kafka's ``Utils.murmur2(byte[])``: 32-bit MurmurHash2, seed ``0x9747b28c``, as a signed Java int.

    ``data`` is any bytes-like object; a ``str`` or ``None`` is refused (encode keys first).
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise InvalidRecordError(f"murmur2 hashes bytes, got {type(data).__name__}")
    buf = bytes(data)
    length = len(buf)
    nblocks = length // 4
    h = (_SEED ^ length) & _MASK32
    # The body: each 4-byte block read little-endian (Kafka assembles it byte by byte, low byte first).
    for k in struct.unpack_from(f"<{nblocks}I", buf):
        k = (k * _M) & _MASK32
        k ^= k >> _R
        k = (k * _M) & _MASK32
        h = ((h * _M) & _MASK32) ^ k
    # The 1..3 trailing bytes, as unsigned bytes (Java masks them with 0xff), then one more multiply.
    tail = length & 3
    if tail:
        base = length & ~3
        if tail == 3:
            h ^= buf[base + 2] << 16
        if tail >= 2:
            h ^= buf[base + 1] << 8
        h ^= buf[base]
        h = (h * _M) & _MASK32
    # Final avalanche.
    h ^= h >> 13
    h = (h * _M) & _MASK32
    h ^= h >> 15
    return to_signed32(h)


def to_positive(n: int) -> int:
    """Kafka's ``Utils.toPositive``: clear the sign bit (not ``abs``, so ``Integer.MIN_VALUE`` maps to 0)."""
    return n & 0x7FFFFFFF


def partition_for_key(key: bytes | bytearray | memoryview, num_partitions: int) -> int:
    """The partition Kafka's default partitioner picks for a keyed record: murmur2, sign bit cleared, mod."""
    _check_num_partitions(num_partitions)
    if key is None:
        raise InvalidRecordError("a keyless record has no key partition; use StickyPartitioner")
    return to_positive(murmur2(key)) % num_partitions


def _binary_chunks(keys: pa.Array | pa.ChunkedArray) -> list[pa.Array]:
    """The chunks of a binary / large_binary column, after checking type and nulls."""
    if isinstance(keys, pa.ChunkedArray):
        chunks: list[pa.Array] = list(keys.chunks)
        key_type = keys.type
    elif isinstance(keys, pa.Array):
        chunks = [keys]
        key_type = keys.type
    else:
        raise InvalidRecordError(f"keys must be a pyarrow Array or ChunkedArray, got {type(keys).__name__}")
    if not (pa.types.is_binary(key_type) or pa.types.is_large_binary(key_type)):
        raise InvalidRecordError(f"keys must be binary or large_binary, got {key_type}")
    if keys.null_count:
        # Keyless records take the sticky path; a null here means the caller did not split them out.
        raise InvalidRecordError(f"keys contain {keys.null_count} null(s); route keyless records separately")
    return chunks


def _murmur2_chunk(chunk: pa.Array) -> npt.NDArray[np.uint32]:
    """murmur2 of every value of one null-free binary / large_binary chunk, as unsigned 32-bit ints."""
    n = len(chunk)
    if n == 0:
        return np.empty(0, dtype=np.uint32)
    _validity, offsets_buf, data_buf = chunk.buffers()
    offset_type = np.int64 if pa.types.is_large_binary(chunk.type) else np.int32
    # Arrow offsets are absolute positions in the data buffer; a sliced array only shifts which offsets
    # belong to it (chunk.offset). Rebase them onto the bytes this chunk actually uses.
    offsets = np.frombuffer(offsets_buf, dtype=offset_type)[chunk.offset : chunk.offset + n + 1]
    offsets = offsets.astype(np.int64)
    first, last = int(offsets[0]), int(offsets[-1])
    starts = offsets[:-1] - first
    lengths = np.diff(offsets)
    nblocks = lengths // 4

    # Those bytes plus 4 zero bytes of padding, so that a 4-byte read at any key's start or tail never
    # runs off the end. `words[i]` is the little-endian uint32 at byte i: a stride-1 (unaligned) view,
    # so one fancy-index gathers one block of every key.
    size = last - first
    padded = np.zeros(size + 4, dtype=np.uint8)
    if size:
        padded[:size] = np.frombuffer(data_buf, dtype=np.uint8, count=size, offset=first)
    words = np.ndarray(shape=(size + 1,), dtype="<u4", buffer=padded, offset=0, strides=(1,))
    last_word = size  # clamp for reads on behalf of keys that are already past their last block

    m = np.uint32(_M)
    r = np.uint32(_R)
    h = np.uint32(_SEED) ^ lengths.astype(np.uint32)

    # Body: pass j mixes block j into every key that has one. `rows` are the keys still in play (None =
    # all of them, in place); once fewer than half of them have block j, they are compacted, so the total
    # work stays within a small factor of the total number of blocks and reads stay in memory order.
    rows: npt.NDArray[np.intp] | None = None
    hs, row_starts, row_blocks = h, starts, nblocks
    scalar_rows: npt.NDArray[np.intp] = np.empty(0, dtype=np.intp)
    max_blocks = int(nblocks.max())
    for j in range(max_blocks):
        has_block = row_blocks > j
        count = int(np.count_nonzero(has_block))
        if count <= _SCALAR_TAIL_KEYS and max_blocks - j > _SCALAR_TAIL_MIN_PASSES:
            keep = np.flatnonzero(has_block)
            scalar_rows = keep if rows is None else rows[keep]
            break
        everyone = count == row_blocks.size
        if count * 2 < row_blocks.size:
            if rows is not None:
                h[rows] = hs
            keep = np.flatnonzero(has_block)
            rows = keep if rows is None else rows[keep]
            hs, row_starts, row_blocks = h[rows], row_starts[keep], row_blocks[keep]
            everyone = True
        k = words[np.minimum(row_starts + 4 * j, last_word)]
        k *= m
        k ^= k >> r
        k *= m
        # In place either way: while rows is None, hs *is* h.
        if everyone:
            hs *= m
            hs ^= k
        else:
            np.copyto(hs, (hs * m) ^ k, where=has_block)
    if rows is not None:
        h[rows] = hs

    # Tail: the 1..3 bytes after the last full block (a masked 4-byte read; Java's bytes & 0xff are
    # unsigned too), then one more multiply, only for keys that have a tail.
    tail = lengths & 3
    h ^= words[starts + 4 * nblocks] & _TAIL_MASK[tail]
    h *= _TAIL_MUL[tail]

    # Final avalanche.
    h ^= h >> np.uint32(13)
    h *= m
    h ^= h >> np.uint32(15)

    for row in scalar_rows.tolist():
        start, length = int(starts[row]), int(lengths[row])
        h[row] = murmur2(padded[start : start + length].tobytes()) & _MASK32
    return h


def murmur2_array(keys: pa.Array | pa.ChunkedArray) -> npt.NDArray[np.int32]:
    """:func:`murmur2` of every key of a binary / large_binary Arrow column, vectorised with numpy.

    Returns the signed Java ints as ``int32``. Null keys raise :class:`InvalidRecordError`.
    """
    chunks = _binary_chunks(keys)
    if not chunks:
        return np.empty(0, dtype=np.int32)
    hashes = np.concatenate([_murmur2_chunk(chunk) for chunk in chunks])
    # uint32 -> int32 reinterprets the bits, which is exactly Java's int view of the same hash.
    return hashes.view(np.int32)


def partitions_for_keys(keys: pa.Array | pa.ChunkedArray, num_partitions: int) -> npt.NDArray[np.int32]:
    """:func:`partition_for_key` for every key of a binary / large_binary Arrow column, as ``int32``.

    Null keys raise :class:`InvalidRecordError`: keyless records take :class:`StickyPartitioner`.
    """
    _check_num_partitions(num_partitions)
    hashes = murmur2_array(keys).view(np.uint32)
    positive = hashes & np.uint32(0x7FFFFFFF)
    return (positive % np.uint32(num_partitions)).astype(np.int32)


class StickyPartitioner:
    """Kafka's sticky partition choice for keyless records (KIP-480, ``StickyPartitionCache``).

    Per topic, one partition is kept until the producer reports a completed batch on it
    (:meth:`on_new_batch`); the next partition is then chosen at random among the *other* partitions
    (the same one only when the topic has a single partition). Reports for a partition that is no longer
    the topic's current one are ignored, so two batches finishing at once move the topic only once.

    All partitions count as available (compactlog has no broker outages to route around), which is
    Kafka's behaviour when every partition has a leader. Thread-safe.
    """

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng if rng is not None else random.Random()
        self._current: dict[str, int] = {}
        self._lock = threading.Lock()

    def partition(self, topic: str, num_partitions: int) -> int:
        """The partition for the next keyless record of ``topic``."""
        _check_num_partitions(num_partitions)
        with self._lock:
            current = self._current.get(topic)
            if current is not None and current < num_partitions:
                return current
            # First record for the topic (or its cached partition no longer exists): pick one.
            return self._choose(topic, num_partitions, None)

    def on_new_batch(self, topic: str, num_partitions: int, previous: int) -> None:
        """A batch for ``topic`` on partition ``previous`` is complete: stick to another partition."""
        _check_num_partitions(num_partitions)
        with self._lock:
            current = self._current.get(topic)
            if current is None or current >= num_partitions:
                self._choose(topic, num_partitions, None)
            elif current == previous:
                self._choose(topic, num_partitions, current)
            # else: another batch already moved the topic on; keep the newer choice.

    def _choose(self, topic: str, num_partitions: int, avoid: int | None) -> int:
        """Pick and remember a uniformly random partition, different from ``avoid`` when possible."""
        if avoid is None or num_partitions == 1:
            chosen = self._rng.randrange(num_partitions)
        else:
            # Uniform over the num_partitions-1 others: draw from a range one shorter and skip `avoid`.
            chosen = self._rng.randrange(num_partitions - 1)
            if chosen >= avoid:
                chosen += 1
        self._current[topic] = chosen
        return chosen
