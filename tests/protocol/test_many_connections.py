"""Many connections at once: 200 clients, all connected together, each sending ApiVersions then Metadata
several rounds over, in lock step: a round begins once every connection's previous round was answered, so
the broker must serve all 200 at the same time (one that served them a few at a time, or one after another,
never finishes the first round). Between rounds, with the 200 connections open and waiting, a confluent-kafka
producer's records are acknowledged; it loses and duplicates nothing.

Prints the ApiVersions round-trip latency (p50, p99) seen by the 200 clients, which run in one asyncio
loop of this process (so the figure includes the clients' own Python work):
``pytest -s -m integration tests/protocol/test_many_connections.py``."""

from __future__ import annotations

import asyncio
import struct
import threading
import time
from typing import Any

import numpy as np
import pytest
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse, MetadataRequest, MetadataResponse

import compactlog
from compactlog.broker.error_codes import NONE

confluent_kafka = pytest.importorskip("confluent_kafka")

pytestmark = pytest.mark.integration
TIMEOUT_S = 60
CONNECTIONS = 200
ROUNDS = 5
DELIVERIES_BETWEEN_ROUNDS = 100  # records the producer must have acknowledged while the 200 connections wait
API_VERSIONS_VERSION, METADATA_VERSION = 3, 9


def encoded(request: Any, correlation_id: int) -> bytes:
    request.with_header(correlation_id=correlation_id, client_id=f"client-{correlation_id}")
    return bytes(request.encode(header=True, framed=True))


async def response(reader: asyncio.StreamReader, response_class: Any, version: int, correlation_id: int) -> Any:
    (size,) = struct.unpack(">i", await reader.readexactly(4))
    answer = response_class.decode(await reader.readexactly(size), version=version, header=True)
    assert answer.header.correlation_id == correlation_id
    return answer


class Rounds:
    """The storm's lock step: how many connections have each round answered, and each round's go."""

    def __init__(self) -> None:
        self.go = [asyncio.Event() for _ in range(ROUNDS)]
        self.answered = [0] * ROUNDS
        self.all_answered = [asyncio.Event() for _ in range(ROUNDS)]

    def done(self, round_: int) -> None:
        self.answered[round_] += 1
        if self.answered[round_] == CONNECTIONS:
            self.all_answered[round_].set()


async def client(port: int, rounds: Rounds, connected: list[int]) -> list[float]:
    """One connection: ROUNDS x (ApiVersions, Metadata), each round once it goes; the ApiVersions latencies
    (s). It stays open until its last round is answered."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    connected.append(1)
    latencies = []
    try:
        for round_ in range(ROUNDS):
            await rounds.go[round_].wait()
            started = time.perf_counter()
            writer.write(encoded(ApiVersionsRequest(version=API_VERSIONS_VERSION, client_software_name="t",
                                                    client_software_version="1"), 2 * round_))
            versions = await response(reader, ApiVersionsResponse, API_VERSIONS_VERSION, 2 * round_)
            latencies.append(time.perf_counter() - started)
            assert versions.error_code == NONE and any(k.api_key == 3 for k in versions.api_keys)
            writer.write(encoded(MetadataRequest(
                version=METADATA_VERSION, topics=[MetadataRequest.MetadataRequestTopic(version=METADATA_VERSION,
                                                                                       name="load")],
                allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
                include_topic_authorized_operations=False), 2 * round_ + 1))
            metadata = await response(reader, MetadataResponse, METADATA_VERSION, 2 * round_ + 1)
            assert [(t.name, t.error_code, len(t.partitions)) for t in metadata.topics] == [("load", NONE, 1)]
            assert [b.node_id for b in metadata.brokers] == [0]
            rounds.done(round_)
    finally:
        writer.close()
        await writer.wait_closed()
    return latencies


async def storm(port: int, load: Load) -> tuple[list[float], list[int]]:
    """The ApiVersions latencies, and the records the producer had acknowledged between each round and the
    next (all connections open, each waiting for its next round)."""
    rounds = Rounds()
    connected: list[int] = []
    clients = asyncio.gather(*(client(port, rounds, connected) for _ in range(CONNECTIONS)))
    while len(connected) < CONNECTIONS and not clients.done():
        await asyncio.sleep(0.01)  # every connection open before the first request: all 200 at once
    between = []
    for round_ in range(ROUNDS):
        rounds.go[round_].set()
        if round_ + 1 < ROUNDS:
            finished = asyncio.ensure_future(rounds.all_answered[round_].wait())
            await asyncio.wait([finished, clients], timeout=TIMEOUT_S, return_when=asyncio.FIRST_COMPLETED)
            if clients.done():
                clients.result()  # a client's error
            assert finished.done(), f"round {round_}: {rounds.answered[round_]} of {CONNECTIONS} connections answered"
            before = load.delivered
            deadline = time.monotonic() + TIMEOUT_S
            while load.delivered < before + DELIVERIES_BETWEEN_ROUNDS and time.monotonic() < deadline:
                await asyncio.sleep(0.01)  # the producer's thread makes the progress
            between.append(load.delivered - before)
    done = await asyncio.wait_for(clients, TIMEOUT_S)
    return [latency for latencies in done for latency in latencies], between


class Load:
    """A confluent-kafka producer producing keyed records to ``load`` in a thread until stopped."""

    def __init__(self, broker: str) -> None:
        self.producer = confluent_kafka.Producer({"bootstrap.servers": broker, "acks": "all", "linger.ms": 5,
                                                 "enable.idempotence": True})
        self.produced = self.delivered = 0
        self.errors: list[Any] = []
        self.delivery_latencies: list[float] = []  # s, from produce() to its acknowledgement
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.run)

    def on_delivery(self, error: Any, message: Any) -> None:
        if error is not None:
            self.errors.append(error)
        else:
            self.delivered += 1
            self.delivery_latencies.append(message.latency())

    def run(self) -> None:
        while not self.stopping.is_set():
            for _ in range(200):  # about 20k records/s: a steady load, not a benchmark
                self.producer.produce("load", key=b"k%d" % (self.produced % 1000), value=b"v" * 100,
                                      on_delivery=self.on_delivery)
                self.produced += 1
            self.producer.poll(0.01)

    def wait_for_deliveries(self, count: int) -> None:
        deadline = time.monotonic() + TIMEOUT_S
        while self.delivered < count and not self.errors and time.monotonic() < deadline:
            time.sleep(0.01)  # waiting on another thread's progress, not on the clock
        assert self.delivered >= count and not self.errors, self.errors


def test_200_connections_are_all_answered_while_a_producer_is_unaffected(data_dir: str, broker: str) -> None:
    with compactlog.open(data_dir) as store:
        store.create_topic("load", 1)
    load = Load(broker)
    load.thread.start()
    try:
        load.wait_for_deliveries(1000)  # the producer is under way before the storm
        before = load.delivered
        answered, between = asyncio.run(storm(int(broker.rsplit(":", 1)[1]), load))
        latencies = np.array(answered)
        during = load.delivered - before
        quiet, stormy = load.delivery_latencies[:before], load.delivery_latencies[before:before + during]
        load.wait_for_deliveries(load.delivered + 1000)  # and still delivers after it
    finally:
        load.stopping.set()
        load.thread.join(TIMEOUT_S)
    assert load.producer.flush(TIMEOUT_S) == 0
    assert len(latencies) == CONNECTIONS * ROUNDS
    assert not load.errors and load.delivered == load.produced
    with compactlog.open(data_dir) as store:  # every record once, in produce order
        offsets = store.read_arrow("load", 0, columns=["offset"]).column("offset").to_pylist()
    assert offsets == list(range(load.produced))
    # acknowledged between every two rounds, the 200 connections open and waiting
    assert min(between) >= DELIVERIES_BETWEEN_ROUNDS, between
    p50, p99 = np.percentile(latencies, [50, 99]) * 1000
    quiet_p99, stormy_p99 = (np.percentile(quiet, 99) * 1000, np.percentile(stormy, 99) * 1000)
    print(f"\n{CONNECTIONS} connections x {ROUNDS} rounds: ApiVersions p50 {p50:.1f} ms, p99 {p99:.1f} ms; "
          f"producer: {load.delivered} records acknowledged ({during} during the storm), 0 errors, "
          f"p99 produce-to-ack {quiet_p99:.1f} ms before the storm, {stormy_p99:.1f} ms during it")
