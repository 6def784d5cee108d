"""Which committed offsets ``offsets.retention.minutes`` expires: a pure rule (Kafka 2.1+, KIP-211).

For each offset, a base time and the retention decide; an offset with a transactional commit pending is
never expired, and an offset whose record carries an expire timestamp (OffsetCommitValue v1, written by
clients of OffsetCommit v1-v4 that set a retention) expires at that timestamp instead. The base time:

* a group with no stored metadata, or whose protocol type is empty (a "simple" consumer that only commits
  offsets): the offset's commit timestamp;
* a group without members now (``is_empty``) that has a protocol type: the later of the commit timestamp and
  the time the group became empty (its metadata's ``currentStateTimestamp``). Kafka counts from the latter
  alone when it is known; an offset committed to an already empty group (by an admin client, say) would then
  expire early, so the commit counts too: no offset expires sooner than Kafka would expire it;
* a group of protocol type ``consumer`` with members: the commit timestamp, and only for topics no member
  subscribes to (its members' subscriptions, Kafka's ConsumerProtocolSubscription, decoded by kafka-python);
  the offsets of subscribed topics are kept however old. A subscription that cannot be decoded keeps them all;
* a group with members of another protocol type (Connect, say): nothing expires.

An offset expires when ``now - base >= retention`` (Kafka's comparison).
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Set

from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription

from .committed_offsets import TopicPartition
from .offset_records import GroupSnapshot, OffsetAndMetadata

__all__ = ["CONSUMER_PROTOCOL_TYPE", "expired_offsets", "subscribed_topics"]

CONSUMER_PROTOCOL_TYPE = "consumer"


def subscribed_topics(group: GroupSnapshot) -> set[str] | None:
    """The topics the group's members subscribe to; None if a subscription cannot be decoded."""
    topics: set[str] = set()
    for member in group.members:
        try:
            subscription = ConsumerProtocolSubscription.decode(member.subscription)
        except (struct.error, ValueError, EOFError, IndexError, TypeError):
            return None  # unknown: the caller keeps every offset
        topics.update(subscription.topics or ())
    return topics


def expired_offsets(offsets: Mapping[TopicPartition, OffsetAndMetadata], group: GroupSnapshot | None,
                    is_empty: bool, pending: Set[TopicPartition], now_ms: int, retention_ms: int,
                    ) -> list[TopicPartition]:
    """The partitions of ``offsets`` whose committed offset has expired (see the module docstring)."""
    kept_topics: set[str] = set()
    empty_since = -1
    if group is not None and group.protocol_type:
        if is_empty:
            empty_since = group.current_state_timestamp
        elif group.protocol_type == CONSUMER_PROTOCOL_TYPE and group.members:
            subscribed = subscribed_topics(group)
            if subscribed is None:
                return []
            kept_topics = subscribed
        else:
            return []
    expired = []
    for tp, offset in sorted(offsets.items()):
        if tp in pending or tp[0] in kept_topics:
            continue
        if offset.expire_timestamp != -1:
            if now_ms >= offset.expire_timestamp:
                expired.append(tp)
        elif now_ms - max(offset.commit_timestamp, empty_since) >= retention_ms:
            expired.append(tp)
    return expired
