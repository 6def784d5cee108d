"""Encoding an append's frames ahead of their writes: one helper thread serialises the next frame while the
log writes the previous one (serialising and the CRC release the GIL, so the two overlap)."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator

import pyarrow as pa

from ..active_segment import encode_stored

__all__ = ["encode_ahead"]

# A frame encoded by the helper thread (header, payload), or the error it raised instead.
_Encoded = tuple[tuple[bytes, pa.Buffer] | None, BaseException | None]


def encode_ahead(batches: list[pa.RecordBatch], omitted: int) -> Iterator[tuple[bytes, pa.Buffer]]:
    """:func:`encode_stored` of each batch, in order. With several batches a helper thread encodes one
    frame ahead: serialising and the CRC release the GIL, so they overlap the write of the previous frame."""
    if len(batches) < 2:
        for batch in batches:
            yield encode_stored(batch, omitted)
        return
    ready: queue.Queue[_Encoded] = queue.Queue(maxsize=2)
    stop = threading.Event()

    def encode() -> None:
        for batch in batches:
            if stop.is_set():
                return
            try:
                item: _Encoded = (encode_stored(batch, omitted), None)
            except BaseException as e:  # handed to the consumer, which raises it
                item = (None, e)
            while not stop.is_set():
                try:
                    ready.put(item, timeout=0.05)
                    break
                except queue.Full:
                    continue
            if item[1] is not None:
                return

    worker = threading.Thread(target=encode, name="compactlog-encode", daemon=True)
    worker.start()
    try:
        for _ in batches:
            parts, error = ready.get()
            if error is not None:
                raise error
            assert parts is not None
            yield parts
    finally:
        stop.set()
        worker.join()
