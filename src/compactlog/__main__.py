"""``python -m compactlog``: the command line (:mod:`compactlog.cli.main`)."""

import sys

from compactlog.cli.main import main

sys.exit(main())
