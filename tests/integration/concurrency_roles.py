"""The processes of the concurrency run (``test_concurrent_processes.py``), one role each, on one data directory.

``python concurrency_roles.py <role> <data_dir> <name> <pass fd>`` imports, opens the store, prints ``ready``, reads
``go <deadline>`` (a ``time.monotonic()`` value: the clock is system-wide) from stdin and works until then;
it then prints one JSON line of what it did and exits 0. Any error is a traceback on stderr and exit 1.

Roles:

* ``plain`` and ``idempotent``: producers (``Store.append``, and ``Store.producer()``); every value is
  ``<key>|<name>|<n>`` so that a record read names the send it came from; one in ten is a tombstone. The JSON
  line lists every acknowledged record: ``[partition, offset, key, value]``.
* ``cleaner``: rolls every partition and runs a forced cleaner pass, again and again; after each pass it
  writes a byte to ``<pass fd>`` (a pipe to the slow reader) if it can.
* ``fast`` and ``slow``: readers of every partition from its log start; ``slow`` waits for a cleaner pass
  between two tables (a read spanning passes), by reading a byte from ``<pass fd>``. Each read is checked
  (:func:`check_read`): strictly increasing offsets, every record whole (its value names its key), an offset
  always holding the same record, and below the cleaner checkpoint read before it only records that an
  earlier read also had there (cleaning only removes: a record gone never comes back) and each key once.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import sys
import time
from collections import Counter
from typing import Any

import pyarrow as pa

import compactlog
from compactlog.checkpoint import read_checkpoint

TOPIC = "t"
PARTITIONS = 2
KEYS = 200
CLOCK_MS = 3_000_000  # fixed: no tombstone or producer ever expires, so the checks need no clock
CONFIG = {"cleanup.policy": "compact", "segment.bytes": 6000, "min.cleanable.dirty.ratio": 0.01,
          "file.delete.delay.ms": 0}


class ReadError(AssertionError):
    """A read broke a rule of the module docstring."""


def produce(store: compactlog.Store, name: str, deadline: float) -> dict[str, Any]:
    rng = random.Random(name)
    acked: list[list[Any]] = []
    producer = store.producer(linger_ms=0) if name.startswith("idempotent") else None
    n = batches = 0
    while time.monotonic() < deadline:
        partition = rng.randrange(PARTITIONS)
        keys = [b"k%03d" % rng.randrange(KEYS) for _ in range(rng.randint(1, 50))]
        values = [None if rng.random() < 0.1 else b"%s|%s|%d" % (k, name.encode(), n + i) for i, k in enumerate(keys)]
        n += len(keys)
        if producer is None:
            first = store.append(TOPIC, partition, pa.table({"key": pa.array(keys, pa.binary()),
                                                             "value": pa.array(values, pa.binary())}))
            offsets = list(range(first.base_offset, first.last_offset + 1))
        else:
            futures = [producer.send(TOPIC, key=k, value=v, partition=partition) for k, v in zip(keys, values,
                                                                                                  strict=True)]
            producer.flush()
            offsets = [f.result().offset for f in futures]
        acked += [[partition, o, k.decode(), None if v is None else v.decode()]
                  for o, k, v in zip(offsets, keys, values, strict=True)]
        batches += 1
    if producer is not None:
        producer.close()
    return {"records": len(acked), "batches": batches, "acked": acked}


def clean(store: compactlog.Store, deadline: float, pass_fd: int) -> dict[str, Any]:
    os.set_blocking(pass_fd, False)
    passes = rolls = 0
    while time.monotonic() < deadline:
        for partition in range(PARTITIONS):
            rolls += store.roll(TOPIC, partition)
        store.clean(force=True)
        passes += 1
        with contextlib.suppress(BlockingIOError):  # the slow reader has enough passes to wait for
            os.write(pass_fd, b".")
    os.close(pass_fd)  # the slow reader reads its end of file and stops waiting
    return {"passes": passes, "rolls": rolls}


class Reader:
    """Holds what earlier reads returned, to check each new one against."""

    def __init__(self) -> None:
        self.at: dict[int, dict[int, tuple[bytes | None, bytes | None]]] = {p: {} for p in range(PARTITIONS)}
        self.below: dict[int, tuple[int, set[int]]] = {p: (0, set()) for p in range(PARTITIONS)}
        self.counts = Counter[str]()

    def read(self, store: compactlog.Store, partition: int, pass_fd: int | None) -> None:
        cleaned = read_checkpoint(os.path.join(store.data_dir, "cleaner-offset-checkpoint")).get((TOPIC, partition), 0)
        start = store.log_start_offset(TOPIC, partition)
        rows: list[tuple[int, bytes | None, bytes | None]] = []
        for table in store.read_tables(TOPIC, partition, start, columns=["offset", "key", "value"]):
            rows += zip(*(table.column(c).to_pylist() for c in ("offset", "key", "value")), strict=True)
            self.counts["tables"] += 1
            if pass_fd is not None and os.read(pass_fd, 1):  # until the cleaner's next pass (nothing once it stopped)
                self.counts["pauses"] += 1
        self.check_read(partition, rows, cleaned)
        self.counts["reads"] += 1
        self.counts["records"] += len(rows)

    def check_read(self, partition: int, rows: list[tuple[int, bytes | None, bytes | None]], cleaned: int) -> None:
        where = f"{TOPIC}-{partition}"
        at = self.at[partition]
        previous = -1
        for offset, key, value in rows:
            if offset <= previous:
                raise ReadError(f"{where}: offset {offset} after {previous}: duplicate or backward")
            previous = offset
            if key is None or (value is not None and value.split(b"|")[0] != key):
                raise ReadError(f"{where}: offset {offset} is not a whole record: {key!r} {value!r}")
            if at.setdefault(offset, (key, value)) != (key, value):
                raise ReadError(f"{where}: offset {offset} holds {(key, value)}, earlier {at[offset]}")
        earlier_cleaned, earlier = self.below[partition]
        now = {offset for offset, _, _ in rows if offset < cleaned}
        back = sorted(o for o in now if o < earlier_cleaned and o not in earlier)
        if back:
            raise ReadError(f"{where}: offsets {back[:5]} below the checkpoint {earlier_cleaned} came back")
        newest: dict[bytes | None, int] = {}
        for offset, key, _ in rows:
            if offset < cleaned:
                if key in newest:  # a producer's last batch is kept as an empty batch, never as its records
                    raise ReadError(f"{where}: {at[newest[key]]} at {newest[key]} superseded by offset {offset}, "
                                    f"both below the checkpoint {cleaned}")
                newest[key] = offset
        self.below[partition] = (cleaned, now)


def read_loop(store: compactlog.Store, deadline: float, pass_fd: int | None) -> dict[str, Any]:
    reader = Reader()
    while time.monotonic() < deadline:
        for partition in range(PARTITIONS):
            reader.read(store, partition, pass_fd)
    return dict(reader.counts)


def main() -> None:
    role, data_dir, name, pass_fd = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    store = compactlog.open(data_dir, clock=lambda: CLOCK_MS)
    print("ready", flush=True)
    words = sys.stdin.readline().split()
    deadline = float(words[1])
    if role in ("plain", "idempotent"):
        done = produce(store, name, deadline)
    elif role == "cleaner":
        done = clean(store, deadline, pass_fd)
    else:
        done = read_loop(store, deadline, pass_fd if role == "slow" else None)
    store.close()
    print(json.dumps(done), flush=True)


if __name__ == "__main__":
    main()
