"""Every error compactlog raises on purpose.

One root, :class:`CompactLogError`; each failure a user can act on has its own subclass.
Errors that wrap a lower-level failure are raised ``from`` it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


class CompactLogError(Exception):
    """Root of every error compactlog raises on purpose."""


class ConfigError(CompactLogError, ValueError):
    """An unknown config key, a value of the wrong type, or a value out of range."""


class InvalidTopicError(CompactLogError, ValueError):
    """A topic name that breaks Kafka's rules (``[a-zA-Z0-9._-]``, 1..249 chars, not ``.``/``..``)."""


class TopicExistsError(CompactLogError):
    """create_topic on a topic that already exists."""


class InvalidPartitionsError(CompactLogError, ValueError):
    """A partition count a topic cannot have: not a positive integer, or more than the data directory's
    ``max.broker.partitions`` allows (Kafka's InvalidPartitionsException)."""


class UnknownTopicOrPartitionError(CompactLogError, KeyError):
    """A topic that does not exist, or a partition number outside the topic."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class OffsetOutOfRangeError(CompactLogError):
    """A read below the log start offset or past the log end offset."""


class InvalidRecordError(CompactLogError, ValueError):
    """A record the log refuses: a keyless record for a compacted topic, a key or value that is not bytes,
    a malformed bulk table."""


class RecordTooLargeError(InvalidRecordError):
    """A record larger than the topic's ``max.message.bytes``."""


class CorruptSegmentError(CompactLogError):
    """A segment whose contents do not match its checksums or its metadata."""


class StoreClosedError(CompactLogError):
    """An operation on a store or producer that was closed."""


class CheckpointError(CompactLogError):
    """A malformed cleaner-offset-checkpoint file."""


class CleanerError(CompactLogError):
    """A cleaning round failed; the partition is marked uncleanable with this reason and retried later."""


class ProducerFencedError(CompactLogError):
    """A producer whose transactional id was taken over by a newer instance (higher epoch)."""


class InvalidTransactionTimeoutError(CompactLogError, ValueError):
    """A transactional producer's ``transaction.timeout.ms`` above the broker's ``transaction.max.timeout.ms``
    (Kafka's InvalidTransactionTimeoutException)."""


class InvalidTxnStateError(CompactLogError):
    """A transactional call out of order: commit without begin, send outside a transaction, ..."""


class OutOfOrderSequenceError(CompactLogError):
    """An idempotent producer's batch whose sequence does not follow the last one appended."""


class ExecutorError(CompactLogError):
    """The Spark executor could not run a task (for example, an executor cannot see the data directory)."""


class DataDirectoryError(CompactLogError):
    """A path that cannot be opened as a data directory: a file, a directory that cannot be read, a
    non-empty directory that is not a store, a malformed ``meta.properties``."""


class ReadOnlyStoreError(CompactLogError):
    """A write to a store whose data directory is read-only (a read-only mount, a snapshot); its reads
    work."""


class CorruptTopicMetadataError(CompactLogError):
    """A topic's ``.topics/<topic>.json`` that cannot be read; the other topics are unaffected."""


class KafkaStorageError(CompactLogError, OSError):
    """A write, fsync or rename of the store's files failed (disk full, I/O error), as Kafka's
    ``KafkaStorageException``: the operation is not acknowledged (an append keeps none of its frames in the
    active segment) and leaves no file in transit; the cause (the ``OSError``) is chained."""


@contextlib.contextmanager
def storage_errors(what: str) -> Iterator[None]:
    """Kafka's ``maybeHandleIOException``, as a context manager or a decorator: an ``OSError`` raised while
    doing ``what`` (writing the store's files) becomes a :class:`KafkaStorageError` naming it; compactlog's
    own errors pass unchanged."""
    try:
        yield
    except CompactLogError:
        raise
    except OSError as e:
        raise KafkaStorageError(f"{what} failed: {e}") from e


class InvalidRequestError(CompactLogError, ValueError):
    """A call whose arguments are not of the kind it takes (a read offset that is not an int, a column that
    does not exist), as Kafka's ``InvalidRequestException``."""


class CorruptTransactionStateError(CompactLogError):
    """A transactional id's ``.transactions/<id>.state`` (or ``.json``, the earlier format) that cannot be
    read; the other ids are unaffected."""


class ReportWriteError(CompactLogError, OSError):
    """A report or picture file (``topics describe --plot`` / ``--html``) that cannot be written."""


class CorruptCleanerStateError(CompactLogError):
    """A ``cleaner-state.json`` that cannot be read (``metrics`` fails on it; the cleaner starts from an empty
    state and its next pass rewrites the file)."""


class DataDirectoryLockedError(CompactLogError):
    """A second ``serve`` on a data directory that one already serves (the ``.lock`` file is held)."""


class EndpointError(CompactLogError):
    """A server endpoint that cannot listen where it was told (the address is in use, or not this host's)."""


class CleaningAbortedError(CleanerError):
    """A round not run because the cleaner is shutting down; unlike another failed round, it does not make
    the partition uncleanable (the next pass cleans it)."""


class MalformedRequestError(CompactLogError):
    """A Kafka-protocol request frame that cannot be decoded, or is larger than ``socket.request.max.bytes``:
    the server closes that connection."""


class CorruptRecordError(CompactLogError):
    """Record-batch bytes that break Kafka's v2 format: a CRC-32C mismatch, a length or record count that
    disagrees with the bytes, a malformed varint, a magic other than 2 (Kafka's CorruptRecordException)."""


class UnsupportedCompressionTypeError(CompactLogError):
    """A record batch whose compression code is none of Kafka's (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd)
    (Kafka's UnsupportedCompressionTypeException)."""


class CorruptOffsetsRecordError(CompactLogError):
    """A ``__consumer_offsets`` key or value not in Kafka's schemas: an unknown version, short or extra bytes."""


class UnknownGroupError(CompactLogError, KeyError):
    """A consumer group with nothing stored in ``__consumer_offsets``."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class ConcurrentTransactionsError(CompactLogError):
    """A transactional request while the id's previous transaction is still being completed (Kafka's
    ConcurrentTransactionsException: retriable, the client backs off and retries)."""


class InvalidProducerIdMappingError(CompactLogError):
    """A transactional request whose producer id is not the one its transactional id holds (Kafka's
    InvalidPidMappingException)."""
