"""Decompression bombs for tests: a few bytes (zstd, snappy) to about a megabyte (gzip, lz4) that a codec
expands (or claims to expand) to about a gigabyte, built in about a second without holding what they expand to."""

from __future__ import annotations

import struct
import zlib

import cramjam
import lz4.frame
import zstandard

from compactlog.protocol import compression

MIB = 1 << 20
GIB = 1 << 30
_ZEROS = bytes(MIB)


def zstd_bomb(size: int = GIB) -> bytes:
    """A zstd frame of ``size`` zero bytes (about 32 KiB for 1 GiB), its content size left out as Java's
    ZstdOutputStream leaves it out."""
    stream = zstandard.ZstdCompressor(level=3, write_content_size=False).compressobj()
    return b"".join([*(stream.compress(_ZEROS) for _ in range(size // MIB)), stream.flush()])


def gzip_bomb(size: int = GIB) -> bytes:
    """One gzip member of ``size`` zero bytes (about 1 MiB for 1 GiB): the deflate blocks of one MiB of
    zeros after a full flush are the same bytes every time, so they are compressed once and repeated."""
    stream = zlib.compressobj(9, zlib.DEFLATED, compression.GZIP_WBITS)
    first = stream.compress(_ZEROS) + stream.flush(zlib.Z_FULL_FLUSH)
    repeated = stream.compress(_ZEROS) + stream.flush(zlib.Z_FULL_FLUSH)
    last = stream.compress(_ZEROS) + stream.flush()
    crc = 0
    for _ in range(size // MIB):
        crc = zlib.crc32(_ZEROS, crc)
    return first + repeated * (size // MIB - 2) + last[:-8] + struct.pack("<II", crc, size & 0xFFFFFFFF)


def lz4_bomb(size: int = GIB) -> bytes:
    """An LZ4 frame of ``size`` zero bytes (lz4 expands at most about 255 times: 4.3 MiB for 1 GiB)."""
    stream = lz4.frame.LZ4FrameCompressor(block_linked=False)
    return b"".join([stream.begin(), *(stream.compress(_ZEROS) for _ in range(size // MIB)), stream.flush()])


def snappy_bomb(size: int = GIB) -> bytes:
    """A raw snappy block that claims ``size`` bytes (its varint length) and holds a few."""
    varint = bytearray()
    while True:
        varint.append((size & 0x7F) | (0x80 if size >= 0x80 else 0))
        size >>= 7
        if not size:
            return bytes(varint) + b"\x00" * 16


def xerial_bomb(size: int = 64 * MIB) -> bytes:
    """xerial framing of real blocks of one MiB of zeros each (snappy expands at most about 21 times, so
    a bomb of it is many blocks), ``size`` in all."""
    block = bytes(cramjam.snappy.compress_raw(_ZEROS))
    return compression.XERIAL_HEADER + (struct.pack(">i", len(block)) + block) * (size // MIB)
