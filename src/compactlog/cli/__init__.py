"""The ``compactlog`` command line: one module per command group (``topics``, ``clean``, ``produce``,
``consume``), dispatched by :func:`compactlog.cli.main.main`."""
