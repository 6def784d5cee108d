"""The record-batch codec against kafka-python's pure-Python one (``kafka.record``), the independent oracle:
its batches decode to the same records, ours parse in it to the same records, for every codec; damaged
bytes give CorruptRecordError and nothing else."""

from __future__ import annotations

import contextlib
import struct

import crc32c
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from compactlog.errors import CorruptRecordError, InvalidRecordError, UnsupportedCompressionTypeError
from compactlog.protocol.batch_plan import batch_starts
from compactlog.protocol.record_batch import (
    BATCH_OVERHEAD,
    CRC_START,
    LOG_APPEND_TIME,
    ProducedBatch,
    decode_batches,
    encode_batches,
)
from compactlog.record import CONTROL_ABORT, CONTROL_COMMIT, CONTROL_EMPTY_BATCH, CONTROL_NONE, SCHEMA

# kafka-python 3 reads its message schemas with importlib.resources' deprecated calls.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

CODECS = [0, 1, 2, 3, 4]
COMPRESSIBLE = b"value " * 40  # long and repetitive: kafka-python sends a batch uncompressed unless it shrinks

# (offset delta, timestamp, key, value, headers): null keys, tombstones, a header with a null value, a gap.
KAFKA_RECORDS = [
    (0, 1_700_000_000_000, b"k1", COMPRESSIBLE, []),
    (1, 1_699_999_999_000, None, b"keyless", [("trace", b"abc"), ("empty", None)]),
    (2, 1_700_000_000_005, b"k1", None, []),
    (7, 1_700_000_000_010, b"", b"", [("", b"")]),
    (8, 1_700_000_000_020, b"k2", COMPRESSIBLE, []),
]


def kafka_batch(codec: int, records: list = KAFKA_RECORDS, *, producer: tuple[int, int, int] = (-1, -1, -1),
                transactional: bool = False, base_offset: int = 0) -> bytes:
    producer_id, epoch, sequence = producer
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=transactional,
                                        producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence,
                                        batch_size=1 << 20)
    for offset_delta, timestamp, key, value, headers in records:
        builder.append(offset_delta, timestamp=timestamp, key=key, value=value, headers=headers)
    data = bytearray(builder.build())
    struct.pack_into(">q", data, 0, base_offset)  # outside the CRC: a broker sets it
    return bytes(data)


def kafka_read(data: bytes) -> list[tuple]:
    """Every record kafka-python reads in ``data``: (offset, timestamp, key, value, headers)."""
    out = []
    for batch in MemoryRecords(data):
        assert batch.validate_crc()
        out += [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch]
    return out


def our_read(batches: list[ProducedBatch]) -> list[tuple]:
    out = []
    for batch in batches:
        for row in batch.records.to_pylist():
            headers = [(h["key"], h["value"]) for h in row["headers"] or []]
            out.append((batch.base_offset + row["offset_delta"], row["timestamp"], row["key"], row["value"], headers))
    return out


def rows(*specs: dict) -> pa.Table:
    """Rows of compactlog.record.SCHEMA: each spec's keys override a data row without a producer."""
    defaults = {"timestamp": 1_000, "key": b"k", "value": b"v", "headers": None, "producer_id": -1,
                "producer_epoch": -1, "sequence": -1, "is_transactional": False, "control_type": CONTROL_NONE,
                "delete_horizon_ms": -1}
    return pa.Table.from_pylist([{**defaults, **spec} for spec in specs], schema=SCHEMA)


# ---------------------------------------------------------------- kafka-python's batches, decoded by us


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_batches_decode_to_the_same_records(codec: int) -> None:
    data = kafka_batch(codec, base_offset=42) + kafka_batch(codec, KAFKA_RECORDS[:2], producer=(7, 3, 100),
                                                            base_offset=51)
    batches = decode_batches(data)
    assert [b.compression for b in batches] == [codec, codec]  # compressed indeed, not sent plain
    assert our_read(batches) == kafka_read(data)
    first, second = batches
    assert (first.base_offset, first.record_count, first.last_offset_delta, first.magic) == (42, 5, 8, 2)
    assert (first.producer_id, first.base_sequence) == (-1, -1)
    assert (second.producer_id, second.producer_epoch, second.base_sequence) == (7, 3, 100)
    assert first.max_timestamp == 1_700_000_000_020 and first.base_timestamp == 1_700_000_000_000
    assert first.size_in_bytes + second.size_in_bytes == len(data)
    assert first.records.schema.field("headers").type == SCHEMA.field("headers").type
    assert first.records.column("headers").null_count == 3  # null where a record has no headers


def test_a_transactional_batch_keeps_its_flags() -> None:
    [batch] = decode_batches(kafka_batch(0, producer=(9, 0, 0), transactional=True))
    assert batch.is_transactional and not batch.is_control and batch.attributes & 0x10


def test_decoding_nothing_gives_no_batches() -> None:
    assert decode_batches(b"") == []


# ---------------------------------------------------------------- our batches, parsed by kafka-python


@pytest.mark.parametrize("codec", CODECS)
def test_our_batches_parse_in_kafka_python_with_the_same_records(codec: int) -> None:
    table = rows(
        {"offset": 100, "key": b"a", "value": COMPRESSIBLE},
        {"offset": 101, "key": None, "value": b"keyless", "headers": [{"key": "h", "value": None},
                                                                      {"key": "i", "value": b"x"}]},
        {"offset": 105, "key": b"a", "value": None, "timestamp": 999},  # a gap, a tombstone, an older timestamp
        {"offset": 106, "key": b"b", "value": COMPRESSIBLE, "producer_id": 4, "producer_epoch": 1, "sequence": 17},
        {"offset": 107, "key": b"c", "value": b"", "producer_id": 4, "producer_epoch": 1, "sequence": 18},
    )
    data = encode_batches(table, codec)
    expected = [(r["offset"], r["timestamp"], r["key"], r["value"],
                 [(h["key"], h["value"]) for h in r["headers"] or []]) for r in table.to_pylist()]
    assert kafka_read(data) == expected
    batches = list(MemoryRecords(data))
    assert [b.compression_type for b in batches] == [codec, codec]
    assert [(b.base_offset, b.last_offset_delta, b.producer_id, b.producer_epoch, b.base_sequence)
            for b in batches] == [(100, 5, -1, -1, -1), (106, 1, 4, 1, 17)]
    assert our_read(decode_batches(data)) == expected


def test_transaction_markers_become_control_batches() -> None:
    table = rows(
        {"offset": 0, "producer_id": 5, "producer_epoch": 2, "sequence": 0, "is_transactional": True},
        {"offset": 1, "producer_id": 5, "producer_epoch": 2, "is_transactional": True, "key": None, "value": None,
         "control_type": CONTROL_COMMIT},
        {"offset": 2, "producer_id": 5, "producer_epoch": 2, "is_transactional": True, "key": None, "value": None,
         "control_type": CONTROL_ABORT},
    )
    batches = list(MemoryRecords(encode_batches(table)))
    assert [(b.is_control_batch, b.is_transactional, b.producer_id, b.producer_epoch) for b in batches] == [
        (False, True, 5, 2), (True, True, 5, 2), (True, True, 5, 2)]
    commit, abort = (next(iter(b)) for b in batches[1:])
    assert (commit.offset, commit.version, commit.commit) == (1, 0, True)
    assert (abort.offset, abort.version, abort.abort) == (2, 0, True)
    assert struct.unpack(">hi", commit.value) == (0, 0)  # EndTransactionMarker v0, coordinator epoch 0
    assert [b.is_control for b in decode_batches(encode_batches(table))] == [False, True, True]


@pytest.mark.parametrize("codec", CODECS)
def test_markers_and_empty_batches_are_written_uncompressed_as_kafka_writes_them(codec: int) -> None:
    table = rows({"offset": 0, "producer_id": 5, "producer_epoch": 2, "sequence": 0, "is_transactional": True,
                  "value": COMPRESSIBLE},
                 {"offset": 1, "producer_id": 5, "producer_epoch": 2, "is_transactional": True, "key": None,
                  "value": None, "control_type": CONTROL_COMMIT},
                 {"offset": 2, "producer_id": 3, "producer_epoch": 1, "sequence": 41, "key": None, "value": None,
                  "control_type": CONTROL_EMPTY_BATCH})
    data = encode_batches(table, codec)
    assert [b.compression_type for b in MemoryRecords(data)] == [codec, 0, 0]
    assert [r[0] for r in kafka_read(data)] == [0, 1]
    assert [b.record_count for b in decode_batches(data)] == [1, 1, 0]


def test_an_emptied_batch_row_becomes_an_empty_batch_header() -> None:
    table = rows({"offset": 7, "producer_id": 3, "producer_epoch": 1, "sequence": 41, "key": None, "value": None,
                  "control_type": CONTROL_EMPTY_BATCH},
                 {"offset": 9, "producer_id": 3, "producer_epoch": 1, "sequence": 42})
    data = encode_batches(table)
    empty, data_batch = MemoryRecords(data)
    assert (empty.base_offset, empty.records_count, empty.last_offset_delta, empty.base_sequence) == (7, 0, 0, 41)
    assert (empty.producer_id, empty.producer_epoch, empty.is_control_batch) == (3, 1, False)
    assert (empty.first_timestamp, empty.max_timestamp) == (-1, 1_000)  # NO_TIMESTAMP, as writeEmptyHeader
    assert list(empty) == []
    assert [r.offset for r in data_batch] == [9]
    ours = decode_batches(data)
    assert [(b.base_offset, b.record_count, b.base_sequence) for b in ours] == [(7, 0, 41), (9, 1, 42)]


def test_a_delete_horizon_goes_in_the_base_timestamp_with_its_attribute_bit() -> None:
    table = rows({"offset": 0, "timestamp": 5_000, "value": None, "delete_horizon_ms": 90_000},
                 {"offset": 1, "timestamp": 6_000, "value": None, "delete_horizon_ms": 90_000},
                 {"offset": 2, "timestamp": 7_000})
    data = encode_batches(table)
    tombstones, rest = MemoryRecords(data)
    assert tombstones.attributes & 0x40 and not rest.attributes & 0x40
    assert tombstones.first_timestamp == 90_000 and tombstones.max_timestamp == 6_000
    assert [r.timestamp for r in tombstones] == [5_000, 6_000]  # deltas taken from the horizon
    ours = decode_batches(data)
    assert [b.delete_horizon_ms for b in ours] == [90_000, -1]
    assert [r[1] for r in our_read(ours)] == [5_000, 6_000, 7_000]


def test_log_append_time_batches_give_every_record_the_max_timestamp() -> None:
    table = rows({"offset": 0, "timestamp": 5}, {"offset": 1, "timestamp": 8})
    data = encode_batches(table, timestamp_type=LOG_APPEND_TIME)
    assert [r.timestamp for r in next(iter(MemoryRecords(data)))] == [8, 8]
    [batch] = decode_batches(data)
    assert batch.timestamp_type == LOG_APPEND_TIME and batch.records.column("timestamp").to_pylist() == [8, 8]


def test_a_fetch_stops_before_the_batch_that_would_pass_max_bytes_but_returns_one() -> None:
    table = rows(*({"offset": i, "producer_id": i, "producer_epoch": 0, "sequence": 0, "value": b"x" * 100}
                   for i in range(10)))  # ten batches: one producer each
    whole = encode_batches(table)
    sizes = [b.size_in_bytes for b in MemoryRecords(whole)]
    assert len(sizes) == 10
    for codec in (0, 1):
        assert encode_batches(table, codec, max_bytes=None) == encode_batches(table, codec)
    assert encode_batches(table, max_bytes=sizes[0] + sizes[1]) == whole[:sizes[0] + sizes[1]]
    assert encode_batches(table, max_bytes=sizes[0] + sizes[1] - 1) == whole[:sizes[0]]
    assert encode_batches(table, max_bytes=1) == whole[:sizes[0]]  # at least one whole batch
    gzip = encode_batches(table, 1, max_bytes=1)
    assert len(list(MemoryRecords(gzip))) == 1
    assert len(list(MemoryRecords(encode_batches(table, 1, max_bytes=len(whole))))) == 10


def test_a_long_run_of_one_producer_is_cut_at_batch_bytes() -> None:
    table = rows(*({"offset": i, "value": b"x" * 100} for i in range(50)))
    batches = list(MemoryRecords(encode_batches(table, batch_bytes=1_000)))
    assert len(batches) == 6 and all(b.size_in_bytes < 1_000 + 200 for b in batches)
    assert [r[0] for r in kafka_read(encode_batches(table, batch_bytes=1_000))] == list(range(50))


def test_batch_starts_rules() -> None:
    import numpy as np

    def starts(**columns: list) -> list[int]:
        n = len(columns["offsets"])
        filled = {"producer_id": [-1] * n, "producer_epoch": [-1] * n, "transactional": [False] * n,
                  "control_type": [-1] * n, "delete_horizon_ms": [-1] * n, "record_bytes": [10] * n, **columns}
        return batch_starts(*(np.array(filled[name]) for name in (
            "offsets", "producer_id", "producer_epoch", "transactional", "control_type", "delete_horizon_ms",
            "record_bytes")), batch_bytes=1_000).tolist()

    assert starts(offsets=[0, 1, 2]) == [0]
    assert starts(offsets=[0, 1, 2, 3], producer_id=[1, 1, 2, 2]) == [0, 2]
    assert starts(offsets=[0, 1, 2], producer_epoch=[0, 1, 1]) == [0, 1]
    assert starts(offsets=[0, 1, 2], transactional=[True, True, False]) == [0, 2]
    assert starts(offsets=[0, 1, 2], delete_horizon_ms=[-1, 5, 5]) == [0, 1]
    assert starts(offsets=[0, 1, 2, 3], control_type=[-1, 1, 1, -1]) == [0, 1, 2, 3]
    assert starts(offsets=[0, 1, 2, 3], record_bytes=[600, 600, 600, 600]) == [0, 2]
    assert starts(offsets=[0, 1, 2, 3], record_bytes=[400, 400, 400, 400]) == [0, 3]
    assert starts(offsets=[0, 1, 2**31, 2**31 + 1]) == [0, 2]


def test_headers_without_a_key_are_refused() -> None:
    table = rows({"offset": 0, "headers": [None]})
    with pytest.raises(InvalidRecordError, match="header without a key"):
        encode_batches(table)


def test_an_unknown_codec_is_refused_both_ways() -> None:
    with pytest.raises(UnsupportedCompressionTypeError, match="compression type 5"):
        encode_batches(rows({"offset": 0}), 5)
    data = bytearray(kafka_batch(0))
    struct.pack_into(">h", data, 21, 5)
    with pytest.raises(UnsupportedCompressionTypeError, match="compression type 5"):
        decode_batches(with_crc(data))


# ---------------------------------------------------------------- damaged bytes


def with_crc(data: bytearray | bytes) -> bytes:
    """``data`` (one batch) with its batchLength and CRC made right again, as a deliberate forger would."""
    data = bytearray(data)
    struct.pack_into(">i", data, 8, len(data) - 12)
    struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[CRC_START:])))
    return bytes(data)


def small_batches() -> list[bytes]:
    table = rows({"offset": 3, "key": None, "value": b"v1", "headers": [{"key": "h", "value": None}]},
                 {"offset": 5, "key": b"k", "value": None})
    return [encode_batches(table, codec) for codec in CODECS]


@pytest.mark.parametrize("codec", CODECS)
def test_every_flipped_byte_is_corrupt_outside_the_fields_the_crc_leaves_out(codec: int) -> None:
    data = small_batches()[codec]
    expected = [record[1:] for record in our_read(decode_batches(data))]
    for position in range(len(data)):
        damaged = bytearray(data)
        damaged[position] ^= 0xFF
        if position < 8 or 12 <= position < 16:  # baseOffset, partitionLeaderEpoch: a broker rewrites them
            assert [record[1:] for record in our_read(decode_batches(damaged))] == expected
            continue
        with pytest.raises(CorruptRecordError):
            decode_batches(bytes(damaged))


@pytest.mark.parametrize("codec", CODECS)
def test_a_batch_cut_short_anywhere_is_corrupt(codec: int) -> None:
    data = small_batches()[codec]
    for doubled in (data, data + data):
        for end in range(len(data) if doubled is data else len(data) + 1, len(doubled)):
            with pytest.raises(CorruptRecordError):
                decode_batches(doubled[:end])
    for end in range(1, len(data)):
        with pytest.raises(CorruptRecordError):
            decode_batches(data[:end])


def test_a_record_count_that_disagrees_with_the_records_is_corrupt() -> None:
    data = bytearray(small_batches()[0])
    for count, message in ((3, "3 records cannot fit"), (1, "bytes after its last record"), (-1, "negative")):
        struct.pack_into(">i", data, 57, count)
        with pytest.raises(CorruptRecordError, match=message):
            decode_batches(with_crc(data))


def test_other_magic_and_undecompressable_records_are_corrupt() -> None:
    data = bytearray(small_batches()[0])
    data[16] = 1
    with pytest.raises(CorruptRecordError, match="magic 1"):
        decode_batches(with_crc(data))
    for codec in (1, 2, 3, 4):
        data = bytearray(small_batches()[codec])
        data[BATCH_OVERHEAD:] = b"\x00" * (len(data) - BATCH_OVERHEAD)
        with pytest.raises(CorruptRecordError):
            decode_batches(with_crc(data))


def test_a_header_key_that_is_not_utf8_is_corrupt() -> None:
    data = bytearray(small_batches()[0])
    position = data.index(b"h", BATCH_OVERHEAD)
    data[position] = 0xFF
    with pytest.raises(CorruptRecordError, match="UTF-8"):
        decode_batches(with_crc(data))


EDITS = st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255), st.sampled_from(["set", "insert", "delete"])),
                 min_size=1, max_size=4)


def forge(codec: int, edits: list) -> bytes:
    """A small batch whose records were edited, then compressed with ``codec``, its length and CRC made right."""
    data = bytearray(small_batches()[0])
    records = bytearray(data[BATCH_OVERHEAD:])
    for position, byte, edit in edits:
        position %= len(records) + 1
        if edit == "set" and position < len(records):
            records[position] = byte
        elif edit == "insert":
            records.insert(position, byte)
        elif position < len(records):
            del records[position]
    if codec:
        from compactlog.protocol.compression import compress

        records = bytearray(compress(codec, records))
        struct.pack_into(">h", data, 21, codec)
    return with_crc(data[:BATCH_OVERHEAD] + records)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(codec=st.sampled_from([0, 0, 0, 1]), edits=EDITS)
def test_forged_records_with_a_right_crc_decode_or_are_corrupt(codec: int, edits: list) -> None:
    """Damage to the records that a CRC does not catch (it was made right again): CorruptRecordError or
    records, never another exception (nor a crash of the C parser)."""
    with contextlib.suppress(CorruptRecordError):
        decode_batches(forge(codec, edits))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(edits=EDITS.map(lambda edits: [(position, byte & 0x7F, edit) for position, byte, edit in edits]))
@example(edits=[(0, 0x18, "set")])  # the first record's length one byte longer than its fields
@example(edits=[(0, 0x14, "set")])  # one byte shorter
def test_forged_records_that_decode_are_what_kafka_python_reads(edits: list) -> None:
    """What decodes of forged records is what kafka-python reads. Bytes below 0x80 only: kafka-python reads a
    record's attributes as a varint where Kafka reads one byte, so a forged attributes byte >= 0x80 makes
    the oracle, not us, read past it."""
    forged = forge(0, edits)
    try:
        ours = our_read(decode_batches(forged))
    except CorruptRecordError:
        return
    assert ours == kafka_read(forged)


# ---------------------------------------------------------------- round trips


HEADERS = st.one_of(st.none(), st.lists(st.fixed_dictionaries(
    {"key": st.text(max_size=4), "value": st.one_of(st.none(), st.binary(max_size=6))}), max_size=3))
ROW = st.fixed_dictionaries({
    "gap": st.integers(1, 3),
    "timestamp": st.integers(0, 2**50),
    "key": st.one_of(st.none(), st.binary(max_size=8)),
    "value": st.one_of(st.none(), st.binary(max_size=300)),
    "headers": HEADERS,
    "producer": st.sampled_from([(-1, -1), (1, 0), (2, 5)]),
    "is_transactional": st.booleans(),
    "delete_horizon_ms": st.sampled_from([-1, -1, 2**40]),
})


@settings(max_examples=150, deadline=None)
@given(specs=st.lists(ROW, min_size=1, max_size=30), codec=st.sampled_from(CODECS),
       batch_bytes=st.sampled_from([100, 1 << 20]))
def test_rows_round_trip_through_our_codec_and_kafka_python(specs: list[dict], codec: int, batch_bytes: int) -> None:
    offset = 1_000
    specs_out = []
    for spec in specs:
        offset += spec.pop("gap")
        producer_id, epoch = spec.pop("producer")
        transactional = spec.pop("is_transactional") and producer_id >= 0
        specs_out.append({**spec, "offset": offset, "producer_id": producer_id, "producer_epoch": epoch,
                          "sequence": offset if producer_id >= 0 else -1, "is_transactional": transactional})
    table = rows(*specs_out)
    data = encode_batches(table, codec, batch_bytes=batch_bytes)
    expected = [(r["offset"], r["timestamp"], r["key"], r["value"],
                 [(h["key"], h["value"]) for h in r["headers"] or []]) for r in specs_out]
    assert kafka_read(data) == expected
    batches = decode_batches(data)
    assert our_read(batches) == expected
    per_row = [(b.producer_id, b.producer_epoch, b.is_transactional, b.delete_horizon_ms)
               for b in batches for _ in range(b.record_count)]
    assert per_row == [(r["producer_id"], r["producer_epoch"], r["is_transactional"], r["delete_horizon_ms"])
                       for r in specs_out]
    assert [b.base_sequence for b in batches] == [
        specs_out[[r["offset"] for r in specs_out].index(b.base_offset)]["sequence"] for b in batches]


@given(data=st.binary(max_size=100))
def test_the_extension_crc32c_is_the_crc32c_package_s(data: bytes) -> None:
    from compactlog.protocol._record_batch import crc32c as extension_crc32c

    assert extension_crc32c(data) == crc32c.crc32c(data)


def test_zstd_records_without_a_content_size_decode_and_a_cut_zstd_frame_is_corrupt() -> None:
    """Java's ZstdOutputStream writes frames without the content size; python-zstandard's one-shot call
    cannot read those, and a stream reader returns what it has of a cut frame without complaint."""
    import zstandard

    data = bytearray(small_batches()[0])
    records = bytes(data[BATCH_OVERHEAD:])
    frame = zstandard.ZstdCompressor(level=3, write_content_size=False).compress(records)
    struct.pack_into(">h", data, 21, 4)
    decoded = decode_batches(with_crc(data[:BATCH_OVERHEAD] + frame))
    assert our_read(decoded) == our_read(decode_batches(small_batches()[0]))
    with pytest.raises(CorruptRecordError, match="zstd"):
        decode_batches(with_crc(data[:BATCH_OVERHEAD] + frame[:-3]))


def test_a_sliced_table_encodes_as_the_same_rows_copied() -> None:
    """Arrow slices keep their parent's buffers and an offset into them (a read of a segment hands out such
    slices): every column's offset must be honoured, the validity bitmaps' too."""
    table = rows(*({"offset": i, "key": None if i % 3 == 0 else b"k%d" % i,
                    "value": None if i % 4 == 0 else b"v" * i,
                    "headers": None if i % 2 else [{"key": f"h{i}", "value": None if i % 5 == 0 else b"x"}]}
                   for i in range(20)))
    for start, length in ((1, 7), (5, 10), (13, 7)):
        sliced = table.slice(start, length)
        assert encode_batches(sliced) == encode_batches(pa.Table.from_pylist(sliced.to_pylist(), schema=SCHEMA))


@settings(max_examples=300, deadline=None)
@given(attributes=st.integers(-(2**15), 2**15 - 1), last_offset_delta=st.integers(-(2**31), 2**31 - 1),
       count=st.integers(-(2**31), 2**31 - 1), batch_length=st.integers(-(2**31), 2**31 - 1),
       fix_length=st.booleans())
def test_forged_headers_with_a_right_crc_decode_or_raise_our_errors(attributes: int, last_offset_delta: int,
                                                                    count: int, batch_length: int,
                                                                    fix_length: bool) -> None:
    data = bytearray(small_batches()[0])
    struct.pack_into(">hi", data, 21, attributes, last_offset_delta)
    struct.pack_into(">i", data, 57, count)
    forged = with_crc(data)
    if not fix_length:
        forged = forged[:8] + struct.pack(">i", batch_length) + forged[12:]
    try:
        batches = decode_batches(forged)
    except (CorruptRecordError, UnsupportedCompressionTypeError):
        return
    assert [b.record_count for b in batches] == [count]
