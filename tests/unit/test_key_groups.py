"""Key grouping and the offset map against plain Python models, including forced hash collisions."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compactlog.cleaner import key_groups
from compactlog.cleaner.key_groups import group_keys, hash_keys, hash_words, in_blocks, words_to_keys
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
        real = key_groups._hash_block

        def weak(out: np.ndarray, lengths: np.ndarray, words: object, start: int, stop: int) -> None:
            real(out, lengths, words, start, stop)  # type: ignore[arg-type]
            out[start:stop] &= np.uint64(3)

        monkeypatch.setattr(key_groups, "_hash_block", weak)
    yield request.param


def split(keys: list[bytes], cut: int) -> list[pa.Array]:
    return [pa.array(keys[:cut], pa.binary()), pa.array(keys[cut:], pa.binary())]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ALPHABETS.flatmap(lambda a: st.lists(st.sampled_from(a), min_size=1, max_size=40)), st.integers(0, 40))
def test_groups_are_exactly_the_equal_keys(hashing: str, keys: list[bytes], cut: int) -> None:
    groups = group_keys(split(keys, min(cut, len(keys))))
    model: dict[bytes, list[int]] = {}
    for row, key in enumerate(keys):
        model.setdefault(key, []).append(row)
    found = {}
    ends = [*groups.starts[1:].tolist(), len(groups.order)]
    for start, end in zip(groups.starts.tolist(), ends, strict=True):
        rows = groups.order[start:end].tolist()
        assert rows == sorted(rows)
        assert len({keys[r] for r in rows}) == 1
        found[keys[rows[0]]] = rows
    assert found == model
    assert groups.first_rows.tolist() == [found[keys[r]][0] for r in groups.first_rows.tolist()]
    if groups.width is not None:  # the groups' words give back their keys
        rebuilt = words_to_keys(groups.words, groups.width, len(groups)).to_pylist()
        assert rebuilt == [keys[r] for r in groups.first_rows.tolist()]


@settings(max_examples=40, deadline=None)
@given(ONE_WIDTH)
def test_words_hash_like_the_keys_they_hold(keys: list[bytes]) -> None:
    groups = group_keys([pa.array(keys, pa.binary())])
    assert groups.width is not None
    from_words = hash_words(groups.words, groups.width, len(groups))
    from_keys = hash_keys([pa.array([keys[r] for r in groups.first_rows.tolist()], pa.binary())])
    assert from_words.tolist() == from_keys.tolist()


def test_blocks_cover_every_row_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(key_groups, "_BLOCK_ROWS", 7)
    seen = np.zeros(100, dtype=np.int64)

    def step(start: int, stop: int) -> None:
        seen[start:stop] += 1

    in_blocks(step, 100)
    assert seen.tolist() == [1] * 100


def test_null_keys_are_refused() -> None:
    with pytest.raises(ValueError, match="null"):
        group_keys([pa.array([b"a", None], pa.binary())])


# -- the offset map -------------------------------------------------------------------------------------

OPERATIONS = st.lists(st.tuples(st.sampled_from(["records", "older", "partial"]), st.integers(1, 25),
                                st.integers(0, 2**32)), min_size=1, max_size=6)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ALPHABETS, OPERATIONS)
def test_offset_map_agrees_with_a_dict(hashing: str, alphabet: list[bytes],
                                       operations: list[tuple[str, int, int]]) -> None:
    """Forward batches keep the newest offset, newest-first batches the first one met, partial maps the
    highest; lookups, the keys and a copy through a table all agree with a dict."""
    m = OffsetMap(1 << 30)
    model: dict[bytes, int] = {}
    forward, backward = 1_000_000, 0  # forward batches count up from here, newest-first ones down
    for kind, size, seed in operations:
        rng = np.random.default_rng(seed)
        keys = [alphabet[i] for i in rng.integers(0, len(alphabet), size)]
        if kind == "older":
            backward -= size
            offsets = np.arange(backward, backward + size, dtype=np.int64)
            assert m.put_older(pa.array(keys, pa.binary()), offsets) is not None
            newest: dict[bytes, int] = {}
            for key, offset in zip(keys, offsets.tolist(), strict=True):
                newest[key] = offset
            for key, offset in newest.items():
                model.setdefault(key, offset)
            continue
        offsets = np.arange(forward, forward + size, dtype=np.int64)
        forward += size
        if kind == "records":
            entries, full = m.put_records(split(keys, size // 2), offsets)
            assert full is None
            assert all(m.offsets[e] >= o for e, o in zip(entries.tolist(), offsets.tolist(), strict=True))
        else:
            latest: dict[bytes, int] = {}
            for key, offset in zip(keys, offsets.tolist(), strict=True):
                latest[key] = offset
            assert m.put_partial(pa.array(list(latest), pa.binary()), np.array(list(latest.values())))
        for key, offset in zip(keys, offsets.tolist(), strict=True):
            model[key] = max(model.get(key, -1), offset)
    probe = [*alphabet, b"\x07absent", b""]
    expected = [model.get(k, -1) for k in probe]
    assert m.lookup(pa.array([*probe, None], pa.binary())).tolist() == [*expected, -1]
    assert sorted(m.keys.to_pylist()) == sorted(model)
    assert len(m) == len(model)
    assert m.used_bytes == sum(len(k) + ENTRY_OVERHEAD_BYTES for k in model)
    copy = OffsetMap.from_table(m.to_table(), 1 << 30, m.latest_offset)
    assert copy.lookup(pa.array(probe, pa.binary())).tolist() == expected


def test_a_newest_first_batch_that_does_not_fit_changes_nothing() -> None:
    m = OffsetMap(2 * (1 + ENTRY_OVERHEAD_BYTES))  # room for two one-byte keys
    assert m.put_older(pa.array([b"a", b"b"]), np.array([10, 11])) is not None
    assert m.put_older(pa.array([b"c", b"a"]), np.array([5, 6])) is None
    assert (len(m), m.lookup(pa.array([b"a", b"b", b"c"])).tolist()) == (2, [10, 11, -1])


def test_keys_of_a_new_width_turn_the_map_to_arrow_keys() -> None:
    m = OffsetMap(1 << 20)
    m.put_records(pa.array([b"aa", b"bb"]), np.array([1, 2]))
    m.put_records(pa.array([b"ccc", b"aa"]), np.array([3, 4]))
    assert m.lookup(pa.array([b"aa", b"bb", b"ccc", b"a"])).tolist() == [4, 2, 3, -1]
    assert m.keys.to_pylist() == [b"aa", b"bb", b"ccc"]
