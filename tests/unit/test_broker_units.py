"""The broker's pure parts: the error-code table, the checks of produced batches (decoded by the codec,
which tests/unit/test_record_batch.py tests against kafka-python)."""

from __future__ import annotations

import pytest

pytest.importorskip("kafka")
from kafka.record.default_records import DefaultRecordBatchBuilder

from compactlog import errors
from compactlog.broker import error_codes
from compactlog.broker.log_validator import check_batches
from compactlog.protocol.record_batch import decode_batches


@pytest.mark.parametrize(("error", "code"), [
    (errors.UnknownTopicOrPartitionError("t"), error_codes.UNKNOWN_TOPIC_OR_PARTITION),
    (errors.OffsetOutOfRangeError("o"), error_codes.OFFSET_OUT_OF_RANGE),
    (errors.RecordTooLargeError("big"), error_codes.MESSAGE_TOO_LARGE),  # before its parent, InvalidRecordError
    (errors.InvalidRecordError("no key"), error_codes.INVALID_RECORD),
    (errors.CorruptRecordError("crc"), error_codes.CORRUPT_MESSAGE),
    (errors.OutOfOrderSequenceError("gap"), error_codes.OUT_OF_ORDER_SEQUENCE_NUMBER),
    (errors.ProducerFencedError("old"), error_codes.INVALID_PRODUCER_EPOCH),
    (errors.ConfigError("bad"), error_codes.INVALID_CONFIG),
    (errors.TopicExistsError("t"), error_codes.TOPIC_ALREADY_EXISTS),
    (errors.KafkaStorageError("disk"), error_codes.KAFKA_STORAGE_ERROR),
    (errors.CompactLogError("other"), error_codes.UNKNOWN_SERVER_ERROR),
])
def test_each_error_has_kafkas_code(error: errors.CompactLogError, code: int) -> None:
    assert error_codes.error_code(error) == code


def _batch(keys: list[bytes | None]) -> bytes:
    builder = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 1 << 20)
    for i, key in enumerate(keys):
        builder.append(i, 1, key, b"v" * 100, [])
    return bytes(builder.build())


def test_a_partitions_batch_is_checked_as_kafkas_log_validator_does() -> None:
    [batch] = decode_batches(_batch([b"c", None]))
    check_batches([batch], compacted=False, max_message_bytes=1000, where="t-0")
    with pytest.raises(errors.InvalidRecordError, match="without a key"):  # the keyless record
        check_batches([batch], compacted=True, max_message_bytes=1000, where="t-0")
    with pytest.raises(errors.RecordTooLargeError, match=r"larger than max\.message\.bytes=200"):
        check_batches([batch], compacted=False, max_message_bytes=200, where="t-0")
    with pytest.raises(errors.InvalidRecordError, match="2 record batches"):  # Kafka: one batch a partition
        check_batches([batch, batch], compacted=False, max_message_bytes=1000, where="t-0")


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


def test_a_null_where_the_schema_has_no_nullable_versions_is_found() -> None:
    from kafka.protocol.producer import ProduceRequest

    from compactlog.broker.messages import null_field

    def request(topic_data: list | None) -> ProduceRequest:
        return ProduceRequest(version=9, transactional_id=None, acks=-1, timeout_ms=1, topic_data=topic_data)

    def topic(partitions: list | None) -> ProduceRequest.TopicProduceData:
        return ProduceRequest.TopicProduceData(version=9, name="t", partition_data=partitions)

    partition = ProduceRequest.TopicProduceData.PartitionProduceData(version=9, index=0, records=None)
    assert null_field(request([topic([partition])]), 9) is None  # transactional_id and records may be null
    assert null_field(request(None), 9) == "topic_data"
    assert null_field(request([topic([partition]), topic(None)]), 9) == "topic_data[1].partition_data"


@pytest.mark.parametrize(("version", "client_id"), [(3, "rdkafka"), (9, "rdkafka"), (9, None), (9, "é" * 200)])
def test_a_request_decodes_as_kafka_pythons_own_decoder_with_its_header(version: int, client_id: str | None) -> None:
    """decode_request decodes the header with its compiled decoder (v3: header v1; v9: flexible, header v2 with
    tagged fields and a non-compact client id) and the body from the header's end."""
    from kafka.protocol.producer import ProduceRequest

    from compactlog.broker.messages import decode_request

    builder = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 1 << 20)
    builder.append(0, 1_000, b"k", b"v", [])
    partition = ProduceRequest.TopicProduceData.PartitionProduceData(index=2, records=bytes(builder.build()))
    request = ProduceRequest(version=version, transactional_id="tx", acks=-1, timeout_ms=1,
                             topic_data=[ProduceRequest.TopicProduceData(name="t", partition_data=[partition])])
    request.with_header(correlation_id=77, client_id=client_id)
    frame = bytes(request.encode(header=True))
    decoded, expected = decode_request(ProduceRequest, frame, version), ProduceRequest.decode(
        frame, version=version, header=True)
    assert decoded == expected and decoded.topic_data[0].partition_data[0].records == partition.records
    assert (decoded.header.correlation_id, decoded.header.client_id) == (77, client_id)
    assert (expected.header.correlation_id, expected.header.client_id) == (77, client_id)


def test_only_a_v2_batch_with_the_transactional_bit_makes_a_request_transactional() -> None:
    from kafka.record.legacy_records import LegacyRecordBatchBuilder

    from compactlog.broker.log_validator import has_transactional_records

    def transactional(is_transactional: bool) -> bytes:
        builder = DefaultRecordBatchBuilder(2, 0, is_transactional, 7, 0, 0, 1 << 20)
        builder.append(0, 1, b"k", b"v", [])
        return bytes(builder.build())

    legacy = LegacyRecordBatchBuilder(1, 0, 1 << 20)
    legacy.append(0, 0x10 << 24, b"k", b"v")  # this timestamp byte sits where v2 has the attributes' low byte
    assert has_transactional_records([None, transactional(False), transactional(True)])
    assert not has_transactional_records([None, b"", transactional(False), bytes(legacy.build())])


def test_fetch_record_sizes_count_key_value_and_header_bytes_and_nothing_for_a_null() -> None:
    import numpy as np
    import pyarrow as pa

    from compactlog.broker.fetch import RECORD_OVERHEAD, _record_sizes
    from compactlog.record import HEADER_TYPE

    # A null whose slot spans bytes (legal Arrow: offsets 2..5 under a clear validity bit), then a slice.
    values = pa.Array.from_buffers(pa.binary(), 4, [pa.py_buffer(bytes([0b1101])), pa.py_buffer(
        np.array([0, 2, 5, 5, 9], np.int32).tobytes()), pa.py_buffer(b"aabbbcccc")])
    keys = pa.array([b"k", b"kk", b"kkk", b"kkkk"])
    headers = pa.array([None, [{"key": "h", "value": b"vv"}], None, None], HEADER_TYPE)
    table = pa.table({"key": keys, "value": values, "headers": headers})
    assert _record_sizes(table).tolist() == [1 + 2 + RECORD_OVERHEAD, 2 + 0 + 3 + RECORD_OVERHEAD,
                                             3 + 0 + RECORD_OVERHEAD, 4 + 4 + RECORD_OVERHEAD]
    sliced = pa.Table.from_batches([table.to_batches()[0].slice(1, 2)])
    assert _record_sizes(sliced).tolist() == [2 + 0 + 3 + RECORD_OVERHEAD, 3 + 0 + RECORD_OVERHEAD]
    chunked = pa.table({"key": pa.chunked_array([keys[:1], keys[1:]]), "value": pa.chunked_array([values]),
                        "headers": pa.chunked_array([headers])})
    assert _record_sizes(chunked).tolist() == _record_sizes(table).tolist()
