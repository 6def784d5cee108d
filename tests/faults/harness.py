"""The fault harness's driver: kill -9 the workload (:mod:`workload`) again and again, and after every kill
reopen the store and hold it to the model of what the workload acknowledged.

One data directory lives through every crash: each child continues where the last one died. A crash is
either armed (``COMPACTLOG_FAULT_POINT=<point>:<n>``, every point of :data:`compactlog.faults.FAULT_POINTS`
in turn) or a SIGKILL from here after a random delay. Between them, runs with an I/O error injected
(``COMPACTLOG_FAULT_IO``, every point of :data:`compactlog.faults.IO_FAULT_POINTS` in turn, ENOSPC or EIO):
the failed operation is not acknowledged and the child goes on with the same store (a raw ``OSError`` or
any other error fails the run). After each run :func:`check_store` reopens the store (which recovers it)
and checks, against :class:`Model` built from the ack log:

- offsets strictly increase, every record read was sent to that partition, and an acknowledged offset
  holds exactly the acknowledged record (none moved or replaced);
- of compacted topics, each key whose every send was acknowledged reads its newest acknowledged value at
  its acknowledged offset (compaction may drop superseded records, never the newest); a tombstone's key
  reads nothing or the tombstone;
- of the delete topic, every acknowledged offset at or past the log start is there;
- no value of an aborted transaction reaches ``read_committed``; no record of a deleted topic comes back
  in the topic created again;
- no temporary file (``*.tmp``, ``*.cleaned``, ``*.swap``, ``*.sealing``, ``*.deleted``) nor topic marker
  (``*.del``, ``*.new``) is left after recovery, no partition directory of a topic that does not exist
  (a creation cut short is undone), and no cleaner checkpoint is past its partition's log end.

``python harness.py --crashes N [--io-runs M]`` (``./dev soak``) runs N crashes and M I/O-error runs (N/2 by
default) and prints where they landed and what was checked; the CI test
(``tests/faults/test_crash_harness.py``) runs a shorter one, with one I/O-error run per point.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: support, as under pytest

from workload import INJECTED_OUTSIDE, IO_PREFIX

import compactlog
from compactlog.checkpoint import read_checkpoint
from compactlog.faults import FAULT_IO_ENV, FAULT_POINT_ENV, FAULT_POINTS, IO_ERRORS, IO_FAULT_POINTS
from support import fault_landed, leftovers

WORKLOAD = str(Path(__file__).with_name("workload.py"))
CLOCK_MS = 1_000_000_000  # the workload's fixed clock (workload.CLOCK_MS)
COMPACTED = ("c", "d")
ARMED_STEPS = 4  # an armed child's operations, in multiples of a random one's
IO_FAULT_LINE = re.compile(r"^compactlog io fault (\S+) hit \d+$", re.M)  # what faults.io_fault writes
MAX_TRIES = 20  # armed runs that end before the point's hit, after which the next point is armed
Record = tuple[str | None, str | None]  # key, value


class HarnessFailure(AssertionError):
    """The recovered store broke a rule of the model."""


@dataclass
class Model:
    """What the ack log says of each partition."""

    acked: dict[tuple[str, int], dict[int, Record]] = field(default_factory=dict)  # offset -> record
    newest: dict[tuple[str, int], dict[str, tuple[str | None, int | None]]] = field(default_factory=dict)
    sent: dict[tuple[str, int], set[Record]] = field(default_factory=dict)
    aborted: set[str] = field(default_factory=set)  # values that must never be read_committed
    forbidden: set[str] = field(default_factory=set)  # values of a deleted incarnation of topic d
    uncertain_topics: set[str] = field(default_factory=set)  # a delete in flight: anything goes but forbidden

    def forget(self, topic: str) -> None:
        for tp in [tp for tp in self.sent if tp[0] == topic]:
            self.forbidden |= {v for _, v in self.sent.pop(tp) if v is not None}
            self.acked.pop(tp, None)
            self.newest.pop(tp, None)

    def send(self, records: list[list[Any]], offsets: list[int] | None) -> None:
        """Records sent; ``offsets`` when acknowledged, None when in flight (the key's newest is unknown)."""
        for i, (topic, partition, key, value) in enumerate(records):
            tp = (topic, partition)
            self.sent.setdefault(tp, set()).add((key, value))
            newest = self.newest.setdefault(tp, {})
            if offsets is None:
                newest[key] = (value, None)
            else:
                self.acked.setdefault(tp, {})[offsets[i]] = (key, value)
                newest[key] = (value, offsets[i])


class AckLogReader:
    """The ack log's entries, parsed once: each call reads only the lines appended since the last one (a
    long soak's ack log grows to megabytes; parsing it whole after every crash made the driver the
    bottleneck). A line a kill cut short is left for the next call."""

    def __init__(self, path: Path) -> None:
        self.path, self.position, self.entries = path, 0, list[dict[str, Any]]()

    def reset(self) -> None:
        self.position, self.entries = 0, []

    def read(self) -> list[dict[str, Any]]:
        with open(self.path, "rb") as f:
            f.seek(self.position)
            new = f.read()
        whole = new[: new.rfind(b"\n") + 1]
        self.position += len(whole)
        self.entries += [json.loads(line) for line in whole.splitlines()]
        return self.entries


def load_model(ack_log: Path | AckLogReader) -> tuple[Model, str | None]:
    """Replay the ack log; also returns the operation in flight at the end (None if the last one was acked)."""
    model = Model()
    intents: dict[str, dict[str, Any]] = {}
    order: list[str] = []
    acks: dict[str, list[int]] = {}
    reader = ack_log if isinstance(ack_log, AckLogReader) else AckLogReader(ack_log)
    for entry in reader.read():
        if "intent" in entry:
            intents[entry["intent"]] = entry
            order.append(entry["intent"])
        else:
            acks[entry["ack"]] = entry["offsets"]
    for n in order:
        entry, offsets = intents[n], acks.get(n)
        op, records = entry["op"], entry["records"]
        if op == "recreate":
            model.forget("d")
            if offsets is None:
                model.uncertain_topics.add("d")  # until a delete of d is acknowledged
            continue
        if op == "create" and entry["topic"] == "d" and offsets is not None:
            model.uncertain_topics.discard("d")
        if op == "abort":
            model.aborted |= {r[3] for r in records if r[3] is not None}
            model.send(records, None)  # in the log, then aborted: the key's newest is left unknown
            continue
        if op == "commit" and offsets is not None:
            model.send(records, offsets)
            continue
        model.send(records, offsets if op != "commit" else None)
    last = order[-1] if order else None
    in_flight = intents[last]["op"] if last is not None and last not in acks else None
    return model, in_flight


def check_store(data_dir: Path, model: Model) -> int:
    """Reopen the store and check it against the model (see the module docstring); returns records checked."""
    store = compactlog.open(str(data_dir), clock=lambda: CLOCK_MS)
    checked = 0
    try:
        checkpoints = read_checkpoint(data_dir / "cleaner-offset-checkpoint")
        for topic, partition in model.acked:
            if topic not in model.uncertain_topics and topic not in store.topics():
                raise HarnessFailure(f"topic {topic} with acknowledged records in partition {partition} is gone")
        for topic in store.topics():
            for log in store.partition_logs(topic):
                tp = (topic, log.partition)
                where = f"{topic}-{log.partition}"
                end = store.log_end_offset(topic, log.partition)
                start = store.log_start_offset(topic, log.partition)
                every = [(r.offset, r.key, r.value) for r in store.read(topic, log.partition, start)]
                committed = [(r.offset, r.key, r.value) for r in
                             store.read(topic, log.partition, start, isolation_level="read_committed")]
                if checkpoints.get(tp, 0) > end:
                    raise HarnessFailure(f"{where}: checkpoint {checkpoints[tp]} past the log end {end}")
                offsets = [o for o, _, _ in every]
                if any(b <= a for a, b in itertools.pairwise(offsets)):
                    raise HarnessFailure(f"{where}: offsets not strictly increasing")
                sent, acked = model.sent.get(tp, set()), model.acked.get(tp, {})
                for offset, key, value in every:
                    record = (key.decode() if key is not None else None, value.decode() if value is not None else None)
                    if topic in model.uncertain_topics:
                        continue  # its delete was in flight: the topic may still be the old one
                    if record[1] in model.forbidden:
                        raise HarnessFailure(f"{where}: offset {offset} {record} of a deleted topic came back")
                    if record not in sent:
                        raise HarnessFailure(f"{where}: offset {offset} {record} was never sent here")
                    if offset in acked and acked[offset] != record:
                        raise HarnessFailure(f"{where}: offset {offset} holds {record}, acknowledged {acked[offset]}")
                for _, _, value in committed:
                    if value is not None and value.decode() in model.aborted:
                        raise HarnessFailure(f"{where}: aborted value {value.decode()} read_committed")
                if topic in model.uncertain_topics:
                    continue
                at = {o: (k.decode() if k is not None else None, v.decode() if v is not None else None)
                      for o, k, v in every}
                if topic in COMPACTED:
                    # Read uncommitted less aborted values: read_committed stops at the last stable offset,
                    # which a transaction a kill left open holds back until the next transactional producer
                    # of its id starts (and aborts it); its keys' newest sends are unacknowledged anyway.
                    state = {k: (v, o) for o, k, v in
                             ((o, k.decode() if k is not None else None, v.decode() if v is not None else None)
                              for o, k, v in every) if v not in model.aborted}
                    for key, (value, offset) in model.newest.get(tp, {}).items():
                        if offset is None:
                            continue  # some send of this key was not acknowledged
                        got = state.get(key)
                        if value is None:
                            if got is not None and got[0] is not None:
                                raise HarnessFailure(f"{where}: deleted key {key} reads {got}")
                        elif got != (value, offset):
                            raise HarnessFailure(f"{where}: key {key} reads {got}, acknowledged {value} at {offset}")
                        checked += 1
                else:
                    for offset, record in acked.items():
                        if offset >= start:
                            if at.get(offset) != record:
                                raise HarnessFailure(f"{where}: acknowledged offset {offset} {record} lost "
                                                     f"(log start {start})")
                            checked += 1
        left = leftovers(data_dir)
        if left:
            raise HarnessFailure(f"left after recovery: {left}")
        orphans = [name for name in os.listdir(data_dir) if (data_dir / name).is_dir() and "-" in name
                   and name.rsplit("-", 1)[1].isdigit() and name.rsplit("-", 1)[0] not in store.topics()]
        if orphans:
            raise HarnessFailure(f"partition directories of no topic after recovery: {orphans}")
    finally:
        store.close()
    return checked


@dataclass
class Summary:
    landed: Counter[str] = field(default_factory=Counter)
    recoveries: int = 0
    check_cpu_seconds: float = 0.0
    completed: int = 0  # children that ran to the end (an armed point not reached that often): checked too
    io_landed: Counter[str] = field(default_factory=Counter)  # I/O errors injected, by point
    io_missed: Counter[str] = field(default_factory=Counter)  # I/O runs that did not reach their point
    records_checked: int = 0
    failures: list[str] = field(default_factory=list)

    def table(self) -> str:
        rows = [("crashes injected", sum(self.landed.values())), ("recoveries checked", self.recoveries),
                ("children that ran to the end", self.completed),
                ("acknowledged records checked", self.records_checked),
                ("recoveries failing a check (lost or wrong data)", len(self.failures))]
        rows += [(f"  landed at {where}", n) for where, n in sorted(self.landed.items())]
        rows += [("I/O errors injected (run on after the error)", sum(self.io_landed.values()))]
        rows += [(f"  at {where}", n) for where, n in sorted(self.io_landed.items())]
        rows += [("I/O runs that never reached their point", sum(self.io_missed.values()))]
        rows += [("CPU seconds of the checks", round(self.check_cpu_seconds))]
        return "\n".join(f"{name:<48} {value:>8}" for name, value in rows)


class Workload:
    """The workload's fork server (:func:`workload.serve`): imported once, a forked child a run."""

    def __init__(self, data_dir: Path, ack_log: Path, err_path: Path) -> None:
        env = {k: v for k, v in os.environ.items() if k not in (FAULT_POINT_ENV, FAULT_IO_ENV)}
        self.err_path = err_path
        self.proc = subprocess.Popen([sys.executable, WORKLOAD, str(data_dir), str(ack_log), str(err_path)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)

    def run(self, seed: int, steps: int, fault: str | None, kill_after: float | None) -> tuple[int, str]:
        """One child, armed at ``fault`` or killed ``kill_after`` seconds after it opened the store; returns
        its exit code (``-9``: killed) and stderr."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        delay = "-" if kill_after is None else f"{kill_after:.4f}"
        self.proc.stdin.write(f"{seed} {steps} {delay} {fault or ''}\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline().strip()
        err = self.err_path.read_text(errors="replace") if self.err_path.exists() else ""
        if answer == "hung":
            return 2, f"the workload hung (stopped by its server) before its fault point {fault}\n{err}"
        if not answer:
            raise HarnessFailure(f"the workload's fork server ended (exit {self.proc.wait()})")
        return int(answer), err

    def stop(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()  # the server's loop ends at end of input
        try:
            self.proc.wait(timeout=300)  # the server first waits out its child (at most its hang limit)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def run(crashes: int, seed: int = 0, steps: int = 12, work: Path | None = None,
        stop_on_failure: bool = True, progress: bool = False, summary: Summary | None = None,
        fault_points: Sequence[str] = FAULT_POINTS, io_points: Sequence[str] = IO_FAULT_POINTS,
        io_runs: int | None = None) -> Summary:
    """``crashes`` kills, alternately at the named ``fault_points`` in turn (each at a random hit, 1 to 3) and
    at random moments, and between them ``io_runs`` runs (one per point of ``io_points`` by default) with an
    I/O error injected at those points in turn; each run followed by :func:`check_store`; a failure stops the
    run if ``stop_on_failure``."""
    io_runs = len(io_points) if io_runs is None else io_runs
    rng = random.Random(seed)
    summary = summary if summary is not None else Summary()
    if work is None and os.path.isdir("/dev/shm"):
        # Memory-backed: a SIGKILL loses no written page (unlike a power cut), so fsync need not reach a disk,
        # and thousands of fsyncs cost nothing.
        work = Path("/dev/shm")
    with tempfile.TemporaryDirectory(prefix="compactlog-faults-", dir=work) as tmp:
        data_dir, ack_log = Path(tmp) / "data", Path(tmp) / "acks.jsonl"
        ack_log.touch()
        work_seconds = 0.2  # a first guess, then the running mean of the children's work that ran to the end
        points, io_list = list(fault_points), list(io_points)
        n = point = tries = crash_runs = io_index = 0
        workload = Workload(data_dir, ack_log, Path(tmp) / "child.err")
        ack_reader = AckLogReader(ack_log)

        def check(fault: str | None, model: Model) -> None:
            """Reopen and check the store after a run (:func:`check_store`); a failure is recorded."""
            checking = time.process_time()
            try:
                summary.records_checked += check_store(data_dir, model)
            except Exception as e:  # a rule broken, or the recovered store raising: both are findings
                summary.failures.append(f"after {fault or 'a random kill'} ({tmp}): {type(e).__name__}: {e}")
                print("FAILED", summary.failures[-1], file=sys.stderr, flush=True)
                if stop_on_failure:
                    shutil.copytree(tmp, f"{tmp}-failed", ignore_dangling_symlinks=True)  # kept to look at
                else:  # go on from an empty directory: the damage would fail every later check too
                    shutil.rmtree(data_dir)
                    ack_log.write_text("")
                    ack_reader.reset()
            summary.recoveries += 1
            if progress and summary.recoveries % 100 == 0:
                print(f"{summary.recoveries} recoveries checked, {len(summary.failures)} failed", file=sys.stderr,
                      flush=True)
            summary.check_cpu_seconds += time.process_time() - checking

        try:
            while sum(summary.landed.values()) < crashes and not (summary.failures and stop_on_failure):
                n += 1
                # Every third run (while io_runs last) has an I/O point armed, the points in turn, at a
                # random hit (1 to 3) with ENOSPC or EIO; it is not killed, and goes on after the error.
                # Of the others, odd runs are armed with a crash point: the points in turn, each until it
                # lands (a child may end before its n-th hit) or MAX_TRIES runs missed it; even runs are
                # killed at a random moment. An armed child runs ARMED_STEPS times longer, so that a rare
                # operation's point is reached.
                if io_index < io_runs and n % 3 == 0:
                    io_point = io_list[io_index % len(io_list)]
                    io_index += 1
                    fault = f"{IO_PREFIX}{io_point}:{rng.randint(1, 3)}:{rng.choice(tuple(IO_ERRORS))}"
                    code, err = workload.run(seed * 1_000_000 + n, steps * ARMED_STEPS, fault, None)
                    model, _ = load_model(ack_reader)
                    landed = IO_FAULT_LINE.search(err)
                    if code not in (0, INJECTED_OUTSIDE):  # a raw OSError, a wrong error, a hang: findings
                        summary.failures.append(f"the workload failed (exit {code}) under {fault}:\n{err}")
                        continue
                    if landed:
                        summary.io_landed[landed.group(1)] += 1
                    else:
                        summary.io_missed[io_point] += 1
                    check(fault, model)
                    continue
                crash_runs += 1
                fault = f"{points[point % len(points)]}:{rng.randint(1, 3)}" if crash_runs % 2 else None
                started = time.monotonic()
                code, err = workload.run(seed * 1_000_000 + n, steps * ARMED_STEPS if fault else steps, fault,
                                         None if fault else rng.uniform(0.0, work_seconds))
                model, in_flight = load_model(ack_reader)
                if code == 0:
                    summary.completed += 1
                    if fault is None:
                        work_seconds = 0.8 * work_seconds + 0.2 * (time.monotonic() - started)
                elif code == -signal.SIGKILL:
                    summary.landed[fault_landed(err) or f"random:{in_flight or 'between'}"] += 1
                else:  # the workload raised: the store it reopened was not as its last run left it
                    summary.failures.append(f"the workload failed (exit {code}), not killed:\n{err}")
                    continue
                if fault is not None:
                    tries = 0 if code == -signal.SIGKILL else tries + 1
                    if tries in (0, MAX_TRIES):
                        point, tries = point + 1, 0
                check(fault, model)
        finally:
            workload.stop()
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="kill -9 a producing and cleaning workload; check every recovery")
    parser.add_argument("--crashes", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=12, help="operations per child at most")
    parser.add_argument("--io-runs", type=int, help="runs with an I/O error injected (default: half the crashes)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    summary = Summary()
    # SIGTERM (or Ctrl-C) ends the run early: the started child is stopped, the table printed so far.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    try:
        run(args.crashes, args.seed, args.steps, stop_on_failure=False, progress=True, summary=summary,
            io_runs=args.crashes // 2 if args.io_runs is None else args.io_runs)
    except (KeyboardInterrupt, SystemExit):
        print("interrupted", file=sys.stderr)
    print(summary.table())
    print(f"{'seconds':<48} {time.monotonic() - started:>8.0f}")
    for failure in summary.failures:
        print("FAILED", failure)
    return 1 if summary.failures else 0


if __name__ == "__main__":
    sys.exit(main())
