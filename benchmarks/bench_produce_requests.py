"""The broker's CPU per small Produce request, as librdkafka sends them in a transaction of 1,000 records.

Per round (a "transaction" of ``--records`` records over ``--partitions`` partitions, 1,000 over 4 by
default, as issue 19's benchmark makes them): AddPartitionsToTxn, then one Produce request per partition
(``records / partitions`` keyed records of 100-byte values, one v2 batch, ``acks=-1``), each sent once the
previous one is answered (librdkafka's idempotent producer keeps one request in flight per partition, and
the broker reads a connection's requests in order), then EndTxn (commit). ``--mode idempotent`` sends the
same Produce requests from an idempotent producer, without AddPartitionsToTxn and EndTxn.

The client is a raw socket speaking pre-built frames (kafka-python's protocol classes; each batch built once,
its sequence and CRC patched per request), so that the client's CPU stays small beside the broker's. The
broker is ``compactlog serve --in-process`` in a child process; its CPU (user + system, from ``/proc``) is
summed over the Produce requests alone and over the other requests, and reported per round (so per 1,000
records) with the wall time. The cleaner is off and its maintenance passes an hour apart: the rounds rewrite
the same keys, and its passes (in the broker's process) would otherwise be counted as the requests' CPU.
The clock ticks of ``/proc`` are 10 ms: many rounds make the sums exact enough.

Run: ``python benchmarks/bench_produce_requests.py [--mode transactional|idempotent] [--rounds N]``.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import struct
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(__file__))
from _common import banner
from bench_protocol import cpu_seconds, start_broker
from kafka.protocol.producer import InitProducerIdRequest, InitProducerIdResponse, ProduceRequest, ProduceResponse
from kafka.protocol.producer.transaction import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
)
from kafka.record.default_records import DefaultRecordBatchBuilder

import compactlog
from compactlog.protocol import _record_batch

TOPIC = "t"
TRANSACTIONAL_ID = "bench"
SEQUENCE_AT = 53  # baseSequence in a v2 batch (protocol/record_batch.py)
CRC_AT, CRC_START = 17, 21


class Connection:
    """One client connection speaking size-prefixed frames, one request at a time."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.correlation_id = 0

    def call(self, request: Any, response_class: Any) -> Any:
        self.correlation_id += 1
        request.with_header(correlation_id=self.correlation_id, client_id="bench")
        self.sock.sendall(bytes(request.encode(header=True, framed=True)))
        (size,) = struct.unpack(">i", self._exactly(4))
        return response_class.decode(self._exactly(size), version=request.API_VERSION, header=True)

    def _exactly(self, n: int) -> bytes:
        data = bytearray()
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("closed by the broker")
            data += chunk
        return bytes(data)


def batch(records: int, producer_id: int, epoch: int, transactional: bool, seed: int) -> bytearray:
    """Records timestamped now, as a client stamps them: old timestamps would make the broker's maintenance
    pass roll the active segment (segment.ms) and count the seal as the requests' CPU."""
    builder = DefaultRecordBatchBuilder(2, 0, transactional, producer_id, epoch, 0, 1 << 20)
    now_ms = int(time.time() * 1000)
    for i in range(records):
        builder.append(i, now_ms + i, b"key-%08d" % (seed * records + i), b"v" * 100, [])
    return bytearray(builder.build())


def with_sequence(template: bytearray, sequence: int) -> bytes:
    struct.pack_into(">i", template, SEQUENCE_AT, sequence)
    struct.pack_into(">I", template, CRC_AT, _record_batch.crc32c(memoryview(template)[CRC_START:]))
    return bytes(template)


def produce_request(transactional: bool, partition: int, records: bytes) -> Any:
    v = 9
    return ProduceRequest(version=v, transactional_id=TRANSACTIONAL_ID if transactional else None, acks=-1,
                          timeout_ms=30000, topic_data=[ProduceRequest.TopicProduceData(
                              version=v, name=TOPIC, partition_data=[
                                  ProduceRequest.TopicProduceData.PartitionProduceData(
                                      version=v, index=partition, records=records)])])


def run(port: int, pid: int, mode: str, rounds: int, records: int, partitions: int) -> tuple[float, float, float]:
    """Broker CPU seconds in Produce requests, in the other requests, and the wall seconds, over ``rounds``."""
    transactional = mode == "transactional"
    conn = Connection(port)
    init = conn.call(InitProducerIdRequest(version=4, transactional_id=TRANSACTIONAL_ID if transactional else None,
                                           transaction_timeout_ms=60000, producer_id=-1, producer_epoch=-1),
                     InitProducerIdResponse)
    producer_id, epoch = init.producer_id, init.producer_epoch
    per_partition = records // partitions
    templates = [batch(per_partition, producer_id, epoch, transactional, p) for p in range(partitions)]
    produce_cpu = other_cpu = 0.0
    started = time.perf_counter()
    for r in range(rounds):
        if transactional:
            c0 = cpu_seconds(pid)
            answer = conn.call(AddPartitionsToTxnRequest(
                version=3, v3_and_below_transactional_id=TRANSACTIONAL_ID, v3_and_below_producer_id=producer_id,
                v3_and_below_producer_epoch=epoch, v3_and_below_topics=[
                    AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=TOPIC, partitions=list(range(partitions)))]),
                AddPartitionsToTxnResponse)
            other_cpu += cpu_seconds(pid) - c0
            assert all(p.partition_error_code == 0 for t in answer.results_by_topic_v3_and_below
                       for p in t.results_by_partition), answer
        for p in range(partitions):
            request = produce_request(transactional, p, with_sequence(templates[p], r * per_partition))
            c0 = cpu_seconds(pid)
            answer = conn.call(request, ProduceResponse)
            produce_cpu += cpu_seconds(pid) - c0
            code = answer.responses[0].partition_responses[0].error_code
            assert code == 0, code
        if transactional:
            c0 = cpu_seconds(pid)
            code = conn.call(EndTxnRequest(version=3, transactional_id=TRANSACTIONAL_ID, producer_id=producer_id,
                                           producer_epoch=epoch, committed=True), EndTxnResponse).error_code
            other_cpu += cpu_seconds(pid) - c0
            assert code == 0, code
    wall = time.perf_counter() - started
    conn.sock.close()
    return produce_cpu, other_cpu, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", choices=("transactional", "idempotent"), default="transactional")
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--records", type=int, default=1000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    banner(f"broker CPU per small Produce request ({args.mode}, {args.records} records over "
           f"{args.partitions} partitions per round)")
    with tempfile.TemporaryDirectory() as data_dir:
        with compactlog.open(data_dir) as store:
            store.create_topic(TOPIC, args.partitions, {"cleanup.policy": "compact"})
        with open(os.path.join(data_dir, "server.properties"), "w") as f:
            # Its passes (compaction, and each pass reading the frames appended since the last one) would be
            # counted as the requests' CPU.
            f.write("log.cleaner.enable=false\nlog.cleaner.backoff.ms=3600000\n")
        proc, broker = start_broker(data_dir)
        port = int(broker.rsplit(":", 1)[1])
        try:
            run(port, proc.pid, args.mode, max(args.rounds // 10, 5), args.records, args.partitions)  # warm-up
            produce_ms, other_ms, wall_ms = [], [], []
            for i in range(args.runs):
                load = os.getloadavg()[0]
                produce_s, other_s, wall_s = run(port, proc.pid, args.mode, args.rounds, args.records,
                                                 args.partitions)
                produce_ms.append(produce_s / args.rounds * 1000)
                other_ms.append(other_s / args.rounds * 1000)
                wall_ms.append(wall_s / args.rounds * 1000)
                print(f"run {i}: broker CPU per round: Produce {produce_ms[-1]:.2f} ms, other requests "
                      f"{other_ms[-1]:.2f} ms; wall {wall_ms[-1]:.2f} ms per round; load {load:.2f}")
            print(f"median per round: Produce CPU {statistics.median(produce_ms):.2f} ms, other CPU "
                  f"{statistics.median(other_ms):.2f} ms, wall {statistics.median(wall_ms):.2f} ms")
        finally:
            proc.terminate()
            proc.wait(30)


if __name__ == "__main__":
    main()
