"""``compactlog clean`` on Spark (the CLI's default executor) and the README's demo, on the shared session."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest

from compactlog import demo
from compactlog.cli.main import main

pytestmark = pytest.mark.spark


def test_clean_on_spark_reuses_the_running_session_and_leaves_it_running(
        tmp_path: Path, spark: Any, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    data = str(tmp_path / "data")
    assert main(["topics", "create", "t", "--data-dir", data, "--config", "cleanup.policy=compact",
                 "--config", "segment.bytes=100"]) == 0
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"a:1\na:2\nb:1\na:3\n")))
    assert main(["produce", "--data-dir", data, "--topic", "t"]) == 0
    capsys.readouterr()

    code = main(["clean", "--data-dir", data, "--spark-master", spark.sparkContext.master, "--force"])

    out = capsys.readouterr().out
    assert code == 0
    assert out.startswith(f"Cleaner pass (Spark {spark.sparkContext.master}): 1 partition(s) cleaned")
    assert spark.sparkContext.parallelize([1, 2]).count() == 2  # not stopped: the CLI did not start it


def test_the_demo_runs_end_to_end(tmp_path: Path, spark: Any) -> None:
    lines: list[str] = []

    result = demo.run(str(tmp_path / "demo-data"), spark, out=lines.append)

    assert result["after"] < result["before"] / 5
    assert any(line.startswith("GDPR: a day later, after another clean, no file of") for line in lines)
    assert result["seconds"] < 60


def test_the_demo_refuses_to_wipe_a_directory_that_is_not_a_data_directory(tmp_path: Path) -> None:
    (tmp_path / "precious.txt").write_text("keep me")
    with pytest.raises(demo.compactlog.CompactLogError, match="not a compactlog data directory"):
        demo.run(str(tmp_path), spark=None, out=lambda line: None)
    assert (tmp_path / "precious.txt").read_text() == "keep me"
