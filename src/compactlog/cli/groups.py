"""``compactlog groups``: list consumer groups and describe their offsets and lag, as ``kafka-consumer-groups``
does, read from the data directory's ``__consumer_offsets`` (:mod:`compactlog.consumer_groups`; ``serve``
need not run).

``list`` prints one group id a line (``kafka-consumer-groups --list``). ``describe --group G`` (or
``--all-groups``) prints Kafka's table: a blank line, then ``GROUP TOPIC PARTITION CURRENT-OFFSET
LOG-END-OFFSET LAG CONSUMER-ID HOST CLIENT-ID``, a row per partition the group has a committed offset for or
a member is assigned, sorted by topic and partition, then a row per member assigned nothing; ``-`` where a
value is unknown (no committed offset, no member). Columns are as wide as Kafka makes them (group, topic,
consumer id and host at least 15 characters, the others fixed). The lag is the log end offset minus the
committed offset. A group whose last stored metadata has no members prints Kafka's notice on stderr,
``Consumer group 'G' has no active members.``, then its offsets. An unknown group is an error (exit 1) with
Kafka's message. ``--json`` prints the same as JSON (a list with ``--all-groups``).

``describe --members`` prints, per group, Kafka's members table: a blank line, ``GROUP CONSUMER-ID HOST
CLIENT-ID #PARTITIONS`` (with ``GROUP-INSTANCE-ID`` after the consumer id when a member has one), a row per
member with the number of partitions assigned to it; every column padded (group, consumer id, host and
client id at least 15 characters, the instance id 17, #PARTITIONS 15) and followed by one space. A group
without members prints the notice, then the header alone. ``describe --state`` prints ``GROUP COORDINATOR
(ID) ASSIGNMENT-STRATEGY STATE #MEMBERS`` and the group's row: the coordinator is this data directory's
broker as ``server.properties`` configures it (first advertised listener, else first listener, and
``node.id``; ``serve``'s command-line listeners are not known here), written ``host:port  (id)`` as Kafka
writes it; the first column is as wide as that (at least 25), the next three 25, 20 and 15. ``--offsets``
is the default table. These are Kafka's ``ConsumerGroupCommand`` formats, quirks included.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from ..consumer_groups import GroupDescription, assigned_partitions, describe_group, list_groups
from ..errors import UnknownGroupError
from ..server_config import load_server_config
from .common import UsageError, data_dir_parent, open_store, print_json

if TYPE_CHECKING:
    from ..store import Store

MISSING = "-"  # Kafka's MISSING_COLUMN_VALUE
HEADER = ("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST",
          "CLIENT-ID")
# Kafka's minimum widths of the group, topic, consumer id and host columns; the others are fixed.
MIN_WIDTH = 15
FIXED_WIDTHS = {2: 10, 3: 15, 4: 15, 5: 15}


def add_parser(commands: Any) -> None:
    parent = data_dir_parent()
    groups = commands.add_parser("groups", parents=[parent],
                                 help="list consumer groups, describe their offsets and lag",
                                 description=__doc__.split("\n\n", 1)[1] if __doc__ else None)
    actions = groups.add_subparsers(dest="action", metavar="ACTION", required=True)

    listing = actions.add_parser("list", parents=[parent], help="every consumer group, one a line")
    listing.set_defaults(run=run_list)

    describe = actions.add_parser("describe", parents=[parent],
                                  help="a group's partitions: committed offset, log end offset, lag and member")
    which = describe.add_mutually_exclusive_group()
    which.add_argument("--group", metavar="GROUP", help="the group")
    which.add_argument("--all-groups", action="store_true", help="every group")
    table = describe.add_mutually_exclusive_group()
    table.add_argument("--offsets", action="store_true", help="each partition's offsets and lag (the default)")
    table.add_argument("--members", action="store_true", help="each member and its number of partitions")
    table.add_argument("--state", action="store_true",
                       help="the group's coordinator, assignment strategy, state and number of members")
    describe.add_argument("--json", action="store_true", help="machine-readable output")
    describe.set_defaults(run=run_describe)


def run_list(args: argparse.Namespace) -> int:
    with open_store(args) as store:
        for group in sorted(list_groups(store)):
            print(group)
    return 0


def _text(value: object) -> str:
    return MISSING if value is None else str(value)


def group_rows(group: GroupDescription) -> list[tuple[str, ...]]:
    """The table rows of one group (module docstring), each value as printed."""
    rows: list[tuple[str, ...]] = [
        (group.group_id, p.topic, str(p.partition), _text(p.current_offset), str(p.log_end_offset), _text(p.lag),
         _text(p.member_id), _text(p.host), _text(p.client_id))
        for p in sorted(group.partitions, key=lambda p: (p.topic, p.partition))]
    assigned = {p.member_id for p in group.partitions}
    rows += [(group.group_id, MISSING, MISSING, MISSING, MISSING, MISSING, m.member_id, m.client_host, m.client_id)
             for m in group.members if m.member_id not in assigned]
    return rows


def format_table(rows: list[tuple[str, ...]]) -> str:
    """Kafka's describe table: a blank line, the header, the rows, every column but the last left-aligned in
    its width and followed by one space."""
    widths = [FIXED_WIDTHS.get(i, max([MIN_WIDTH, *(len(row[i]) for row in rows)])) for i in range(len(HEADER) - 1)]
    lines = [" ".join(value.ljust(width) for value, width in zip(row, widths, strict=False)) + " " + row[-1]
             for row in [HEADER, *rows]]
    return "\n" + "\n".join(lines) + "\n"


def _kafka_format(widths: list[int], values: tuple[str, ...]) -> str:
    """Java's ``%-Ns`` per column, each followed by one space (Kafka's members table)."""
    return "".join(value.ljust(width) + " " for value, width in zip(values, widths, strict=True))


def format_members(group: GroupDescription) -> str:
    """Kafka's ``--members`` table of one group (module docstring)."""
    with_instance = any(m.group_instance_id for m in group.members)
    rows = [(group.group_id, m.member_id, *((m.group_instance_id or "",) if with_instance else ()), m.client_host,
             m.client_id, str(len(assigned_partitions(m)))) for m in group.members]
    header = ("GROUP", "CONSUMER-ID", *(("GROUP-INSTANCE-ID",) if with_instance else ()), "HOST", "CLIENT-ID",
              "#PARTITIONS")
    minimums = [MIN_WIDTH, MIN_WIDTH, *((17,) if with_instance else ()), MIN_WIDTH, MIN_WIDTH]
    widths = [max([minimum, *(len(row[i]) for row in rows)]) for i, minimum in enumerate(minimums)] + [15]
    return "".join(["\n", _kafka_format(widths, header), "\n", *(_kafka_format(widths, row) + "\n" for row in rows)])


def coordinator_of(data_dir: str) -> str:
    """The data directory's broker as ``--state`` names it (module docstring)."""
    config = load_server_config(data_dir)
    listener = (config.advertised_listeners or config.listeners)[0]
    return f"{listener.host}:{listener.port}  ({config.node_id})"


def format_state(group: GroupDescription, coordinator: str) -> str:
    """Kafka's ``--state`` table of one group (module docstring)."""
    first = max(25, len(coordinator))

    def line(values: tuple[str, ...]) -> str:
        return "\n" + " ".join(value.ljust(width) for value, width in zip(values, (first, 25, 20, 15), strict=False)) \
            + " " + values[-1]

    return line(("GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS")) + line(
        (group.group_id, coordinator, group.protocol or "", group.state, str(len(group.members)))) + "\n"


def group_json(group: GroupDescription) -> dict[str, Any]:
    return {"group": group.group_id, "state": group.state, "protocol_type": group.protocol_type,
            "protocol": group.protocol, "generation": group.generation,
            "members": [{"consumer_id": m.member_id, "group_instance_id": m.group_instance_id,
                         "client_id": m.client_id, "host": m.client_host} for m in group.members],
            "partitions": [{"topic": p.topic, "partition": p.partition, "current_offset": p.current_offset,
                            "log_end_offset": p.log_end_offset, "lag": p.lag, "consumer_id": p.member_id,
                            "host": p.host, "client_id": p.client_id}
                           for p in sorted(group.partitions, key=lambda p: (p.topic, p.partition))]}


def kafka_describe_group(store: Store, group_id: str) -> GroupDescription:
    """:func:`describe_group`, an unknown group's error in Kafka's words."""
    try:
        return describe_group(store, group_id)
    except UnknownGroupError as e:
        raise UnknownGroupError(f"Consumer group '{group_id}' does not exist.") from e


def run_describe(args: argparse.Namespace) -> int:
    if args.group is None and not args.all_groups:
        raise UsageError("give --group GROUP or --all-groups")
    with open_store(args) as store:
        names = sorted(list_groups(store)) if args.all_groups else [args.group]
        described = [kafka_describe_group(store, name) for name in names]
    if args.json:
        print_json([group_json(g) for g in described] if args.all_groups else group_json(described[0]))
        return 0
    coordinator = coordinator_of(store.data_dir) if args.state else ""
    for group in described:
        if not group.members:  # Kafka prints this notice on stderr, then the group's table
            sys.stdout.flush()
            print(f"\nConsumer group '{group.group_id}' has no active members.", file=sys.stderr)
        if args.members:
            sys.stdout.write(format_members(group))
        elif args.state:
            sys.stdout.write(format_state(group, coordinator))
        elif rows := group_rows(group):
            sys.stdout.write(format_table(rows))
    return 0
