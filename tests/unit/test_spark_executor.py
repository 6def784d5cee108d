"""The Spark executor's pure parts (no JVM): task packing, what crosses the network, refusals."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pytest

import compactlog
from compactlog.cleaner.executor import RoundResult
from compactlog.cleaner.offset_map import OffsetMap
from compactlog.errors import ExecutorError
from compactlog.spark import executor as spark_executor
from compactlog.spark.clean_tasks import BroadcastMap, partial_map_from_ipc, partial_map_to_ipc
from compactlog.spark.executor import pack
from compactlog.spark.partial_map import PartialMap


def test_pack_spreads_small_items_over_every_slot_in_order() -> None:
    assert pack(list(range(10)), [1] * 10, slots=2) == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]


def test_pack_gives_big_items_a_task_each() -> None:
    assert pack(list(range(4)), [100] * 4, slots=2, min_task_bytes=50) == [[0], [1], [2], [3]]


def test_pack_balances_bytes_not_counts() -> None:
    assert pack(list(range(5)), [100, 1, 1, 1, 1], slots=2) == [[0], [1, 2, 3, 4]]


def test_pack_handles_empty_and_zero_sized_items() -> None:
    assert pack([], [], slots=4) == []
    assert pack(["a", "b", "c"], [0, 0, 0], slots=2) == [["a"], ["b", "c"]]
    assert pack(["a"], [5], slots=8) == [["a"]]


def test_a_partial_map_crosses_as_keys_and_offsets_only() -> None:
    part = PartialMap(40, pa.array([b"a", b"b"], pa.binary()), np.array([41, 45], dtype=np.int64), 6, 1234)

    back = partial_map_from_ipc(40, partial_map_to_ipc(part), 6, 1234)

    assert back.keys.equals(part.keys)
    assert back.latest.tolist() == [41, 45]
    assert (back.base_offset, back.records_read, back.bytes_read) == (40, 6, 1234)
    empty = PartialMap(0, pa.array([], pa.binary()), np.empty(0, dtype=np.int64), 0, 0)
    assert len(partial_map_from_ipc(0, partial_map_to_ipc(empty), 0, 0).keys) == 0


def test_a_broadcast_offset_map_looks_up_as_the_original() -> None:
    offset_map = OffsetMap(10_000, 12_000)
    offset_map.put_records(pa.array([b"x", b"y", b"x"], pa.binary()), np.array([3, 4, 5], dtype=np.int64))
    offset_map.update_latest_offset(9)

    copy = BroadcastMap.of(offset_map).offset_map()

    assert copy.latest_offset == 9
    assert (copy.capacity_bytes, copy.buffer_bytes) == (10_000, 12_000)
    assert copy.used_bytes == offset_map.used_bytes
    keys = pa.array([b"x", b"y", b"z", None], pa.binary())
    assert copy.lookup(keys).tolist() == offset_map.lookup(keys).tolist() == [5, 4, -1, -1]


def test_only_a_spark_session_is_an_executor() -> None:
    with pytest.raises(ExecutorError, match="executor must be None"):
        spark_executor.spark_context("local[2]")


def test_anything_but_a_session_given_to_store_clean_fails_the_pass(tmp_path: Any) -> None:
    store = compactlog.open(tmp_path)
    with pytest.raises(ExecutorError, match="executor must be None"):
        store.clean(executor="local[2]")


def test_the_spark_executor_hands_back_each_partition_s_round_or_error(monkeypatch: pytest.MonkeyPatch) -> None:
    failed = ExecutorError("t-1: Spark task for the round failed")
    monkeypatch.setattr(spark_executor, "run_many_on_spark", lambda spark, tasks: [("map of t-0", ["group"]), failed])
    first, second = spark_executor.SparkExecutor("session").run_rounds(["t-0", "t-1"])  # type: ignore[list-item]
    assert isinstance(first, RoundResult) and (first.mapped, first.groups) == ("map of t-0", ["group"])
    assert second is failed


def test_speculation_is_refused() -> None:
    with pytest.raises(ExecutorError, match=r"spark\.speculation=false"):
        spark_executor.check_spark_conf(conf_with("spark.speculation", "true"))


@pytest.mark.parametrize(("policy", "size", "total", "slots", "split"), [
    ("auto", 1 << 30, 1 << 30, 8, True),  # one big partition, many slots: use them all
    ("auto", 1 << 30, 1 << 30, 2, False),  # two slots: a split round does about twice the work
    ("auto", 1 << 20, 1 << 20, 8, False),  # too small to be worth a split
    ("auto", 1 << 30, 8 << 30, 8, False),  # one of eight equal partitions: whole rounds keep slots busy
    ("always", 1, 8, 2, True),
    ("never", 1 << 40, 1 << 40, 64, False),
])
def test_when_a_round_is_split(policy: str, size: int, total: int, slots: int, split: bool) -> None:
    assert spark_executor.should_split(policy, size, total, slots) is split


def conf_with(key: str, value: str) -> Any:
    """A SparkConf stand-in that holds ``key=value``."""

    class Conf:
        def get(self, asked: str, default: str) -> str:
            return value if asked == key else default

    return Conf()


def test_a_bad_split_setting_is_refused() -> None:
    with pytest.raises(ExecutorError, match=r"spark\.compactlog\.cleaner\.split='sometimes'; allowed"):
        spark_executor.split_policy(conf_with(spark_executor.SPLIT_CONF, "sometimes"))
    with pytest.raises(ExecutorError, match=r"spark\.compactlog\.cleaner\.split=''; allowed"):
        spark_executor.split_policy(conf_with(spark_executor.SPLIT_CONF, ""))  # set, but empty


def test_the_round_threads_setting() -> None:
    assert spark_executor.round_threads(conf_with("other", "x")) == spark_executor.ROUND_THREADS == "all"
    assert spark_executor.round_threads(conf_with(spark_executor.ROUND_THREADS_CONF, " One ")) == "one"
    with pytest.raises(ExecutorError, match=r"spark\.compactlog\.cleaner\.roundThreads='two'; allowed"):
        spark_executor.round_threads(conf_with(spark_executor.ROUND_THREADS_CONF, "two"))
