"""The server: the one long-running process of a data directory, shaped as Kafka's ``KafkaServer``. It owns
components and starts them in order, and shuts them down in reverse order; the data-directory lock is held
before the first starts and after the last stops.

A component is anything with a ``name``, ``start()`` and ``shutdown()`` (:class:`Component`): the cleaner
service (:mod:`compactlog.cleaner_service`), the metrics endpoint (:mod:`compactlog.metrics_endpoint`), and
later the Kafka protocol listener. ``start()`` returns once the component runs (its threads started);
``shutdown()`` returns once it has stopped. A component that fails to start shuts down the ones started
before it, in reverse order, and its error is raised.

One server per data directory: :class:`DataDirectoryLock` holds an exclusive ``flock`` of ``<data-dir>/.lock``
(Kafka's name for its log directories' lock) with the server's pid in it, for the server's whole life; the
kernel releases it when the process ends, however it ends, so a stale file never blocks a restart. It is
taken before the data directory's stores are opened (``compactlog serve`` starts it ahead of the server),
because opening a writable store does recovery work (stale temporary files removed, interrupted topic
deletions finished) that a second server must not do to a directory another one serves. A missing data
directory is created for it, empty; ``.lock`` alone leaves a directory empty for
:func:`compactlog.data_dir.open_action`.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import signal
import threading
from collections.abc import Callable, Sequence
from types import FrameType
from typing import Protocol

from .data_dir import LOCK_FILE, read_only_error
from .errors import DataDirectoryError, DataDirectoryLockedError

_log = logging.getLogger("compactlog.server")

# CPython runs a signal's Python handler only in the main thread, and only once that thread is back in Python
# code. The kernel may hand SIGTERM to any of the process's threads (the storage, socket-server and cleaner
# threads included); one taken by another thread does not interrupt the main thread's wait on a lock, and one
# that lands just before the wait starts is noted but not acted on. So the main thread waits in slices of this
# many seconds: a signal is acted on within one slice however it was delivered.
SIGNAL_CHECK_S = 0.5


class Component(Protocol):
    name: str

    def start(self) -> None: ...

    def shutdown(self) -> None: ...


class DataDirectoryLock:
    """The component that makes a server the only one of its data directory (see the module docstring)."""

    name = "data-directory lock"

    def __init__(self, data_dir: str) -> None:
        self.path = os.path.join(os.path.abspath(data_dir), LOCK_FILE)
        self._fd: int | None = None

    def start(self) -> None:
        directory = os.path.dirname(self.path)
        if os.path.lexists(directory) and not os.path.isdir(directory):
            raise DataDirectoryError(f"data directory {directory} is not a directory")
        try:
            os.makedirs(directory, exist_ok=True)
        except OSError as e:
            raise DataDirectoryError(f"cannot create data directory {directory}: {e.strerror}") from e
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_RDWR, 0o644)
        except OSError as e:
            if e.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
                raise read_only_error(directory, "serve") from e
            raise DataDirectoryError(f"cannot open {self.path}: {e.strerror}") from e
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as e:
            holder = os.read(fd, 32).decode("ascii", errors="replace").strip() or "unknown"
            os.close(fd)
            raise DataDirectoryLockedError(f"{os.path.dirname(self.path)} is already served by process {holder} "
                                           f"(it holds {self.path})") from e
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode("ascii"))
        self._fd = fd

    def shutdown(self) -> None:
        if self._fd is not None:
            os.ftruncate(self._fd, 0)  # no pid of a process that is gone
            os.close(self._fd)  # releases the flock
            self._fd = None


class Server:
    """Components started in order, shut down in reverse order (see the module docstring)."""

    def __init__(self, components: Sequence[Component]) -> None:
        self.components = list(components)
        self._started: list[Component] = []

    def startup(self) -> None:
        for component in self.components:
            try:
                component.start()
            except BaseException:
                self.shutdown()
                raise
            self._started.append(component)
            _log.debug("started %s", component.name)

    def shutdown(self) -> None:
        """Shut every started component down, the last started first; the first error is raised once all
        have been asked to stop."""
        first_error: BaseException | None = None
        while self._started:
            component = self._started.pop()
            try:
                component.shutdown()
            except Exception as e:
                _log.error("shutting down %s failed: %s", component.name, e)
                first_error = first_error or e
        if first_error is not None:
            raise first_error

    def run_until_signalled(self, stop: threading.Event | None = None,
                            on_started: Callable[[], None] | None = None) -> None:
        """Start, call ``on_started``, wait for SIGTERM or SIGINT (or ``stop``), shut down. Call from the main
        thread."""
        stop = stop or threading.Event()
        signalled: list[int] = []

        def request_stop(signum: int, frame: FrameType | None) -> None:
            # A list append and nothing else: no lock may be taken here. The handler runs in the main thread
            # between two of its bytecodes, wherever it is, including inside stop.wait() while that holds the
            # Event's lock (after each slice ends); stop.set() or a log line from here would wait on a lock
            # the interrupted code holds, forever. The loop below acts on it.
            signalled.append(signum)

        previous = {s: signal.signal(s, request_stop) for s in (signal.SIGTERM, signal.SIGINT)}
        with contextlib.ExitStack() as restore:
            for s, handler in previous.items():
                restore.callback(signal.signal, s, handler)
            self.startup()  # a signal meanwhile is honoured once it has started
            try:
                _log.info("server started: %s", ", ".join(c.name for c in self.components))
                if on_started is not None:
                    on_started()
                while not signalled and not stop.wait(SIGNAL_CHECK_S):
                    pass
                if signalled:
                    _log.info("%s received: shutting down", signal.Signals(signalled[0]).name)
                    stop.set()
            finally:
                self.shutdown()
                _log.info("server stopped")
