"""Fault points: the armed-point setting, and every declared point placed in the code exactly once."""

from __future__ import annotations

import errno
import re
from pathlib import Path

import pytest

import compactlog
from compactlog import faults
from compactlog.errors import ConfigError


def test_the_setting_names_a_point_and_optionally_its_hit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(faults.FAULT_POINT_ENV, raising=False)
    assert faults._armed() is None
    monkeypatch.setenv(faults.FAULT_POINT_ENV, "cleaner.swap-renamed")
    assert faults._armed() == ("cleaner.swap-renamed", 1)
    monkeypatch.setenv(faults.FAULT_POINT_ENV, "log.roll-sealed:3")
    assert faults._armed() == ("log.roll-sealed", 3)
    for bad in ("cleaner.swap", "log.roll-sealed:x", "log.roll-sealed:-1"):
        monkeypatch.setenv(faults.FAULT_POINT_ENV, bad)
        with pytest.raises(ConfigError, match="COMPACTLOG_FAULT_POINT"):
            faults._armed()


def test_every_declared_point_is_placed_once_and_no_other() -> None:
    source = Path(compactlog.__file__).parent
    placed = [name for path in sorted(source.rglob("*.py")) if path.name != "faults.py"
              for name in re.findall(r'fault_point\("([^"]+)"\)', path.read_text())]
    assert sorted(placed) == sorted(faults.FAULT_POINTS)
    io_placed = [name for path in sorted(source.rglob("*.py")) if path.name != "faults.py"
                 for name in re.findall(r'io_fault\("([^"]+)"\)', path.read_text())]
    assert sorted(io_placed) == sorted(faults.IO_FAULT_POINTS)


def test_the_io_setting_names_a_point_its_first_failing_hit_and_the_error() -> None:
    assert faults._io_armed(None) is None
    assert faults._io_armed("log.fsync") == ("log.fsync", 1, errno.ENOSPC)
    assert faults._io_armed("log.frame-write:3:EIO") == ("log.frame-write", 3, errno.EIO)
    for bad in ("log.nope", "log.fsync:x", "log.fsync:0", "log.fsync:2:EIO:1"):
        with pytest.raises(ConfigError, match="COMPACTLOG_FAULT_IO"):
            faults._io_armed(bad)


def test_an_armed_io_point_fails_from_its_nth_hit_on_and_others_pass() -> None:
    try:
        faults.arm_io_fault("log.fsync", nth=2, code="EIO")
        faults.io_fault("log.frame-write")
        faults.io_fault("log.fsync")
        for _ in range(2):
            with pytest.raises(OSError) as raised:
                faults.io_fault("log.fsync")
            assert raised.value.errno == errno.EIO
    finally:
        faults.arm_io_fault(None)
    faults.io_fault("log.fsync")


def test_several_io_points_are_armed_at_once_and_an_injected_error_names_its_point() -> None:
    assert faults._io_armed_all("log.fsync:2:EIO,checkpoint.write") == {"log.fsync": [2, errno.EIO, 0],
                                                                      "checkpoint.write": [1, errno.ENOSPC, 0]}
    try:
        faults.arm_io_fault("log.fsync", code="EIO")
        faults.arm_io_fault("checkpoint.write", add=True)
        for point in ("log.fsync", "checkpoint.write"):
            with pytest.raises(OSError) as raised:
                faults.io_fault(point)
            assert faults.injected_point(raised.value) == point and faults.io_hits(point) == 1
        try:
            try:
                faults.io_fault("log.fsync")
            except OSError as e:
                raise compactlog.KafkaStorageError("wrapped") from e
        except compactlog.KafkaStorageError as wrapped:
            assert faults.injected_point(wrapped) == "log.fsync"
        assert faults.injected_point(OSError(errno.EIO, "Input/output error")) is None
    finally:
        faults.arm_io_fault(None)
    assert faults.io_hits("log.fsync") == 0
