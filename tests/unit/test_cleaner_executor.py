"""The cleaner's executor boundary: what ``Store.clean``'s executor argument becomes, how the in-process
executor hands rounds back, and the rule that the cleaner package never imports ``compactlog.spark``."""

from __future__ import annotations

import ast
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import compactlog
from compactlog.cleaner import executor as executor_module
from compactlog.cleaner.executor import InProcessExecutor, OnDemandExecutor, RoundResult, cleaner_executor
from compactlog.cleaner.kernel import CleanTask
from support import FakeClock

CLEANER_PACKAGE = Path(compactlog.__file__).parent / "cleaner"


def imported_modules(path: Path, package: str) -> set[str]:
    """Every module an ``import`` anywhere in the file names (in functions too), relative ones resolved."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            parts = package.split(".")
            base = ".".join(parts[:len(parts) - node.level + 1]) if node.level else ""
            module = ".".join(p for p in (base, node.module) if p)
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)  # `from .. import spark`
    return names


def test_the_cleaner_package_imports_nothing_from_spark() -> None:
    files = sorted(CLEANER_PACKAGE.glob("*.py"))
    assert len(files) > 5
    for path in files:
        spark = {name for name in imported_modules(path, "compactlog.cleaner")
                 if name.split(".")[:2] == ["compactlog", "spark"] or name.split(".")[0] == "pyspark"}
        assert not spark, f"{path.name} imports {sorted(spark)}"


def fill(store: compactlog.Store, topic: str) -> None:
    store.create_topic(topic, 1, {"cleanup.policy": "compact", "segment.bytes": 14,
                                  "min.cleanable.dirty.ratio": 0.01})
    for value in (b"1", b"2", b"3"):
        store.append(topic, 0, pa.table({"key": [b"k"], "value": [value]}))


class Recording:
    """A CleanerExecutor of a test's own: the in-process one, noting the partitions it was given."""

    def __init__(self) -> None:
        self.given: list[tuple[str, int]] = []

    def run_rounds(self, tasks: Sequence[CleanTask]) -> Iterator[RoundResult | Exception]:
        self.given += [(task.topic, task.partition) for task in tasks]
        return InProcessExecutor().run_rounds(tasks)


def test_none_is_the_in_process_executor_with_log_cleaner_threads() -> None:
    assert cleaner_executor(None, 3) == InProcessExecutor(3)


def test_a_cleaner_executor_given_to_store_clean_runs_the_rounds(tmp_path: Path) -> None:
    store = compactlog.open(tmp_path, clock=FakeClock())
    for topic in ("a", "b"):
        fill(store, topic)
    recording = Recording()
    report = store.clean(force=True, executor=recording)
    assert recording.given == [("a", 0), ("b", 0)]
    assert [(p.topic, p.end_offset) for p in report.partitions] == [("a", 2), ("b", 2)] and not report.skipped


def test_an_on_demand_executor_starts_only_when_a_pass_has_a_round(tmp_path: Path) -> None:
    """What ``start`` returns is resolved as the store's own argument: here None, the in-process executor."""
    starts: list[int] = []

    def start() -> None:
        starts.append(1)

    store = compactlog.open(tmp_path, clock=FakeClock())
    store.create_topic("t", 1, {"cleanup.policy": "compact"})
    assert store.clean(force=True, executor=OnDemandExecutor(start)).partitions == []
    assert starts == []
    fill(store, "u")
    report = store.clean(force=True, executor=OnDemandExecutor(start))
    assert starts == [1] and [p.topic for p in report.partitions] == ["u"]


def test_an_in_process_pass_never_imports_compactlog_spark(tmp_path: Path) -> None:
    script = f"""
import sys
import pyarrow as pa
import compactlog
store = compactlog.open({str(tmp_path)!r})
store.create_topic("t", 1, {{"cleanup.policy": "compact", "segment.bytes": 14}})
for value in (b"1", b"2"):
    store.append("t", 0, pa.table({{"key": [b"k"], "value": [value]}}))
assert store.clean(force=True).partitions
print(sorted(m for m in sys.modules if m.startswith(("compactlog.spark", "pyspark"))))
"""
    out = subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, text=True).stdout
    assert out.strip() == "[]"


def test_one_round_at_a_time_runs_a_round_only_when_its_outcome_is_asked_for(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """So each round is swapped in before the next one reads its partition's segments; a failed round
    comes back as a value and the next still runs."""
    ran: list[str] = []

    def run(task: Any) -> Any:
        ran.append(task)
        if task == "bad":
            raise ValueError("bad round")
        return f"map of {task}", []

    monkeypatch.setattr(executor_module, "run_in_process", run)
    outcomes = InProcessExecutor(1).run_rounds(["a", "bad", "c"])  # type: ignore[list-item]
    assert ran == []
    first = next(outcomes)
    assert isinstance(first, RoundResult) and first.mapped == "map of a" and ran == ["a"]
    assert isinstance(next(outcomes), ValueError) and ran == ["a", "bad"]
    assert isinstance(next(outcomes), RoundResult) and ran == ["a", "bad", "c"]


def test_rounds_side_by_side_come_back_in_the_order_given(monkeypatch: pytest.MonkeyPatch) -> None:
    """The second round ends before the first (the first waits for it), yet the first is handed back first."""
    second_done = threading.Event()

    def run(task: Any) -> Any:
        if task == "first":
            assert second_done.wait(timeout=30)
        else:
            second_done.set()
        return f"map of {task}", []

    monkeypatch.setattr(executor_module, "run_in_process", run)
    outcomes = list(InProcessExecutor(2).run_rounds(["first", "second"]))  # type: ignore[list-item]
    assert [o.mapped for o in outcomes if isinstance(o, RoundResult)] == ["map of first", "map of second"]


def test_the_engine_executor_is_named_by_a_class_that_exists() -> None:
    """A SparkSession becomes the executor ENGINE_EXECUTOR names: the name resolves to Spark's executor class
    (a typo or a move would make every Spark clean fail at its first pass)."""
    import importlib

    from compactlog.cleaner.executor import ENGINE_EXECUTOR

    module, _, name = ENGINE_EXECUTOR.partition(":")
    from compactlog.spark.executor import SparkExecutor

    assert getattr(importlib.import_module(module), name) is SparkExecutor
