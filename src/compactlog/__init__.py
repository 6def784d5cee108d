"""compactlog: Kafka's topic compaction (key-based retention) on Arrow and Parquet files.

``compactlog.open(data_dir)`` returns a :class:`Store`: topics, a producer, readers, and the log cleaner.
Spark integration lives in :mod:`compactlog.spark` and is imported only on demand.
"""

import os
from collections.abc import Callable

from .config import BrokerConfig, ProducerConfig, TopicConfig
from .errors import (
    CheckpointError,
    CleanerError,
    CleaningAbortedError,
    CompactLogError,
    ConcurrentTransactionsError,
    ConfigError,
    CorruptCleanerStateError,
    CorruptOffsetsRecordError,
    CorruptRecordError,
    CorruptSegmentError,
    CorruptTopicMetadataError,
    CorruptTransactionStateError,
    DataDirectoryError,
    DataDirectoryLockedError,
    EndpointError,
    ExecutorError,
    InvalidPartitionsError,
    InvalidProducerIdMappingError,
    InvalidRecordError,
    InvalidRequestError,
    InvalidTopicError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    KafkaStorageError,
    MalformedRequestError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    ProducerFencedError,
    ReadOnlyStoreError,
    RecordTooLargeError,
    ReportWriteError,
    StoreClosedError,
    TopicExistsError,
    UnknownGroupError,
    UnknownTopicOrPartitionError,
    UnsupportedCompressionTypeError,
)
from .partition_view import PartitionInfo, SegmentInfo
from .record import AppendResult, Record, RecordMetadata
from .store import Store, open_store

__version__ = "0.1.0"


def open(data_dir: str | os.PathLike[str], clock: Callable[[], int] | None = None) -> Store:
    """Open a data directory, creating a store in a missing or empty one (see :mod:`compactlog.data_dir`).
    ``clock`` returns epoch milliseconds (default: wall clock)."""
    return open_store(data_dir, clock)


__all__ = [
    "AppendResult",
    "BrokerConfig",
    "CheckpointError",
    "CleanerError",
    "CleaningAbortedError",
    "CompactLogError",
    "ConcurrentTransactionsError",
    "ConfigError",
    "CorruptCleanerStateError",
    "CorruptOffsetsRecordError",
    "CorruptRecordError",
    "CorruptSegmentError",
    "CorruptTopicMetadataError",
    "CorruptTransactionStateError",
    "DataDirectoryError",
    "DataDirectoryLockedError",
    "EndpointError",
    "ExecutorError",
    "InvalidPartitionsError",
    "InvalidProducerIdMappingError",
    "InvalidRecordError",
    "InvalidRequestError",
    "InvalidTopicError",
    "InvalidTransactionTimeoutError",
    "InvalidTxnStateError",
    "KafkaStorageError",
    "MalformedRequestError",
    "OffsetOutOfRangeError",
    "OutOfOrderSequenceError",
    "PartitionInfo",
    "ProducerConfig",
    "ProducerFencedError",
    "ReadOnlyStoreError",
    "Record",
    "RecordMetadata",
    "RecordTooLargeError",
    "ReportWriteError",
    "SegmentInfo",
    "Store",
    "StoreClosedError",
    "TopicConfig",
    "TopicExistsError",
    "UnknownGroupError",
    "UnknownTopicOrPartitionError",
    "UnsupportedCompressionTypeError",
    "open",
]
