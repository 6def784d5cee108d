"""Every decompressed records section is checked a second way before it is parsed: a decompression that
gives other bytes (an injected fault here: one byte flipped inside a record's value, which parses as well as
the right bytes) is a CorruptRecordError, and Produce answers CORRUPT_MESSAGE with nothing appended. What
clients really send passes: one or several gzip members, xerial and raw snappy, lz4 and zstd frames with
and without their checksums and content sizes."""

from __future__ import annotations

import gzip
from collections.abc import Callable

import cramjam
import lz4.frame
import numpy as np
import pyarrow as pa
import pytest
import zstandard
from kafka.record.default_records import DefaultRecordBatchBuilder

import compactlog
from compactlog.broker.error_codes import CORRUPT_MESSAGE, NONE
from compactlog.broker.produce import _append_all
from compactlog.errors import CorruptRecordError
from compactlog.protocol import compression
from compactlog.protocol.record_batch import decode_batches, encode_batches
from compactlog.record import data_rows
from support import FakeClock

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")  # kafka-python's importlib.resources

# codec -> the function that decompresses its records (what a fault replaces)
PRIMARY = {compression.GZIP: "_gzip", compression.SNAPPY: "_snappy", compression.LZ4: "_lz4",
           compression.ZSTD: "_zstd"}
RECORDS = b"".join(b"record %d, " % i + bytes([i % 256]) * 300 for i in range(1000))  # about 300 KB


def large_rows(seed: int) -> pa.Table:
    """Rows of SCHEMA: three records of about 100 KB values, different per seed."""
    values = [RECORDS[i * 100_000:(i + 1) * 100_000] + b"%d" % seed for i in range(3)]
    table = data_rows(pa.array(1_700_000_000_000 + np.arange(3, dtype=np.int64)),
                      pa.array([b"k%d" % i for i in range(3)], pa.binary()), pa.array(values, pa.binary()))
    return table.set_column(0, "offset", pa.array(np.arange(3, dtype=np.int64)))


def faulty(primary: Callable[[memoryview, int], bytes], fault: Callable[[bytes], bytes]
           ) -> Callable[[memoryview, int], bytes]:
    return lambda data, limit: fault(primary(data, limit))


def flip_middle(records: bytes) -> bytes:
    """One byte flipped halfway: inside a record's value in these batches, so the records still parse."""
    wrong = bytearray(records)
    wrong[len(wrong) // 2] ^= 0xFF
    return bytes(wrong)


@pytest.mark.parametrize("codec", list(PRIMARY))
def test_a_decompression_that_gives_other_bytes_is_refused_and_nothing_is_appended(
        tmp_path: object, monkeypatch: pytest.MonkeyPatch, codec: int) -> None:
    rows = large_rows(seed=codec)
    sent = encode_batches(rows, codec)
    monkeypatch.setattr(compression, PRIMARY[codec], faulty(getattr(compression, PRIMARY[codec]), flip_middle))
    with pytest.raises(CorruptRecordError, match="a second time to other bytes of that length"):
        decode_batches(sent)
    with compactlog.open(str(tmp_path), clock=FakeClock()) as store:
        store.create_topic("t", 1, {"max.message.bytes": str(1 << 22)})
        results, _ = _append_all(store, [("t", 0, sent)], None)
        assert (results[0]["error_code"], results[0]["base_offset"]) == (CORRUPT_MESSAGE, -1), results
        assert "a second time" in results[0]["error_message"]
        assert store.log("t", 0).log_end_offset == 0
        monkeypatch.undo()  # the same request, decompressed right, is appended
        results, _ = _append_all(store, [("t", 0, sent)], None)
        assert results[0]["error_code"] == NONE, results
        assert store.read_arrow("t", 0).column("value").equals(rows.column("value"))


@pytest.mark.parametrize("codec", list(PRIMARY))
@pytest.mark.parametrize("fault", [lambda records: records[:-1], lambda records: records + b"\x00",
                                   lambda records: records[1:] + records[:1]], ids=["shorter", "longer", "rotated"])
def test_a_decompression_of_another_length_or_order_is_refused(monkeypatch: pytest.MonkeyPatch, codec: int,
                                                               fault: Callable[[bytes], bytes]) -> None:
    packed = memoryview(compression.compress(codec, RECORDS))
    monkeypatch.setattr(compression, PRIMARY[codec], faulty(getattr(compression, PRIMARY[codec]), fault))
    with pytest.raises(CorruptRecordError, match="a second time"):
        compression.decompress(codec, packed)


# What clients write, each decompressed and checked whole.
FRAMES = {
    "gzip, one member": (compression.GZIP, gzip.compress(RECORDS)),
    "gzip, three members": (compression.GZIP, b"".join(gzip.compress(RECORDS[i:i + 100_000])
                                                         for i in range(0, len(RECORDS), 100_000))),
    "gzip, an empty member first": (compression.GZIP, gzip.compress(b"") + gzip.compress(RECORDS)),
    "snappy, raw block": (compression.SNAPPY, bytes(cramjam.snappy.compress_raw(RECORDS))),
    "snappy, xerial blocks": (compression.SNAPPY, compression.compress(compression.SNAPPY, RECORDS)),
    "lz4, content size and checksums": (compression.LZ4, lz4.frame.compress(
        RECORDS, block_linked=False, content_checksum=True, block_checksum=True, store_size=True)),
    "lz4, no content size (Java)": (compression.LZ4, lz4.frame.compress(RECORDS, block_linked=False,
                                                                        store_size=False)),
    "zstd, content size": (compression.ZSTD, zstandard.ZstdCompressor(level=3).compress(RECORDS)),
    "zstd, no content size (Java), checksum": (compression.ZSTD, zstandard.ZstdCompressor(
        level=1, write_content_size=False, write_checksum=True).compress(RECORDS)),
}


@pytest.mark.parametrize("name", list(FRAMES))
def test_what_clients_write_decompresses_and_passes_the_check(name: str) -> None:
    codec, packed = FRAMES[name]
    assert compression.decompress(codec, memoryview(packed), len(RECORDS)) == RECORDS


def test_a_gzip_stream_whose_trailer_lies_is_corrupt() -> None:
    """zlib checks the trailer too; the check's own comparison is what the fault tests above exercise."""
    packed = bytearray(gzip.compress(RECORDS))
    packed[-8] ^= 1  # the CRC-32
    with pytest.raises(CorruptRecordError):
        compression.decompress(compression.GZIP, memoryview(packed))


def test_kafka_python_batches_of_every_codec_pass_the_check() -> None:
    for codec in PRIMARY:
        builder = DefaultRecordBatchBuilder(2, codec, False, -1, -1, -1, 1 << 22)
        builder.append(0, 1_700_000_000_000, b"k", RECORDS, [])
        (batch,) = decode_batches(bytes(builder.build()))
        assert batch.columns.value.to_pylist() == [RECORDS]
