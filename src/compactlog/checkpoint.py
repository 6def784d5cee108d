"""The cleaner's offset checkpoint: ``<data-dir>/cleaner-offset-checkpoint``, in Kafka's text format.

This module owns that file: its format (parse / format, pure functions), crash-safe replacement on
disk, and the read-modify-write cycle that keeps it consistent between threads and processes.

Format (Kafka's ``OffsetCheckpointFile``, version 0), UTF-8, one item per line::

    0                              <- format version, always 0
    2                              <- N, the number of entries
    orders 0 1523                  <- N lines "<topic> <partition> <offset>"
    orders 1 877

An entry maps a partition to the offset up to which the cleaner has compacted it ("first dirty offset").
Reading follows Kafka's reader: a missing file, an empty file, or a file with only the version line all
mean "no entries"; anything else that is not exactly the format above is a :class:`CheckpointError`
naming the file and the line. A few checks are stricter than Kafka, because they can only mean
corruption: negative partitions or offsets, and the same partition listed twice.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import operator
import os
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import SupportsIndex, TypeAlias

from compactlog.errors import CheckpointError, storage_errors
from compactlog.faults import fault_point, io_fault
from compactlog.limits import INT_MAX, LONG_MAX

__all__ = [
    "CHECKPOINT_FILE_NAME",
    "CURRENT_VERSION",
    "CheckpointFile",
    "TopicPartition",
    "format_checkpoint",
    "parse_checkpoint",
    "read_checkpoint",
    "write_checkpoint",
]

TopicPartition: TypeAlias = tuple[str, int]

# Kafka's LogCleanerManager keeps its checkpoint under this name in every data directory.
CHECKPOINT_FILE_NAME = "cleaner-offset-checkpoint"
# OffsetCheckpointFile's only format version.
CURRENT_VERSION = 0

# Java's BufferedReader.readLine ends a line at "\n", "\r" or "\r\n"; str.splitlines would also split on
# form feeds, vertical tabs, U+2028 and friends, which readLine keeps inside the line.
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
# Integer.parseInt / Long.parseLong syntax: optional sign, ASCII digits, nothing else (no spaces, no "_",
# which Python's int() would accept).
_INTEGER = re.compile(r"[+-]?[0-9]+")



# ------------------------------------------------------------------------------------------- parsing


def _split_lines(text: str) -> list[str]:
    """The lines readLine would return: a final line break does not start another (empty) line."""
    lines = _LINE_BREAK.split(text)
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def _parse_int(field: str, what: str, maximum: int, source: str, line_no: int) -> int:
    if not _INTEGER.fullmatch(field):
        raise CheckpointError(f"{source}: line {line_no}: {what} is not an integer: {field!r}")
    value = int(field)
    if not 0 <= value <= maximum:
        raise CheckpointError(f"{source}: line {line_no}: {what} out of range [0, {maximum}]: {value}")
    return value


def parse_checkpoint(text: str, source: str = "<string>") -> dict[TopicPartition, int]:
    """The entries of a checkpoint file's text; ``source`` names the file in error messages.

    Raises :class:`CheckpointError` (with ``source`` and the 1-based line number) for an unknown version,
    a malformed or duplicate entry line, a non-integer field, or an entry count that does not match.
    """
    lines = _split_lines(text)
    if not lines:
        return {}  # empty file: Kafka reads it as no entries

    if not _INTEGER.fullmatch(lines[0]):
        raise CheckpointError(f"{source}: line 1: malformed version line: {lines[0]!r}")
    version = int(lines[0])
    if version != CURRENT_VERSION:
        raise CheckpointError(f"{source}: line 1: unrecognised version {version}, expected {CURRENT_VERSION}")

    if len(lines) < 2:
        return {}  # version but no count line: also no entries, as in Kafka

    if not _INTEGER.fullmatch(lines[1]):
        raise CheckpointError(f"{source}: line 2: malformed entry count: {lines[1]!r}")
    expected = int(lines[1])
    if expected < 0:
        raise CheckpointError(f"{source}: line 2: negative entry count {expected}")

    entries: dict[TopicPartition, int] = {}
    for line_no, line in enumerate(lines[2:], start=3):
        # Kafka splits on runs of whitespace and wants exactly three fields.
        fields = line.split()
        if len(fields) != 3:
            raise CheckpointError(
                f"{source}: line {line_no}: malformed entry, want '<topic> <partition> <offset>': {line!r}"
            )
        topic = fields[0]
        partition = _parse_int(fields[1], "partition", INT_MAX, source, line_no)
        offset = _parse_int(fields[2], "offset", LONG_MAX, source, line_no)
        if (topic, partition) in entries:
            raise CheckpointError(f"{source}: line {line_no}: duplicate entry for {topic}-{partition}")
        entries[(topic, partition)] = offset

    if len(entries) != expected:
        raise CheckpointError(
            f"{source}: line 2: the file declares {expected} entries but contains {len(entries)}"
        )
    return entries


# ----------------------------------------------------------------------------------------- formatting


def _check_entry(key: object, offset: object) -> tuple[str, int, int]:
    """An entry as (topic, partition, offset), or CheckpointError if the format cannot hold it."""
    if not (isinstance(key, tuple) and len(key) == 2):
        raise CheckpointError(f"checkpoint keys are (topic, partition) tuples, got {key!r}")
    topic, partition = key
    # The topic must come back as the same single field: not empty, no whitespace (the field separator,
    # which also covers line breaks).
    if not isinstance(topic, str) or topic.split() != [topic]:
        raise CheckpointError(f"cannot write topic {topic!r} to a checkpoint: empty, or contains whitespace")
    values = []
    for what, value, maximum in (("partition", partition, INT_MAX), ("offset", offset, LONG_MAX)):
        # Ints and numpy integers (anything with __index__), but not bool, which is an int in Python.
        if isinstance(value, bool) or not isinstance(value, SupportsIndex):
            raise CheckpointError(f"{topic}-{partition}: {what} must be an int, got {value!r}")
        try:
            number = operator.index(value)
        except TypeError:  # e.g. numpy.bool_ has an __index__ that refuses
            raise CheckpointError(f"{topic}-{partition}: {what} must be an int, got {value!r}") from None
        if not 0 <= number <= maximum:
            raise CheckpointError(f"{topic}-{partition}: {what} out of range [0, {maximum}]: {number}")
        values.append(number)
    return topic, values[0], values[1]


def format_checkpoint(entries: Mapping[TopicPartition, int]) -> str:
    """The checkpoint file text for ``entries``: version, count, then entries sorted by (topic, partition).

    Sorting makes the file a deterministic function of the mapping. Lines end with ``"\\n"``, the last one
    included. Raises :class:`CheckpointError` for an entry the format cannot hold (see :func:`_check_entry`).
    """
    rows = sorted(_check_entry(key, offset) for key, offset in entries.items())
    lines = [str(CURRENT_VERSION), str(len(rows))]
    lines.extend(f"{topic} {partition} {offset}" for topic, partition, offset in rows)
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------- files


def _tmp_path(path: Path) -> Path:
    return path.with_name(path.name + ".tmp")


def _fsync_dir(directory: Path) -> None:
    """Make a rename inside ``directory`` durable (the new directory entry reaches the disk)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        io_fault("checkpoint.dir-fsync")
        os.fsync(fd)
    except OSError as e:
        # Some filesystems cannot fsync a directory; the rename is still atomic there, only its
        # durability is up to the filesystem.
        if e.errno not in (errno.EINVAL, errno.ENOTSUP):
            raise
    finally:
        os.close(fd)


def read_checkpoint(path: str | os.PathLike[str]) -> dict[TopicPartition, int]:
    """The entries of the checkpoint file at ``path``; a missing file has none.

    Raises :class:`CheckpointError` for a malformed file (including bytes that are not UTF-8); other I/O
    errors propagate as :class:`OSError`.
    """
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return {}
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line_no = raw.count(b"\n", 0, e.start) + 1
        raise CheckpointError(f"{path}: line {line_no}: not valid UTF-8") from e
    return parse_checkpoint(text, source=str(path))


def write_checkpoint(path: str | os.PathLike[str], entries: Mapping[TopicPartition, int]) -> None:
    """Replace the checkpoint file at ``path`` with ``entries``, crash-safely.

    The text goes to ``<path>.tmp`` (truncating any stale one a crash left behind), is flushed and
    fsynced, then renamed over ``path`` (atomic: readers see the old file or the new one, never a mix),
    and the directory is fsynced so the rename survives a crash. Nothing is touched if an entry is
    invalid. The directory must exist.
    """
    path = Path(path)
    data = format_checkpoint(entries).encode("utf-8")
    tmp = _tmp_path(path)
    try:
        with open(tmp, "wb") as f:
            io_fault("checkpoint.write")
            f.write(data)
            f.flush()
            io_fault("checkpoint.fsync")
            os.fsync(f.fileno())
        fault_point("checkpoint.tmp-written")
        io_fault("checkpoint.rename")
        os.replace(tmp, path)
    except BaseException:
        # Do not leave a half-written .tmp behind (the next write would overwrite it anyway).
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    _fsync_dir(path.parent)


class CheckpointFile:
    """One checkpoint file, safe to read and update from several threads and several processes.

    Writers serialise on a :class:`threading.Lock` (threads of this process) and on an exclusive
    ``fcntl.flock`` of ``<path>.lock`` (other processes, and other ``CheckpointFile`` objects for the same
    path). The lock file is created on first use and never deleted: deleting it would let two processes
    lock two different files. Readers take no lock: the file is only ever replaced atomically.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._path = Path(path)
        self._lock = threading.Lock()

    @property
    def path(self) -> Path:
        return self._path

    @property
    def lock_path(self) -> Path:
        return self._path.with_name(self._path.name + ".lock")

    def __repr__(self) -> str:
        return f"CheckpointFile({str(self._path)!r})"

    @contextlib.contextmanager
    def _exclusive(self) -> Iterator[None]:
        """Hold this object's thread lock and the inter-process file lock."""
        with self._lock:
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                try:
                    yield
                finally:
                    fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)

    def remove_stale_tmp(self) -> None:
        """Remove the ``<path>.tmp`` a writer killed before its rename left (its write never happened); under
        the locks, so never the file of a write in progress. Called when a store opens."""
        with self._exclusive(), contextlib.suppress(FileNotFoundError):
            _tmp_path(self._path).unlink()

    def read(self) -> dict[TopicPartition, int]:
        """The current entries (see :func:`read_checkpoint`)."""
        return read_checkpoint(self._path)

    @storage_errors("writing the cleaner checkpoint")
    def write(self, entries: Mapping[TopicPartition, int]) -> None:
        """Replace all entries (see :func:`write_checkpoint`); an I/O error is a KafkaStorageError."""
        with self._exclusive():
            write_checkpoint(self._path, entries)

    @storage_errors("writing the cleaner checkpoint")
    def update(
        self,
        add: Mapping[TopicPartition, int] | None = None,
        remove: Iterable[TopicPartition] | None = None,
        keep: Callable[[TopicPartition], bool] | None = None,
    ) -> dict[TopicPartition, int]:
        """Read, modify and write the file under the locks; return the entries now in it.

        In order: entries for which ``keep(topic_partition)`` is false are dropped (Kafka drops the
        checkpoints of partitions that are no longer in the log pool), then the ``remove`` keys (missing
        ones are ignored), then ``add`` is applied, overriding existing offsets. A malformed existing
        file raises :class:`CheckpointError` and is left as it is.
        """
        with self._exclusive():
            entries = read_checkpoint(self._path)
            if keep is not None:
                entries = {tp: offset for tp, offset in entries.items() if keep(tp)}
            for tp in remove or ():
                entries.pop(tp, None)
            if add:
                # Normalised (numpy ints -> int) and validated before anything is written.
                checked = (_check_entry(tp, offset) for tp, offset in add.items())
                entries.update({(topic, partition): offset for topic, partition, offset in checked})
            write_checkpoint(self._path, entries)
            return entries
