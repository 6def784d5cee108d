"""A cleaning round allocates from Arrow's jemalloc pool and gives the default pool back afterwards."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

import compactlog
from compactlog.cleaner import executor
from compactlog.cleaner.memory_pool import round_memory_pool


def jemalloc_or_skip() -> None:
    try:
        pa.jemalloc_memory_pool()
    except NotImplementedError:
        pytest.skip("this pyarrow is built without jemalloc")


def test_rounds_allocate_from_jemalloc_until_the_last_one_ends() -> None:
    jemalloc_or_skip()
    before = pa.default_memory_pool().backend_name
    with round_memory_pool():
        assert pa.default_memory_pool().backend_name == "jemalloc"
        with round_memory_pool():  # a second round of the process, at once
            assert pa.default_memory_pool().backend_name == "jemalloc"
        assert pa.default_memory_pool().backend_name == "jemalloc"
    assert pa.default_memory_pool().backend_name == before


def test_a_failed_round_gives_the_pool_back() -> None:
    jemalloc_or_skip()
    before = pa.default_memory_pool().backend_name
    with pytest.raises(RuntimeError), round_memory_pool():
        raise RuntimeError("the round failed")
    assert pa.default_memory_pool().backend_name == before


def test_a_clean_runs_its_round_in_the_jemalloc_pool(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    jemalloc_or_skip()
    seen: list[str] = []
    real = executor.clean_newest_first

    def spy(task: Any, one_core: bool = False) -> Any:
        seen.append(pa.default_memory_pool().backend_name)
        return real(task, one_core)

    monkeypatch.setattr(executor, "clean_newest_first", spy)
    store = compactlog.open(str(tmp_path))
    store.create_topic("t", 1, {"cleanup.policy": "compact"})
    store.append("t", 0, pa.table({"key": [b"a", b"a", b"b"], "value": [b"1", b"2", b"3"]}))
    store.roll("t", 0)
    before = pa.default_memory_pool().backend_name
    assert store.clean(force=True).partitions
    assert seen == ["jemalloc"]
    assert pa.default_memory_pool().backend_name == before
    assert {r.key: r.value for r in store.read("t", 0)} == {b"a": b"2", b"b": b"3"}


def test_decay_is_set_once_per_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """Freed memory stays with the pool long enough for a round to reuse it (no page faults to take it
    again); jemalloc's decay setting applies to arenas made afterwards, so it is set once, before the first
    round."""
    jemalloc_or_skip()
    from compactlog.cleaner import memory_pool

    calls: list[int] = []
    monkeypatch.setattr(memory_pool, "_decay_set", False)
    monkeypatch.setattr(pa, "jemalloc_set_decay_ms", calls.append)
    for _ in range(2):
        with round_memory_pool(), round_memory_pool():
            pass
    assert calls == [memory_pool.ROUND_DECAY_MS]
