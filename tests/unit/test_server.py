"""serve's parts without a child process: the server's component order, the data-directory lock, the
cleaner service's loop (with a wait that never sleeps), its backoff rule, and the metrics address."""

from __future__ import annotations

import inspect
import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pytest

import compactlog
from compactlog import maintenance
from compactlog.cleaner.cleaner import CleanReport
from compactlog.cleaner.executor import InProcessExecutor, RoundResult
from compactlog.cleaner.kernel import CleanTask
from compactlog.cleaner.state import read_cleaner_state
from compactlog.cleaner_service import CleanerService, ShutdownAwareExecutor
from compactlog.errors import (
    CleaningAbortedError,
    ConfigError,
    DataDirectoryError,
    DataDirectoryLockedError,
    ReadOnlyStoreError,
    UnknownTopicOrPartitionError,
)
from compactlog.maintenance import PassReport, backoff_after_pass_ms
from compactlog.metrics_endpoint import parse_address
from compactlog.server import LOCK_FILE, DataDirectoryLock, Server
from support import FakeClock, read_only_view


class Recorder:
    def __init__(self, name: str, calls: list[str], fail_start: bool = False) -> None:
        self.name, self.calls, self.fail_start = name, calls, fail_start

    def start(self) -> None:
        if self.fail_start:
            raise OSError(f"{self.name} cannot start")
        self.calls.append(f"start {self.name}")

    def shutdown(self) -> None:
        self.calls.append(f"stop {self.name}")


def test_components_start_in_order_and_stop_in_reverse() -> None:
    calls: list[str] = []
    server = Server([Recorder("lock", calls), Recorder("cleaner", calls), Recorder("metrics", calls)])
    server.startup()
    server.shutdown()
    assert calls == ["start lock", "start cleaner", "start metrics", "stop metrics", "stop cleaner", "stop lock"]


def test_a_component_that_cannot_start_stops_those_started_before_it() -> None:
    calls: list[str] = []
    server = Server([Recorder("lock", calls), Recorder("cleaner", calls), Recorder("metrics", calls, True)])
    with pytest.raises(OSError, match="metrics cannot start"):
        server.startup()
    assert calls == ["start lock", "start cleaner", "stop cleaner", "stop lock"]


def test_a_signal_taken_by_another_thread_still_stops_the_server() -> None:
    # Any thread may take a process-directed SIGTERM; one taken by a component's thread must end the main
    # thread's wait too (it did not, and `compactlog serve` then ignored a SIGTERM now and then).
    calls: list[str] = []
    stopped, watchdog_fired = threading.Event(), threading.Event()
    stop = threading.Event()

    def watchdog() -> None:  # ends a wait the signal failed to end, so that the test fails rather than hangs
        if not stopped.wait(10):
            watchdog_fired.set()
            stop.set()

    main = threading.get_ident()

    lines, first = inspect.getsourcelines(threading.Condition.wait)
    acquires = [first + i for i, line in enumerate(lines) if "gotit = waiter.acquire(" in line or
                line.strip() == "waiter.acquire()"][1:]  # the blocking ones, not the first that takes it

    def blocked_in_wait() -> bool:  # the main thread is at a blocking lock acquire under stop.wait
        frame = sys._current_frames().get(main)
        return frame is not None and frame.f_code is threading.Condition.wait.__code__ \
            and frame.f_lineno in acquires

    def component_thread() -> None:
        seen = 0  # the line is set before the acquire's futex call: seen at five polls 20 ms apart, it is in it
        while not stopped.is_set():
            seen = seen + 1 if blocked_in_wait() else 0
            if seen == 5:
                break
            stopped.wait(0.02)
        else:
            return  # the server stopped without the signal (the watchdog): sending it now would end pytest
        signal.pthread_kill(threading.get_ident(), signal.SIGTERM)  # delivered to this thread only

    def on_started() -> None:
        threading.Thread(target=component_thread, daemon=True).start()

    before = signal.getsignal(signal.SIGTERM)
    threading.Thread(target=watchdog, daemon=True).start()
    try:
        Server([Recorder("listener", calls)]).run_until_signalled(stop, on_started=on_started)
    finally:
        stopped.set()
    assert not watchdog_fired.is_set() and stop.is_set()
    assert calls == ["start listener", "stop listener"]
    assert signal.getsignal(signal.SIGTERM) == before  # the server's handler was taken down again


def test_a_signal_handled_while_the_main_thread_holds_the_stop_events_lock_still_stops_the_server() -> None:
    # stop.wait() holds the Event's lock for a moment after each slice ends, and the signal's handler may run
    # right then (it did, for a SIGTERM taken by a busy cleaner thread): a handler that called stop.set() there
    # waited on that lock forever and `compactlog serve` never exited. Here on_started holds the lock while
    # the handler runs. In a child process, so that a hang fails the test by its deadline.
    child = """
import signal, threading
from compactlog.server import Server
stop = threading.Event()
def on_started():
    with stop._cond:  # the lock stop.wait() holds between its slices
        signal.raise_signal(signal.SIGTERM)  # the handler runs before raise_signal returns
Server([]).run_until_signalled(stop, on_started=on_started)
print("stopped:", stop.is_set())
"""
    done = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=20)
    assert (done.returncode, done.stdout) == (0, "stopped: True\n"), done.stderr


def test_one_server_per_data_directory(tmp_path: Path) -> None:
    first = DataDirectoryLock(str(tmp_path))
    first.start()
    assert (tmp_path / LOCK_FILE).read_text() == f"{os.getpid()}\n"
    with pytest.raises(DataDirectoryLockedError, match=f"already served by process {os.getpid()}"):
        DataDirectoryLock(str(tmp_path)).start()
    first.shutdown()
    second = DataDirectoryLock(str(tmp_path))
    second.start()  # released: a new server may start
    second.shutdown()


def test_the_lock_of_a_new_data_directory_creates_it_and_leaves_it_a_store_to_be(tmp_path: Path) -> None:
    lock = DataDirectoryLock(str(tmp_path / "new"))
    lock.start()
    try:
        assert os.listdir(tmp_path / "new") == [LOCK_FILE]
        with compactlog.open(tmp_path / "new") as store:  # .lock alone: still an empty directory
            assert store.directory_id is not None
    finally:
        lock.shutdown()


def test_a_lock_that_cannot_be_taken_is_one_line_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(DataDirectoryError, match=f"^data directory {tmp_path / 'file'} is not a directory$"):
        DataDirectoryLock(str(tmp_path / "file")).start()
    (tmp_path / "ro").mkdir()
    with read_only_view(tmp_path / "ro") as view, pytest.raises(ReadOnlyStoreError) as refused:
        DataDirectoryLock(str(view)).start()
    assert str(refused.value) == f"cannot serve: the data directory {view} is read-only (opened for reads only)"


def report(cleaned: int) -> PassReport:
    clean = CleanReport()
    clean.partitions.extend([object()] * cleaned)  # type: ignore[list-item]
    return PassReport(clean)


def test_the_cleaner_backs_off_only_after_a_pass_that_cleaned_nothing() -> None:
    assert backoff_after_pass_ms(report(0), 15_000) == 15_000
    assert backoff_after_pass_ms(report(1), 15_000) == 0


class Waits:
    """A wait that records the seconds asked for and reports a shutdown after ``passes`` waits."""

    def __init__(self, passes: int) -> None:
        self.asked: list[float] = []
        self.passes = passes

    def __call__(self, seconds: float) -> bool:
        self.asked.append(seconds)
        return len(self.asked) >= self.passes


def dirty_store(tmp_path: Path, backoff_ms: int) -> compactlog.Store:
    (tmp_path / "server.properties").write_text(f"log.cleaner.backoff.ms={backoff_ms}\n")
    store = compactlog.open(str(tmp_path), clock=FakeClock())
    store.create_topic("t", 1, {"cleanup.policy": "compact", "segment.bytes": 14})
    for value in (b"1", b"2", b"3"):
        store.append("t", 0, pa.table({"key": [b"k"], "value": [value]}))
    return store


def test_the_loop_cleans_then_waits_the_backoff(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = dirty_store(tmp_path, 250)
    waits = Waits(passes=3)
    service = CleanerService(store, wait=waits)
    with caplog.at_level(logging.INFO, logger="compactlog.cleaner"):
        service.run()
    # The first pass cleans t-0 and goes on at once; the second finds nothing and waits the backoff.
    assert waits.asked == [0, 0.25, 0.25] and service.passes == 3
    passes = [r.getMessage() for r in caplog.records if r.getMessage().startswith("cleaner pass")]
    assert passes[0].startswith("cleaner pass: cleaned 1 partition(s): t-0 (2->1 records)")
    assert passes[1].startswith("cleaner pass: cleaned 0 partition(s)")
    assert store.describe("t")[0].dirty_ratio == 0
    assert service.dead_thread_count() == 0


def test_a_failed_pass_is_retried_after_the_backoff_and_an_unexpected_error_kills_the_thread(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = dirty_store(tmp_path, 100)
    errors: list[Exception] = [UnknownTopicOrPartitionError("topic t deleted meanwhile"), RuntimeError("bug")]

    def failing_pass(store: object, *args: object, **kwargs: object) -> PassReport:
        raise errors.pop(0)

    monkeypatch.setattr(maintenance, "run_pass", failing_pass)
    monkeypatch.setattr("compactlog.cleaner_service.run_pass", failing_pass)
    waits = Waits(passes=5)
    service = CleanerService(store, wait=waits)
    service.run()
    assert waits.asked == [0.1]  # the CompactLogError: logged, retried after the backoff
    assert service.passes == 2 and service.dead_thread_count() == 1  # the RuntimeError ended the thread


def test_a_shutdown_wakes_the_waiting_thread(tmp_path: Path) -> None:
    store = dirty_store(tmp_path, 3_600_000)  # an hour: only the stop Event can end the wait
    service = CleanerService(store)
    waiting = threading.Event()
    stop_wait = service._wait

    def wait(seconds: float) -> bool:
        if seconds:
            waiting.set()  # the thread is in the hour's wait
        return stop_wait(seconds)

    service._wait = wait
    service.start()
    assert waiting.wait(60)
    service.shutdown(grace_s=10)  # the Event ends the hour's wait at once; 10 s is slack for a loaded machine
    assert service._thread is not None and not service._thread.is_alive()
    assert service.passes == 2  # the pass that cleaned t-0, then one that found nothing


@pytest.mark.parametrize(("address", "expected"), [("127.0.0.1:9404", ("127.0.0.1", 9404)),
                                                   ("[::1]:0", ("::1", 0)), ("localhost:80", ("localhost", 80))])
def test_metrics_address(address: str, expected: tuple[str, int]) -> None:
    assert parse_address(address) == expected


@pytest.mark.parametrize("address", ["9404", ":9404", "host:", "host:port", "host:70000"])
def test_a_bad_metrics_address_is_refused(address: str) -> None:
    with pytest.raises(ConfigError, match="HOST:PORT"):
        parse_address(address)


class LazyRounds:
    """An executor that runs a round only when its outcome is asked for, recording which ran."""

    def __init__(self) -> None:
        self.ran: list[str] = []
        self.closed = False

    def run_rounds(self, tasks: Sequence[CleanTask]) -> Iterator[RoundResult | Exception]:
        try:
            for task in tasks:
                self.ran.append(task.topic)
                yield RuntimeError(f"{task.topic} ran")
        finally:
            self.closed = True


def test_a_shutdown_lets_the_round_under_way_finish_and_starts_no_other() -> None:
    inner, stopping = LazyRounds(), threading.Event()
    tasks = [SimpleNamespace(topic=name, partition=0) for name in ("a", "b", "c")]
    outcomes = ShutdownAwareExecutor(inner, stopping).run_rounds(tasks)  # type: ignore[arg-type]
    assert str(next(outcomes)) == "a ran"
    stopping.set()  # while a's round is being swapped in
    rest = list(outcomes)
    assert [type(o) for o in rest] == [CleaningAbortedError, CleaningAbortedError]
    assert inner.ran == ["a"] and inner.closed


def test_an_abandoned_round_does_not_make_its_partition_uncleanable(tmp_path: Path) -> None:
    store = dirty_store(tmp_path, 100)
    stopping = threading.Event()
    stopping.set()
    report = store.clean(executor=ShutdownAwareExecutor(InProcessExecutor(1), stopping))
    assert report.partitions == [] and report.skipped[("t", 0)].startswith("not cleaned: t-0: the cleaner is")
    assert store.cleaner_metrics()["uncleanable-partitions-count"] == 0
    assert read_cleaner_state(str(tmp_path)).uncleanable == {}
    assert store.clean().partition("t", 0) is not None  # the next pass cleans it


def test_the_service_stops_a_pass_after_the_round_under_way(tmp_path: Path) -> None:
    store = dirty_store(tmp_path, 100)
    store.create_topic("u", 1, {"cleanup.policy": "compact", "segment.bytes": 14})
    for value in (b"1", b"2", b"3"):
        store.append("u", 0, pa.table({"key": [b"k"], "value": [value]}))

    class StopAfterFirstRound:
        def run_rounds(self, tasks: Sequence[CleanTask]) -> Iterator[RoundResult | Exception]:
            for outcome in InProcessExecutor(1).run_rounds(tasks):
                service._stop.set()  # SIGTERM during the first round
                yield outcome

    service = CleanerService(store, StopAfterFirstRound(), wait=Waits(passes=5))
    service.run()
    assert service.passes == 1
    ratios = {topic: store.describe(topic)[0].dirty_ratio for topic in ("t", "u")}
    assert sorted(ratios.values()) == [0, 1.0]  # one partition cleaned, the other left for the next pass
    assert read_cleaner_state(str(tmp_path)).uncleanable == {}


def test_rounds_run_side_by_side_but_never_taken_leave_no_cleaned_files(tmp_path: Path) -> None:
    (tmp_path / "server.properties").write_text("log.cleaner.threads=2\n")
    store = compactlog.open(str(tmp_path), clock=FakeClock())
    for topic in ("a", "b", "c"):
        store.create_topic(topic, 1, {"cleanup.policy": "compact", "segment.bytes": 14})
        for value in (b"1", b"2", b"3"):
            store.append(topic, 0, pa.table({"key": [b"k"], "value": [value]}))
    stopping = threading.Event()

    class StopDuringTheFirstRound:
        def run_rounds(self, tasks: Sequence[CleanTask]) -> Iterator[RoundResult | Exception]:
            rounds = InProcessExecutor(2).run_rounds(tasks)  # the first two rounds start together
            try:
                for outcome in rounds:
                    stopping.set()
                    yield outcome
            finally:
                rounds.close()  # type: ignore[attr-defined]

    report = store.clean(executor=ShutdownAwareExecutor(StopDuringTheFirstRound(), stopping))
    assert len(report.partitions) == 1
    assert sum(why.startswith("not cleaned:") for why in report.skipped.values()) == 2
    left = [name for topic in ("a", "b", "c") for name in os.listdir(tmp_path / f"{topic}-0")
            if name.endswith(".cleaned")]
    assert left == []  # the second round ran, its output was never swapped in: discarded at once


def test_rounds_computed_at_once_but_never_taken_leave_no_cleaned_files(tmp_path: Path) -> None:
    store = compactlog.open(str(tmp_path), clock=FakeClock())
    for topic in ("a", "b", "c"):
        store.create_topic(topic, 1, {"cleanup.policy": "compact", "segment.bytes": 14})
        for value in (b"1", b"2", b"3"):
            store.append(topic, 0, pa.table({"key": [b"k"], "value": [value]}))
    stopping = threading.Event()

    class AllRoundsFirst:  # as the Spark executor: every round runs before the first is handed back
        def run_rounds(self, tasks: Sequence[CleanTask]) -> Iterator[RoundResult | Exception]:
            outcomes = list(InProcessExecutor(1).run_rounds(tasks))
            stopping.set()  # SIGTERM while the rounds ran
            return iter(outcomes)

    report = store.clean(executor=ShutdownAwareExecutor(AllRoundsFirst(), stopping))
    assert len(report.partitions) == 1
    left = [name for topic in ("a", "b", "c") for name in os.listdir(tmp_path / f"{topic}-0")
            if name.endswith(".cleaned")]
    assert left == []
