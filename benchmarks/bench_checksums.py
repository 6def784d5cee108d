"""The cost of checksums on reads (issue 16): sealed segments carry a CRC32 per Parquet page (verified on
every read) and a footer CRC (checked at open), measured against reading the same files without them.

1. ``store.read_arrow`` of a sealed partition of N records (~15-byte keys, 100-byte values), as shipped
   (every page's CRC checked before it is decoded), against the same read with the page check switched off
   (``segment_file.verify_chunk`` replaced by a no-op, which is what a store without checksums would do).
2. ``pyarrow.parquet.ParquetFile(...).read()`` of the same segment files with and without
   ``page_checksum_verification``: the cost of Parquet's own check, which the store does not use.
3. The store's page check alone (:func:`compactlog.parquet_pages.verify_chunk` over every column chunk of
   the files, held in memory: page headers walked, ISA-L's CRC-32) against pyarrow's check alone (the
   difference in 2).
4. ``SealedSegment.open`` of every segment (footer read, ranges and footer CRC checked) against
   ``pyarrow.parquet.read_metadata`` of the same files.

Usage: ``python benchmarks/bench_checksums.py [--records N] [--runs R] [--dir DIR]``. Inputs are generated
(fixed seed); every figure is the median of ``--runs`` runs, each read from the page cache (every file is
read once before the runs). The ratio is verified time over unverified time: 1.00 is free.
"""

from __future__ import annotations

import argparse
import glob
import os
import sys
import tempfile

import pyarrow.parquet as pq
from _common import banner, keyed_table, median_time

import compactlog
from compactlog import segment_file
from compactlog.parquet_pages import verify_chunk
from compactlog.sealed_segment import SealedSegment


def unchecked_chunk(data: memoryview, start: int, size: int) -> int:
    """``verify_chunk`` without the check."""
    return 0


def check_pages(data: memoryview, metadata: pq.FileMetaData) -> None:
    """Every page of a file (its bytes, its footer) checked, as a read of all its columns does before
    decoding them."""
    for group in range(metadata.num_row_groups):
        for leaf in range(metadata.num_columns):
            chunk = metadata.row_group(group).column(leaf)
            start = chunk.dictionary_page_offset if chunk.has_dictionary_page else chunk.data_page_offset
            verify_chunk(data, start, chunk.total_compressed_size)


def build(data_dir: str, records: int) -> list[str]:
    with compactlog.open(data_dir) as store:
        store.create_topic("t", config={"cleanup.policy": "compact", "segment.bytes": 64 << 20})
        table = keyed_table(records, records, value_bytes=100, seed=16)
        for start in range(0, records, 1_000_000):
            store.append("t", 0, table.slice(start, 1_000_000))
        store.roll("t", 0)
    return sorted(glob.glob(os.path.join(data_dir, "t-0", "*.parquet")))


def line(name: str, verified: float, unverified: float, unit: str = "s") -> None:
    print(f"{name:<44} verified {verified:8.4f} {unit}  unverified {unverified:8.4f} {unit}  "
          f"ratio {verified / unverified:5.2f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--runs", type=int, default=7, help="runs per figure (the median is reported)")
    parser.add_argument("--dir", default=None, help="where to write (default: a temporary directory)")
    args = parser.parse_args(argv)
    banner(f"checksum cost on reads: {args.records:,} records")
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        data_dir = os.path.join(tmp, "data")
        files = build(data_dir, args.records)
        size = sum(os.path.getsize(f) for f in files)
        print(f"{len(files)} sealed segments, {size / 1e6:.1f} MB")
        for path in files:  # into the page cache
            with open(path, "rb") as f:
                while f.read(1 << 24):
                    pass
        store = compactlog.open(data_dir)

        def read_store() -> None:
            assert store.read_arrow("t", 0).num_rows == args.records

        verified, _ = median_time(read_store, args.runs)
        segment_file.verify_chunk = unchecked_chunk  # type: ignore[assignment]
        try:
            unverified, _ = median_time(read_store, args.runs)
        finally:
            segment_file.verify_chunk = verify_chunk
            store.close()
        line("store.read_arrow (page CRCs)", verified, unverified)

        def raw(verify: bool) -> None:
            for path in files:
                pq.ParquetFile(path, page_checksum_verification=verify).read()

        raw_verified, _ = median_time(lambda: raw(True), args.runs)
        raw_unverified, _ = median_time(lambda: raw(False), args.runs)
        line("pyarrow ParquetFile.read (page CRCs)", raw_verified, raw_unverified)
        in_memory = []
        for path in files:
            with open(path, "rb") as f:
                in_memory.append((memoryview(f.read()), pq.read_metadata(path)))
        checked, _ = median_time(lambda: [check_pages(data, metadata) for data, metadata in in_memory], args.runs)
        print(f"{'page check alone':<44} ours {checked:8.4f} s  pyarrow's {raw_verified - raw_unverified:8.4f} s")

        def open_segments() -> None:
            for path in files:
                SealedSegment.open(path)

        def read_footers() -> None:
            for path in files:
                pq.read_metadata(path)

        opened, _ = median_time(open_segments, args.runs)
        footers, _ = median_time(read_footers, args.runs)
        line("SealedSegment.open vs read_metadata (footer)", opened * 1000, footers * 1000, "ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
