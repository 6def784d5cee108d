"""The listener against mutated valid requests: real ApiVersions, Metadata, Produce, Fetch, ListOffsets and
InitProducerId requests as kafka-python encodes them, with bits flipped, bytes inserted, deleted or
overwritten with extreme integers, cut short, or re-framed under a wrong size, sent over many concurrent
connections (seeded: the same cases every run). The broker must never die, must answer or close every
connection (a long-polling fetch or a frame promising more bytes may keep it waiting), log one line for each
connection it closes and never an internal error, while a well-behaved client on another connection keeps
producing and fetching throughout."""

from __future__ import annotations

import collections
import random
import socket
import struct
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from broker import start_broker, stop_broker
from kafka.protocol.consumer import FetchRequest, ListOffsetsRequest
from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest
from kafka.protocol.producer import InitProducerIdRequest, ProduceRequest
from test_wire import Connection, batch, fetch, fetched_offsets, produce

import compactlog
from compactlog.broker.error_codes import NONE
from compactlog.protocol import compression
from compactlog.protocol.record_batch import encode_batches

pytestmark = pytest.mark.integration
CASES = 1200
WORKERS = 8  # concurrent fuzzing connections
SEED = 18
ANSWER_WAIT_S = 0.5


def compressed_batch(codec: int) -> bytes:
    import pyarrow as pa

    from compactlog.record import SCHEMA
    rows = {"offset": list(range(20)), "timestamp": [1] * 20, "key": [b"k%d" % i for i in range(20)],
            "value": [b"v" * 50] * 20, "headers": [None] * 20, "is_transactional": [False] * 20}
    table = pa.table({name: rows.get(name, [-1] * 20) for name in SCHEMA.names}, schema=SCHEMA)  # -1: none
    return encode_batches(table, codec)


def seed_requests() -> dict[str, bytes]:
    """Valid request frames (size prefix included), by name."""
    def framed(request: Any) -> bytes:
        request.with_header(correlation_id=7, client_id="fuzz")
        return bytes(request.encode(header=True, framed=True))

    def produce_request(version: int, records: bytes) -> Any:
        return ProduceRequest(version=version, transactional_id=None, acks=-1, timeout_ms=1000, topic_data=[
            ProduceRequest.TopicProduceData(version=version, name="t", partition_data=[
                ProduceRequest.TopicProduceData.PartitionProduceData(version=version, index=0, records=records)])])

    def fetch_request(version: int) -> Any:
        return FetchRequest(version=version, replica_id=-1, max_wait_ms=100, min_bytes=1, max_bytes=1 << 20,
                            isolation_level=0, session_id=0, session_epoch=-1, topics=[FetchRequest.FetchTopic(
                                version=version, topic="t", partitions=[FetchRequest.FetchTopic.FetchPartition(
                                    version=version, partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])],
                            forgotten_topics_data=[], rack_id="")

    plain = batch([(b"k%d" % i, b"v%d" % i) for i in range(5)])
    return {
        "ApiVersions v3": framed(ApiVersionsRequest(version=3, client_software_name="fuzz",
                                                    client_software_version="1")),
        "ApiVersions v0": framed(ApiVersionsRequest(version=0)),
        "Metadata v9": framed(MetadataRequest(version=9, topics=[MetadataRequest.MetadataRequestTopic(
            version=9, name="t")], allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False)),
        "Metadata v1": framed(MetadataRequest(version=1, topics=None)),
        "Produce v9": framed(produce_request(9, plain)),
        "Produce v3": framed(produce_request(3, plain)),
        "Produce v9 gzip": framed(produce_request(9, compressed_batch(compression.GZIP))),
        "Produce v9 zstd": framed(produce_request(9, compressed_batch(compression.ZSTD))),
        "Produce v9 snappy": framed(produce_request(9, compressed_batch(compression.SNAPPY))),
        "Produce v9 lz4": framed(produce_request(9, compressed_batch(compression.LZ4))),
        "Fetch v12": framed(fetch_request(12)),
        "Fetch v4": framed(fetch_request(4)),
        "ListOffsets v7": framed(ListOffsetsRequest(version=7, replica_id=-1, isolation_level=0, topics=[
            ListOffsetsRequest.ListOffsetsTopic(version=7, name="t", partitions=[
                ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
                    version=7, partition_index=0, current_leader_epoch=-1, timestamp=-2)])])),
        "InitProducerId v4": framed(InitProducerIdRequest(version=4, transactional_id=None,
                                                          transaction_timeout_ms=60000, producer_id=-1,
                                                          producer_epoch=-1)),
    }


EXTREMES = [b"\x7f\xff\xff\xff", b"\x80\x00\x00\x00", b"\xff\xff\xff\xff", b"\x00\x00\x00\x00", b"\x7f\xff",
            b"\x80\x00", b"\xff\xff", b"\xff"]


def flip(rng: random.Random, body: bytearray) -> None:
    for _ in range(rng.randint(1, 4)):
        body[rng.randrange(len(body))] ^= 1 << rng.randrange(8)


def insert(rng: random.Random, body: bytearray) -> None:
    at = rng.randrange(len(body) + 1)
    body[at:at] = rng.randbytes(rng.randint(1, 16))


def delete(rng: random.Random, body: bytearray) -> None:
    at = rng.randrange(len(body))
    del body[at:at + rng.randint(1, 16)]


def extreme(rng: random.Random, body: bytearray) -> None:
    value = rng.choice(EXTREMES)
    at = rng.randrange(max(1, len(body) - len(value)))
    body[at:at + len(value)] = value


def cut(rng: random.Random, body: bytearray) -> None:
    del body[rng.randrange(len(body)):]


MUTATIONS: dict[str, Callable[[random.Random, bytearray], None]] = {
    "flip": flip, "insert": insert, "delete": delete, "extreme": extreme, "cut": cut}


def mutated(rng: random.Random, seeds: dict[str, bytes]) -> tuple[str, str, bytes]:
    """A case: (seed name, mutation, the frame's bytes). One case in 20 keeps its original size prefix
    (a frame promising more or fewer bytes than follow); the rest are re-framed."""
    name = rng.choice(sorted(seeds))
    frame = seeds[name]
    body = bytearray(frame[4:])
    mutation = rng.choice(sorted(MUTATIONS))
    MUTATIONS[mutation](rng, body)
    if rng.random() < 0.05:
        return name, mutation + " (size kept)", frame[:4] + bytes(body)
    return name, mutation, struct.pack(">i", len(body)) + bytes(body)


def send_case(port: int, data: bytes) -> tuple[str, int]:
    """('answered' | 'closed' | 'waiting', the client's port)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    local_port = sock.getsockname()[1]
    try:
        sock.sendall(data)
        sock.settimeout(ANSWER_WAIT_S)
        received = b""
        while True:
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                return "waiting", local_port
            except ConnectionResetError:
                return "closed", local_port
            if not chunk:
                return ("answered" if len(received) >= 4 else "closed"), local_port
            received += chunk
            if len(received) >= 4 and len(received) >= 4 + struct.unpack(">i", received[:4])[0]:
                return "answered", local_port
    finally:
        sock.close()


class GoodClient(threading.Thread):
    """Produces a record and fetches it back, again and again, on one connection until stopped."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.port = port
        self.stopped = threading.Event()
        self.rounds = 0
        self.failure: BaseException | None = None

    def run(self) -> None:
        conn = Connection(f"127.0.0.1:{self.port}")
        try:
            while not self.stopped.is_set():
                key = b"good-%d" % self.rounds
                answer = produce(conn, "good", batch([(key, b"v")]))
                assert (answer.error_code, answer.base_offset) == (NONE, self.rounds), answer
                fetched = fetch(conn, "good", self.rounds)
                assert fetched_offsets(fetched)[0] == self.rounds, fetched
                self.rounds += 1
        except BaseException as e:  # reported by the test
            self.failure = e
        finally:
            conn.close()


def test_mutated_requests_never_harm_the_broker_or_other_clients(data_dir: str) -> None:
    with compactlog.open(data_dir) as store:
        store.create_topic("t", 1, {"cleanup.policy": "compact"})
        store.create_topic("good", 1, {"cleanup.policy": "compact"})
    rng = random.Random(SEED)
    seeds = seed_requests()
    cases = [mutated(rng, seeds) for _ in range(CASES)]
    proc, port = start_broker(data_dir)
    good = GoodClient(port)
    try:
        good.start()
        with ThreadPoolExecutor(WORKERS) as pool:
            outcomes = list(pool.map(lambda case: send_case(port, case[2]), cases))
        good.stopped.set()
        good.join(30)
        assert proc.poll() is None, "the broker died"
        conn = Connection(f"127.0.0.1:{port}")
        try:
            assert produce(conn, "good", batch([(b"after", b"v")])).error_code == NONE
        finally:
            conn.close()
    finally:
        good.stopped.set()
        log = stop_broker(proc)
    assert good.failure is None, good.failure
    assert good.rounds >= 5, good.rounds  # it kept working while the fuzzing went on
    assert "internal error" not in log and "Traceback" not in log, log[-3000:]
    # One line for each connection the broker closed; one the client gave up waiting on, or that was answered
    # and then closed (a frame under its original size: the bytes after it are read as a next, bad frame), at
    # most one. Client ports are reused within a run: lines are counted per port.
    closed = collections.Counter(local_port for outcome, local_port in outcomes if outcome == "closed")
    others = collections.Counter(local_port for outcome, local_port in outcomes if outcome != "closed")
    lines = collections.Counter(int(line.split("closing connection from ('127.0.0.1', ", 1)[1].split(")", 1)[0])
                                for line in log.splitlines() if "closing connection from ('127.0.0.1', " in line)
    unlogged = [p for p in closed | lines if not closed[p] <= lines[p] <= closed[p] + others[p]]
    assert not unlogged, [(p, closed[p], others[p], lines[p]) for p in unlogged[:10]]
    by_outcome = collections.Counter(outcome for outcome, _ in outcomes)
    by_seed = collections.Counter((name.split()[0], outcome) for (name, _, _), (outcome, _) in zip(cases, outcomes,
                                                                                                 strict=True))
    print(f"\nfuzz: {CASES} mutated requests, {dict(by_outcome)}; good client rounds {good.rounds}; "
          f"by API {dict(sorted(by_seed.items()))}")
    assert by_outcome["answered"] and by_outcome["closed"]  # both kinds of mutation were met
