"""The compaction scenario every client test plays: keyed records and tombstones in, a clean from another
process, and the compacted log as Kafka shows it out."""

from __future__ import annotations

import os
import subprocess
import sys

# (key, value): b"k1" is overwritten, b"k2" deleted by a tombstone (None), b"k3" written once.
RECORDS = [(b"k1", b"v1"), (b"k2", b"v2"), (b"k1", b"v1b"), (b"k3", b"v3"), (b"k2", None), (b"k1", b"v1c")]
# Compacted (tombstones kept until delete.retention.ms, a day by default): offset -> (key, value).
COMPACTED = {3: (b"k3", b"v3"), 4: (b"k2", None), 5: (b"k1", b"v1c")}
# max.compaction.lag.ms=1: the clean rolls the idle active segment, so every record is cleanable.
TOPIC_CONFIGS = {"cleanup.policy": "compact", "max.compaction.lag.ms": "1", "min.cleanable.dirty.ratio": "0.01"}


def clean(data_dir: str) -> None:
    """``compactlog clean --force --in-process`` in a child process."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "VIRTUAL_ENV")}
    subprocess.run([sys.executable, "-m", "compactlog", "clean", "--data-dir", data_dir, "--force", "--in-process"],
                   check=True, env=env, capture_output=True, timeout=120)
