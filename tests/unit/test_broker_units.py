"""The broker's pure parts: the error-code table, the records adapter on real v2 batches."""

from __future__ import annotations

import struct

import pyarrow as pa
import pytest

pytest.importorskip("kafka")
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from compactlog import errors
from compactlog.broker import error_codes
from compactlog.broker.produce import check_batches
from compactlog.broker.records_adapter import fetch_records, produced_batches
from compactlog.record import HEADER_TYPE


@pytest.mark.parametrize(("error", "code"), [
    (errors.UnknownTopicOrPartitionError("t"), error_codes.UNKNOWN_TOPIC_OR_PARTITION),
    (errors.OffsetOutOfRangeError("o"), error_codes.OFFSET_OUT_OF_RANGE),
    (errors.RecordTooLargeError("big"), error_codes.MESSAGE_TOO_LARGE),  # before its parent, InvalidRecordError
    (errors.InvalidRecordError("no key"), error_codes.INVALID_RECORD),
    (errors.CorruptRecordBatchError("crc"), error_codes.CORRUPT_MESSAGE),
    (errors.OutOfOrderSequenceError("gap"), error_codes.OUT_OF_ORDER_SEQUENCE_NUMBER),
    (errors.ProducerFencedError("old"), error_codes.INVALID_PRODUCER_EPOCH),
    (errors.ConfigError("bad"), error_codes.INVALID_CONFIG),
    (errors.TopicExistsError("t"), error_codes.TOPIC_ALREADY_EXISTS),
    (errors.KafkaStorageError("disk"), error_codes.KAFKA_STORAGE_ERROR),
    (errors.CompactLogError("other"), error_codes.UNKNOWN_SERVER_ERROR),
])
def test_each_error_has_kafkas_code(error: errors.CompactLogError, code: int) -> None:
    assert error_codes.error_code(error) == code


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])  # none, gzip, snappy, lz4, zstd
def test_a_produced_batch_decodes_to_columns(codec: int) -> None:
    builder = DefaultRecordBatchBuilder(2, codec, False, 9, 1, 40, 1 << 20)
    for i in range(50):
        builder.append(i, 1000 + i, b"k%d" % i, None if i == 7 else b"v" * 100, [("h", b"%d" % i)] if i == 3 else [])
    ((header, table),) = produced_batches(bytes(builder.build()))
    assert (header.producer_id, header.producer_epoch, header.base_sequence, header.record_count) == (9, 1, 40, 50)
    rows = table.to_pylist()
    assert [r["offset_delta"] for r in rows] == list(range(50)) and rows[10]["timestamp"] == 1010
    assert rows[7]["value"] is None
    assert rows[3]["headers"] == [{"key": "h", "value": b"3"}] and rows[4]["headers"] is None


def test_a_damaged_batch_is_corrupt() -> None:
    builder = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 1 << 20)
    builder.append(0, 1, b"k", b"v", [])
    data = bytes(builder.build())
    flipped = bytearray(data)
    flipped[-2] ^= 0xFF  # a byte of the value: the batch still parses, only its CRC tells
    for bad in (data[:-2], bytes(flipped)):
        with pytest.raises(errors.CorruptRecordBatchError):
            produced_batches(bad)


def test_fetched_rows_become_batches_with_gaps_and_control_batches() -> None:
    table = pa.table({
        "offset": pa.array([3, 5, 6, 9], pa.int64()), "timestamp": pa.array([1, 2, 3, 4], pa.int64()),
        "key": pa.array([b"a", b"b", b"c", None], pa.binary()),
        "value": pa.array([b"1", None, b"3", None], pa.binary()),
        "headers": pa.array([None, [{"key": "h", "value": b"x"}], None, None], HEADER_TYPE),
        "producer_id": pa.array([-1, 7, 7, 7], pa.int64()), "producer_epoch": pa.array([-1, 0, 0, 0], pa.int16()),
        "sequence": pa.array([-1, 0, 1, -1], pa.int32()), "is_transactional": [False, True, True, True],
        "control_type": pa.array([-1, -1, -1, 1], pa.int8())})
    batches = list(MemoryRecords(fetch_records(table)))
    assert [(b.base_offset, b.producer_id, b.is_transactional, b.is_control_batch) for b in batches] == [
        (3, -1, False, False), (5, 7, True, False), (9, 7, True, True)]
    assert all(b.validate_crc() for b in batches)
    assert [(r.offset, r.key, r.value, r.headers) for r in batches[1]] == [(5, b"b", None, [("h", b"x")]),
                                                                         (6, b"c", b"3", [])]
    ((control,),) = [list(batches[2])]
    assert struct.unpack(">hh", control.key) == (0, 1)  # version 0, COMMIT


def _batch(keys: list[bytes | None]) -> bytes:
    builder = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 1 << 20)
    for i, key in enumerate(keys):
        builder.append(i, 1, key, b"v" * 100, [])
    return bytes(builder.build())


def test_a_partitions_batches_are_all_checked_before_any_is_appended() -> None:
    batches = produced_batches(_batch([b"a", b"b"]) + _batch([b"c", None]))
    check_batches(batches, compacted=False, max_message_bytes=1000, where="t-0")
    with pytest.raises(errors.InvalidRecordError, match="without a key"):  # the second batch's keyless record
        check_batches(batches, compacted=True, max_message_bytes=1000, where="t-0")
    with pytest.raises(errors.RecordTooLargeError, match=r"larger than max\.message\.bytes=200"):
        check_batches(batches, compacted=False, max_message_bytes=200, where="t-0")


def test_alter_configs_replaces_the_overrides_and_incremental_changes_them(tmp_path) -> None:
    import compactlog
    from compactlog.broker.topic_admin import APPEND, DELETE, SET, TOPIC_RESOURCE, _alter_all

    with compactlog.open(tmp_path / "data") as store:
        store.create_topic("t", 1, {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01"})
        (replaced,) = _alter_all(store, [(TOPIC_RESOURCE, "t", {"delete.retention.ms": (SET, "5000")}, True)], False)
        config = store.topic_config("t")
        assert replaced["error_code"] == error_codes.NONE  # left out: back to the defaults (delete, 0.5)
        assert (config.delete_retention_ms, config.min_cleanable_dirty_ratio, config.cleanup_policy) == (
            5000, 0.5, ("delete",))
        _alter_all(store, [(TOPIC_RESOURCE, "t", {"cleanup.policy": (APPEND, "compact"),
                                                  "delete.retention.ms": (DELETE, None)}, False)], False)
        config = store.topic_config("t")
        assert (config.cleanup_policy, config.delete_retention_ms) == (("delete", "compact"), 86_400_000)
        (bad,) = _alter_all(store, [(TOPIC_RESOURCE, "t", {"cleanup.policy": (SET, "shred")}, False)], False)
        assert bad["error_code"] == error_codes.INVALID_CONFIG and "cleanup.policy" in bad["error_message"]
