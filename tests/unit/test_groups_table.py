"""``compactlog groups describe``'s table (:mod:`compactlog.cli.groups`) from a group description as values:
Kafka's columns and widths, ``-`` where unknown, a row for a member assigned nothing."""

from __future__ import annotations

from compactlog.cli.groups import format_table, group_rows
from compactlog.consumer_groups import GroupDescription, PartitionLag
from compactlog.coordinator.offset_records import MemberSnapshot


def member(member_id: str, host: str) -> MemberSnapshot:
    return MemberSnapshot(member_id, None, member_id.rsplit("-", 1)[0], host, 300_000, 45_000, b"", b"")


def test_rows_sorted_by_topic_and_partition_then_each_member_without_partitions() -> None:
    busy, idle = member("consumer-1-aa", "/10.0.0.1"), member("consumer-2-bb", "/10.0.0.2")
    group = GroupDescription("g", "Stable", "consumer", "range", 3, (busy, idle), (
        PartitionLag("t", 1, None, 7, None, "consumer-1-aa", "consumer-1", "/10.0.0.1"),
        PartitionLag("a-long-topic-name", 0, 2, 9, 7, None, None, None),
        PartitionLag("t", 0, 5, 5, 0, "consumer-1-aa", "consumer-1", "/10.0.0.1"),
    ))

    assert group_rows(group) == [
        ("g", "a-long-topic-name", "0", "2", "9", "7", "-", "-", "-"),
        ("g", "t", "0", "5", "5", "0", "consumer-1-aa", "/10.0.0.1", "consumer-1"),
        ("g", "t", "1", "-", "7", "-", "consumer-1-aa", "/10.0.0.1", "consumer-1"),
        ("g", "-", "-", "-", "-", "-", "consumer-2-bb", "/10.0.0.2", "consumer-2"),
    ]
    assert format_table(group_rows(group)).splitlines() == [
        "",
        "GROUP           TOPIC             PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  LAG             CONSUMER-ID     "
        "HOST            CLIENT-ID",
        "g               a-long-topic-name 0          2               9               7               -               "
        "-               -",
        "g               t                 0          5               5               0               consumer-1-aa   "
        "/10.0.0.1       consumer-1",
        "g               t                 1          -               7               -               consumer-1-aa   "
        "/10.0.0.1       consumer-1",
        "g               -                 -          -               -               -               consumer-2-bb   "
        "/10.0.0.2       consumer-2",
    ]
