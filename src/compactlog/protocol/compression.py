"""The compression codecs of Kafka's record batches: the records section of a v2 batch (everything after
its 61-byte header) compressed whole, the codec named by the low three bits of the batch's attributes.

====  ======  ==============================================================================================
code  codec   wire format
====  ======  ==============================================================================================
0     none    the records as they are
1     gzip    a gzip stream (RFC 1952)
2     snappy  Java clients (xerial's SnappyOutputStream) write xerial framing: a 16-byte header
              (``0x82 "SNAPPY" 0x00``, int32 version, int32 compatible version) then blocks of
              [int32 big-endian length][raw snappy block]; librdkafka writes one raw snappy block. Both are
              read (told apart by the header's first 8 bytes, as kafka-python's ``kafka.codec`` does); xerial
              framing with 32 KiB blocks is written, which every client reads.
3     lz4     an LZ4 frame (Kafka >= 0.10, magic >= 1) with independent blocks: Kafka's Java reader rejects
              linked blocks, so frames are written with ``block_linked=False`` (python-lz4: cramjam's
              frames link blocks); read with python-lz4 too (3x cramjam's speed on 16 KiB frames)
4     zstd    a zstd frame, with or without its content size (Java's ZstdOutputStream leaves it out): read
              as a stream that must reach the frame's end; written with python-zstandard at level 3
              (Kafka's default), 10x cramjam's speed on incompressible records
====  ======  ==============================================================================================

Codes 5-7 are not defined: :class:`~compactlog.errors.UnsupportedCompressionTypeError`. Bytes a codec cannot
decompress are a :class:`~compactlog.errors.CorruptRecordError`.

Decompression is bounded (a few KiB of zstd or snappy can claim gigabytes): :func:`decompress` takes the most
bytes the records may decompress to and stops as soon as they would pass it, with a
:class:`~compactlog.errors.RecordTooLargeError`, having held at most that much (plus one step) in memory.
gzip stops at ``max_length``; lz4 takes its output in doubling steps, each within what is left of the limit
(python-lz4 allocates a step's whole ``max_length`` first); zstd is fed ``ZSTD_INPUT_STEP`` bytes at a time
(a zstd block of 128 KiB takes as little as 4 bytes, so a step yields at most about 32768 times its size);
snappy's uncompressed length (the varint that opens a raw block, of each block in xerial framing) is checked
before the block is decompressed.

The broker's storage threads compress and decompress at the same time. python-zstandard's contexts are not
thread-safe: each thread has its own compressor and decompressor (:func:`_zstd_compressor`). The other codecs
keep no context between calls: an lz4 frame decompressor and a zlib stream are made per call, and
python-lz4's ``compress`` and cramjam's functions make theirs inside the call.

Every decompression is checked before its records are parsed (:func:`check_decompressed`). A batch's CRC
covers its compressed bytes only, and the broker stores what it decompressed under checksums of its own (a
consumer's ``check.crcs`` sees only those): a decompression that gave other bytes would be stored and served
as the client's records. So the records are found a second way that shares no state with the decompression
that gave them: gzip by the CRC-32 and length the client wrote in the stream's trailer (a stream of several
members, whose last trailer covers only the last, is decompressed a second time by cramjam); snappy
(cramjam's keeps no state between calls) by a second decompression of each block into its place in a buffer
of the length the first gave; lz4 and zstd by a second decompression in one call, with a context of its
own, into that length plus one byte (to see a longer one). Any difference is a
:class:`~compactlog.errors.CorruptRecordError` (CORRUPT_MESSAGE to the producer), raised before anything of
the batch is appended. The second way costs about one more decompression (gzip: one CRC-32 pass) and holds
a second copy of the records while it compares; uncompressed records are parsed from the very bytes their
batch's CRC covers and are not checked again.
"""

from __future__ import annotations

import struct
import threading
import zlib
from collections.abc import Callable

import cramjam
import lz4.frame
import zstandard

from ..errors import CorruptRecordError, RecordTooLargeError, UnsupportedCompressionTypeError
from ..limits import LONG_MAX

NONE = 0
GZIP = 1
SNAPPY = 2
LZ4 = 3
ZSTD = 4
NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}

XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
XERIAL_BLOCK_BYTES = 32 * 1024
_BLOCK_LENGTH = struct.Struct(">i")
ZSTD_LEVEL = 3
ZSTD_INPUT_STEP = 1024
LZ4_FIRST_STEP = 64 * 1024
GZIP_WBITS = 16 + zlib.MAX_WBITS  # a gzip header and trailer around the deflate stream
GZIP_TRAILER = struct.Struct("<II")  # a gzip member's last 8 bytes: CRC-32 and length mod 2^32 of its data
UNLIMITED = LONG_MAX


# Each thread's zstd contexts (see _zstd_compressor).
_contexts = threading.local()


def _zstd_compressor() -> zstandard.ZstdCompressor:
    """This thread's zstd compressor. python-zstandard's contexts are not thread-safe (one used by two
    threads at once writes or reads other bytes, fails, or crashes the process), and a new one per call costs
    about 15 us, more than compressing a small batch: one per thread, made at its first use."""
    try:
        compressor: zstandard.ZstdCompressor = _contexts.zstd_compressor
    except AttributeError:
        compressor = _contexts.zstd_compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL)
    return compressor


def _zstd_decompressor() -> zstandard.ZstdDecompressor:
    """This thread's zstd decompressor (as :func:`_zstd_compressor`: a ``decompressobj`` uses the context
    of the decompressor that made it, so it is used by one thread and one stream at a time)."""
    try:
        decompressor: zstandard.ZstdDecompressor = _contexts.zstd_decompressor
    except AttributeError:
        decompressor = _contexts.zstd_decompressor = zstandard.ZstdDecompressor()
    return decompressor


def _zstd_checker() -> zstandard.ZstdDecompressor:
    """This thread's second zstd decompressor, for :func:`check_decompressed` only: a context that the
    decompression being checked never touches."""
    try:
        checker: zstandard.ZstdDecompressor = _contexts.zstd_checker
    except AttributeError:
        checker = _contexts.zstd_checker = zstandard.ZstdDecompressor()
    return checker


def check_codec(compression: int) -> None:
    """Raise :class:`UnsupportedCompressionTypeError` unless ``compression`` is one of Kafka's codes."""
    if compression not in NAMES:
        raise UnsupportedCompressionTypeError(
            f"compression type {compression} is not one of Kafka's (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd)")


def compress(compression: int, data: bytes | bytearray | memoryview) -> bytes:
    """``data`` compressed with the codec ``compression`` (not 0)."""
    check_codec(compression)
    if compression == GZIP:
        return bytes(cramjam.gzip.compress(data))
    if compression == SNAPPY:
        return _xerial_snappy(memoryview(data))
    if compression == LZ4:
        return lz4.frame.compress(data, block_linked=False)
    if compression == ZSTD:
        return _zstd_compressor().compress(data)
    raise ValueError("compress() of uncompressed records")


def decompress(compression: int, data: memoryview, limit: int = UNLIMITED) -> bytes:
    """The records section of a batch compressed with ``compression`` (not 0), decompressed and checked (see
    :func:`check_decompressed`); a :class:`RecordTooLargeError` as soon as it would pass ``limit`` bytes."""
    check_codec(compression)
    if compression == NONE:
        raise ValueError("decompress() of uncompressed records")
    try:
        if compression == GZIP:
            records = _gzip(data, limit)
        elif compression == SNAPPY:
            records = _snappy(data, limit)
        elif compression == LZ4:
            records = _lz4(data, limit)
        else:
            records = _zstd(data, limit)
        check_decompressed(compression, data, records)
    except (cramjam.DecompressionError, RuntimeError, zstandard.ZstdError, zlib.error) as e:  # lz4: RuntimeError
        raise CorruptRecordError(f"{NAMES[compression]} records do not decompress: {e}") from e
    return records


def check_decompressed(compression: int, data: memoryview, records: bytes) -> None:
    """Raise :class:`CorruptRecordError` unless ``records`` are what ``data`` (compressed with
    ``compression``) decompresses to, found a second way that shares no state with the decompression that
    gave them (the module's docstring says which, per codec)."""
    if compression == GZIP:
        if _gzip_trailer_matches(data, records):
            return
        again = _into(cramjam.gzip.decompress_into, data, len(records))
    elif compression == SNAPPY:
        again = _snappy_again(data, len(records))
    elif compression == LZ4:
        again = _lz4_again(data, len(records))
    else:
        again = _zstd_again(data, len(records))
    if again != records:
        raise _second_differs(compression, len(records), f"{len(again)} bytes" if len(again) != len(records)
                              else "other bytes of that length")


def _bounded(limit: int) -> int:
    """The ``max_length`` that tells a limit's passing (one byte past it) from its reaching."""
    return min(limit, UNLIMITED - 1) + 1


def _check_size(compression: int, size: int, limit: int) -> None:
    if size > limit:
        raise RecordTooLargeError(f"{NAMES[compression]} records decompress to more than {limit} bytes")


def _gzip(data: memoryview, limit: int) -> bytes:
    """A gzip stream of one or more members (as GZIPInputStream reads them), at most ``limit`` bytes."""
    parts: list[bytes] = []
    size = 0
    rest: bytes | memoryview = data
    while True:
        stream = zlib.decompressobj(GZIP_WBITS)
        part = stream.decompress(rest, _bounded(limit - size))
        size += len(part)
        _check_size(GZIP, size, limit)
        parts.append(part)
        if not stream.eof:
            raise CorruptRecordError("gzip records end before their stream does")
        rest = stream.unused_data
        if not rest:
            return parts[0] if len(parts) == 1 else b"".join(parts)


def _lz4(data: memoryview, limit: int) -> bytes:
    """One LZ4 frame, at most ``limit`` bytes. python-lz4 allocates (and the kernel maps) ``max_length`` before
    it decompresses, which would cost a small frame far more than its decompression: the output is taken in
    steps that double from :data:`LZ4_FIRST_STEP` or 4 times the input, each within what is left of the
    limit."""
    stream = lz4.frame.LZ4FrameDecompressor()
    parts: list[bytes] = []
    size = 0
    step = max(LZ4_FIRST_STEP, 4 * len(data))
    rest: bytes | memoryview = data
    while True:
        part = stream.decompress(rest, max_length=min(step, _bounded(limit - size)))
        size += len(part)
        _check_size(LZ4, size, limit)
        parts.append(part)
        if stream.eof:
            return parts[0] if len(parts) == 1 else b"".join(parts)
        if stream.needs_input:
            raise CorruptRecordError("lz4 records end before their frame does")
        rest = b""
        step *= 2


def _zstd(data: memoryview, limit: int) -> bytes:
    stream = _zstd_decompressor().decompressobj()
    parts: list[bytes] = []
    size = 0
    for start in range(0, len(data), ZSTD_INPUT_STEP):
        part = stream.decompress(data[start:start + ZSTD_INPUT_STEP])
        size += len(part)
        _check_size(ZSTD, size, limit)
        parts.append(part)
        if stream.eof:
            break
    if not stream.eof:
        raise CorruptRecordError("zstd records end before their frame does")
    return b"".join(parts)


def _snappy(data: memoryview, limit: int) -> bytes:
    if not _is_xerial(data):
        _check_size(SNAPPY, _snappy_length(data, 0), limit)
        return bytes(cramjam.snappy.decompress_raw(data))
    parts = []
    size = 0
    for position, block in _xerial_blocks(data):
        # each block refused before it is decompressed if it would take the records past the limit
        _check_size(SNAPPY, size + _snappy_length(block, position), limit)
        part = bytes(cramjam.snappy.decompress_raw(block))
        size += len(part)
        parts.append(part)
    return b"".join(parts)


def _is_xerial(data: memoryview) -> bool:
    return len(data) > 16 and data[:8] == XERIAL_MAGIC


def _snappy_length(block: memoryview, position: int) -> int:
    """A raw snappy block's uncompressed length: the little-endian base-128 varint of at most 5 bytes that
    opens it."""
    length = shift = 0
    for i in range(min(5, len(block))):
        length |= (block[i] & 0x7F) << shift
        shift += 7
        if not block[i] & 0x80:
            return length
    raise CorruptRecordError(f"snappy block at byte {position}: no uncompressed length")


def _xerial_snappy(data: memoryview) -> bytes:
    parts = [XERIAL_HEADER]
    for start in range(0, len(data), XERIAL_BLOCK_BYTES):
        block = bytes(cramjam.snappy.compress_raw(data[start:start + XERIAL_BLOCK_BYTES]))
        parts += (_BLOCK_LENGTH.pack(len(block)), block)
    return b"".join(parts)


def _xerial_blocks(data: memoryview) -> list[tuple[int, memoryview]]:
    """The raw snappy blocks of xerial framing after its 16-byte header, with their positions."""
    blocks = []
    position = 16
    while position < len(data):
        if len(data) - position < 4:
            raise CorruptRecordError(f"xerial snappy block length truncated at byte {position}")
        (length,) = _BLOCK_LENGTH.unpack_from(data, position)
        position += 4
        if length < 0 or length > len(data) - position:
            raise CorruptRecordError(f"xerial snappy block of {length} bytes at byte {position} passes the end")
        blocks.append((position, data[position:position + length]))
        position += length
    return blocks


# ---------------------------------------------------------------- the second way (check_decompressed)

def _gzip_trailer_matches(data: memoryview, records: bytes) -> bool:
    """Whether ``records`` have the CRC-32 and the length (mod 2^32) of a gzip stream's last trailer: those
    of all the records when the stream is one member, as every Kafka client writes it."""
    if len(data) < GZIP_TRAILER.size:
        return False
    crc, size = GZIP_TRAILER.unpack_from(data, len(data) - GZIP_TRAILER.size)
    return size == len(records) & 0xFFFFFFFF and crc == zlib.crc32(records)


def _into(decompress_into: Callable[[memoryview, bytearray], int], data: memoryview, size: int) -> bytes:
    """``data`` decompressed by a cramjam ``decompress_into`` into a buffer one byte longer than ``size``
    (bounded: more than that is an error)."""
    buffer = bytearray(size + 1)
    return bytes(memoryview(buffer)[:decompress_into(data, buffer)])


def _second_differs(compression: int, size: int, second: str) -> CorruptRecordError:
    return CorruptRecordError(f"{NAMES[compression]} records decompress to {size} bytes, and a second time to "
                              f"{second}: refused rather than stored either way")


def _snappy_again(data: memoryview, size: int) -> bytes:
    blocks = _xerial_blocks(data) if _is_xerial(data) else [(0, data)]
    lengths = [_snappy_length(block, position) for position, block in blocks]
    if sum(lengths) != size:
        raise _second_differs(SNAPPY, size, f"{sum(lengths)} bytes (the blocks' lengths)")
    # Each block into its place in one buffer of the known length: a block that decompresses to more than
    # its varint says does not fit its slice and is an error.
    records = bytearray(size)
    view = memoryview(records)
    at = 0
    for (position, block), length in zip(blocks, lengths, strict=True):
        if cramjam.snappy.decompress_raw_into(block, view[at:at + length]) != length:
            raise _second_differs(SNAPPY, size, f"fewer bytes than the block at byte {position} says")
        at += length
    return bytes(records)


def _lz4_again(data: memoryview, size: int) -> bytes:
    stream = lz4.frame.LZ4FrameDecompressor()
    again: bytes = stream.decompress(data, max_length=size + 1)
    if not stream.eof:
        raise _second_differs(LZ4, size, f"more than {len(again)} bytes")
    return again


def _zstd_again(data: memoryview, size: int) -> bytes:
    # One call decompresses into the frame's content size when its header gives one, else into
    # max_output_size: a content size other than ``size`` is a difference already.
    declared = zstandard.frame_content_size(data)
    if declared not in (-1, size):
        raise _second_differs(ZSTD, size, f"{declared} bytes (the frame's content size)")
    again: bytes = _zstd_checker().decompress(data, max_output_size=size + 1)
    return again
