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
"""

from __future__ import annotations

import struct

import cramjam
import lz4.frame
import zstandard

from ..errors import CorruptRecordError, UnsupportedCompressionTypeError

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
_zstd_compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL)
_zstd_decompressor = zstandard.ZstdDecompressor()


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
        return _zstd_compressor.compress(data)
    raise ValueError("compress() of uncompressed records")


def decompress(compression: int, data: memoryview) -> bytes:
    """The records section of a batch compressed with ``compression`` (not 0), decompressed."""
    check_codec(compression)
    try:
        if compression == GZIP:
            return bytes(cramjam.gzip.decompress(data))
        if compression == SNAPPY:
            if len(data) > 16 and data[:8] == XERIAL_MAGIC:
                return _xerial_blocks(data)
            return bytes(cramjam.snappy.decompress_raw(data))
        if compression == LZ4:
            return lz4.frame.decompress(data)
        if compression == ZSTD:
            stream = _zstd_decompressor.decompressobj()
            records = stream.decompress(data)
            if not stream.eof:
                raise CorruptRecordError("zstd records end before their frame does")
            return records
    except (cramjam.DecompressionError, RuntimeError, zstandard.ZstdError) as e:  # lz4.frame: RuntimeError
        raise CorruptRecordError(f"{NAMES[compression]} records do not decompress: {e}") from e
    raise ValueError("decompress() of uncompressed records")


def _xerial_snappy(data: memoryview) -> bytes:
    parts = [XERIAL_HEADER]
    for start in range(0, len(data), XERIAL_BLOCK_BYTES):
        block = bytes(cramjam.snappy.compress_raw(data[start:start + XERIAL_BLOCK_BYTES]))
        parts += (_BLOCK_LENGTH.pack(len(block)), block)
    return b"".join(parts)


def _xerial_blocks(data: memoryview) -> bytes:
    parts = []
    position = 16
    while position < len(data):
        if len(data) - position < 4:
            raise CorruptRecordError(f"xerial snappy block length truncated at byte {position}")
        (length,) = _BLOCK_LENGTH.unpack_from(data, position)
        position += 4
        if length < 0 or length > len(data) - position:
            raise CorruptRecordError(f"xerial snappy block of {length} bytes at byte {position} passes the end")
        parts.append(bytes(cramjam.snappy.decompress_raw(data[position:position + length])))
        position += length
    return b"".join(parts)
