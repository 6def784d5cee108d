"""``python -m compactlog.broker --data-dir D [--listeners L] [--advertised-listeners L]``: serve a data
directory over Kafka's protocol until SIGTERM or SIGINT.

Prints ``listening on NAME://host:port`` on stdout, one line per bound listener (port 0 replaced by the
port bound), once every listener listens. ``compactlog serve`` will take this over.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Sequence

from ..errors import CompactLogError
from .listener import KafkaListener


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m compactlog.broker", description=__doc__)
    parser.add_argument("--data-dir", required=True)
    parser.add_argument("--listeners", help="Kafka's listeners, e.g. PLAINTEXT://127.0.0.1:9092")
    parser.add_argument("--advertised-listeners")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    overrides = {key: value for key, value in (("listeners", args.listeners),
                                               ("advertised.listeners", args.advertised_listeners)) if value}
    try:
        listener = KafkaListener(args.data_dir, overrides)
        listener.start()
    except (CompactLogError, OSError) as e:
        print(f"compactlog broker: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    for bound in listener.server.bound:
        print(f"listening on {bound}", flush=True)
    stop.wait()
    listener.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
