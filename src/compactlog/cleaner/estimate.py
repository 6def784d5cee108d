"""The estimate of what one cleaning round would free, from key statistics alone (``clean --dry-run``).

Nothing is rewritten: the rows of ``[log start, first uncleanable offset)`` are read (offset, key, value
validity and size, control type, delete horizon) and the record rule of :mod:`.retain` is applied to them
column-wise, as a round would with an offset map of the whole dirty section:

* the map: for every key of a data row in the dirty section ``[first dirty, first uncleanable)``, its
  newest offset there (a pyarrow group-by / max over the key column);
* a keyed data row is freed when its key is in the map at a newer offset (superseded), or when it is a
  tombstone whose stamped delete horizon has passed (``horizon != -1 and now >= horizon``); a tombstone
  not yet stamped is kept (the round stamps it, two-phase deletion);
* a keyless data row is freed (invalid in a compacted topic);
* control rows (transaction markers, emptied batches) are kept: their fate depends on producer state
  the estimate does not model; data of aborted transactions is counted as kept for the same reason.

Bytes freed: the range's bytes on disk times the freed rows' share of the range's record bytes (key plus
value plus :data:`~compactlog.record.RECORD_OVERHEAD_BYTES` per row), since a Parquet file's bytes are not
attributable to single rows. The figures are an upper bound on what the dirty range alone can free and
exact for topics without transactions when the dirty section's keys fit the offset map in one round.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..columns import to_numpy
from ..record import CONTROL_NONE, NO_DELETE_HORIZON, RECORD_OVERHEAD_BYTES

# The columns the estimate reads.
ESTIMATE_COLUMNS = ["offset", "key", "value", "control_type", "delete_horizon_ms"]


@dataclass(frozen=True, slots=True)
class FreedEstimate:
    """Records and bytes a round would remove, out of the records and bytes it would read."""

    records: int
    bytes: int
    records_read: int
    bytes_read: int
    superseded: int  # of ``records``: values and tombstones with a newer record of their key
    expired_tombstones: int  # of ``records``: tombstones past their delete horizon
    keyless: int  # of ``records``: data rows without a key


def _lengths(column: pa.ChunkedArray) -> np.ndarray:
    return to_numpy(pc.fill_null(pc.binary_length(column), 0)).astype(np.int64, copy=False)


def estimate_freed(rows: pa.Table, first_dirty_offset: int, first_uncleanable_offset: int, now_ms: int,
                   range_bytes: int) -> FreedEstimate:
    """The estimate (module docstring) for ``rows``, the rows of ``[log start, first_uncleanable_offset)``
    with :data:`ESTIMATE_COLUMNS`; ``range_bytes`` is those segments' size on disk."""
    n = rows.num_rows
    if n == 0:
        return FreedEstimate(0, 0, 0, range_bytes, 0, 0, 0)
    offsets = to_numpy(rows.column("offset")).astype(np.int64, copy=False)
    data = to_numpy(rows.column("control_type")) == CONTROL_NONE
    keyed = to_numpy(pc.is_valid(rows.column("key")))
    dirty = data & keyed & (offsets >= first_dirty_offset) & (offsets < first_uncleanable_offset)
    in_range = offsets < first_uncleanable_offset
    latest = np.full(n, -1, dtype=np.int64)
    if dirty.any():
        mapped = pa.table({"key": rows.column("key").filter(pa.array(dirty)),
                           "offset": pa.array(offsets[dirty])})
        newest = mapped.group_by("key", use_threads=False).aggregate([("offset", "max")])
        index = to_numpy(pc.fill_null(pc.index_in(rows.column("key"), value_set=newest.column("key")), -1))
        found = index >= 0
        latest[found] = to_numpy(newest.column("offset_max"))[index[found]]
    candidates = data & keyed & in_range
    superseded = candidates & (latest > offsets)
    horizon = to_numpy(rows.column("delete_horizon_ms")).astype(np.int64, copy=False)
    tombstone = ~to_numpy(pc.is_valid(rows.column("value")))
    expired = candidates & ~superseded & tombstone & (horizon != NO_DELETE_HORIZON) & (now_ms >= horizon)
    keyless = data & ~keyed & in_range
    freed = superseded | expired | keyless
    sizes = _lengths(rows.column("key")) + _lengths(rows.column("value")) + RECORD_OVERHEAD_BYTES
    total_size = int(sizes[in_range].sum())
    freed_bytes = range_bytes * int(sizes[freed].sum()) // total_size if total_size else 0
    return FreedEstimate(records=int(freed.sum()), bytes=freed_bytes, records_read=int(in_range.sum()),
                         bytes_read=range_bytes, superseded=int(superseded.sum()),
                         expired_tombstones=int(expired.sum()), keyless=int(keyless.sum()))
