"""Where a fetch's rows are cut into record batches: a pure function of the rows' columns.

Rules (what one Kafka batch can say once for all its records):
- a batch's rows share producer id, producer epoch, transactional flag and delete horizon (Kafka keeps
  these per batch; compactlog per row, so a change starts a new batch);
- every control row (a transaction marker, an emptied batch) is a batch of its own, as Kafka's markers and
  empty batch headers are;
- a batch's offsets span less than 2^31 (offsetDelta is an int32);
- a run of rows is split where its records pass ``batch_bytes`` (counted from the run's first row), so a
  client is never handed one batch of a whole segment: a batch is at least one record.
"""

from __future__ import annotations

import numpy as np

from ..limits import INT_MAX

MAX_OFFSET_SPAN = INT_MAX + 1


def batch_starts(offsets: np.ndarray, producer_id: np.ndarray, producer_epoch: np.ndarray,
                 transactional: np.ndarray, control_type: np.ndarray, delete_horizon_ms: np.ndarray,
                 record_bytes: np.ndarray, batch_bytes: int) -> np.ndarray:
    """The row index (int64, ascending, starting at 0) where each batch starts, for ``n > 0`` rows."""
    n = len(offsets)
    start = np.zeros(n, bool)
    start[0] = True
    control = control_type >= 0
    start[1:] |= producer_id[1:] != producer_id[:-1]
    start[1:] |= producer_epoch[1:] != producer_epoch[:-1]
    start[1:] |= transactional[1:] != transactional[:-1]
    start[1:] |= delete_horizon_ms[1:] != delete_horizon_ms[:-1]
    start[1:] |= control[1:] | control[:-1]
    run = np.cumsum(start) - 1
    run_first = np.flatnonzero(start)
    # Within a run: the bytes before each row, and its offset's distance from the run's first offset.
    before = np.cumsum(record_bytes) - record_bytes
    within = before - before[run_first][run]
    span = offsets - offsets[run_first][run]
    size_bucket = within // max(batch_bytes, 1)
    span_bucket = span // MAX_OFFSET_SPAN
    start[1:] |= (size_bucket[1:] != size_bucket[:-1]) | (span_bucket[1:] != span_bucket[:-1])
    return np.flatnonzero(start).astype(np.int64)
