"""The connection layer of a real ``serve`` under hostile clients, with raw sockets: long-polling fetches
whose clients go away leave no socket in CLOSE-WAIT; clients that send huge fetches and never read hold a
bounded amount of the broker's memory (its RSS); idle connections are closed; ``max.connections`` and
``max.connections.per.ip`` hold back or refuse connections; a request cut short closes its connection.

Prints the RSS figures under the non-reading clients: ``pytest -s tests/protocol/test_connections.py``."""

from __future__ import annotations

import os
import socket
import struct
import time
from collections.abc import Callable, Iterator
from typing import Any

import psutil
import pyarrow as pa
import pytest
from broker import start_broker, stop_broker
from kafka.protocol.consumer import FetchRequest
from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest
from kafka.protocol.producer import ProduceRequest
from test_wire import api_versions_answered, batch, fetch
from wire_client import Connection

import compactlog
from compactlog.limits import INT_MAX

pytestmark = pytest.mark.integration
DEADLINE_S = 30
LONG_POLLS = 1000


def _fetch_frame(topic: str, max_wait_ms: int, max_bytes: int = INT_MAX, correlation_id: int = 1) -> bytes:
    request = FetchRequest(version=12, replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=max_bytes,
                           isolation_level=0, session_id=0, session_epoch=-1, forgotten_topics_data=[], rack_id="",
                           topics=[FetchRequest.FetchTopic(version=12, topic=topic, partitions=[
                               FetchRequest.FetchTopic.FetchPartition(version=12, partition=0, fetch_offset=0,
                                                                      partition_max_bytes=max_bytes)])])
    request.with_header(correlation_id=correlation_id, client_id="hostile")
    return bytes(request.encode(header=True, framed=True))


def _api_versions_frame() -> bytes:
    request = ApiVersionsRequest(version=3, client_software_name="t", client_software_version="1")
    request.with_header(correlation_id=1, client_id="t")
    return bytes(request.encode(header=True, framed=True))


def _connect(port: int, source: str = "127.0.0.1", receive_buffer: int = 0) -> socket.socket:
    sock = socket.socket()
    if receive_buffer:  # before connecting: the window the client offers
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    sock.bind((source, 0))
    sock.settimeout(DEADLINE_S)
    sock.connect(("127.0.0.1", port))
    return sock


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(min(n - len(data), 1 << 20))
        if not chunk:
            raise ConnectionError("closed by the broker")
        data += chunk
    return bytes(data)


def _read_frame(sock: socket.socket) -> bytes:
    return _recv_exactly(sock, struct.unpack(">i", _recv_exactly(sock, 4))[0])


def _answered(sock: socket.socket) -> bool:
    """Whether an ApiVersions request on ``sock`` is answered (False: the broker closed the connection)."""
    try:
        sock.sendall(_api_versions_frame())
        return len(_read_frame(sock)) > 0
    except (ConnectionError, BrokenPipeError):
        return False


def _closed_by_broker(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def _until(condition: Callable[[], bool]) -> bool:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)  # polling another process's state, with a deadline
    return True


def _sockets(pid: int, port: int, status: str | None = None) -> int:
    """The broker's sockets of connections on ``port`` (in ``status``, or any but LISTEN)."""
    return sum(1 for c in psutil.Process(pid).net_connections(kind="tcp")
               if c.laddr and c.laddr.port == port and c.status != psutil.CONN_LISTEN
               and (status is None or c.status == status))


@pytest.fixture
def configured(data_dir: str) -> Iterator[Callable[..., tuple[Any, int]]]:
    """Start a broker on ``data_dir`` with server.properties lines; stops it (and shows its log) at the end."""
    started: list[Any] = []

    def start(*properties: str) -> tuple[Any, int]:
        os.makedirs(data_dir, exist_ok=True)
        with open(os.path.join(data_dir, "server.properties"), "a", encoding="utf-8") as f:
            f.write("".join(line + "\n" for line in properties))
        proc, port = start_broker(data_dir)
        started.append(proc)
        return proc, port

    yield start
    for proc in started:
        log = stop_broker(proc)
        print(log)
        assert "internal error" not in log and "Traceback" not in log, log[-3000:]


def test_long_polling_fetches_whose_clients_go_away_leave_no_socket_in_close_wait(data_dir: str, configured) -> None:
    with compactlog.open(data_dir) as store:
        store.create_topic("idle", 1)
    proc, port = configured()
    frame = _fetch_frame("idle", max_wait_ms=INT_MAX, max_bytes=1 << 20)
    clients = []
    for _ in range(LONG_POLLS):
        sock = _connect(port)
        sock.sendall(frame)  # waits for a record that never comes
        clients.append(sock)
    assert _until(lambda: _sockets(proc.pid, port, psutil.CONN_ESTABLISHED) == LONG_POLLS)
    for sock in clients:
        sock.close()
    assert _until(lambda: _sockets(proc.pid, port) == 0), (
        _sockets(proc.pid, port, psutil.CONN_CLOSE_WAIT), _sockets(proc.pid, port))
    assert api_versions_answered(f"127.0.0.1:{port}")


# The non-reading clients: as the attack (10 sockets x 3 fetches of max_bytes 2^31-1; here 5 fetches, so that
# a connection that is not muted holds much more than one that is), on a partition of 12 records of 2 MB,
# with fetch.max.bytes 4 MiB: a response is 2 records (4 MB).
CLIENTS, FETCHES_EACH = 10, 5
RECORD_VALUE_BYTES, RECORDS = 2_000_000, 12
FETCH_MAX_BYTES = 4 << 20
# What a non-reading client may hold: one unsent response (at most fetch.max.bytes) and the transport's
# 1 MiB beyond which its connection mutes.
HELD_PER_CLIENT = FETCH_MAX_BYTES + (1 << 20)
# The RSS is measured twice: once 10 clients have sent one fetch each, then once 10 more have sent 5 each.
# The first 10 make the allocators grow by what a round of 10 concurrent reads needs besides the responses
# (they keep most of it); so what the next 10 add is what they hold, at most 10 x HELD_PER_CLIENT, and what
# the allocators add beyond it, 90 MiB (measured: 13-60 MiB). Without muting each holds its 5 responses
# (5 x 4 MB); without the cap a response is the whole partition (23 MB).
RSS_INCREASE_BOUND = CLIENTS * HELD_PER_CLIENT + (90 << 20)


def _peak_rss_until_steady(process: psutil.Process, steady_s: float = 2.0) -> int:
    """The process's largest RSS until it has not grown for ``steady_s`` (or DEADLINE_S have passed)."""
    peak = process.memory_info().rss
    deadline, last_growth = time.monotonic() + DEADLINE_S, time.monotonic()
    while time.monotonic() - last_growth < steady_s and time.monotonic() < deadline:
        rss = process.memory_info().rss
        if rss > peak:
            peak, last_growth = rss, time.monotonic()
        time.sleep(0.02)  # sampling another process's memory
    return peak


def _non_reading_clients(port: int, fetches_each: int) -> list[socket.socket]:
    """CLIENTS connections offering a 4 KiB window, each sending ``fetches_each`` fetches and reading nothing."""
    clients = [_connect(port, receive_buffer=4096) for _ in range(CLIENTS)]
    for sock in clients:
        sock.sendall(b"".join(_fetch_frame("big", max_wait_ms=0, correlation_id=i) for i in range(fetches_each)))
    return clients


def test_clients_that_send_huge_fetches_and_never_read_hold_one_capped_response_each(data_dir: str,
                                                                                     configured) -> None:
    with compactlog.open(data_dir) as store:
        store.create_topic("big", 1, {"max.message.bytes": str(RECORD_VALUE_BYTES + 1000)})
        for i in range(RECORDS):
            store.append("big", 0, pa.table({"key": [b"k%d" % i], "value": [os.urandom(RECORD_VALUE_BYTES)]}))
    proc, port = configured(f"fetch.max.bytes={FETCH_MAX_BYTES}")
    broker = psutil.Process(proc.pid)
    with _connect(port) as reader:  # one fetch read in full first: the read and encode paths are warm
        reader.sendall(_fetch_frame("big", max_wait_ms=0))
        assert len(_read_frame(reader)) > FETCH_MAX_BYTES // 2
    before = broker.memory_info().rss
    hostile: list[socket.socket] = []
    try:
        hostile += _non_reading_clients(port, 1)
        first = _peak_rss_until_steady(broker)
        hostile += _non_reading_clients(port, FETCHES_EACH)
        second = _peak_rss_until_steady(broker)
        print(f"\nRSS of the broker: {before >> 20} MiB; {first >> 20} MiB with {CLIENTS} non-reading clients "
              f"x 1 fetch of max_bytes 2^31-1; {second >> 20} MiB with {CLIENTS} more x {FETCHES_EACH} "
              f"(fetch.max.bytes {FETCH_MAX_BYTES >> 20} MiB, a {RECORDS * RECORD_VALUE_BYTES >> 20} MiB partition); "
              f"bound on the increase {RSS_INCREASE_BOUND >> 20} MiB")
        assert second - first <= RSS_INCREASE_BOUND, (before >> 20, first >> 20, second >> 20)
    finally:
        for sock in hostile:
            sock.close()
    assert api_versions_answered(f"127.0.0.1:{port}")


def test_idle_connections_are_closed_after_connections_max_idle_ms(data_dir: str, configured) -> None:
    with compactlog.open(data_dir) as store:
        store.create_topic("idle", 1)
    proc, port = configured("connections.max.idle.ms=1000")
    silent, slow, polling = _connect(port), _connect(port), _connect(port)
    try:
        slow.sendall(b"\x00\x00\x00\x40\x00")  # a size prefix and one byte of its 64: a slowloris
        polling.sendall(_fetch_frame("idle", max_wait_ms=INT_MAX))  # a request in flight does not keep it open
        for sock in (silent, slow, polling):
            assert _closed_by_broker(sock)
        assert _until(lambda: _sockets(proc.pid, port) == 0)
    finally:
        for sock in (silent, slow, polling):
            sock.close()


def test_max_connections_holds_new_connections_back_and_max_connections_per_ip_closes_them(
        data_dir: str, configured) -> None:
    _, port = configured("max.connections=6", "max.connections.per.ip=2",
                         "max.connections.per.ip.overrides=127.0.0.2:3,127.0.0.3:0")
    served = [_connect(port) for _ in range(2)] + [_connect(port, "127.0.0.2") for _ in range(3)]
    try:
        assert all(_answered(sock) for sock in served)
        for source in ("127.0.0.1", "127.0.0.2", "127.0.0.3"):  # past their per-address limits
            with _connect(port, source) as refused:
                assert _closed_by_broker(refused), source
        served.append(_connect(port, "127.0.0.4"))
        assert _answered(served[-1])  # the sixth
        with _connect(port, "127.0.0.5") as waiting:  # the seventh waits, unaccepted, for a slot
            waiting.sendall(_api_versions_frame())
            waiting.settimeout(1.0)
            with pytest.raises(TimeoutError):
                waiting.recv(1)
            served.pop(0).close()
            waiting.settimeout(DEADLINE_S)
            assert len(_read_frame(waiting)) > 0
    finally:
        for sock in served:
            sock.close()


def _metadata_cut_inside(name: str, keep: int) -> bytes:
    """A Metadata v1 request for topic ``name`` cut after ``keep`` bytes of the name, framed at its cut size."""
    request = MetadataRequest(version=1, topics=[MetadataRequest.MetadataRequestTopic(version=1, name=name)])
    request.with_header(correlation_id=1, client_id="t")
    payload = bytes(request.encode(header=True, framed=False))
    cut = payload[:payload.index(name.encode()) + keep]
    return struct.pack(">i", len(cut)) + cut


def test_a_request_cut_short_inside_a_field_closes_its_connection_and_takes_no_effect(data_dir: str,
                                                                                      configured) -> None:
    with compactlog.open(data_dir) as store:
        store.create_topic("healt", 1)  # what the cut request would name if read as a shorter string
        store.create_topic("t", 1)
    _, port = configured()
    with _connect(port) as conn:
        conn.sendall(_metadata_cut_inside("health", 5))
        assert _closed_by_broker(conn)
    records = batch([(b"k", b"v" * 100)])
    request = ProduceRequest(version=3, transactional_id=None, acks=-1, timeout_ms=30_000, topic_data=[
        ProduceRequest.TopicProduceData(version=3, name="t", partition_data=[
            ProduceRequest.TopicProduceData.PartitionProduceData(version=3, index=0, records=records)])])
    request.with_header(correlation_id=2, client_id="t")
    payload = bytes(request.encode(header=True, framed=False))[:-10]  # the records' last 10 bytes missing
    with _connect(port) as conn:
        conn.sendall(struct.pack(">i", len(payload)) + payload)
        assert _closed_by_broker(conn)
    conn = Connection(f"127.0.0.1:{port}")
    try:
        assert fetch(conn, "t", 0).high_watermark == 0  # nothing appended
    finally:
        conn.close()

