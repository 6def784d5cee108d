"""Java ``.properties`` files: the text format, and the data directory's ``server.properties``.

``server.properties`` holds two kinds of config under Kafka's names: the Kafka-protocol server's
(:mod:`compactlog.server_config`, its ``SERVER_CONFIG_NAMES``) and the data directory's broker config
(:mod:`compactlog.config`: topic defaults, cleaner, producer ids); each loader takes its own keys.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from compactlog.errors import ConfigError

__all__ = ["SERVER_PROPERTIES", "parse_properties", "read_server_properties"]

# The data directory's config file, as Kafka's config/server.properties.
SERVER_PROPERTIES = "server.properties"


def parse_properties(text: str) -> dict[str, str]:
    """Java ``.properties`` lines ``key=value``, ``key: value`` or ``key value`` (trimmed) as a dict.

    ``#``/``!`` start comments; a line ending in an odd number of backslashes continues on the next; the last
    of repeated keys wins (as java.util.Properties). Backslash escapes are not decoded.
    """
    props: dict[str, str] = {}
    lines = iter(text.splitlines())
    for raw in lines:
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        while (len(line) - len(line.rstrip("\\"))) % 2 == 1:
            line = line[:-1] + next(lines, "").strip()
        key, value = re.fullmatch(r"([^=:\s]*)\s*[=:]?(.*)", line).groups()  # type: ignore[union-attr]
        props[key] = value.strip()
    return props


def read_server_properties(data_dir: str | os.PathLike[str]) -> dict[str, str]:
    """The settings of ``<data_dir>/server.properties`` as written (``{}`` without the file); a file that
    cannot be read (a directory, unreadable, not UTF-8) is a ConfigError naming it."""
    path = Path(data_dir) / SERVER_PROPERTIES
    try:
        return parse_properties(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: {exc}") from exc
