"""The fault harness's workload: a child process that the driver (:mod:`harness`) kills with SIGKILL.

``python workload.py <data_dir> <ack_log> <stderr file>`` imports once and then serves runs (:func:`serve`):
for each line ``<seed> <steps> <kill after seconds or -> [<fault point> | io=<I/O point>:<n>:<errno>]`` on
stdin it forks a child, which opens the store and runs ``steps`` random operations: appends
(``Store.append``), idempotent and transactional producers (commit and abort), forced cleaning, rolls,
retention, and deleting and re-creating a topic. Before each operation it appends an *intent* line to
``ack_log`` and after it returns an *ack* line with what was acknowledged (the offsets of flushed records, a
transaction's outcome), each line written with ``O_APPEND`` and fsynced before the workload goes on: the ack
log is what the driver holds the recovered store to.

An armed I/O point (``COMPACTLOG_FAULT_IO``) fails an operation with a CompactLogError: it gets no ack line,
the point is disarmed and the run goes on with the same store (a failed re-creation of a topic is retried,
as a user would), so what follows the error is checked too. Any other exception, a raw ``OSError`` included,
fails the run.

Ack-log lines (JSON): ``{"intent": n, "op": <name>, "records": [[topic, partition, key, value], ...]}``
then ``{"ack": n, "offsets": [...]}`` (one offset per record, in order; ``[]`` for an operation without
records). Keys and values are ASCII strings; a value of null is a tombstone. Every value is unique
(``<seed>-<step>-<i>``), so a value read back names the send it came from.

Time is a fixed clock: no tombstone or transaction expires by time, so the model needs no clock.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import select
import signal
import sys
import tempfile
import threading
import traceback
from collections.abc import Callable
from typing import Any

import pyarrow as pa

import compactlog
from compactlog import faults

CLOCK_MS = 1_000_000_000
# The topics the workload writes: compacted (two partitions), delete with size retention, and a compacted
# one it deletes and creates again.
# Compacted segments of 40 kB: a sealed segment of a few records is a Parquet file of several kB, so the
# cleaner merges cleaned segments into a group only under a limit well above that; with a smaller one their
# number (and every open's, clean's and check's work) would grow with every roll through a long run.
TOPICS: dict[str, tuple[int, dict[str, Any]]] = {
    "c": (2, {"cleanup.policy": "compact", "segment.bytes": 40_000, "min.cleanable.dirty.ratio": 0.01}),
    "r": (1, {"cleanup.policy": "delete", "segment.bytes": 2000, "retention.bytes": 4000}),
    "d": (1, {"cleanup.policy": "compact", "segment.bytes": 40_000, "min.cleanable.dirty.ratio": 0.01}),
}
IO_PREFIX = "io="  # a run's fault word naming an I/O point (COMPACTLOG_FAULT_IO) rather than a crash point
AFTER_ERROR = 4  # operations run after an injected I/O error (on the store that saw it), then the run ends
INJECTED_OUTSIDE = 3  # a child's exit code: an injected I/O error failed it outside an operation (its open)
HANG_SECONDS = 120  # a child that runs longer than this unkilled is stopped and reported as hung
KEYS = 24  # per topic: few, so that compaction has superseded records to remove
OPS = ("append", "append", "idempotent", "idempotent", "commit", "abort", "clean", "clean", "roll",
       "retention", "recreate")


class AckLog:
    """Append-only, fsynced JSON lines."""

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def write(self, entry: dict[str, Any]) -> None:
        os.write(self.fd, (json.dumps(entry) + "\n").encode())
        os.fsync(self.fd)


def batch(rng: random.Random, tag: str, topic: str, partitions: int, size: int) -> list[list[Any]]:
    partition = rng.randrange(partitions)
    return [[topic, partition, f"k{rng.randrange(KEYS):02d}", None if rng.random() < 0.1 else f"{tag}-{i}"]
            for i in range(size)]


def ensure_topics(store: compactlog.Store, acks: AckLog, n: str) -> None:
    for topic, (partitions, config) in TOPICS.items():
        if topic not in store.topics():
            acks.write({"intent": f"{n}-{topic}", "op": "create", "topic": topic, "records": []})
            store.create_topic(topic, partitions, config)
            acks.write({"ack": f"{n}-{topic}", "offsets": []})


def run(data_dir: str, ack_path: str, seed: int, steps: int, ready: Callable[[], None]) -> None:
    rng = random.Random(seed)
    acks = AckLog(ack_path)
    store = compactlog.open(data_dir, clock=lambda: CLOCK_MS)
    ensure_topics(store, acks, f"{seed}-setup")
    ready()  # a random kill's delay counts from here, not from the fork
    producers = Producers(store)
    failed_at = steps
    for step in range(steps):
        if step > failed_at + AFTER_ERROR:
            break
        n = f"{seed}-{step}"
        op = rng.choice(OPS)
        topic = rng.choice(("c", "c", "r", "d")) if op in ("append", "idempotent", "roll") else "c"
        records = batch(rng, n, topic, TOPICS[topic][0], rng.randint(1, 40)) \
            if op in ("append", "idempotent", "commit", "abort") else []
        acks.write({"intent": n, "op": op, "topic": topic, "records": records})
        try:
            operate(store, acks, producers, rng, n, op, topic, records)
        except compactlog.CompactLogError as e:  # an injected I/O error: not acknowledged; the store goes on
            if faults.injected_point(e) is None:
                raise
            faults.arm_io_fault(None)
            failed_at = step
            producers.failed()
            if op == "recreate":  # its deletion may be pending (the topic refused): retried, as a user would
                operate(store, acks, producers, rng, f"{n}-retry", op, topic, records, intent=True)
    producers.close()
    store.close()


class Producers:
    """The workload's idempotent producer and its transactional one (made on first use: a new instance
    aborts what a killed or failed one left open)."""

    def __init__(self, store: compactlog.Store) -> None:
        self.store = store
        self.idempotent = store.producer()
        self.transactional: compactlog.Producer | None = None

    def transaction(self) -> compactlog.Producer:
        if self.transactional is None:
            self.transactional = self.store.producer(transactional_id="workload")
        return self.transactional

    def failed(self) -> None:
        """After an injected error: the transactional instance is dropped (its transaction must be aborted;
        the next instance does it); the idempotent one goes on."""
        if self.transactional is not None:
            with contextlib.suppress(compactlog.CompactLogError):
                self.transactional.close()
            self.transactional = None

    def close(self) -> None:
        for producer in (self.idempotent, self.transactional):
            if producer is not None:
                producer.close()  # its sender thread ends


def operate(store: compactlog.Store, acks: AckLog, producers: Producers, rng: random.Random, n: str, op: str,
            topic: str, records: list[list[Any]], intent: bool = False) -> None:
    """One operation, its ack line written when it returns (its intent line too with ``intent``)."""
    if intent:
        acks.write({"intent": n, "op": op, "topic": topic, "records": records})
    offsets: list[int] = []
    if op == "append":
        part = records[0][1]
        table = pa.table({"key": pa.array([r[2].encode() for r in records], pa.binary()),
                          "value": pa.array([None if r[3] is None else r[3].encode() for r in records],
                                            pa.binary())})
        base = store.append(topic, part, table).base_offset
        offsets = list(range(base, base + len(records)))
    elif op in ("idempotent", "commit", "abort"):
        if op == "idempotent":
            producer = producers.idempotent
        else:
            producer = producers.transaction()
            producer.begin_transaction()
        futures = [producer.send(t, r.encode() if r else None, v.encode() if v else None, partition=p)
                   for t, p, r, v in records]
        if op == "idempotent":
            producer.flush()
        elif op == "commit":
            producer.commit_transaction()
        else:
            producer.flush()  # the records are in the log, then aborted
            producer.abort_transaction()
        offsets = [f.result().offset for f in futures]
    elif op == "clean":
        store.clean(force=True)
    elif op == "roll":
        store.roll(topic, rng.randrange(TOPICS[topic][0]))
    elif op == "retention":
        store.enforce_retention()
    elif op == "recreate":
        if "d" in store.topics():  # else a retried deletion that its failed attempt finished
            store.delete_topic("d")
        acks.write({"ack": n, "offsets": []})
        n = f"{n}-create"
        acks.write({"intent": n, "op": "create", "topic": "d", "records": []})
        store.create_topic("d", *TOPICS["d"])
    acks.write({"ack": n, "offsets": offsets})


def child(data_dir: str, ack_path: str, err_path: str, words: list[str], ready_fd: int) -> None:
    """The forked child: stderr to ``err_path``, the fault point armed, one run; never returns."""
    code = 0
    try:
        err = os.open(err_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(err, 2)
        os.environ.pop(faults.FAULT_POINT_ENV, None)
        os.environ.pop(faults.FAULT_IO_ENV, None)
        if len(words) > 3:
            armed = words[3].removeprefix(IO_PREFIX)
            os.environ[faults.FAULT_IO_ENV if armed != words[3] else faults.FAULT_POINT_ENV] = armed
        faults.rearm()
        run(data_dir, ack_path, int(words[0]), int(words[1]), lambda: os.write(ready_fd, b"r"))
    except compactlog.CompactLogError as e:  # an injected I/O error outside an operation (open, close)
        os.write(2, traceback.format_exc().encode())
        code = 1 if faults.injected_point(e) is None else INJECTED_OUTSIDE
    except BaseException:  # the driver reads stderr: a workload that raised is a finding
        os.write(2, traceback.format_exc().encode())
        code = 1
    os._exit(code)  # no atexit handler, no flush of the parent's buffers


def warm_up() -> None:
    """Run the workload once in a scratch directory, so that what its operations import on first use
    (pyarrow imports pandas lazily, over a second) is imported here once, not in every child. No thread of
    it is left (a fork copies only the forking thread)."""
    with tempfile.TemporaryDirectory(prefix="compactlog-warm-up-") as scratch:
        ack_path = os.path.join(scratch, "acks.jsonl")
        for seed in range(3):
            run(os.path.join(scratch, "data"), ack_path, seed, 20, lambda: None)
    assert threading.active_count() == 1, threading.enumerate()


def serve(data_dir: str, ack_path: str, err_path: str) -> None:
    """Fork one child a line of stdin (``<seed> <steps> <kill after seconds or -> [<fault point>]``); kill it
    with SIGKILL that long after it opened the store unless it ended first (``-``: an armed run, stopped only
    after :data:`HANG_SECONDS` and answered ``hung``); answer its wait status as ``<exit code>`` (negative:
    the signal) on stdout. Forking skips the interpreter's start and the imports,
    most of a short run's cost; this process itself never touches the store, so its children start clean."""
    warm_up()
    for line in sys.stdin:
        words = line.split()
        ready_read, ready_write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(ready_read)
            child(data_dir, ack_path, err_path, words, ready_write)
        os.close(ready_write)
        # b"r" when the store is open; end of file when the child is gone (it holds the pipe until then).
        started = os.read(ready_read, 1)
        hung = stopped = False
        if started:
            limit = HANG_SECONDS if words[2] == "-" else float(words[2])
            # The child's end, or this server's stdin readable: the driver sends nothing before the answer,
            # so that is its end (the driver stopping): the child is killed and the server ends.
            ended, _, _ = select.select([ready_read, sys.stdin], [], [], limit)
            stopped = sys.stdin in ended
            if not ended or stopped:
                os.kill(pid, signal.SIGKILL)  # not yet waited for: the pid is still this child's
                hung = not stopped and words[2] == "-"
        os.close(ready_read)
        _, status = os.waitpid(pid, 0)
        if stopped:
            return
        print("hung" if hung else os.waitstatus_to_exitcode(status), flush=True)


def main() -> None:
    serve(sys.argv[1], sys.argv[2], sys.argv[3])


if __name__ == "__main__":
    main()
