"""Damaged files give a CompactLogError naming the file, never other data: the cases of issue 16 (a flipped
bit in a sealed segment, in the first active frame, a digit of a footer or a producer snapshot, a garbage
producer-ids, a server.properties that is not UTF-8). The exhaustive sweep is tests/faults/."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import compactlog
from compactlog.errors import (
    CompactLogError,
    ConfigError,
    CorruptSegmentError,
    CorruptTopicMetadataError,
    CorruptTransactionStateError,
)
from compactlog.record import SCHEMA, to_rows
from compactlog.sealed_segment import SealedSegment, write_sealed
from compactlog.segment import segment_name
from compactlog.store import Store
from support import FakeClock


def _rows(count: int) -> pa.Table:
    """Rows at offsets 0..count-1 holding ``value-0-0-<offset>``."""
    rows = to_rows(pa.table({"key": [b"key-%d" % i for i in range(count)],
                             "value": [b"value-0-0-%d" % i for i in range(count)]}), 1_000)
    return rows.set_column(0, "offset", pa.array(range(count), pa.int64())).cast(SCHEMA)


def _replace_once(path: Path, old: bytes, new: bytes) -> None:
    data = path.read_bytes()
    assert data.count(old) == 1, (old, data.count(old))
    path.write_bytes(data.replace(old, new))


def test_flipped_bit_in_a_sealed_page_is_corrupt_segment_error_not_another_value(tmp_path: Path) -> None:
    path = tmp_path / segment_name(0, ".parquet")
    write_sealed(str(path), _rows(100), 0, 100, compression="none")
    _replace_once(path, b"value-0-0-50", b"value-0-0-10")  # one bit: "5" (0x35) -> "1" (0x31)
    segment = SealedSegment.open(str(path), 0)
    for read in (lambda: segment.read(), lambda: segment.read(40, 60), lambda: segment.read(columns=["value"])):
        with pytest.raises(CorruptSegmentError, match=re.escape(str(path)) + r".*\[0, 100\)"):
            read()


def test_flipped_bit_in_a_sealed_offset_is_corrupt_segment_error_not_a_far_offset(tmp_path: Path) -> None:
    path = tmp_path / segment_name(0, ".parquet")
    write_sealed(str(path), _rows(100), 0, 100, compression="none")
    data = bytearray(path.read_bytes())
    position = data.find((50).to_bytes(8, "little") + (51).to_bytes(8, "little"))
    data[position + 7] ^= 0x02  # offset 50 -> 50 + 2**57
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptSegmentError, match=re.escape(str(path))):
        SealedSegment.open(str(path), 0).read()


def test_footer_checksum_catches_a_changed_control_count(tmp_path: Path) -> None:
    path = tmp_path / segment_name(0, ".parquet")
    write_sealed(str(path), _rows(10), 0, 10, compression="none")
    table = pq.read_table(path)
    kv = dict(pq.read_metadata(path).metadata)
    kv[b"compactlog.control_count"] = b"1"  # consistent with every other check; only the CRC sees it
    pq.write_table(table.replace_schema_metadata(kv), path)
    with pytest.raises(CorruptSegmentError, match="footer checksum"):
        SealedSegment.open(str(path), 0)


def test_a_footer_record_count_changed_is_corrupt_segment_error_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / segment_name(0, ".parquet")
    write_sealed(str(path), _rows(40), 0, 40, compression="none")
    table = pq.read_table(path)  # an old segment (no footer CRC): only the row count can see it
    kv = {k: v for k, v in pq.read_metadata(path).metadata.items() if k != b"compactlog.checksum"}
    kv[b"compactlog.record_count"] = b"30"  # a one-digit change of 40
    pq.write_table(table.replace_schema_metadata(kv), path)
    with pytest.raises(CorruptSegmentError, match=re.escape(str(path)) + ": 40 rows but metadata says 30"):
        SealedSegment.open(str(path), 0)


def test_a_segment_written_without_checksums_still_reads(tmp_path: Path) -> None:
    path = tmp_path / segment_name(0, ".parquet")
    write_sealed(str(path), _rows(10), 0, 10)
    table = pq.read_table(path)
    kv = {k: v for k, v in pq.read_metadata(path).metadata.items() if k != b"compactlog.checksum"}
    pq.write_table(table.replace_schema_metadata(kv), path)  # no page CRCs either
    assert SealedSegment.open(str(path), 0).read().column("value").to_pylist() == table.column("value").to_pylist()


def _store_with_sealed_segment(root: Path) -> tuple[Store, Path]:
    store = compactlog.open(str(root), clock=FakeClock())
    store.create_topic("t", 1, {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": 0.01,
                                "compression.type": "uncompressed"})
    with store.producer() as producer:
        for i in range(100):
            producer.send("t", key=b"k%d" % (i % 60), value=b"value-0-0-%d" % i)
        producer.flush()
    store.roll("t", 0)
    return store, next((root / "t-0").glob("*.parquet"))


def test_cleaner_never_rewrites_a_segment_it_cannot_verify(tmp_path: Path) -> None:
    store, path = _store_with_sealed_segment(tmp_path / "data")
    _replace_once(path, b"value-0-0-50", b"value-0-0-10")
    damaged = path.read_bytes()
    try:
        store.clean(force=True)
    except CorruptSegmentError as e:
        assert str(path) in str(e)
    assert path.read_bytes() == damaged  # not replaced by a cleaned copy of the damaged value
    assert not list(path.parent.glob("*.cleaned")) and not list(path.parent.glob("*.swap"))
    with pytest.raises(CorruptSegmentError, match=re.escape(str(path))):
        list(store.read("t", 0))
    store.close()


def test_footer_next_offset_past_the_active_base_is_refused(tmp_path: Path) -> None:
    store, path = _store_with_sealed_segment(tmp_path / "data")
    with store.producer() as producer:
        producer.send("t", key=b"k", value=b"in the active segment")
    store.close()
    table = pq.read_table(path)  # an old segment (no footer CRC): only the range checks can see it
    kv = {k: v for k, v in pq.read_metadata(path).metadata.items() if k != b"compactlog.checksum"}
    kv[b"compactlog.next_offset"] = b"160"  # a one-digit change of 100
    pq.write_table(table.replace_schema_metadata(kv), path)
    store = compactlog.open(str(tmp_path / "data"), clock=FakeClock())
    with pytest.raises(CorruptSegmentError, match="past the active segment's base 100"):
        list(store.read("t", 0))
    store.close()


def _active_store(root: Path, frames: int) -> Path:
    store = compactlog.open(str(root), clock=FakeClock())
    store.create_topic("t", 1, {"cleanup.policy": "compact"})
    with store.producer() as producer:
        for i in range(frames):
            producer.send("t", key=b"k%d" % i, value=b"value-%d" % i)
            producer.flush()  # one frame each
    store.close()
    return next((root / "t-0").glob("*.log"))


def test_flip_in_the_first_active_frame_does_not_drop_later_frames_silently(tmp_path: Path) -> None:
    path = _active_store(tmp_path / "data", 3)
    _replace_once(path, b"value-0", b"value-1")
    before = path.read_bytes()
    with pytest.raises(CorruptSegmentError, match=re.escape(str(path)) + ".*followed by a valid frame"):
        compactlog.open(str(tmp_path / "data"), clock=FakeClock()).read_arrow("t", 0)
    assert path.read_bytes() == before  # nothing truncated


def test_a_torn_tail_is_truncated_and_logged(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = _active_store(tmp_path / "data", 3)
    data = path.read_bytes()
    path.write_bytes(data[:-5])  # the last frame torn
    with caplog.at_level(logging.WARNING, logger="compactlog"):
        store = compactlog.open(str(tmp_path / "data"), clock=FakeClock())
        values = store.read_arrow("t", 0).column("value").to_pylist()
    assert values == [b"value-0", b"value-1"]
    assert any(str(path) in m and "truncating" in m for m in caplog.messages)
    store.close()


def test_damaged_producer_snapshot_never_makes_read_committed_return_uncommitted_records(tmp_path: Path) -> None:
    root = tmp_path / "data"
    store = compactlog.open(str(root), clock=FakeClock())
    store.create_topic("t", 1, {"cleanup.policy": "compact"})
    with store.producer() as producer:
        for i in range(400):
            producer.send("t", key=b"k%d" % i, value=b"plain")
    txn = store.producer(transactional_id="tx")
    txn.begin_transaction()
    txn.send("t", key=b"open", value=b"uncommitted")
    txn.flush()
    store.roll("t", 0)  # the snapshot holds the open transaction's first offset, 400
    with store.producer() as producer:
        producer.send("t", key=b"after", value=b"plain")
    store.close()
    snapshot = next((root / "t-0").glob("*.snapshot"))
    original = snapshot.read_bytes()
    digits = [m.start() for m in re.finditer(rb"\d", original)]
    assert digits
    for position in digits:
        changed = original[:position] + str((int(chr(original[position])) + 1) % 10).encode() + original[position + 1:]
        snapshot.write_bytes(changed)
        reopened = compactlog.open(str(root), clock=FakeClock())
        try:
            values = [r.value for r in reopened.read("t", 0, isolation_level="read_committed")]
        finally:
            reopened.close()
        assert values == [b"plain"] * 400, f"digit at byte {position} of the snapshot"
    snapshot.write_bytes(original)


def test_garbage_producer_ids_is_an_error_naming_the_file(tmp_path: Path) -> None:
    store = compactlog.open(str(tmp_path / "data"), clock=FakeClock())
    store.create_topic("t", 1)
    with store.producer() as producer:
        producer.send("t", key=b"k", value=b"v")
    path = tmp_path / "data" / ".transactions" / "producer-ids"
    text = path.read_text()
    for damaged in (b"\x9c\xff garbage", b"", text.replace(text[0], str((int(text[0]) + 1) % 10), 1).encode()):
        path.write_bytes(damaged)
        with pytest.raises(CorruptTransactionStateError, match=re.escape(str(path))):
            store.transactions.init_producer(None, 60000)
    store.close()


def test_producer_ids_written_before_the_checksum_still_read(tmp_path: Path) -> None:
    store = compactlog.open(str(tmp_path / "data"), clock=FakeClock())
    (tmp_path / "data" / ".transactions").mkdir(exist_ok=True)
    (tmp_path / "data" / ".transactions" / "producer-ids").write_text("41")
    assert store.transactions.init_producer(None, 60000) == (41, 0)
    store.close()


def test_server_properties_not_utf8_is_a_config_error_naming_the_file(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    path = tmp_path / "data" / "server.properties"
    path.write_bytes(b"log.cleaner.threads=\xff\xfe1\n")
    with pytest.raises(ConfigError, match=re.escape(str(path))) as info:
        compactlog.open(str(tmp_path / "data"))
    assert isinstance(info.value, CompactLogError)


def test_a_changed_digit_in_topic_metadata_is_an_error_naming_the_file(tmp_path: Path) -> None:
    store = compactlog.open(str(tmp_path / "data"), clock=FakeClock())
    store.create_topic("t", 1, {"segment.bytes": 65536})
    store.close()
    path = tmp_path / "data" / ".topics" / "t.json"
    original = path.read_text()
    path.write_text(original.replace('"partitions": 1', '"partitions": 3'))
    with pytest.raises(CorruptTopicMetadataError, match=re.escape(str(path))):
        compactlog.open(str(tmp_path / "data")).partitions("t")
    path.write_text(original.replace("segment.bytes", "segment.bytez"))
    with pytest.raises(CompactLogError, match=re.escape(str(path))):
        compactlog.open(str(tmp_path / "data")).topic_config("t")


def test_topic_metadata_written_before_the_checksum_still_reads(tmp_path: Path) -> None:
    store = compactlog.open(str(tmp_path / "data"), clock=FakeClock())
    store.create_topic("t", 1)
    store.close()
    path = tmp_path / "data" / ".topics" / "t.json"
    path.write_text(re.sub(r'"checksum": \d+, ', "", path.read_text()).replace('"partitions": 1', '"partitions": 2'))
    assert compactlog.open(str(tmp_path / "data")).partitions("t") == 2


def test_cleaner_checks_the_footer_again_before_it_rewrites(tmp_path: Path) -> None:
    store, path = _store_with_sealed_segment(tmp_path / "data")
    store.describe("t")  # the log is open: its segment list read the footer undamaged
    table = pq.read_table(path)
    kv = dict(pq.read_metadata(path).metadata)
    kv[b"compactlog.control_count"] = b"1"  # damaged since: only the footer CRC sees it
    pq.write_table(table.replace_schema_metadata(kv), path)
    damaged = path.read_bytes()
    try:
        store.clean(force=True)
    except CorruptSegmentError as e:
        assert str(path) in str(e)
    assert path.read_bytes() == damaged
    assert not list(path.parent.glob("*.cleaned")) and not list(path.parent.glob("*.swap"))
    store.close()
