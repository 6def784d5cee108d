"""One consumer-group member as a child process, for the group tests: a real client, unmodified, subscribed to
a topic in a group, committing synchronously what it has processed after every poll.

``python group_member.py CLIENT BOOTSTRAP GROUP TOPIC JOURNAL STOP_FILE`` with CLIENT ``kafka-python`` or
``confluent``. It appends to JOURNAL one line per event, each with the wall-clock time (``time.time()``,
shared by the processes of one machine):

* ``assigned <time> <p,p,...>`` when its assignment changes;
* ``record <time> <partition> <offset>`` for each record, before its commit;
* ``commit <time> <partition> <next offset>`` once a commit was acknowledged.

It leaves the group (closes the consumer) and exits once STOP_FILE exists. A commit refused because the group
rebalanced is not an error: the records stay uncommitted and are consumed again (at least once).
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, TextIO

SESSION_TIMEOUT_MS = 6000  # the broker's default group.min.session.timeout.ms
HEARTBEAT_INTERVAL_MS = 500
POLL_S = 0.2


def log(journal: TextIO, *fields: object) -> None:
    journal.write(" ".join(str(f) for f in (fields[0], time.time(), *fields[1:])) + "\n")
    journal.flush()


def run_kafka_python(bootstrap: str, group: str, topic: str, journal: TextIO, stop_file: str) -> None:
    from kafka import KafkaConsumer, OffsetAndMetadata
    from kafka.errors import KafkaError

    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest",
                             enable_auto_commit=False, session_timeout_ms=SESSION_TIMEOUT_MS,
                             heartbeat_interval_ms=HEARTBEAT_INTERVAL_MS, max_poll_records=20,
                             reconnect_backoff_max_ms=500, request_timeout_ms=10_000)
    assigned: Any = None
    while not os.path.exists(stop_file):
        batches = consumer.poll(int(POLL_S * 1000))
        now = sorted(tp.partition for tp in consumer.assignment())
        if now != assigned:
            assigned = now
            log(journal, "assigned", ",".join(map(str, now)))
        offsets = {}
        for tp, records in batches.items():
            for record in records:
                log(journal, "record", tp.partition, record.offset)
            offsets[tp] = OffsetAndMetadata(records[-1].offset + 1, "", -1)
        if offsets:
            try:
                consumer.commit(offsets)
            except KafkaError:
                continue
            for tp, offset in offsets.items():
                log(journal, "commit", tp.partition, offset.offset)
    consumer.close()


def run_confluent(bootstrap: str, group: str, topic: str, journal: TextIO, stop_file: str) -> None:
    import confluent_kafka

    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
        "enable.auto.commit": False, "session.timeout.ms": SESSION_TIMEOUT_MS,
        "heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS, "reconnect.backoff.max.ms": 500,
        "partition.assignment.strategy": "range,roundrobin"})
    consumer.subscribe([topic])
    assigned: Any = None
    while not os.path.exists(stop_file):
        messages = consumer.consume(20, POLL_S)
        now = sorted(tp.partition for tp in consumer.assignment())
        if now != assigned:
            assigned = now
            log(journal, "assigned", ",".join(map(str, now)))
        offsets: dict[int, int] = {}
        for message in messages:
            if message.error():
                continue  # end-of-partition and transient errors: the consumer goes on
            log(journal, "record", message.partition(), message.offset())
            offsets[message.partition()] = message.offset() + 1
        if offsets:
            try:
                consumer.commit(offsets=[confluent_kafka.TopicPartition(topic, p, o) for p, o in offsets.items()],
                                asynchronous=False)
            except confluent_kafka.KafkaException:
                continue
            for partition, offset in offsets.items():
                log(journal, "commit", partition, offset)
    consumer.close()


def main() -> None:
    client, bootstrap, group, topic, journal_path, stop_file = sys.argv[1:]
    run = {"kafka-python": run_kafka_python, "confluent": run_confluent}[client]
    with open(journal_path, "a", encoding="utf-8") as journal:
        run(bootstrap, group, topic, journal, stop_file)


if __name__ == "__main__":
    main()
