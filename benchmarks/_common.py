"""Shared helpers for benchmarks: timing medians, environment banner, data generation."""

from __future__ import annotations

import os
import platform
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa


def banner(title: str) -> None:
    try:
        import pyspark

        spark_version = pyspark.__version__
    except ImportError:
        spark_version = "not installed"
    print(f"== {title}")
    print(f"machine: {platform.machine()} {platform.processor() or ''} cores={os.cpu_count()} "
          f"python={sys.version.split()[0]} pyarrow={pa.__version__} numpy={np.__version__} pyspark={spark_version}")


def median_time(fn: Callable[[], Any], runs: int, setup: Callable[[], Any] | None = None) -> tuple[float, list[float]]:
    times = []
    for _ in range(runs):
        if setup is not None:
            setup()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), times


def keyed_table(n: int, distinct_keys: int, value_bytes: int = 100, tombstone_fraction: float = 0.0,
                seed: int = 0, timestamp: int | None = None, zipf: float = 0.0) -> pa.Table:
    """``n`` records over ``distinct_keys`` keys (``key-%010d``), random values, some tombstones. Keys are
    drawn uniformly, or with ``zipf`` > 0 from a Zipf distribution of that exponent over the keys (the key of
    rank r drawn with probability proportional to r ** -zipf: a few hot keys, a long tail of cold ones)."""
    rng = np.random.default_rng(seed)
    if zipf > 0:
        weights = np.arange(1, distinct_keys + 1, dtype=np.float64) ** -zipf
        ids = np.searchsorted(np.cumsum(weights / weights.sum()), rng.random(n)).clip(0, distinct_keys - 1)
    else:
        ids = rng.integers(0, distinct_keys, n)
    keys = pa.array(np.char.add(b"key-", np.char.zfill(ids.astype("S10"), 10)).astype(object), pa.binary())
    raw = rng.integers(0, 256, size=n * value_bytes, dtype=np.uint8).tobytes()
    offsets = pa.array(np.arange(0, (n + 1) * value_bytes, value_bytes, dtype=np.int32))
    values = pa.BinaryArray.from_buffers(pa.binary(), n, [None, offsets.buffers()[1], pa.py_buffer(raw)])
    if tombstone_fraction:
        mask = rng.random(n) < tombstone_fraction
        values = pa.compute.if_else(pa.array(mask), pa.scalar(None, pa.binary()), values)
    columns = {"key": keys, "value": values}
    if timestamp is not None:
        columns["timestamp"] = pa.array(np.full(n, timestamp, dtype=np.int64))
    return pa.table(columns)


def fresh_copy(source: str, target: str) -> None:
    """A data directory to clean, from ``source`` left as it is: the sealed segments hard-linked (a clean never
    edits a segment file: it writes new ones and renames), the rest copied (active segments, metadata and
    checkpoint files may be edited in place). The links share the source's page cache, so a clean reads the
    same cached files the contenders read.

    Every segment is then read through once, so that each run starts with its input in the page cache (as a
    cleaner's input, segments written not long before, usually is). This VM gives cached pages back to its
    host within seconds (measured: 2.3 GB cached fell to 1.75 GB in 20 s idle, with 22 GB free), so without
    it a run read an unknown part of its input from disk."""
    shutil.rmtree(target, ignore_errors=True)
    linked = []
    for root, _, files in os.walk(source):
        out = os.path.join(target, os.path.relpath(root, source))
        os.makedirs(out, exist_ok=True)
        for name in files:
            src, dst = os.path.join(root, name), os.path.join(out, name)
            if name.endswith(".parquet"):
                os.link(src, dst)
                linked.append(dst)
            else:
                shutil.copy2(src, dst)
    read_through(linked)


def read_through(paths: list[str]) -> None:
    """Read every byte of the files (into the page cache), discarding them."""
    buffer = bytearray(8 << 20)
    for path in paths:
        with open(path, "rb", buffering=0) as f:
            while f.readinto(buffer):
                pass
