"""The offset map against a plain dict, with the real hash and with one of four values (every key collides)."""

from __future__ import annotations

import pickle
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compactlog.cleaner._key_table import KeyTable
from compactlog.cleaner.offset_map import ENTRY_OVERHEAD_BYTES, OffsetMap

# Keys of one width and of several, bytes 0-2 only so equal prefixes and "a" / "a\0" pairs are common.
ONE_WIDTH = st.integers(0, 20).flatmap(lambda w: st.lists(st.binary(min_size=w, max_size=w), min_size=1,
                                                          max_size=6))
MIXED = st.lists(st.binary(max_size=19).map(lambda b: bytes(x % 3 for x in b)), min_size=1, max_size=8)
ALPHABETS = st.one_of(ONE_WIDTH, MIXED)


@pytest.fixture(params=["real hash", "four hash values"])
def hashing(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """Run a test with the real hash, and with one that has only four values (collisions everywhere)."""
    if request.param == "four hash values":
        monkeypatch.setattr(OffsetMap, "_hash_mask", 3)
    yield request.param


def split(keys: list[bytes], cut: int) -> list[pa.Array]:
    return [pa.array(keys[:cut], pa.binary()), pa.array(keys[cut:], pa.large_binary())]


OPERATIONS = st.lists(st.tuples(st.sampled_from(["records", "older", "partial"]), st.integers(1, 25),
                                st.integers(0, 2**32)), min_size=1, max_size=6)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ALPHABETS, OPERATIONS)
def test_offset_map_agrees_with_a_dict(hashing: str, alphabet: list[bytes],
                                       operations: list[tuple[str, int, int]]) -> None:
    """Forward batches keep the newest offset, newest-first batches the first one met, partial maps the
    highest; lookups, the keys (in order of insertion) and a copy through a table all agree with a dict."""
    m = OffsetMap(1 << 30)
    model: dict[bytes, int] = {}
    forward, backward = 1_000_000, 0  # forward batches count up from here, newest-first ones down
    for kind, size, seed in operations:
        rng = np.random.default_rng(seed)
        keys = [alphabet[i] for i in rng.integers(0, len(alphabet), size)]
        if kind == "older":
            backward -= size
            offsets = np.arange(backward, backward + size, dtype=np.int64)
            newest = m.put_older(pa.array(keys, pa.binary()), offsets)
            assert newest is not None
            for key, offset in reversed(list(zip(keys, offsets.tolist(), strict=True))):  # newest first
                model.setdefault(key, offset)
            assert newest.tolist() == [model[k] for k in keys]
            continue
        offsets = np.arange(forward, forward + size, dtype=np.int64)
        forward += size
        if kind == "records":
            entries, full = m.put_records(split(keys, size // 2), offsets)
            assert full is None
            assert (m.offsets_of(entries) >= offsets).all()
        else:
            latest: dict[bytes, int] = {}
            for key, offset in zip(keys, offsets.tolist(), strict=True):
                latest[key] = offset
            assert m.put_partial(pa.array(list(latest), pa.binary()), np.array(list(latest.values())))
        for key, offset in zip(keys, offsets.tolist(), strict=True):
            if key not in model:
                model[key] = offset
            model[key] = max(model[key], offset)
    probe = [*alphabet, b"\x07absent", b""]
    expected = [model.get(k, -1) for k in probe]
    assert m.lookup(pa.array([*probe, None], pa.binary())).tolist() == [*expected, -1]
    assert m.keys.to_pylist() == list(model)
    assert m.offsets.tolist() == list(model.values())
    assert len(m) == len(model)
    assert m.used_bytes == sum(len(k) + ENTRY_OVERHEAD_BYTES for k in model)
    copy = OffsetMap.from_table(m.to_table(), 1 << 30, m.latest_offset)
    assert copy.lookup(pa.array(probe, pa.large_binary())).tolist() == expected
    pickled = pickle.loads(pickle.dumps(m))  # how a map crosses to and from Spark executors
    entries = m.entries_of(pa.array(probe, pa.binary()))
    assert pickled.entries_of(pa.array(probe, pa.binary())).tolist() == entries.tolist()
    assert pickled.offsets_of(entries).tolist() == expected
    assert (pickled.used_bytes, pickled.latest_offset, len(pickled)) == (m.used_bytes, m.latest_offset, len(m))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.integers(0, 300), min_size=1, max_size=400), st.integers(1, 120), st.integers(0, 50))
def test_a_full_map_cuts_at_the_first_new_key_that_does_not_fit(hashing: str, ids: list[int], room: int,
                                                                 already: int) -> None:
    """Kafka's cut: the map holds exactly the records before the first record whose new key does not fit;
    a newest-first batch or a partial map that does not fit changes nothing (entries, offsets, index)."""
    keys = [b"k%d" % i for i in ids]
    m = OffsetMap(sum(len(k) + ENTRY_OVERHEAD_BYTES for k in set(keys[:already])) + room * 8)
    m.put_records(pa.array(keys[:already], pa.binary()), np.arange(already))
    before = (m.to_table(), m.used_bytes)
    rest = keys[already:]
    offsets = np.arange(already, len(keys), dtype=np.int64)
    if m.put_older(pa.array(rest, pa.binary()), offsets - 10_000) is None:
        assert (m.to_table(), m.used_bytes) == before
    distinct = list(dict.fromkeys(rest))
    if not m.put_partial(pa.array(distinct, pa.binary()), np.arange(len(distinct)) + 10**9):
        assert (m.to_table(), m.used_bytes) == before
    m = OffsetMap(m.capacity_bytes)
    entries, full_at = m.put_records(split(keys, len(keys) // 3), np.arange(len(keys)))
    model: dict[bytes, int] = {}
    used = 0
    for offset, key in enumerate(keys):
        if key not in model and used + len(key) + ENTRY_OVERHEAD_BYTES > m.capacity_bytes:
            assert full_at == offset
            assert entries[offset:].tolist() == [-1] * (len(keys) - offset)
            break
        used += (len(key) + ENTRY_OVERHEAD_BYTES) * (key not in model)
        model[key] = offset
    else:
        assert full_at is None
    assert dict(zip(m.keys.to_pylist(), m.offsets.tolist(), strict=True)) == model
    assert m.lookup(pa.array(list(model), pa.binary())).tolist() == list(model.values())
    assert m.used_bytes == used


def test_a_newest_first_batch_that_does_not_fit_changes_nothing() -> None:
    m = OffsetMap(2 * (1 + ENTRY_OVERHEAD_BYTES))  # room for two one-byte keys
    assert m.put_older(pa.array([b"a", b"b"]), np.array([10, 11])) is not None
    assert m.put_older(pa.array([b"c", b"a"]), np.array([5, 6])) is None
    assert (len(m), m.lookup(pa.array([b"a", b"b", b"c"])).tolist()) == (2, [10, 11, -1])


def test_many_keys_grow_the_index_and_a_refused_batch_rolls_back_across_growth() -> None:
    m = OffsetMap(50_000 * (6 + ENTRY_OVERHEAD_BYTES))
    first = pa.array([b"%06d" % i for i in range(30_000)], pa.binary())
    assert m.put_older(first, np.arange(100_000, 130_000)) is not None
    second = pa.array([b"%06d" % i for i in range(20_000, 80_000)], pa.binary())  # 50,000 new: 30,000 fit
    assert m.put_older(second, np.arange(0, 60_000)) is None
    assert len(m) == 30_000
    probe = pa.array([b"%06d" % i for i in (0, 29_999, 30_000, 79_999)], pa.binary())
    assert m.lookup(probe).tolist() == [100_000, 129_999, -1, -1]


def test_sliced_string_and_empty_keys() -> None:
    m = OffsetMap(1 << 20)
    keys = pa.array(["x", "", "yy", "x", None, "zzz"]).slice(1, 4)  # "", "yy", "x", None
    m.put_records(pa.array([b"", b"yy", b"x"]), np.array([1, 2, 3]))
    assert m.lookup(keys).tolist() == [1, 2, 3, -1]
    assert m.lookup(pa.chunked_array([keys, pa.array(["x"])])).tolist() == [1, 2, 3, -1, 3]
    entries = m.entries_of(pa.array([b"x", b"nope", b""]))
    assert entries[1] == -1
    assert m.offsets_of(entries).tolist() == [3, -1, 1]
    with pytest.raises(IndexError):
        m.offsets_of(np.array([1 << 20], dtype=np.int32))


def test_the_table_refuses_buffers_that_do_not_match() -> None:
    table = KeyTable(7)
    with pytest.raises(ValueError, match="outside"):
        table.find(np.array([0, 5], dtype=np.int32), b"abc", np.empty(1, dtype=np.int32))
    with pytest.raises(ValueError, match="decrease"):
        table.find(np.array([0, 2, 1], dtype=np.int32), b"abc", np.empty(2, dtype=np.int32))
    with pytest.raises(ValueError, match="entries"):
        table.find(np.array([0, 1], dtype=np.int32), b"abc", np.empty(2, dtype=np.int32))
    with pytest.raises(ValueError, match="int32 or int64"):
        table.find(np.array([0, 1], dtype=np.int16), b"abc", np.empty(1, dtype=np.int32))
    with pytest.raises(ValueError, match="offsets must hold 1 items of 8 bytes"):
        table.lookup(np.array([0, 1], dtype=np.int32), b"abc", np.empty(1, dtype=np.int32))
    with pytest.raises(ValueError, match="lookup needs"):
        table.lookup(np.array([0, 1], dtype=np.int32), b"abc", None)
    with pytest.raises(ValueError, match="offsets must hold 1 items of 8 bytes"):
        table.put_older(np.array([0, 1], dtype=np.int32), b"abc", np.zeros(1, np.int64), np.empty(1, np.int32),
                        100, 32)
    with pytest.raises(ValueError, match="not an arena"):
        table.restore(b"\x00" * 20)
    assert len(table) == 0
