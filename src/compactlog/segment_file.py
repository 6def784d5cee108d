"""A sealed segment's Parquet file as read: every page a read decodes has its CRC checked first.

:func:`open_parquet` gives the reader (:class:`VerifiedParquetFile`) and :func:`read_parquet` reads a whole
file with it. A file is read through a read-only mapping of it (or, for a pinned segment, the mapping the
segment holds): before Parquet decodes a row group's column chunks, every page of them is checked against
its CRC in the mapping (:func:`.parquet_pages.verify_chunk`), and Parquet then decodes those same mapped
bytes with its own check off. A segment file is never edited (it is replaced whole), so the bytes checked
are the bytes decoded, as when Parquet checks a mapped file itself. The file's pages are let go once a row
group is decoded (``MADV_DONTNEED``): the process keeps no more of a file mapped than the row groups being
read, whatever the file's size (the page cache keeps them).
"""

from __future__ import annotations

import contextlib
import mmap
import os
import sys
import threading
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from types import TracebackType

import pyarrow as pa
import pyarrow.parquet as pq

from .errors import CorruptSegmentError
from .parquet_pages import CorruptPageError, verify_chunk

# What a reader can fail with on a damaged file: a page whose CRC does not match (CorruptPageError), a short
# read (OSError), an undecodable page or footer (ArrowException), a column name the footer lost (KeyError),
# and Thrift or decompression errors pyarrow lets through.
READ_ERRORS = (OSError, pa.ArrowException, ValueError, IndexError, KeyError, EOFError, CorruptPageError)


# Linux's MADV_POPULATE_READ (5.14; Python's mmap module names it from 3.12 on): a column chunk of at least
# POPULATE_BYTES is mapped in one call before its pages are checked, instead of a fault every few pages.
_MADV_POPULATE_READ = getattr(mmap, "MADV_POPULATE_READ", 22)
_POPULATE = sys.platform.startswith("linux")
POPULATE_BYTES = 256 * 1024
_RELEASE = hasattr(mmap, "MADV_DONTNEED")  # not on Windows, where a mapping's pages are the system's to drop


class VerifiedParquetFile:
    """A Parquet file (a path, or the bytes of a pinned segment) whose reads check every page they decode.
    Not thread-safe, as ``pq.ParquetFile``: a thread reads through a reader of its own (:meth:`another`)."""

    def __init__(self, source: str | pa.Buffer, metadata: pq.FileMetaData | None = None,
                 mapping: mmap.mmap | None = None) -> None:
        self._mapping = mapping  # the file's mapping when this reader made it (its pages are let go after reads)
        if isinstance(source, str):
            with open(source, "rb") as file:
                if os.fstat(file.fileno()).st_size == 0:
                    raise CorruptPageError("an empty file")
                self._mapping = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
            source = pa.py_buffer(self._mapping)
        self._buffer = source
        self._data = memoryview(source)
        self._file = pq.ParquetFile(pa.BufferReader(source), metadata=metadata, page_checksum_verification=False)
        self.metadata = self._file.metadata
        # Each top-level column's leaf columns (a list or struct has several), by name.
        self._leaves: dict[str, list[int]] = {}
        for leaf in range(len(self.metadata.schema)):
            self._leaves.setdefault(self.metadata.schema.column(leaf).path.split(".")[0], []).append(leaf)

    def another(self) -> VerifiedParquetFile:
        """A reader of the same file for another thread (no second mapping, no footer read again)."""
        return VerifiedParquetFile(self._buffer, self.metadata, self._mapping)

    @property
    def schema_arrow(self) -> pa.Schema:
        return self._file.schema_arrow

    def _verify(self, groups: Iterable[int], columns: Sequence[str] | None) -> tuple[int, int] | None:
        """Check every page of the groups' chunks of ``columns`` (all when None); the bytes they span."""
        leaves = range(len(self.metadata.schema)) if columns is None else [
            leaf for name in columns for leaf in self._leaves.get(name, ())]
        low = high = -1
        for group in groups:
            row_group = self.metadata.row_group(group)
            for leaf in leaves:
                chunk = row_group.column(leaf)
                start = chunk.dictionary_page_offset if chunk.has_dictionary_page else chunk.data_page_offset
                size = chunk.total_compressed_size
                if _POPULATE and size >= POPULATE_BYTES:
                    self._populate(start, size)
                verify_chunk(self._data, start, size)
                low = start if low < 0 else min(low, start)
                high = max(high, start + size)
        return (low, high) if low >= 0 else None

    def _populate(self, start: int, size: int) -> None:
        """Map the pages of ``[start, start + size)`` in one call (a hint: without it, the check's first
        touch of each page faults)."""
        if self._mapping is None:
            return
        aligned = start - start % mmap.PAGESIZE
        with contextlib.suppress(OSError):  # a kernel before 5.14 does not know the advice
            self._mapping.madvise(_MADV_POPULATE_READ, aligned, start + size - aligned)

    def _release(self, span: tuple[int, int] | None) -> None:
        """Let the mapped pages of ``span`` go (a later read maps them again from the page cache)."""
        if self._mapping is None or span is None or not _RELEASE:
            return
        start = span[0] - span[0] % mmap.PAGESIZE
        self._mapping.madvise(mmap.MADV_DONTNEED, start, span[1] - start)

    def read_row_group(self, group: int, columns: list[str] | None = None, use_threads: bool = True) -> pa.Table:
        span = self._verify((group,), columns)
        table = self._file.read_row_group(group, columns=columns, use_threads=use_threads)
        self._release(span)
        return table

    def read_row_groups(self, groups: Sequence[int], columns: list[str] | None = None,
                        use_threads: bool = True) -> pa.Table:
        span = self._verify(groups, columns)
        table = self._file.read_row_groups(groups, columns=columns, use_threads=use_threads)
        self._release(span)
        return table

    def read(self, columns: list[str] | None = None, use_threads: bool = True) -> pa.Table:
        return self.read_row_groups(range(self.metadata.num_row_groups), columns, use_threads)

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> VerifiedParquetFile:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()


def open_parquet(path: str | pa.Buffer) -> VerifiedParquetFile:
    """A reader of a sealed segment (its path, or its bytes) that checks every page's CRC before decoding it
    (pages written without one are read)."""
    return VerifiedParquetFile(path)


# A whole file is read as this many runs of row groups at once, each by its own reader (a reader decodes
# its row groups' columns in parallel, not the row groups themselves).
READ_PARTS = 4
_readers: ThreadPoolExecutor | None = None
_readers_lock = threading.Lock()


def read_parquet(path: str | pa.Buffer, columns: list[str] | None = None) -> pa.Table:
    """A whole Parquet file (or its ``columns``; ``path`` may be the file's bytes), row groups decoded in
    parallel as ``pq.read_table`` does. Not ``pq.read_table`` itself: it goes through ``pyarrow.dataset``,
    whose import brings pandas in (see :mod:`compactlog.columns`)."""
    try:
        return read_parquet_unwrapped(path, columns)
    except FileNotFoundError:
        raise
    except READ_ERRORS as e:
        raise CorruptSegmentError(f"{path if isinstance(path, str) else 'a pinned segment'}: unreadable: {e}") from e


def read_parquet_unwrapped(path: str | pa.Buffer, columns: list[str] | None) -> pa.Table:
    """:func:`read_parquet` with a damaged file's error as the reader raised it (one of READ_ERRORS)."""
    global _readers
    with open_parquet(path) as file:
        count = file.metadata.num_row_groups
        if count < 2:
            return file.read(columns=columns)
        parts = min(READ_PARTS, count)
        runs = [list(range(count * i // parts, count * (i + 1) // parts)) for i in range(parts)]
        with _readers_lock:
            if _readers is None:
                _readers = ThreadPoolExecutor(READ_PARTS, thread_name_prefix="compactlog-read")

        def read(groups: list[int]) -> pa.Table:
            with file.another() as reader:  # one reader per thread: a reader is not thread-safe
                return reader.read_row_groups(groups, columns=columns)

        return pa.concat_tables(list(_readers.map(read, runs)))
