"""What the consumer-aware tombstone horizon is decided from, read from a store: every group's committed
offsets and the topics its stored members subscribe to (:class:`compactlog.consumer_horizon.ConsumerPositions`),
for ``topics describe``, ``explain`` and ``verify-erasure``.

One replay of ``__consumer_offsets`` by the read view (:func:`compactlog.consumer_groups.replayed`, the
manager's own rules): committed offsets only, a transaction's once its COMMIT marker is written. A store without the
topic has no groups.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..consumer_groups import offsets_by_group, replayed
from ..consumer_horizon import ConsumerPositions
from ..coordinator.offset_expiry import CONSUMER_PROTOCOL_TYPE, subscribed_topics
from ..errors import CompactLogError

if TYPE_CHECKING:
    from ..store import Store


def consumer_positions(store: Store) -> ConsumerPositions:
    """Every group's committed offsets and the topics its stored members subscribe to. Only a ``consumer``
    group's subscriptions are Kafka's ConsumerProtocolSubscription; one that cannot be decoded counts as none
    (the group's committed offsets still count)."""
    state = replayed(store)
    committed = offsets_by_group(state)
    subscribed = {group: frozenset(subscribed_topics(snapshot) or ()) for group, snapshot in state.snapshots.items()
                  if snapshot.protocol_type == CONSUMER_PROTOCOL_TYPE}
    return ConsumerPositions(committed, subscribed)


def read_consumer_positions(store: Store) -> tuple[ConsumerPositions | None, str | None]:
    """:func:`consumer_positions` for the tombstone horizon (``topics describe``, ``explain``,
    ``verify-erasure``), or None and why when ``__consumer_offsets`` cannot be read: those commands still
    report the rest."""
    try:
        return consumer_positions(store), None
    except CompactLogError as e:
        return None, str(e)
