from __future__ import annotations

from collections.abc import Iterator

import pytest
from broker import running_broker


@pytest.fixture
def data_dir(tmp_path) -> str:
    return str(tmp_path / "data")


@pytest.fixture
def broker(data_dir: str) -> Iterator[str]:
    """A running broker on ``data_dir``: its bootstrap address."""
    with running_broker(data_dir) as port:
        yield f"127.0.0.1:{port}"
