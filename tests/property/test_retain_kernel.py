"""The vectorised kernel against its specification, the per-record rule of :mod:`compactlog.cleaner.retain`.

Random rows of one segment (keyed and keyless data, tombstones with and without delete horizons,
transactional data of committed, aborted and open transactions, COMMIT and ABORT markers, emptied batch
rows, an unknown control type), a random offset map over a prefix of them, random sets of markers whose
transaction still has data and of live producers' last records, and a random clock. ``rewrite_rows`` must
write exactly the rows :func:`clean_record` writes, with every column equal, and count the same stamps.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from compactlog.cleaner.kernel import CleanTask
from compactlog.cleaner.offset_map import OffsetMap
from compactlog.cleaner.retain import NO_DELETE_HORIZON, RetainDecision, clean_record
from compactlog.cleaner.rewrite import rewrite_rows
from compactlog.producer_state import AbortedTxn
from compactlog.record import CONTROL_ABORT, CONTROL_COMMIT, CONTROL_EMPTY_BATCH, CONTROL_NONE, SCHEMA

UNKNOWN_CONTROL = 3  # a control type the cleaner does not know: kept as is
HEADERS = [{"key": "h", "value": b"x"}]

# (kind, key, value is null, horizon, producer, with headers)
row_strategy = st.tuples(
    st.sampled_from(["data", "data", "txn", "txn", "commit", "abort", "empty", "unknown"]),
    st.sampled_from([None, b"a", b"b", b"c"]),
    st.booleans(),
    st.sampled_from([NO_DELETE_HORIZON, 50, 150]),
    st.sampled_from([1, 2]),
    st.booleans(),
)

CONTROL_OF = {"commit": CONTROL_COMMIT, "abort": CONTROL_ABORT, "empty": CONTROL_EMPTY_BATCH,
              "unknown": UNKNOWN_CONTROL}


def make_rows(spec: list[tuple[str, bytes | None, bool, int, int, bool]]) -> list[dict[str, Any]]:
    rows = []
    for i, (kind, key, null_value, horizon, producer, headers) in enumerate(spec):
        control = CONTROL_OF.get(kind, CONTROL_NONE)
        data = control == CONTROL_NONE
        rows.append({
            "offset": 10 + 2 * i,  # offsets with gaps, as a cleaned segment has
            "timestamp": 1000 + i,
            "key": key if data else None,
            "value": None if (null_value or not data) else b"v%d" % i,
            "headers": HEADERS if headers and data else None,
            "producer_id": producer if kind != "data" or producer == 1 else -1,
            "producer_epoch": 0,
            "sequence": i,
            "is_transactional": kind in ("txn", "commit", "abort"),
            "control_type": control,
            "delete_horizon_ms": horizon,
        })
    return rows


def aborted_transactions(rows: list[dict[str, Any]]) -> list[AbortedTxn]:
    """Each ABORT marker closes its producer's transaction: data since that producer's previous marker."""
    aborted, first = [], {}
    for row in rows:
        pid = row["producer_id"]
        if row["control_type"] == CONTROL_NONE and row["is_transactional"]:
            first.setdefault(pid, row["offset"])
        elif row["control_type"] in (CONTROL_COMMIT, CONTROL_ABORT):
            start = first.pop(pid, row["offset"])
            if row["control_type"] == CONTROL_ABORT:
                aborted.append(AbortedTxn(pid, start, row["offset"]))
    return aborted


def in_aborted(row: dict[str, Any], aborted: list[AbortedTxn]) -> bool:
    return (row["control_type"] == CONTROL_NONE and row["is_transactional"]
            and any(a.producer_id == row["producer_id"] and a.first_offset <= row["offset"] < a.last_offset
                    for a in aborted))


@settings(max_examples=400, deadline=None)
@given(
    spec=st.lists(row_strategy, min_size=1, max_size=40),
    map_upto=st.integers(0, 40),
    now=st.sampled_from([0, 49, 50, 100, 150, 200]),
    delete_retention_ms=st.sampled_from([0, 7, 2**63 - 1]),
    with_data=st.sets(st.integers(0, 39)),
    producer_last=st.sets(st.integers(0, 39)),
)
def test_rewrite_rows_writes_what_the_per_record_rule_writes(
    spec: list[tuple[str, bytes | None, bool, int, int, bool]], map_upto: int, now: int,
    delete_retention_ms: int, with_data: set[int], producer_last: set[int],
) -> None:
    rows = make_rows(spec)
    aborted = aborted_transactions(rows)
    offsets = [r["offset"] for r in rows]
    map_latest = offsets[min(map_upto, len(rows)) - 1] if map_upto else 9
    # The offset map of the round: keyed data rows up to map_latest, aborted data never enters it.
    offset_map = OffsetMap(1 << 20)
    mapped = [r for r in rows if r["offset"] <= map_latest and r["key"] is not None
              and r["control_type"] == CONTROL_NONE and not in_aborted(r, aborted)]
    if mapped:
        offset_map.put_records(pa.array([r["key"] for r in mapped], pa.binary()),
                               np.array([r["offset"] for r in mapped], dtype=np.int64))
    offset_map.update_latest_offset(map_latest)
    markers_with_data = frozenset(offsets[i] for i in with_data if i < len(rows))
    last_offsets = frozenset(offsets[i] for i in producer_last if i < len(rows))
    task = CleanTask("t", 0, "/nonexistent", (), 0, offsets[-1] + 1, now, delete_retention_ms, 1 << 20,
                     "snappy", 1 << 20, 1 << 20, aborted=tuple(aborted), markers_with_data=markers_with_data,
                     producer_last_offsets=last_offsets)

    kept = rewrite_rows(task, pa.Table.from_pylist(rows, schema=SCHEMA), offset_map, None)

    expected, stamped, invalid = [], 0, 0
    for row in rows:
        key = row["key"]
        found = int(offset_map.lookup(pa.array([key], pa.binary()))[0]) if key is not None else -1
        fate = clean_record(
            offset=row["offset"], key=key, value_is_null=row["value"] is None, control_type=row["control_type"],
            map_latest_offset_for_key=found, map_latest_offset=offset_map.latest_offset,
            delete_horizon_ms=row["delete_horizon_ms"], now_ms=now, delete_retention_ms=delete_retention_ms,
            batch_aborted=in_aborted(row, aborted), marker_has_data=row["offset"] in markers_with_data,
            is_producer_last=row["offset"] in last_offsets)
        if fate.decision is RetainDecision.DROP_KEYLESS or (
                fate.decision is RetainDecision.DROP_ABORTED and key is None
                and row["offset"] <= offset_map.latest_offset):
            invalid += 1  # the kernel also counts keyless aborted data in the map's range as invalid
        if not fate.written:
            continue
        out = dict(row, delete_horizon_ms=fate.delete_horizon_ms)
        if fate.emptied:
            out.update(key=None, value=None, headers=None, control_type=CONTROL_EMPTY_BATCH)
        elif fate.delete_horizon_ms != row["delete_horizon_ms"]:
            stamped += 1
        expected.append(out)

    assert kept.rows.to_pylist() == expected
    assert kept.stamped == stamped
    assert kept.invalid == invalid
    assert kept.abort_markers == [r["offset"] for r in expected if r["control_type"] == CONTROL_ABORT]
