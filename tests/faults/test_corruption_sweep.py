"""The corruption sweep: damage every kind of file a store keeps, one case at a time, and check what the store
then gives: the data as written, or a ``CompactLogError`` naming the file, never wrong data and never a raw
exception.

One small store is written once (a sealed Parquet segment of several row groups, an active segment of
several frames, a producer snapshot, transactions committed and aborted, a cleaner checkpoint and the
cleaner's state file, topic and transaction metadata, ``producer-ids``, ``meta.properties``,
``server.properties``). Each case copies it, damages one file (one flipped bit; a truncation at every
frame boundary of the active segment and at several points of every other file; garbage appended; a
one-digit change of each count and offset in the sealed segment's footer) and opens the copy. Bits are
sampled (a fixed seed) where a file has more than :data:`MAX_BIT_FLIPS` of them, so the sweep stays under a
minute.

Outcomes:

* ``same``: everything read matches what was written; ``recovered``: the same, and a warning on the
  ``compactlog`` logger says what was damaged and passed over (a producer snapshot: the log rebuilds it);
* ``error``: a ``CompactLogError`` whose message names the damaged file;
* ``tail``: the active segment's last frames are gone, truncated by recovery with a warning on the
  ``compactlog`` logger (a torn tail: Kafka's recovery), what was read before them is intact;
* ``unchecked``: a value of a file in a text format with no checksum (Kafka's ``meta.properties``, the
  cleaner checkpoint, ``server.properties``; ``.transactions/<id>.state``, whose damaged last line is taken
  for a torn tail and gives the state before it) changed into another valid value,
  the records read unchanged; the sweep counts these, it cannot tell them from an edit;
* ``wrong``: anything else read differently; ``raw``: any other exception. ``raw`` must stay at 0 for every
  file, ``wrong`` for the files that carry checksums (:data:`CHECKED_KINDS`).

Run it alone for the table: ``python tests/faults/test_corruption_sweep.py`` prints the counts.
"""

from __future__ import annotations

import logging
import os
import random
import shutil
import sys
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import compactlog
from compactlog import sealed_segment
from compactlog.active_segment import ActiveSegment
from compactlog.checkpoint import read_checkpoint
from compactlog.cleaner.state import read_cleaner_state, state_to_dict
from compactlog.errors import CompactLogError

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from support import FakeClock

SEED = 16
MAX_BIT_FLIPS = 100  # per file; every bit of a smaller file
TOPIC = "t"
TXN_ID = "tx-sweep"
# Files whose format carries a checksum (or is checked against another): no case may read wrong data.
CHECKED_KINDS = ("sealed", "active", "snapshot", "producer-ids", "topic", "cleaner-state")
FOOTER_FIELDS = ("record_count", "control_count", "base_offset", "next_offset", "first_timestamp", "max_timestamp")


def build_store(root: Path) -> None:
    """Write the store the sweep damages."""
    clock = FakeClock()
    root.mkdir()
    (root / "server.properties").write_text("log.cleaner.dedupe.buffer.size=4194304\n", encoding="utf-8")
    store = compactlog.open(str(root), clock=clock)
    store.create_topic(TOPIC, 1, {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": 0.01,
                                  "segment.bytes": 1 << 20})
    with store.producer() as producer:
        for i in range(60):
            producer.send(TOPIC, key=b"k%d" % (i % 25), value=b"value-%d" % i)
        producer.flush()
    txn = store.producer(transactional_id=TXN_ID)
    txn.begin_transaction()
    txn.send(TOPIC, key=b"k1", value=b"committed")
    txn.commit_transaction()
    txn.begin_transaction()
    txn.send(TOPIC, key=b"k2", value=b"aborted")
    txn.abort_transaction()
    txn.close()
    store.roll(TOPIC, 0)  # the sealed segment, and a producer snapshot at its end
    clock.advance(1000)
    store.clean(force=True)
    with store.producer() as producer:  # the active segment: several frames
        for i in range(4):
            for j in range(3):
                producer.send(TOPIC, key=b"k%d" % j, value=b"active-%d-%d" % (i, j))
            producer.flush()
    store.close()


def expected_state(root: Path) -> dict[str, Any]:
    """Everything the sweep compares, read from the store at ``root`` (which this changes: it hands out a
    producer id and bumps the transactional id's epoch)."""
    store = compactlog.open(str(root), clock=FakeClock())
    try:
        # A partition that cannot be opened raises here, naming the file (describe reports it instead).
        uncommitted = _records(store.read(TOPIC, 0))
        sealed_end = store.describe(TOPIC)[0].segments[-1].base_offset  # the active segment's
        state = {
            "uncommitted": uncommitted,
            "committed": _records(store.read(TOPIC, 0, isolation_level="read_committed")),
            "seek": _records(store.read(TOPIC, 0, start_offset=max(sealed_end - 7, 0))),
            "config": store.topic_config(TOPIC),
            "partitions": store.partitions(TOPIC),
            "broker": store.broker,
            "directory_id": store.directory_id,
            "checkpoint": read_checkpoint(root / "cleaner-offset-checkpoint"),
            # What `metrics` reads (strictly: a damaged file is an error naming it; the store's own load
            # passes over it with a warning).
            "cleaner_state": state_to_dict(read_cleaner_state(str(root))),
            "producer_id": store.transactions.init_producer(None, 60000),
            "txn": store.transactions.init_producer(TXN_ID, 60000),
        }
    finally:
        store.close()
    return state


def _records(records: Iterator[Any]) -> list[tuple[int, bytes | None, bytes | None]]:
    return [(r.offset, r.key, r.value) for r in records]


def file_kinds(root: Path) -> dict[str, Path]:
    """One file of every kind the store keeps."""
    partition = root / f"{TOPIC}-0"
    kinds = {
        "sealed": next(partition.glob("*.parquet")),
        "active": next(partition.glob("*.log")),
        "snapshot": next(partition.glob("*.snapshot")),
        "producer-ids": root / ".transactions" / "producer-ids",
        "transaction": next((root / ".transactions").glob("*.state")),
        "topic": root / ".topics" / f"{TOPIC}.json",
        "checkpoint": root / "cleaner-offset-checkpoint",
        "cleaner-state": root / "cleaner-state.json",
        "meta.properties": root / "meta.properties",
        "server.properties": root / "server.properties",
    }
    return kinds


def frame_boundaries(path: Path) -> list[int]:
    segment, _ = ActiveSegment.open(str(path), int(path.name.split(".")[0]), truncate=False)
    return [frame.position for frame in segment.frames] + [segment.size]


def flip(data: bytes, bit: int) -> bytes:
    return data[:bit // 8] + bytes([data[bit // 8] ^ 1 << bit % 8]) + data[bit // 8 + 1:]


def change_footer_digit(data: bytes, name: str) -> bytes:
    """``data`` (a sealed segment) with the first digit of footer field ``compactlog.<name>``'s value changed
    (0-8 up by one, 9 to 1), the footer's length unchanged."""
    at = data.index(f"compactlog.{name}".encode()) + len(f"compactlog.{name}")
    while not 0x30 <= data[at] <= 0x39:  # past the Thrift field header and length of the value
        at += 1
    digit = data[at] - 0x30
    return data[:at] + bytes([0x30 + (digit + 1 if digit < 9 else 1)]) + data[at + 1:]


def mutations(kind: str, path: Path) -> Iterator[tuple[str, Callable[[bytes], bytes]]]:
    """Every damage applied to the file of ``kind``: (description, bytes -> damaged bytes)."""
    data = path.read_bytes()
    bits = range(len(data) * 8)
    sample = bits if len(bits) <= MAX_BIT_FLIPS else sorted(random.Random(f"{SEED}-{kind}").sample(bits,
                                                                                                    MAX_BIT_FLIPS))
    for bit in sample:
        yield f"flip bit {bit}", lambda d, bit=bit: flip(d, bit)
    if kind == "sealed":  # a one-digit change of each footer count or offset: the file still parses
        for name in FOOTER_FIELDS:
            yield f"footer {name} digit changed", lambda d, name=name: change_footer_digit(d, name)
    cuts = set(frame_boundaries(path)) if kind == "active" else set()
    cuts |= {0, 1, len(data) // 3, len(data) // 2, len(data) - 8, len(data) - 1}
    for cut in sorted(c for c in cuts if 0 <= c < len(data)):
        yield f"truncate at {cut}", lambda d, cut=cut: d[:cut]
    for garbage in (b"\0" * 7, b"garbage!" * 9, bytes(random.Random(SEED).randrange(256) for _ in range(100))):
        yield f"append {len(garbage)} bytes", lambda d, garbage=garbage: d + garbage


class _Warnings(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def classify(root: Path, kind: str, path: Path, expected: dict[str, Any], boundaries: list[int]) -> str:
    """Open the damaged store at ``root`` and say what it gave (see the module docstring). ``boundaries``:
    where the frames of the undamaged active segment start and end."""
    cut_at_boundary = path.stat().st_size in boundaries[:-1]  # a truncation no recovery needs to see
    warnings = _Warnings()
    logger = logging.getLogger("compactlog")
    logger.addHandler(warnings)
    try:
        got = expected_state(root)
    except CompactLogError as e:
        return "error" if path.name in str(e) or str(path.parent) in str(e) else f"raw: {type(e).__name__}: {e}"
    except Exception as e:  # what the sweep is for: any other exception is a finding
        return f"raw: {type(e).__name__}: {e}"
    finally:
        logger.removeHandler(warnings)
    if got == expected:
        return "recovered" if warnings.messages else "same"
    if kind == "active" and _is_prefix(got, expected) and (warnings.messages or cut_at_boundary):
        return "tail"
    if kind not in CHECKED_KINDS and got["uncommitted"] == expected["uncommitted"] and (
            got["committed"] == expected["committed"]):
        return "unchecked"
    return "wrong"


def _is_prefix(got: dict[str, Any], expected: dict[str, Any]) -> bool:
    rows = got["uncommitted"]
    return (rows == expected["uncommitted"][:len(rows)]
            and got["committed"] == expected["committed"][:len(got["committed"])]
            and {k: v for k, v in got.items() if k not in ("uncommitted", "committed", "seek", "producer_id")}
            == {k: v for k, v in expected.items() if k not in ("uncommitted", "committed", "seek", "producer_id")})


def sweep(work: Path) -> dict[str, Counter[str]]:
    """Run every case; the outcome counts per file kind (findings keep their message in the key)."""
    golden = work / "golden"
    original_rows = sealed_segment.ROW_GROUP_ROWS
    sealed_segment.ROW_GROUP_ROWS = 16  # several row groups in a small sealed segment
    try:
        build_store(golden)
    finally:
        sealed_segment.ROW_GROUP_ROWS = original_rows
    shutil.copytree(golden, work / "reference")
    expected = expected_state(work / "reference")
    counts: dict[str, Counter[str]] = {}
    case = work / "case"
    for kind, golden_path in file_kinds(golden).items():
        counts[kind] = Counter()
        relative = golden_path.relative_to(golden)
        boundaries = frame_boundaries(golden_path) if kind == "active" else []
        for _, damage in mutations(kind, golden_path):
            shutil.rmtree(case, ignore_errors=True)
            shutil.copytree(golden, case)
            path = case / relative
            path.write_bytes(damage(golden_path.read_bytes()))
            counts[kind][classify(case, kind, path, expected, boundaries)] += 1
    return counts


def summary(counts: dict[str, Counter[str]]) -> dict[str, int]:
    total = Counter[str]()
    for by_outcome in counts.values():
        for outcome, n in by_outcome.items():
            total["raw" if outcome.startswith("raw") else outcome] += n
    return {"cases": sum(total.values()), **total}


@pytest.mark.slow
def test_corruption_sweep_never_reads_wrong_data_nor_raises_raw(tmp_path: Path) -> None:
    counts = sweep(tmp_path)
    findings = {kind: {o: n for o, n in c.items() if o.startswith("raw") or (o == "wrong" and kind in CHECKED_KINDS)}
                for kind, c in counts.items()}
    assert not any(findings.values()), findings
    for kind in CHECKED_KINDS:
        assert counts[kind]["error"] + counts[kind]["recovered"] > 0, counts[kind]
    print(summary(counts))


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as work:
        results = sweep(Path(work))
    for file_kind, outcomes in results.items():
        print(f"{file_kind:18} {dict(outcomes)}")
    print(summary(results))
    os._exit(0)
