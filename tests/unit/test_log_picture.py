"""The picture of a topic's log (``topics describe --plot`` / ``--html``): the per-segment sections, the counts,
the layout, the PNG and the HTML page, and the command through the installed ``compactlog`` script."""

from __future__ import annotations

import dataclasses
import itertools
import os
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import compactlog
from compactlog.cleaner.plan import CleaningPolicy, PartitionState
from compactlog.cli.log_picture_html import render_html
from compactlog.cli.log_picture_png import COLOURS, DPI, HEADER_IN, ROW_IN, figure_size_px, write_png
from compactlog.cli.main import main
from compactlog.log_picture import (
    ACTIVE,
    CLEAN,
    CLEANABLE,
    MIN_LAG,
    NOT_COMPACTED,
    OPEN_TRANSACTION,
    UNCLEANABLE,
    TopicPicture,
    box_extents,
    partition_status,
    segment_counts,
    segment_sections,
    topic_picture,
)
from compactlog.segment import SegmentStats
from support import FakeClock

HOUR = 3_600_000
POLICY = CleaningPolicy(compact=True, delete=False, min_cleanable_dirty_ratio=0.5, min_compaction_lag_ms=0,
                        max_compaction_lag_ms=2**63 - 1, delete_retention_ms=86_400_000, retention_ms=-1,
                        retention_bytes=-1, segment_bytes=1 << 30)


def state(max_timestamps: list[int], checkpoint: int | None = None, lso: int | None = None,
          policy: CleaningPolicy = POLICY, uncleanable_reason: str | None = None) -> PartitionState:
    """Segments of 100 offsets and 1000 bytes each, one per timestamp, the last one active (10 records)."""
    segments = [SegmentStats(100 * i, 100 * (i + 1), 1000, 100, ts, ts, False) for i, ts in enumerate(max_timestamps)]
    end = 100 * len(max_timestamps)
    segments.append(SegmentStats(end, end + 10, 100, 10, max_timestamps[-1], max_timestamps[-1], True))
    return PartitionState("t", 0, tuple(segments), 0, end + 10, end + 10 if lso is None else lso, checkpoint, policy,
                          uncleanable_reason)


# --- The sections --------------------------------------------------------------------------------------------


def test_segments_below_the_checkpoint_are_clean_and_the_dirty_ones_cleanable() -> None:
    now = FakeClock()()
    assert segment_sections(state([now] * 4, checkpoint=200), now) == (CLEAN, CLEAN, CLEANABLE, CLEANABLE, ACTIVE)
    assert segment_sections(state([now] * 2), now) == (CLEANABLE, CLEANABLE, ACTIVE)


def test_min_lag_holds_back_the_first_young_segment_and_every_later_one_until_it_passes() -> None:
    clock = FakeClock()
    lagged = dataclasses.replace(POLICY, min_compaction_lag_ms=HOUR)
    young = clock() - HOUR // 2
    partition = state([clock() - 2 * HOUR, young, clock() - 3 * HOUR], policy=lagged)

    assert segment_sections(partition, clock()) == (CLEANABLE, MIN_LAG, MIN_LAG, ACTIVE)
    clock.advance(HOUR // 2)
    assert segment_sections(partition, clock()) == (CLEANABLE, CLEANABLE, CLEANABLE, ACTIVE)


def test_segments_from_the_last_stable_offset_on_are_held_back_by_the_open_transaction() -> None:
    now = FakeClock()()
    assert segment_sections(state([now] * 3, lso=150), now) == (CLEANABLE, OPEN_TRANSACTION, OPEN_TRANSACTION,
                                                               ACTIVE)


def test_an_uncleanable_partition_and_a_topic_without_compact() -> None:
    now = FakeClock()()
    assert segment_sections(state([now] * 2, checkpoint=100, uncleanable_reason="boom"), now) == (
        UNCLEANABLE, UNCLEANABLE, ACTIVE)
    deleted = dataclasses.replace(POLICY, compact=False, delete=True)
    assert segment_sections(state([now] * 2, policy=deleted), now) == (NOT_COMPACTED, NOT_COMPACTED, ACTIVE)


def test_the_status_says_why_a_partition_is_not_cleaned_and_until_when() -> None:
    clock = FakeClock()
    lagged = dataclasses.replace(POLICY, min_compaction_lag_ms=HOUR)
    assert partition_status(state([clock()] * 2), clock()) == (
        True, "due: the next pass cleans offsets [0, 200) (dirty ratio 1.00 > min.cleanable.dirty.ratio 0.50)")

    due, why = partition_status(state([clock()] * 2, policy=lagged), clock())
    assert not due
    assert why == ("not cleaned: nothing cleanable: min.compaction.lag.ms holds segment 0 back until "
                   "2023-11-14 23:13:20 UTC")
    assert partition_status(state([clock()] * 2, uncleanable_reason="disk on fire"), clock()) == (
        False, "not cleaned: uncleanable: disk on fire")


# --- Counting and layout -------------------------------------------------------------------------------------


def test_duplicates_and_tombstones_are_counted_per_segment_as_a_plain_model_counts_them() -> None:
    rng = np.random.default_rng(17)
    n, bases = 3000, [0, 700, 1500, 2900]
    keys = [None if k == 0 else b"k%d" % k for k in rng.integers(0, 400, n)]
    values = [None if t else b"v" for t in rng.random(n) < 0.1]
    table = pa.table({"offset": pa.array(range(n), pa.int64()), "key": pa.array(keys, pa.binary()),
                      "value": pa.array(values, pa.binary())})
    # Model: a record is a duplicate when its key (not null) appears at a later offset.
    last = {key: offset for offset, key in enumerate(keys) if key is not None}
    expected = np.zeros((len(bases), 3), dtype=np.int64)
    for offset in range(n):
        segment = max(i for i, base in enumerate(bases) if base <= offset)
        expected[segment] += (1, keys[offset] is not None and last[keys[offset]] > offset, values[offset] is None)

    pieces = [table.slice(2000), table.slice(0, 1000), table.slice(1000, 1000)]  # any split, any order
    assert (segment_counts(pieces, bases) == expected).all()
    assert (segment_counts([], bases) == 0).all()


def test_box_widths_follow_bytes_with_a_floor_for_empty_segments() -> None:
    extents = box_extents([3000, 1000, 0])
    assert [round(w, 4) for _, w in extents] == [round(0.03 + 0.91 * 0.75, 4), round(0.03 + 0.91 * 0.25, 4), 0.03]
    assert extents[0][0] == 0 and abs(sum(w for _, w in extents) - 1) < 1e-9
    assert all(abs(left - (prev_left + prev_w)) < 1e-9
               for (prev_left, prev_w), (left, _) in itertools.pairwise(extents))


# --- A store's topic ------------------------------------------------------------------------------------------


def three_partitions(path: Path, clock: FakeClock) -> compactlog.Store:
    """Topic ``users``: partition 0 cleaned (a clean segment and a small active one), partition 1 dirty and
    held back by min.compaction.lag.ms, partition 2 only an active segment."""
    store = compactlog.open(path, clock=clock)
    store.create_topic("users", 3, {"cleanup.policy": "compact", "min.compaction.lag.ms": HOUR})

    def produce(partition: int, n: int, keys: int) -> None:
        store.append("users", partition, pa.table({
            "key": [b"user-%d" % (i % keys) for i in range(n)],
            "value": [None if i % 25 == 0 else b"x" * 40 for i in range(n)]}))

    for _ in range(3):
        produce(0, 300, 120)
        store.roll("users", 0)
    clock.advance(2 * HOUR)
    store.clean(topic="users", partition=0)
    produce(0, 40, 40)
    for i in range(3):
        produce(1, 300 + 100 * i, 150)
        store.roll("users", 1)
    produce(1, 50, 50)
    produce(2, 80, 80)
    return store


def test_a_topic_picture_of_a_clean_a_held_back_and_an_active_only_partition(tmp_path: Path) -> None:
    store = three_partitions(tmp_path / "data", FakeClock())
    picture = topic_picture(store, "users")

    clean, held, active = picture.partitions
    assert [b.section for b in clean.segments] == [CLEAN, ACTIVE] and clean.checkpoint == 900
    assert [(b.record_count, b.duplicate_count, b.tombstone_count) for b in clean.segments] == [(120, 40, 4),
                                                                                                (40, 0, 2)]
    assert [b.section for b in held.segments] == [MIN_LAG, MIN_LAG, MIN_LAG, ACTIVE] and held.checkpoint is None
    assert "min.compaction.lag.ms holds segment 0 back until" in held.status and not held.due
    assert [b.section for b in active.segments] == [ACTIVE]
    assert active.status == "not cleaned: nothing cleanable: first dirty offset 0 is at the active segment (base 0)"


# --- Rendering -----------------------------------------------------------------------------------------------


def box_pixel(image: np.ndarray, row: int) -> tuple[int, int, int]:
    """The colour near the left end of partition ``row``'s first box (away from its text and the checkpoint)."""
    width = image.shape[1]
    x = round(width * (0.07 + 0.91 * 0.01))
    y = round((HEADER_IN + ROW_IN * (row + 0.12 + 0.24)) * DPI)
    return tuple(round(float(c) * 255) for c in image[y, x, :3])  # type: ignore[return-value]


def rgb(colour: str) -> tuple[int, int, int]:
    return int(colour[1:3], 16), int(colour[3:5], 16), int(colour[5:7], 16)


def test_the_png_has_the_expected_size_and_colours_each_partition_by_its_state(tmp_path: Path) -> None:
    from matplotlib.image import imread

    clock = FakeClock()
    store = compactlog.open(tmp_path / "data", clock=clock)
    store.create_topic("t", 2, {"cleanup.policy": "compact"})
    for partition in (0, 1):
        store.append("t", partition, pa.table({"key": [b"a", b"b", b"a"], "value": [b"1", b"2", b"3"]}))
        store.roll("t", partition)
    store.clean(topic="t", partition=0)
    write_png(topic_picture(store, "t"), tmp_path / "t.png")

    image = imread(tmp_path / "t.png")
    assert (image.shape[1], image.shape[0]) == figure_size_px(2) == (1400, 130 + 2 * 170 + 20)
    assert box_pixel(image, 0) == rgb(COLOURS[CLEAN]) == (0x4E, 0x9A, 0x5B)
    assert box_pixel(image, 1) == rgb(COLOURS[CLEANABLE]) == (0xF0, 0xA8, 0x30)


class Boxes(HTMLParser):
    """The partitions of a report and, per partition, its boxes' (base offset, section)."""

    def __init__(self) -> None:
        super().__init__()
        self.partitions: dict[int, list[tuple[int, str]]] = {}
        self.external: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        self.external += [f"{tag} {name}" for name in ("src", "href") if name in attributes]
        if "data-partition" in attributes:
            self.partitions[int(attributes["data-partition"] or "")] = []
        if "data-section" in attributes:
            current = list(self.partitions.values())[-1]
            current.append((int(attributes["data-base-offset"] or ""), attributes["data-section"] or ""))


def test_the_html_holds_every_partition_and_every_segment_with_its_section(tmp_path: Path) -> None:
    store = three_partitions(tmp_path / "data", FakeClock())
    picture = topic_picture(store, "users")
    page = render_html(picture)

    parsed = Boxes()
    parsed.feed(page)
    assert parsed.partitions == {p.partition: [(b.base_offset, b.section) for b in p.segments]
                                 for p in picture.partitions}
    assert {section for boxes in parsed.partitions.values() for _, section in boxes} == {CLEAN, MIN_LAG, ACTIVE}
    assert parsed.external == []  # self-contained: nothing fetched from elsewhere
    for partition in picture.partitions:
        assert f'title="{partition.status}"' in page
    assert 'title="clean: offsets 0..899, 4.5 kB; 120 records, 40 duplicates, 4 tombstones"' in page


def test_an_empty_topic_picture_still_renders(tmp_path: Path) -> None:
    picture = TopicPicture("empty", "compact", 0, ())
    write_png(picture, tmp_path / "e.png")
    assert "<h1>Topic empty</h1>" in render_html(picture)


# --- The command ---------------------------------------------------------------------------------------------


def test_describe_plot_and_html_through_the_installed_script(tmp_path: Path) -> None:
    from matplotlib.image import imread

    three_partitions(tmp_path / "data", FakeClock()).close()
    script = Path(sys.executable).parent / "compactlog"
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "VIRTUAL_ENV")}
    done = subprocess.run([str(script), "topics", "describe", "users", "--data-dir", str(tmp_path / "data"),
                           "--plot", str(tmp_path / "log.png"), "--html", str(tmp_path / "log.html")],
                          capture_output=True, text=True, env=env, timeout=120)

    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("Topic: users\tPartitionCount: 3")
    assert done.stderr.splitlines() == [f"Wrote the picture of topic users to {tmp_path / 'log.png'}.",
                                        f"Wrote the picture of topic users to {tmp_path / 'log.html'}."]
    image = imread(tmp_path / "log.png")
    assert (image.shape[1], image.shape[0]) == figure_size_px(3)
    parsed = Boxes()
    parsed.feed((tmp_path / "log.html").read_text())
    assert sorted(parsed.partitions) == [0, 1, 2]


def test_describe_plot_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    three_partitions(tmp_path / "data", FakeClock()).close()
    data = ["--data-dir", str(tmp_path / "data")]

    assert main(["topics", "describe", *data, "--plot", str(tmp_path / "x.png")]) == 2
    usage, error = capsys.readouterr().err.splitlines()  # a usage error: the command's usage, then the error
    assert usage.startswith("usage: compactlog topics describe ")
    assert error == "compactlog topics describe: error: --plot and --html draw one topic: name it"
    assert main(["topics", "describe", "users", *data, "--html", str(tmp_path / "missing" / "x.html")]) == 1
    assert capsys.readouterr().err == (f"compactlog: ReportWriteError: cannot write {tmp_path / 'missing' / 'x.html'}"
                                       ": No such file or directory\n")


def test_import_compactlog_and_the_cli_do_not_import_matplotlib() -> None:
    code = "import compactlog, compactlog.cli.main, compactlog.log_picture, sys; print('matplotlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert out.strip() == "False"


def test_the_picture_of_a_topic_never_imports_pandas(tmp_path: Path) -> None:
    """As reads and cleans (tests/unit/test_import.py): the counts group keys without pyarrow.acero."""
    three_partitions(tmp_path / "data", FakeClock()).close()
    code = ("import compactlog, sys; from compactlog.log_picture import topic_picture; "
            f"picture = topic_picture(compactlog.open({str(tmp_path / 'data')!r}), 'users'); "
            "print(sum(b.duplicate_count for p in picture.partitions for b in p.segments), 'pandas' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert out.split() == ["1140", "False"]
