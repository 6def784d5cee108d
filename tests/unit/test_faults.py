"""Fault points: the armed-point setting, and every declared point placed in the code exactly once."""

from __future__ import annotations

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
