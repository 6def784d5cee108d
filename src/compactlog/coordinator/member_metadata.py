"""A group member (Kafka's ``MemberMetadata``), what a JoinGroup says about it (:class:`JoinParams`), the
JoinGroup and SyncGroup answers the group state machine (:mod:`.group_metadata`) addresses to members, and
Kafka's protocol vote (:func:`select_protocol`). Pure values."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["NO_GENERATION", "JoinParams", "JoinResult", "MemberMetadata", "Reply", "SyncResult", "select_protocol"]

NO_GENERATION = -1


@dataclass(frozen=True)
class JoinParams:
    """What a JoinGroup request says about its member."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]  # (name, metadata) in the member's order of preference
    require_known_member_id: bool  # JoinGroup v4+


@dataclass(frozen=True)
class JoinResult:
    """A JoinGroup response for ``member_id``; ``members`` only for the leader: (id, instance id, metadata)."""

    member_id: str
    error: int
    generation: int = NO_GENERATION
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str = ""
    members: tuple[tuple[str, str | None, bytes], ...] = ()
    skip_assignment: bool = False  # v9+: a static leader rejoining a Stable group keeps the assignment


@dataclass(frozen=True)
class SyncResult:
    """A SyncGroup response for ``member_id``."""

    member_id: str
    error: int
    protocol_type: str | None = None
    protocol: str | None = None
    assignment: bytes = b""


Reply = JoinResult | SyncResult


@dataclass
class MemberMetadata:
    """One member of a group."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    heartbeat_deadline: int
    assignment: bytes = b""
    awaiting_join: bool = False
    awaiting_sync: bool = False

    def metadata(self, protocol: str) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        return b""

    def matches(self, protocols: tuple[tuple[str, bytes], ...]) -> bool:
        return self.protocols == protocols

    def kept_alive(self, now: int) -> bool:
        """Whether the member has not timed out: a held response keeps it alive."""
        return self.awaiting_join or self.awaiting_sync or now < self.heartbeat_deadline


def select_protocol(members: Iterable[MemberMetadata]) -> str:
    """Kafka's vote: among the protocols every member supports, each member votes for the first of its own
    order of preference; the most votes win, a tie goes to the protocol voted for first."""
    members = list(members)
    candidates = set.intersection(*({name for name, _ in m.protocols} for m in members))
    votes: dict[str, int] = {}
    for member in members:
        choice = next(name for name, _ in member.protocols if name in candidates)
        votes[choice] = votes.get(choice, 0) + 1
    return max(votes, key=lambda name: votes[name])  # max keeps the first of equal counts
