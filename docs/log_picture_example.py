"""Makes docs/log-picture.png: topic ``users`` with a clean partition, one held back by min.compaction.lag.ms
and one the cleaner marked uncleanable (a damaged segment footer). Run: .venv/bin/python docs/log_picture_example.py
"""

from __future__ import annotations

import os
import shutil
import sys

import pyarrow as pa

import compactlog
from compactlog.cli.log_picture_png import write_png
from compactlog.log_picture import topic_picture

HOUR = 3_600_000
now = [1_700_000_000_000]  # a fixed clock, so the picture is the same on every run
DATA_DIR = "/tmp/compactlog-example/data"  # a fixed path: the uncleanable reason names a file in it
shutil.rmtree(DATA_DIR, ignore_errors=True)
with compactlog.open(DATA_DIR, clock=lambda: now[0]) as store:
    store.create_topic("users", 3, {"cleanup.policy": "compact", "min.compaction.lag.ms": HOUR})

    def produce(partition: int, n: int, keys: int, tombstone_every: int = 25) -> None:
        store.append("users", partition, pa.table({
            "key": [b"user-%d" % (i % keys) for i in range(n)],
            "value": [None if i % tombstone_every == 0 else b"x" * 40 for i in range(n)]}))

    for partition in (0, 2):
        for _ in range(3):
            produce(partition, 300, 120)
            store.roll("users", partition)
    now[0] += 2 * HOUR
    store.clean(topic="users", partition=0)
    produce(0, 40, 40)
    for i in range(3):
        produce(1, 300 + 100 * i, 150, 30)
        store.roll("users", 1)
    produce(1, 50, 50)
    directory = os.path.join(store.data_dir, "users-2")
    segment = sorted(name for name in os.listdir(directory) if name.endswith(".parquet"))[1]
    with open(os.path.join(directory, segment), "r+b") as f:  # damage the footer's length
        f.seek(-12, os.SEEK_END)
        f.write(b"\xff" * 8)
    store.clean(topic="users", partition=2)
    write_png(topic_picture(store, "users"), sys.argv[1] if len(sys.argv) > 1 else "docs/log-picture.png")
