"""``Log.append_marker``'s marker-only path writes what the general append of the marker's row
(``Log.append(marker_rows(...))``) writes: the same frame bytes, the same roll, the same producer state,
aborted-transaction index and last stable offset."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import compactlog
from compactlog.log import Log
from compactlog.record import CONTROL_ABORT, CONTROL_COMMIT, marker_rows
from support import FakeClock

ROWS = pa.table({"key": [b"k1", b"k2"], "value": [b"v1", b"v2"]})


def general_append_marker(log: Log, producer_id: int, epoch: int, control_type: int, flush: bool = True) -> int:
    with log.locked():
        return log.append(marker_rows(producer_id, epoch, control_type, log._clock()), flush=flush)[0]


def build(path: Path, segment_bytes: int, marker: str, monkeypatch: pytest.MonkeyPatch) -> compactlog.Store:
    """Two transactions per partition (one committed, one aborted), markers written by ``marker``."""
    if marker == "general":
        monkeypatch.setattr(Log, "append_marker", general_append_marker)
    else:
        monkeypatch.undo()
    store = compactlog.open(str(path), clock=FakeClock())
    store.create_topic("out", 2, {"cleanup.policy": "delete", "segment.bytes": str(segment_bytes)})
    for partition in (0, 1):
        for n, control in enumerate((CONTROL_COMMIT, CONTROL_ABORT, CONTROL_COMMIT)):
            store.append("out", partition, ROWS, producer_id=7, producer_epoch=0, base_sequence=2 * n,
                         transactional=True)
            store.write_marker("out", partition, 7, 0, commit=control == CONTROL_COMMIT)
        store.append("out", partition, ROWS, producer_id=7, producer_epoch=0, base_sequence=6, transactional=True)
    return store


def picture(store: compactlog.Store, directory: Path) -> dict[str, object]:
    found: dict[str, object] = {}
    for partition in (0, 1):
        log = store.log("out", partition)
        files = sorted((directory / f"out-{partition}").iterdir())
        found[f"{partition} files"] = {p.name: p.read_bytes() for p in files if p.suffix in (".log", ".parquet")}
        found[f"{partition} segments"] = log.segments_meta()
        found[f"{partition} producers"] = log._producers.manager.to_snapshot()
        found[f"{partition} aborted"] = log.aborted_transactions(0)
        found[f"{partition} lso"] = log.last_stable_offset
        committed = store.read("out", partition, isolation_level="read_committed")
        found[f"{partition} committed"] = [r.value for r in committed]
    return found


@pytest.mark.parametrize("segment_bytes", [1 << 30, 1_500], ids=["no-roll", "markers-roll"])
def test_the_marker_path_writes_what_the_general_append_writes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, segment_bytes: int) -> None:
    general = build(tmp_path / "general", segment_bytes, "general", monkeypatch)
    general_picture = picture(general, tmp_path / "general")
    general.close()
    monkeypatch.undo()
    fast = build(tmp_path / "fast", segment_bytes, "fast", monkeypatch)
    fast_picture = picture(fast, tmp_path / "fast")
    fast.close()
    assert fast_picture == general_picture
    assert fast_picture["0 committed"] == [b"v1", b"v2", b"v1", b"v2"]
    assert fast_picture["0 lso"] == 9  # the last transaction is still open
    if segment_bytes < 1 << 20:
        assert len(fast_picture["0 segments"]) > 2  # the roll decisions were exercised  # type: ignore[arg-type]


def test_a_marker_if_open_is_written_only_where_the_producer_has_a_transaction_open(tmp_path: Path) -> None:
    store = compactlog.open(str(tmp_path), clock=FakeClock())
    store.create_topic("out", 1, {"cleanup.policy": "delete"})
    log = store.log("out", 0)
    assert not log.append_marker_if_open(7, 0, CONTROL_COMMIT)  # none open: nothing written
    assert log.log_end_offset == 0
    store.append("out", 0, ROWS, producer_id=7, producer_epoch=0, transactional=True)
    assert log.append_marker_if_open(7, 0, CONTROL_COMMIT)
    assert log.log_end_offset == 3 and log.last_stable_offset == 3
    assert not log.append_marker_if_open(7, 0, CONTROL_COMMIT)  # ended here already: no second marker
    assert log.log_end_offset == 3
    store.close()
