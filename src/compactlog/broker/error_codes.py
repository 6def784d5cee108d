"""Kafka's error codes, and the one table that maps compactlog's errors to them.

Errors cross the wire as codes in responses, never as exceptions (Kafka's ``Errors``): a handler catches a
:class:`~compactlog.errors.CompactLogError` and answers :func:`error_code` of it, with the message where
the response has an error-message field.
"""

from __future__ import annotations

from .. import errors

NONE = 0
UNKNOWN_SERVER_ERROR = -1
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
MESSAGE_TOO_LARGE = 10
OFFSET_METADATA_TOO_LARGE = 12
COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
INVALID_TOPIC_EXCEPTION = 17
INVALID_REQUIRED_ACKS = 21
ILLEGAL_GENERATION = 22
INCONSISTENT_GROUP_PROTOCOL = 23
INVALID_GROUP_ID = 24
UNKNOWN_MEMBER_ID = 25
INVALID_SESSION_TIMEOUT = 26
REBALANCE_IN_PROGRESS = 27
INVALID_COMMIT_OFFSET_SIZE = 28
UNSUPPORTED_VERSION = 35
TOPIC_ALREADY_EXISTS = 36
INVALID_PARTITIONS = 37
INVALID_REPLICATION_FACTOR = 38
INVALID_REPLICA_ASSIGNMENT = 39
INVALID_CONFIG = 40
INVALID_REQUEST = 42
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
INVALID_PRODUCER_ID_MAPPING = 49
INVALID_TRANSACTION_TIMEOUT = 50
CONCURRENT_TRANSACTIONS = 51
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
OPERATION_NOT_ATTEMPTED = 55
KAFKA_STORAGE_ERROR = 56
NON_EMPTY_GROUP = 68
GROUP_ID_NOT_FOUND = 69
UNSUPPORTED_COMPRESSION_TYPE = 76
MEMBER_ID_REQUIRED = 79
GROUP_MAX_SIZE_REACHED = 81
FENCED_INSTANCE_ID = 82
GROUP_SUBSCRIBED_TO_TOPIC = 86
INVALID_RECORD = 87
UNSTABLE_OFFSET_COMMIT = 88
PRODUCER_FENCED = 90

# Most specific first: the first class in an error's MRO found here gives its code.
_CODES: dict[type[errors.CompactLogError], int] = {
    errors.UnknownTopicOrPartitionError: UNKNOWN_TOPIC_OR_PARTITION,
    errors.OffsetOutOfRangeError: OFFSET_OUT_OF_RANGE,
    errors.RecordTooLargeError: MESSAGE_TOO_LARGE,
    errors.InvalidRecordError: INVALID_RECORD,  # a keyless record on a compacted topic, among others
    errors.CorruptRecordError: CORRUPT_MESSAGE,
    errors.UnsupportedCompressionTypeError: UNSUPPORTED_COMPRESSION_TYPE,
    errors.OutOfOrderSequenceError: OUT_OF_ORDER_SEQUENCE_NUMBER,
    errors.ProducerFencedError: INVALID_PRODUCER_EPOCH,  # what Produce answers an older epoch
    errors.InvalidTxnStateError: INVALID_TXN_STATE,
    errors.InvalidProducerIdMappingError: INVALID_PRODUCER_ID_MAPPING,
    errors.ConcurrentTransactionsError: CONCURRENT_TRANSACTIONS,
    errors.InvalidTransactionTimeoutError: INVALID_TRANSACTION_TIMEOUT,
    errors.TopicExistsError: TOPIC_ALREADY_EXISTS,
    errors.InvalidPartitionsError: INVALID_PARTITIONS,
    errors.InvalidTopicError: INVALID_TOPIC_EXCEPTION,
    errors.ConfigError: INVALID_CONFIG,
    errors.KafkaStorageError: KAFKA_STORAGE_ERROR,
    errors.ReadOnlyStoreError: KAFKA_STORAGE_ERROR,
    errors.CorruptSegmentError: KAFKA_STORAGE_ERROR,
    errors.CorruptTopicMetadataError: KAFKA_STORAGE_ERROR,
    errors.InvalidRequestError: INVALID_REQUEST,
    errors.MalformedRequestError: INVALID_REQUEST,
}


def error_code(error: BaseException) -> int:
    """Kafka's error code for ``error``: the entry of its most specific class, else UNKNOWN_SERVER_ERROR."""
    for cls in type(error).__mro__:
        code = _CODES.get(cls)
        if code is not None:
            return code
    return UNKNOWN_SERVER_ERROR
