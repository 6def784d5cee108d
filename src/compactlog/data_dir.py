"""A data directory's identity and access: ``meta.properties``, what may become a store, and whether the
directory can be written.

``<data-dir>/meta.properties`` marks a directory as compactlog's, as Kafka's ``meta.properties`` marks
each of a broker's log directories. Its format is Kafka's (``java.util.Properties`` text)::

    # compactlog data directory
    version=0
    directory.id=J8aAPcfLQt2bqs1JT_rlFQ

``directory.id`` is a random id in Kafka's ``Uuid`` text form (the 16 bytes in URL-safe base64 without
padding, 22 characters), drawn as Kafka's ``DirectoryId.random``: never one of the 100 reserved ids
(high 64 bits zero, low 64 bits below 100) and never one whose text starts with ``-``. The id stays the
same for the life of the directory. Kafka's ``version=1`` requires ``cluster.id`` and ``node.id``; a
compactlog data directory belongs to no cluster and no node, and inventing them would make the file lie,
so it is written as ``version=0``, the version in which Kafka's reader takes both as optional. Reading
accepts versions 0 and 1 and ignores keys it does not know (Kafka's ``cluster.id``, ``node.id``,
``broker.id``).

Rules at open (:func:`open_data_dir`; the decision is :func:`open_action`):

* a missing directory, or one holding nothing but files a user may prepare before the first open
  (``server.properties``, a file system's ``lost+found``) and the ``.lock`` of ``serve`` (which takes it
  before it opens the store), becomes a store: ``.topics/`` is created, then
  ``meta.properties`` (written to a temporary file, fsynced, linked into place so two processes creating
  one store agree on one id, and the directory fsynced). ``meta.properties`` comes last: a crash before
  it leaves ``.topics/``, which the next open upgrades;
* a directory with ``meta.properties`` is opened; a malformed one is a :class:`DataDirectoryError`;
* a directory with ``.topics/`` but no ``meta.properties`` (made before ``meta.properties`` existed) is
  upgraded: ``meta.properties`` is written, silently;
* anything else (a non-empty directory that is not a store, a path that is a file, a directory that
  cannot be listed) is a :class:`DataDirectoryError`: compactlog never writes into a directory it
  did not make.

A directory the process cannot write (a read-only mount, a snapshot, missing permissions) opens read-only:
nothing is written at open (not even the upgrade), reads work, and writes raise
:class:`ReadOnlyStoreError`. A read-only directory that holds no store cannot become one.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Literal

from .errors import DataDirectoryError, ReadOnlyStoreError
from .faults import io_fault
from .properties import parse_properties
from .segment import fsync_path

META_PROPERTIES = "meta.properties"
TOPICS_DIR = ".topics"
# The server's lock of the whole data directory (compactlog.server.DataDirectoryLock; Kafka's name).
LOCK_FILE = ".lock"
# Entries a directory may hold and still count as empty: a broker config written before the first open,
# the directory ext2/3/4 keep at the root of every file system (a data directory may be a mount), and the
# server's lock, which ``serve`` takes before it opens (and so creates) the store.
PREPARED_ENTRIES = frozenset({"server.properties", "lost+found", LOCK_FILE})
WRITTEN_VERSION = 0
READABLE_VERSIONS = (0, 1)
VERSION_KEY = "version"
DIRECTORY_ID_KEY = "directory.id"
# Kafka's DirectoryId reserves the ids whose high 64 bits are zero and low 64 bits below this.
RESERVED_DIRECTORY_IDS = 100

OpenAction = Literal["create", "open", "upgrade", "refuse"]


@dataclass(frozen=True)
class MetaProperties:
    version: int
    directory_id: str


@dataclass(frozen=True)
class DataDirectory:
    """What :func:`open_data_dir` found. ``directory_id`` is None for a read-only directory that predates
    ``meta.properties`` (it could not be upgraded)."""

    path: str
    read_only: bool
    directory_id: str | None


# ----------------------------------------------------------------------------------- pure rules


def random_directory_id() -> str:
    """A new directory id, as Kafka's ``DirectoryId.random`` draws one."""
    while True:
        raw = uuid.uuid4().bytes
        text = base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")
        reserved = raw[:8] == bytes(8) and int.from_bytes(raw[8:], "big") < RESERVED_DIRECTORY_IDS
        if not reserved and not text.startswith("-"):
            return text


def is_directory_id(text: str) -> bool:
    """Kafka's ``Uuid.fromString`` accepts it: URL-safe base64 of exactly 16 bytes, unpadded."""
    if len(text) != 22:
        return False
    try:
        raw = base64.urlsafe_b64decode(text + "==")
    except ValueError:
        return False
    return len(raw) == 16 and base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=") == text


def format_meta_properties(meta: MetaProperties) -> str:
    return (f"# compactlog data directory\n{VERSION_KEY}={meta.version}\n"
            f"{DIRECTORY_ID_KEY}={meta.directory_id}\n")


def parse_meta_properties(text: str, source: str) -> MetaProperties:
    """The version and directory id of a ``meta.properties`` text; ``source`` names the file in errors."""
    props = parse_properties(text)
    version = props.get(VERSION_KEY, "0")
    if version not in {str(v) for v in READABLE_VERSIONS}:
        raise DataDirectoryError(f"{source}: unsupported version {version!r} (readable: "
                                 f"{', '.join(map(str, READABLE_VERSIONS))})")
    directory_id = props.get(DIRECTORY_ID_KEY)
    if directory_id is None:
        raise DataDirectoryError(f"{source}: no {DIRECTORY_ID_KEY}")
    if not is_directory_id(directory_id):
        raise DataDirectoryError(f"{source}: {DIRECTORY_ID_KEY} {directory_id!r} is not a base64 UUID")
    return MetaProperties(int(version), directory_id)


def open_action(entries: set[str]) -> OpenAction:
    """What opening a directory holding ``entries`` (names, hidden ones included) does."""
    if META_PROPERTIES in entries:
        return "open"
    if TOPICS_DIR in entries:
        return "upgrade"
    if entries <= PREPARED_ENTRIES:
        return "create"
    return "refuse"


# ----------------------------------------------------------------------------------------------- I/O


def is_writable(path: str) -> bool:
    """Whether this process may create and remove files in the directory (False on a read-only mount,
    also for root)."""
    return os.access(path, os.W_OK | os.X_OK)


def read_only_error(path: str, doing: str) -> ReadOnlyStoreError:
    return ReadOnlyStoreError(f"cannot {doing}: the data directory {path} is read-only (opened for reads only)")


def open_data_dir(path: str) -> DataDirectory:
    """Check, create or upgrade the data directory at ``path`` (absolute) by the rules above."""
    if not os.path.lexists(path):
        try:
            os.makedirs(path)
        except FileExistsError:
            pass  # created by another process meanwhile
        except OSError as e:
            raise DataDirectoryError(f"cannot create data directory {path}: {e.strerror}") from e
    if not os.path.isdir(path):
        raise DataDirectoryError(f"data directory {path} is not a directory")
    try:
        entries = set(os.listdir(path))
    except OSError as e:
        raise DataDirectoryError(f"cannot read data directory {path}: {e.strerror}") from e
    action = open_action(entries)
    if action == "refuse":
        raise DataDirectoryError(
            f"{path} is not empty and has no {META_PROPERTIES}: not a compactlog data directory "
            "(compactlog creates stores only in missing or empty directories)")
    read_only = not is_writable(path)
    if action == "open":
        return DataDirectory(path, read_only, _read_meta(path).directory_id)
    if read_only:
        if action == "create":
            raise DataDirectoryError(f"cannot create a store in {path}: the directory is read-only")
        return DataDirectory(path, True, None)
    try:
        os.makedirs(os.path.join(path, TOPICS_DIR), exist_ok=True)
        meta = _write_meta_once(path, MetaProperties(WRITTEN_VERSION, random_directory_id()))
    except OSError as e:  # a read-only or full disk, an I/O error
        raise DataDirectoryError(f"cannot create a store in {path}: {e.strerror}") from e
    return DataDirectory(path, False, meta.directory_id)


def _read_meta(path: str) -> MetaProperties:
    file = os.path.join(path, META_PROPERTIES)
    try:
        with open(file, "rb") as f:
            text = f.read().decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataDirectoryError(f"{file}: not valid UTF-8") from e
    except OSError as e:
        raise DataDirectoryError(f"cannot read {file}: {e.strerror}") from e
    return parse_meta_properties(text, file)


def _write_meta_once(path: str, meta: MetaProperties) -> MetaProperties:
    """Write ``meta.properties`` unless it exists; returns the one in place. ``os.link`` fails when the
    name is taken, so of two processes creating one store, both end up with the first one's id."""
    final = os.path.join(path, META_PROPERTIES)
    tmp = os.path.join(path, f".{META_PROPERTIES}.{uuid.uuid4().hex}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            io_fault("meta-properties.write")
            f.write(format_meta_properties(meta))
            f.flush()
            io_fault("meta-properties.fsync")
            os.fsync(f.fileno())
        try:
            io_fault("meta-properties.link")
            os.link(tmp, final)
        except FileExistsError:
            return _read_meta(path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    io_fault("meta-properties.dir-fsync")
    fsync_path(path)
    return meta


# ------------------------------------------------------------------------------- read-only partitions


def open_partition_lock(directory: str, read_only: bool) -> tuple[int, int]:
    """The file descriptor a partition's log locks, and how: ``<partition-dir>/.lock`` (created if missing)
    locked exclusively; for a read-only log, ``.lock`` opened for reading (``flock`` works on any open
    file) and locked shared, which waits out writers, who lock it exclusively, but not other readers. A
    read-only partition without ``.lock`` was never opened by a writer; its directory is locked instead."""
    path = os.path.join(directory, ".lock")
    if not read_only:
        return os.open(path, os.O_CREAT | os.O_RDWR, 0o644), fcntl.LOCK_EX
    try:
        return os.open(path, os.O_RDONLY), fcntl.LOCK_SH
    except FileNotFoundError:
        return os.open(directory, os.O_RDONLY), fcntl.LOCK_SH


@contextlib.contextmanager
def exclusive_lock(path: str) -> Iterator[None]:
    """``flock`` (exclusive, blocking) of the lock file ``path``, created if missing; released on exit. Not
    re-entrant within a process: never nest two holds of one file."""
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
