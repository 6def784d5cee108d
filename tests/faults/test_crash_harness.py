"""The fault harness in CI: 200 kill -9s of the workload, at every named fault point and at random moments,
and a run with an I/O error injected at each I/O point in turn (the workload going on after the error), each
followed by a recovery checked against the model of what was acknowledged (:mod:`harness`); the check itself
catches a store that lost or changed an acknowledged record; the workload takes an injected I/O error (a
CompactLogError) and goes on, and fails on a raw OSError. ``./dev soak`` runs 1,000 kills. Every I/O point
is also met in process, with its checks, by ``test_io_errors.py``."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pyarrow as pa
import pytest
import workload
from harness import CLOCK_MS, HarnessFailure, check_store, load_model, run

import compactlog
from compactlog import faults
from compactlog import transactions as transaction_coordinator
from compactlog.faults import FAULT_POINTS, IO_FAULT_POINTS
from compactlog.transaction_state_manager import TransactionStateManager

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_200_crashes_lose_no_acknowledged_record(tmp_path: Path) -> None:
    summary = run(crashes=200, seed=1, steps=5, work=tmp_path, fault_points=FAULT_POINTS)
    print(summary.table())
    assert summary.failures == []
    assert sum(summary.io_landed.values()) + sum(summary.io_missed.values()) == len(IO_FAULT_POINTS)
    assert len(summary.io_landed) >= len(IO_FAULT_POINTS) // 2  # the others: not reached by this workload
    assert sum(summary.landed.values()) >= 200 and summary.recoveries >= 200
    assert set(FAULT_POINTS) <= set(summary.landed), f"never hit: {set(FAULT_POINTS) - set(summary.landed)}"
    assert sum(n for where, n in summary.landed.items() if where.startswith("random:")) >= 50
    assert summary.records_checked > 1000


def test_the_workload_goes_on_after_an_injected_error_and_fails_on_a_raw_os_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    acks = tmp_path / "acks.jsonl"
    try:
        faults.arm_io_fault("producer-ids.rename")  # the idempotent producer's id, at the run's start
        workload.run(str(tmp_path / "data"), str(acks), seed=3, steps=8, ready=lambda: None)
        model, in_flight = load_model(acks)
        assert in_flight is None and sum(len(a) for a in model.acked.values()) > 0
        # The same error let out raw, as before the transaction state's writes were wrapped: a finding.
        monkeypatch.setattr(TransactionStateManager, "write_whole", TransactionStateManager.write_whole.__wrapped__)
        monkeypatch.setattr(transaction_coordinator, "storage_errors", lambda doing: contextlib.nullcontext())
        faults.arm_io_fault("producer-ids.rename")
        with pytest.raises(OSError) as raised:
            workload.run(str(tmp_path / "data"), str(acks), seed=4, steps=8, ready=lambda: None)
        assert not isinstance(raised.value, compactlog.CompactLogError)
    finally:
        faults.arm_io_fault(None)


def written_store(tmp_path: Path) -> tuple[Path, Path]:
    """A data directory with one acknowledged record, and its ack log."""
    data, acks = tmp_path / "data", tmp_path / "acks.jsonl"
    store = compactlog.open(str(data), clock=lambda: CLOCK_MS)
    store.create_topic("c", 2, {"cleanup.policy": "compact"})
    store.append("c", 0, pa.table({"key": [b"k01"], "value": [b"first"]}))
    store.close()
    acks.write_text(json.dumps({"intent": "0", "op": "append", "topic": "c", "records": [["c", 0, "k01", "first"]]})
                    + "\n" + json.dumps({"ack": "0", "offsets": [0]}) + "\n")
    return data, acks


def test_the_check_catches_a_lost_or_changed_record(tmp_path: Path) -> None:
    data, acks = written_store(tmp_path)
    model, _ = load_model(acks)
    assert check_store(data, model) == 1
    store = compactlog.open(str(data), clock=lambda: CLOCK_MS)
    store.append("c", 0, pa.table({"key": [b"k01"], "value": [b"never-sent"]}))
    store.close()
    with pytest.raises(HarnessFailure, match="never sent"):
        check_store(data, model)
    store = compactlog.open(str(data), clock=lambda: CLOCK_MS)
    store.delete_topic("c")
    store.close()
    with pytest.raises(HarnessFailure, match="gone"):
        check_store(data, model)
