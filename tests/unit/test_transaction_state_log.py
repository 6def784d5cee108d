"""The transaction coordinator's state logs (``.transactions/<id>.state``): the latest valid line is the id's
state, a torn tail is passed over and never joins the next line, a log past its size is compacted to its
latest line, the earlier ``<id>.json`` format is read and replaced, and a state cached in memory is read
again once another process (here: another store on the same directory) changed its file."""

from __future__ import annotations

import json
import logging
from dataclasses import MISSING, fields
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import compactlog
from compactlog import transaction_state_manager
from compactlog.errors import CorruptTransactionStateError, InvalidTxnStateError, ProducerFencedError
from compactlog.log import Log
from compactlog.transaction_state_manager import legacy_file_name, parse_state_log, read_transaction_state
from compactlog.transaction_transitions import ONGOING, TransactionMetadata
from support import FakeClock

ROWS = pa.table({"key": [b"k"], "value": [b"v"]})


def open_store(path: Path) -> compactlog.Store:
    store = compactlog.open(str(path), clock=FakeClock())
    if "out" not in store.topics():
        store.create_topic("out", 2, {"cleanup.policy": "delete"})
    return store


def test_a_torn_last_line_is_passed_over_and_the_next_append_starts_a_line_of_its_own(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = open_store(tmp_path)
    coordinator = store.transactions
    pid, epoch = coordinator.init_producer("app", 60_000)
    coordinator.add_to_transaction("app", pid, epoch, [("out", 0)])
    path = Path(coordinator.state.path("app"))
    whole = path.read_bytes()
    path.write_bytes(whole + whole.splitlines(keepends=True)[-1][:25])  # a crash cut the next line short
    store.close()
    store = open_store(tmp_path)
    with caplog.at_level(logging.WARNING, logger="compactlog"):
        (state,) = store.transactions.states()
    assert state.state == ONGOING and state.ongoing == [("out", 0)]
    assert "torn tail" in caplog.text
    store.transactions.end_ongoing_transaction("app", pid, epoch, commit=False)  # appends after the torn bytes
    assert read_transaction_state(str(path)).state == "CompleteAbort"
    assert path.read_bytes().startswith(whole + whole.splitlines(keepends=True)[-1][:25] + b"\n")
    store.close()


def test_a_state_log_with_no_valid_line_is_an_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "x.state"
    path.write_bytes(b"0000abcd {\"not\": \"this\"}\n")
    with pytest.raises(CorruptTransactionStateError, match=r"x\.state"):
        read_transaction_state(str(path))
    with pytest.raises(CorruptTransactionStateError, match="no valid state line"):
        parse_state_log(b"", "empty.state")


def test_a_state_log_past_its_size_is_compacted_to_its_latest_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transaction_state_manager, "COMPACT_BYTES", 2_000)
    store = open_store(tmp_path)
    coordinator = store.transactions
    pid, epoch = coordinator.init_producer("app", 60_000)
    path = Path(coordinator.state.path("app"))
    sizes = []
    for n in range(20):
        coordinator.add_to_transaction("app", pid, epoch, [("out", n % 2)])
        store.append("out", n % 2, ROWS, producer_id=pid, producer_epoch=epoch, base_sequence=n // 2,
                     transactional=True)
        coordinator.end_ongoing_transaction("app", pid, epoch, commit=True)
        sizes.append(path.stat().st_size)
    assert max(sizes) <= 2_000 + 1_000 and min(sizes[5:]) < 1_000  # it grew, then was rewritten short
    assert [p.name for p in path.parent.iterdir() if p.name.endswith(".tmp")] == []
    other = open_store(tmp_path)  # a fresh reader of the compacted file
    (state,) = other.transactions.states()
    assert state.state == "CompleteCommit" and state.epoch == epoch
    assert [r.value for r in other.read("out", 0, isolation_level="read_committed")] == [b"v"] * 10
    other.close()
    store.close()


def test_a_state_file_of_the_earlier_format_is_read_and_replaced_by_a_state_log(tmp_path: Path) -> None:
    store = open_store(tmp_path)
    directory = Path(store.transactions.directory)
    legacy = directory / legacy_file_name("old id")
    legacy.write_text(json.dumps(TransactionMetadata("old id", 7, 3, timeout_ms=60_000).to_json()))
    store.close()
    store = open_store(tmp_path)
    assert [(s.transactional_id, s.epoch) for s in store.transactions.states()] == [("old id", 3)]
    with pytest.raises(ProducerFencedError):
        store.transactions.verify("old id", 7, 2)
    assert store.transactions.init_producer("old id", 60_000) == (7, 4)  # read, bumped, written anew
    assert not legacy.exists()
    assert read_transaction_state(store.transactions.state.path("old id")).epoch == 4
    store.close()


def test_a_cached_state_is_read_again_once_another_process_changed_it(tmp_path: Path) -> None:
    ours, theirs = open_store(tmp_path), open_store(tmp_path)  # two coordinators, one directory
    pid, epoch = ours.transactions.init_producer("app", 60_000)
    ours.transactions.add_to_transaction("app", pid, epoch, [("out", 0)])
    ours.transactions.check_in_transaction("app", pid, epoch, ("out", 0))  # cached
    # The other one ends the transaction, then fences the producer: ours must see both, lock or no lock.
    theirs.transactions.end_ongoing_transaction("app", pid, epoch, commit=False)
    with pytest.raises(InvalidTxnStateError):
        ours.transactions.check_in_transaction("app", pid, epoch, ("out", 0))
    theirs.transactions.init_producer("app", 60_000)
    with pytest.raises(ProducerFencedError):
        ours.transactions.add_to_transaction("app", pid, epoch, [("out", 1)])
    ours.close()
    theirs.close()


def test_a_crash_between_the_commit_decision_and_the_markers_is_completed_by_the_next_process(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = open_store(tmp_path)
    coordinator = store.transactions
    pid, epoch = coordinator.init_producer("app", 60_000)
    coordinator.add_to_transaction("app", pid, epoch, [("out", 0), ("out", 1)])
    for partition in (0, 1):
        store.append("out", partition, ROWS, producer_id=pid, producer_epoch=epoch, transactional=True)

    def die(*args: object, **kwargs: object) -> bool:
        raise OSError("the process died here")

    monkeypatch.setattr(Log, "append_marker_if_open", die)
    with pytest.raises(OSError):
        coordinator.end_ongoing_transaction("app", pid, epoch, commit=True)
    monkeypatch.undo()
    path = Path(coordinator.state.path("app"))
    assert read_transaction_state(str(path)).state == "PrepareCommit"
    store.close()
    with path.open("ab") as f:  # and the next state's write was cut short too
        f.write(b"0badf00d {\"transactional_id\": \"app\"")
    restarted = open_store(tmp_path)  # a new process: nothing cached
    assert [r.value for r in restarted.read("out", 1, isolation_level="read_committed")] == []
    assert restarted.transactions.init_producer("app", 60_000) == (pid, epoch + 1)  # commits first, then bumps
    for partition in (0, 1):
        assert [r.value for r in restarted.read("out", partition, isolation_level="read_committed")] == [b"v"]
        assert restarted.log("out", partition).aborted_transactions(0) == []
    restarted.close()


def test_a_copied_state_has_every_field_and_lists_of_its_own() -> None:
    meta = TransactionMetadata("app", 7, 3, [("out", 0)], ONGOING, [("out", 1)], 5_000, 1234, [("out", 0)], 2)
    assert all(getattr(meta, f.name) != f.default for f in fields(TransactionMetadata)
               if f.default is not MISSING)  # none left at its default: a field the copy missed would show
    copy = transaction_state_manager.copy_metadata(meta)
    assert copy == meta
    copy.partitions.append(("out", 2))
    copy.prepared.clear()
    copy.ongoing.append(("out", 3))
    assert (meta.partitions, meta.prepared, meta.ongoing) == ([("out", 0)], [("out", 1)], [("out", 0)])


def test_a_state_checked_in_one_hold_of_the_lock_is_checked_again_in_the_next(tmp_path: Path) -> None:
    ours, theirs = open_store(tmp_path), open_store(tmp_path)  # two coordinators, one directory
    pid, epoch = ours.transactions.init_producer("app", 60_000)
    with ours.transactions.state.locked():
        assert ours.transactions.state.load("app") is not None  # checked against the file: trusted until the end
    theirs.transactions.init_producer("app", 60_000)  # between our holds: fences ours
    with pytest.raises(ProducerFencedError):
        ours.transactions.verify("app", pid, epoch)
    ours.close()
    theirs.close()


_TEXT = st.text(max_size=12)
_PARTITIONS = st.lists(st.tuples(_TEXT, st.integers(0, 2**31 - 1)), max_size=5)
_INTS = st.integers(-(2**63), 2**63 - 1)


@settings(max_examples=150, deadline=None)
@given(st.builds(TransactionMetadata, _TEXT, _INTS, st.integers(-1, 32767), _PARTITIONS, _TEXT, _PARTITIONS,
                 _INTS, st.none() | _INTS, _PARTITIONS, st.integers(-1, 32767)))
def test_a_state_line_holds_the_json_of_the_state(meta: TransactionMetadata) -> None:
    expected = json.dumps(meta.to_json(), separators=(",", ":"))
    assert transaction_state_manager.state_json(meta) == expected
    assert transaction_state_manager.state_json(meta) == expected  # again, from the kept fragments
    record = transaction_state_manager.state_record(meta)
    assert record.endswith(expected.encode() + b"\n")
    assert parse_state_log(record, "x")[0] == meta
