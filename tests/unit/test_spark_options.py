"""Tests for compactlog.spark.options: option checks, offset specs, and the read-planning rules (no Spark)."""

from __future__ import annotations

import itertools
import json

import pytest

from compactlog import ConfigError
from compactlog.segment import SegmentMeta
from compactlog.spark.options import (
    EARLIEST,
    LATEST,
    SourceOptions,
    check_isolation_level,
    parse_offsets,
    rate_limit,
    split_range,
)


def segment(base: int, next_offset: int, size: int) -> SegmentMeta:
    return SegmentMeta(base, next_offset, size, next_offset - base, 0, 0, 0, False)


# ------------------------------------------------------------------------------------------ options


def test_options_are_case_insensitive_and_paths_become_absolute() -> None:
    options = SourceOptions.parse({"PATH": "rel/dir", "topic": "t", "STARTINGOFFSETS": "earliest"}, "read")
    assert options.path.startswith("/") and options.path.endswith("rel/dir")
    assert options.starting_offsets == "earliest"
    assert options.mode == "log"


@pytest.mark.parametrize("options, use, message", [
    ({"topic": "t"}, "read", "'path' is required"),
    ({"path": "/d"}, "read", "'topic' is required"),
    ({"path": "/d", "topic": "t", "mode": "newest"}, "read", "allowed: log, latest"),
    ({"path": "/d", "topic": "t", "failOnDataLoss": "false"}, "read", "unknown option 'failOnDataLoss'"),
    ({"path": "/d", "topic": "t", "keyColumn": "k"}, "read", "unknown option 'keyColumn'"),
    ({"path": "/d", "topic": "t", "endingOffsets": "latest"}, "stream", "unknown option 'endingOffsets'"),
    ({"path": "/d", "topic": "t", "minPartitions": "0"}, "read", "positive integer"),
    ({"path": "/d", "topic": "t", "maxOffsetsPerTrigger": "x"}, "stream", "positive integer"),
    ({"path": "/d", "topic": "t", "isolationLevel": "serializable"}, "read", "read_committed"),
])
def test_bad_options_fail_naming_the_option(options: dict[str, str], use: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        SourceOptions.parse(options, use)


def test_isolation_levels_are_kafkas() -> None:
    assert check_isolation_level("READ_COMMITTED") == "read_committed"
    with pytest.raises(ConfigError):
        check_isolation_level("committed")


# ------------------------------------------------------------------------------------------ offsets


def test_offset_words_apply_to_every_partition() -> None:
    assert parse_offsets("startingOffsets", "earliest", "t", 3, LATEST) == dict.fromkeys(range(3), EARLIEST)
    assert parse_offsets("endingOffsets", " Latest ", "t", 2, EARLIEST) == {0: LATEST, 1: LATEST}
    assert parse_offsets("endingOffsets", None, "t", 2, LATEST) == {0: LATEST, 1: LATEST}


def test_offset_json_is_kafkas_and_missing_partitions_take_the_default() -> None:
    text = json.dumps({"t": {"0": 23, "2": -1}})
    assert parse_offsets("startingOffsets", text, "t", 3, EARLIEST) == {0: 23, 1: EARLIEST, 2: LATEST}


@pytest.mark.parametrize("text, message", [
    ('{"other": {"0": 1}}', "exactly the topic 't'"),
    ('{"t": {"3": 1}}', "partitions 0..2"),
    ('{"t": {"x": 1}}', "partitions 0..2"),
    ('{"t": {"0": -3}}', "offset -3"),
    ('{"t": {"0": "5"}}', "offset '5'"),
    ("{not json", "JSON like"),
])
def test_bad_offset_specs_fail(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_offsets("startingOffsets", text, "t", 3, EARLIEST)


# ------------------------------------------------------------------------------------------ planning


def test_split_range_cuts_only_at_segment_boundaries() -> None:
    segments = [segment(0, 10, 100), segment(10, 20, 100), segment(20, 30, 100), segment(30, 35, 10)]
    assert split_range(segments, 0, 35, 1000) == [(0, 35)]
    assert split_range(segments, 0, 35, 150) == [(0, 10), (10, 20), (20, 35)]
    assert split_range(segments, 15, 25, 50) == [(15, 20), (20, 25)]
    assert split_range(segments, 5, 5, 50) == [(5, 5)]


def test_split_range_pieces_cover_the_range_without_overlap() -> None:
    segments = [segment(i * 7, i * 7 + 7, 40 + i) for i in range(20)]
    for target in (1, 50, 90, 200, 10_000):
        pieces = split_range(segments, 3, 131, target)
        assert pieces[0][0] == 3 and pieces[-1][1] == 131
        assert all(a[1] == b[0] for a, b in itertools.pairwise(pieces))


def test_rate_limit_spreads_the_budget_by_backlog_as_kafka() -> None:
    begin = {0: 0, 1: 100, 2: 50}
    end = {0: 300, 1: 200, 2: 50}
    assert rate_limit(begin, end, 1000) == end  # everything fits
    assert rate_limit(begin, end, 100) == {0: 75, 1: 125, 2: 50}
    # a share below one offset rounds up, so a small partition is never starved
    assert rate_limit({0: 0, 1: 0}, {0: 1000, 1: 1}, 10) == {0: 9, 1: 1}
