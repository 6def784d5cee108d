"""One consumer group's membership as a pure state machine (Kafka's classic ``GroupMetadata`` and
``MemberMetadata`` with the decisions of ``GroupCoordinator``): no I/O, no clock of its own, no futures.

Every method takes the time (epoch ms) and returns :class:`JoinResult` / :class:`SyncResult` replies, each
addressed to a member id; the async coordinator (:mod:`.group_coordinator`) holds each member's JoinGroup
and SyncGroup response until a reply for it comes out, and calls :meth:`GroupMetadata.expire` when a
deadline passes.

States and transitions (Kafka's):

* Empty: no members (a new group, or one whose members all left); offsets may be committed.
  A JoinGroup -> PreparingRebalance.
* PreparingRebalance: JoinGroup responses are held until every known member has rejoined or the rebalance
  deadline (the largest member ``rebalance.timeout.ms``) passes; a join of an Empty group instead waits
  ``group.initial.rebalance.delay.ms`` (0: not at all) and completes then with whoever joined, pending
  member ids or not; a group never formed (generation 0) waits another delay while new members keep
  arriving, never past the rebalance timeout. Then members that did not rejoin are removed, the generation goes up, a
  protocol is chosen by vote, the leader (the old one if it rejoined, else the first member) gets every
  member's metadata -> CompletingRebalance (or Empty if nobody rejoined).
* CompletingRebalance: SyncGroup responses are held until the leader's SyncGroup brings the assignment;
  once stored -> Stable and every held SyncGroup gets its member's assignment.
* Stable: heartbeats; a join by the leader or with changed protocols, a leave or a session timeout
  -> PreparingRebalance.
* Dead: deleted; every request answers COORDINATOR_NOT_AVAILABLE (the client looks the group up again).

Errors as Kafka returns them: an unknown member id is UNKNOWN_MEMBER_ID; a stale generation is
ILLEGAL_GENERATION; a heartbeat or SyncGroup during PreparingRebalance is REBALANCE_IN_PROGRESS (the member
rejoins); a JoinGroup v4+ without a member id first gets MEMBER_ID_REQUIRED with the id the coordinator
made for it (``<client_id>-<uuid>``), which it must rejoin with within its session timeout; a static member
(``group.instance.id``) whose member id is not the one registered for its instance id is
FENCED_INSTANCE_ID; a static member rejoining with no member id takes over the instance's place (the old
id's held responses are answered FENCED_INSTANCE_ID) without a rebalance when the group is Stable and its
protocols did not change (a rejoining leader is told to skip the assignment, JoinGroup v9: the stored one stays).

Session timeouts: a member's heartbeat deadline is renewed by every JoinGroup, SyncGroup and Heartbeat; a
member whose JoinGroup or SyncGroup response is being held is kept alive (it cannot heartbeat meanwhile);
one that misses its deadline is removed as if it had left.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..broker.error_codes import (
    COORDINATOR_NOT_AVAILABLE,
    FENCED_INSTANCE_ID,
    GROUP_MAX_SIZE_REACHED,
    ILLEGAL_GENERATION,
    INCONSISTENT_GROUP_PROTOCOL,
    MEMBER_ID_REQUIRED,
    NONE,
    REBALANCE_IN_PROGRESS,
    UNKNOWN_MEMBER_ID,
)
from .member_metadata import JoinParams, JoinResult, MemberMetadata, Reply, SyncResult, select_protocol

__all__ = ["UNKNOWN_MEMBER", "GroupMetadata", "GroupState"]

UNKNOWN_MEMBER = ""  # the member id of a member that has none yet


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass
class GroupMetadata:
    """One group's state; see the module docstring for the transitions."""

    group_id: str
    initial_rebalance_delay_ms: int
    max_size: int
    now: int
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol: str | None = None
    leader: str | None = None
    current_state_timestamp: int = -1
    members: dict[str, MemberMetadata] = field(default_factory=dict)
    pending_members: dict[str, int] = field(default_factory=dict)  # member id -> its join deadline
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    rebalance_deadline: int | None = None  # while PreparingRebalance: when the join completes anyway
    # an Empty group's join: what is left of the rebalance timeout after the initial delay; -1 for other joins
    initial_delay_remaining_ms: int = 0
    new_member_added: bool = False

    def __post_init__(self) -> None:
        self.current_state_timestamp = self.now

    # -- queries ---------------------------------------------------------------------------------------------

    @property
    def is_empty(self) -> bool:
        return not self.members and not self.pending_members

    def next_deadline(self) -> int | None:
        """The earliest time :meth:`expire` has something to do, None if nothing is due."""
        deadlines = [m.heartbeat_deadline for m in self.members.values() if not (m.awaiting_join or m.awaiting_sync)]
        deadlines += self.pending_members.values()
        if self.rebalance_deadline is not None:
            deadlines.append(self.rebalance_deadline)
        return min(deadlines, default=None)

    def _transition(self, state: GroupState, now: int) -> None:
        self.state = state
        self.current_state_timestamp = now

    def _supports(self, protocol_type: str, protocols: tuple[tuple[str, bytes], ...]) -> bool:
        if not protocol_type or not protocols:
            return False
        if not self.members:
            return True
        if protocol_type != self.protocol_type:
            return False
        names = {name for name, _ in protocols}
        return all(names & {name for name, _ in m.protocols} for m in self.members.values())

    # -- JoinGroup -------------------------------------------------------------------------------------------

    def join(self, params: JoinParams, new_member_id: str, now: int) -> tuple[str, list[Reply]]:
        """A JoinGroup: returns the member id the caller's response is held under (``new_member_id`` for a
        member that had none) and the replies now due (the caller's among them when it is answered now)."""
        if self.state == GroupState.DEAD:
            return params.member_id, [JoinResult(params.member_id, COORDINATOR_NOT_AVAILABLE)]
        if not self._supports(params.protocol_type, params.protocols):
            return params.member_id, [JoinResult(params.member_id, INCONSISTENT_GROUP_PROTOCOL)]
        if params.member_id == UNKNOWN_MEMBER:
            return self._join_unknown(params, new_member_id, now)
        return params.member_id, self._join_known(params, now)

    def _join_unknown(self, params: JoinParams, new_member_id: str, now: int) -> tuple[str, list[Reply]]:
        instance = params.group_instance_id
        if instance is not None and instance in self.static_members:
            return new_member_id, self._replace_static_member(params, new_member_id, now)
        if len(self.members) + len(self.pending_members) >= self.max_size:
            return new_member_id, [JoinResult(new_member_id, GROUP_MAX_SIZE_REACHED)]
        if instance is None and params.require_known_member_id:
            # Kafka's two-step join: the id is handed out first, the member joins with it next
            self.pending_members[new_member_id] = now + params.session_timeout_ms
            return new_member_id, [JoinResult(new_member_id, MEMBER_ID_REQUIRED)]
        return new_member_id, self._add_member_and_rebalance(params, new_member_id, now)

    def _join_known(self, params: JoinParams, now: int) -> list[Reply]:
        member_id = params.member_id
        if member_id in self.pending_members:
            del self.pending_members[member_id]
            return self._add_member_and_rebalance(params, member_id, now)
        instance = params.group_instance_id
        if instance is not None and self.static_members.get(instance, member_id) != member_id:
            return [JoinResult(member_id, FENCED_INSTANCE_ID)]
        member = self.members.get(member_id)
        if member is None or self.state == GroupState.EMPTY:
            return [JoinResult(member_id, UNKNOWN_MEMBER_ID)]
        if self.state == GroupState.PREPARING_REBALANCE:
            return self._update_member_and_rebalance(member, params, now)
        if self.state == GroupState.COMPLETING_REBALANCE:
            if member.matches(params.protocols):
                # the member lost its JoinGroup response: answer it again, with this generation
                member.heartbeat_deadline = now + member.session_timeout_ms
                return [self._join_result(member)]
            return self._update_member_and_rebalance(member, params, now)
        # Stable: a follower with unchanged protocols just gets the generation again; the leader's rejoin
        # or changed protocols start a rebalance
        if member_id != self.leader and member.matches(params.protocols):
            member.heartbeat_deadline = now + member.session_timeout_ms
            return [self._join_result(member)]
        return self._update_member_and_rebalance(member, params, now)

    def _new_member(self, params: JoinParams, member_id: str, now: int) -> MemberMetadata:
        return MemberMetadata(member_id, params.group_instance_id, params.client_id, params.client_host,
                              params.rebalance_timeout_ms, params.session_timeout_ms, params.protocol_type,
                              params.protocols, now + params.session_timeout_ms)

    def _add_member_and_rebalance(self, params: JoinParams, member_id: str, now: int) -> list[Reply]:
        member = self._new_member(params, member_id, now)
        member.awaiting_join = True
        if not self.members:
            self.protocol_type = params.protocol_type
        self.members[member_id] = member
        if self.leader is None:
            self.leader = member_id
        if params.group_instance_id is not None:
            self.static_members[params.group_instance_id] = member_id
        if self.state == GroupState.PREPARING_REBALANCE and self.generation == 0:
            self.new_member_added = True  # Kafka extends the initial delay only for a group never formed
        return self._rebalance_or_complete(now)

    def _update_member_and_rebalance(self, member: MemberMetadata, params: JoinParams, now: int) -> list[Reply]:
        member.protocols = params.protocols
        member.rebalance_timeout_ms = params.rebalance_timeout_ms
        member.session_timeout_ms = params.session_timeout_ms
        member.client_id, member.client_host = params.client_id, params.client_host
        member.awaiting_join = True
        member.heartbeat_deadline = now + member.session_timeout_ms
        return self._rebalance_or_complete(now)

    def _replace_static_member(self, params: JoinParams, new_member_id: str, now: int) -> list[Reply]:
        assert params.group_instance_id is not None
        old_id = self.static_members[params.group_instance_id]
        old = self.members.pop(old_id)
        replies: list[Reply] = []
        if old.awaiting_join:
            replies.append(JoinResult(old_id, FENCED_INSTANCE_ID))
        if old.awaiting_sync:
            replies.append(SyncResult(old_id, FENCED_INSTANCE_ID))
        protocols_unchanged = old.matches(params.protocols)
        old.member_id = new_member_id
        old.awaiting_join = old.awaiting_sync = False
        self.members[new_member_id] = old
        self.static_members[params.group_instance_id] = new_member_id
        if self.leader == old_id:
            self.leader = new_member_id
        if self.state == GroupState.STABLE and protocols_unchanged:
            # the member keeps its assignment: it syncs with this generation and gets it back
            old.heartbeat_deadline = now + params.session_timeout_ms
            old.client_id, old.client_host = params.client_id, params.client_host
            result = dataclasses.replace(self._join_result(old), skip_assignment=new_member_id == self.leader)
            return [*replies, result]
        return replies + self._update_member_and_rebalance(old, params, now)

    def _rebalance_or_complete(self, now: int) -> list[Reply]:
        replies: list[Reply] = []
        if self.state != GroupState.PREPARING_REBALANCE:
            replies += self._prepare_rebalance(now)
        if self.initial_delay_remaining_ms >= 0 and self.rebalance_deadline is not None \
                and self.rebalance_deadline <= now:
            return replies + self._rebalance_deadline_passed(now)  # a delay of 0 ends now, not on a tick
        return replies + self._try_complete_join(now)

    def _prepare_rebalance(self, now: int) -> list[Reply]:
        replies: list[Reply] = []
        if self.state == GroupState.COMPLETING_REBALANCE:
            # held SyncGroups of the old generation: their members rejoin
            replies += self._answer_syncs(REBALANCE_IN_PROGRESS)
        rebalance_timeout = max((m.rebalance_timeout_ms for m in self.members.values()), default=0)
        if self.state == GroupState.EMPTY:
            # Kafka's InitialDelayedJoin, whatever the delay: the join completes when the delay ends (a delay
            # of 0 at once), whether or not every member has joined or a pending member id has come back
            delay = min(self.initial_rebalance_delay_ms, rebalance_timeout)
            self.rebalance_deadline = now + delay
            self.initial_delay_remaining_ms = max(rebalance_timeout - delay, 0)
        else:
            self.rebalance_deadline = now + rebalance_timeout
            self.initial_delay_remaining_ms = -1  # no initial delay: complete once all have joined
        self._transition(GroupState.PREPARING_REBALANCE, now)
        return replies

    def _try_complete_join(self, now: int) -> list[Reply]:
        """Complete the join if every member has rejoined (not an Empty group's: only its delay's end does)."""
        if self.state != GroupState.PREPARING_REBALANCE or self.initial_delay_remaining_ms >= 0:
            return []
        if self.pending_members or not all(m.awaiting_join for m in self.members.values()):
            return []
        return self._complete_join(now)

    def _complete_join(self, now: int) -> list[Reply]:
        replies: list[Reply] = []
        for member_id in [i for i, m in self.members.items() if not m.awaiting_join]:
            replies += self._remove_member(member_id)
        self.rebalance_deadline = None
        self.initial_delay_remaining_ms = -1
        self.generation += 1
        if not self.members:
            self.protocol = None
            self.leader = None
            self._transition(GroupState.EMPTY, now)
            return replies
        self.protocol = select_protocol(self.members.values())
        self._transition(GroupState.COMPLETING_REBALANCE, now)
        for member in self.members.values():
            member.awaiting_join = False
            member.assignment = b""
            member.heartbeat_deadline = now + member.session_timeout_ms
            replies.append(self._join_result(member))
        return replies

    def _join_result(self, member: MemberMetadata) -> JoinResult:
        protocol = self.protocol or ""
        members = tuple((m.member_id, m.group_instance_id, m.metadata(protocol)) for m in self.members.values()) \
            if member.member_id == self.leader else ()
        return JoinResult(member.member_id, NONE, self.generation, self.protocol_type, self.protocol,
                          self.leader or "", members)

    # -- SyncGroup -------------------------------------------------------------------------------------------

    def sync(self, member_id: str, group_instance_id: str | None, generation: int, protocol_type: str | None,
             protocol: str | None, assignments: Mapping[str, bytes], now: int) -> tuple[list[Reply], bool]:
        """A SyncGroup: the replies now due and whether the group must be stored before
        :meth:`assignment_stored` completes it (the leader's SyncGroup during CompletingRebalance)."""
        if self.state == GroupState.DEAD:
            return [SyncResult(member_id, COORDINATOR_NOT_AVAILABLE)], False
        error = self._check_member(member_id, group_instance_id, generation)
        if error == NONE and ((protocol_type is not None and protocol_type != self.protocol_type)
                              or (protocol is not None and protocol != self.protocol)):
            error = INCONSISTENT_GROUP_PROTOCOL
        if error != NONE:
            return [SyncResult(member_id, error)], False
        member = self.members[member_id]
        member.heartbeat_deadline = now + member.session_timeout_ms
        if self.state == GroupState.PREPARING_REBALANCE:
            return [SyncResult(member_id, REBALANCE_IN_PROGRESS)], False
        if self.state == GroupState.STABLE:
            return [self._sync_result(member, NONE)], False
        member.awaiting_sync = True  # CompletingRebalance: held until the leader's assignment is stored
        if member_id != self.leader:
            return [], False
        for other in self.members.values():
            other.assignment = assignments.get(other.member_id, b"")
        return [], True

    def assignment_stored(self, generation: int, error: int, now: int) -> list[Reply]:
        """The group of ``generation`` was stored (``error`` NONE) or not: answer the held SyncGroups."""
        if self.state != GroupState.COMPLETING_REBALANCE or self.generation != generation:
            return []  # a rebalance began meanwhile; it answered them already
        if error != NONE:
            for member in self.members.values():
                member.assignment = b""
            return self._answer_syncs(error)
        self._transition(GroupState.STABLE, now)
        return self._answer_syncs(NONE)

    def _answer_syncs(self, error: int) -> list[Reply]:
        replies: list[Reply] = []
        for member in self.members.values():
            if member.awaiting_sync:
                member.awaiting_sync = False
                replies.append(self._sync_result(member, error))
        return replies

    def _sync_result(self, member: MemberMetadata, error: int) -> SyncResult:
        if error != NONE:
            return SyncResult(member.member_id, error)
        return SyncResult(member.member_id, NONE, self.protocol_type, self.protocol, member.assignment)

    def _check_member(self, member_id: str, group_instance_id: str | None, generation: int) -> int:
        if group_instance_id is not None and self.static_members.get(group_instance_id, member_id) != member_id:
            return FENCED_INSTANCE_ID
        if member_id not in self.members:
            return UNKNOWN_MEMBER_ID
        if generation != self.generation:
            return ILLEGAL_GENERATION
        return NONE

    # -- Heartbeat, LeaveGroup, session timeouts -------------------------------------------------------------

    def heartbeat(self, member_id: str, group_instance_id: str | None, generation: int, now: int) -> int:
        """A Heartbeat's error code; a known member's session is renewed."""
        if self.state == GroupState.DEAD:
            return COORDINATOR_NOT_AVAILABLE
        error = self._check_member(member_id, group_instance_id, generation)
        if error != NONE:
            return error
        member = self.members[member_id]
        member.heartbeat_deadline = now + member.session_timeout_ms
        return REBALANCE_IN_PROGRESS if self.state == GroupState.PREPARING_REBALANCE else NONE

    def validate_offset_commit(self, member_id: str, group_instance_id: str | None, generation: int, *,
                               transactional: bool = False) -> int:
        """Kafka's ``validateOffsetCommit``. An OffsetCommit: a simple consumer's (generation < 0, no member or
        instance id) is allowed only while the group has no members (else UNKNOWN_MEMBER_ID: only members
        commit then); a member's must name itself and this generation, and not while the assignment is being
        handed out (CompletingRebalance: REBALANCE_IN_PROGRESS); during PreparingRebalance it still may.
        A TxnOffsetCommit (``transactional``): a simple consumer's is allowed whatever the members, as is any
        generation < 0 while the group is Empty; a ``group.instance.id`` must be registered (else
        UNKNOWN_MEMBER_ID); no state refuses it."""
        if self.state == GroupState.DEAD:
            return COORDINATOR_NOT_AVAILABLE
        if generation < 0 and member_id == UNKNOWN_MEMBER and group_instance_id is None:
            return NONE if transactional or not self.members else UNKNOWN_MEMBER_ID
        if transactional and generation < 0 and self.state == GroupState.EMPTY:
            return NONE
        if transactional and group_instance_id is not None and group_instance_id not in self.static_members:
            return UNKNOWN_MEMBER_ID
        error = self._check_member(member_id, group_instance_id, generation)
        if error != NONE or transactional:
            return error
        return REBALANCE_IN_PROGRESS if self.state == GroupState.COMPLETING_REBALANCE else NONE

    def renew(self, member_id: str, now: int) -> None:
        """A valid offset commit also counts as a heartbeat."""
        member = self.members.get(member_id)
        if member is not None:
            member.heartbeat_deadline = now + member.session_timeout_ms

    def leave(self, member_id: str, group_instance_id: str | None, now: int) -> tuple[int, list[Reply]]:
        """One member of a LeaveGroup: its error code and the replies now due."""
        if self.state == GroupState.DEAD:
            return COORDINATOR_NOT_AVAILABLE, []
        if group_instance_id is not None:
            registered = self.static_members.get(group_instance_id)
            if registered is None:
                return UNKNOWN_MEMBER_ID, []
            if member_id != UNKNOWN_MEMBER and registered != member_id:
                return FENCED_INSTANCE_ID, []
            member_id = registered
        if member_id in self.pending_members:
            del self.pending_members[member_id]
            return NONE, self._try_complete_join(now)
        if member_id not in self.members:
            return UNKNOWN_MEMBER_ID, []
        return NONE, self._member_gone(member_id, now)

    def _remove_member(self, member_id: str) -> list[Reply]:
        member = self.members.pop(member_id)
        if member.group_instance_id is not None:
            self.static_members.pop(member.group_instance_id, None)
        if self.leader == member_id:
            self.leader = next(iter(self.members), None)
        replies: list[Reply] = []
        if member.awaiting_join:
            replies.append(JoinResult(member_id, UNKNOWN_MEMBER_ID))
        if member.awaiting_sync:
            replies.append(SyncResult(member_id, UNKNOWN_MEMBER_ID))
        return replies

    def _member_gone(self, member_id: str, now: int) -> list[Reply]:
        replies = self._remove_member(member_id)
        if self.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            return replies + self._prepare_rebalance(now) + self._try_complete_join(now)
        if self.state == GroupState.PREPARING_REBALANCE:
            return replies + self._try_complete_join(now)
        return replies

    def expire(self, now: int) -> list[Reply]:
        """What the deadlines due at ``now`` do: members past their session timeout are removed, pending
        member ids past theirs are forgotten, a join whose rebalance deadline passed completes."""
        replies: list[Reply] = []
        for member_id, deadline in list(self.pending_members.items()):
            if deadline <= now:
                del self.pending_members[member_id]
        expired = [i for i, m in self.members.items() if not m.kept_alive(now)]
        for member_id in expired:
            replies += self._remove_member(member_id)
        if expired and self.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            replies += self._prepare_rebalance(now)
        if self.state == GroupState.PREPARING_REBALANCE and self.rebalance_deadline is not None \
                and self.rebalance_deadline <= now:
            replies += self._rebalance_deadline_passed(now)
        else:
            replies += self._try_complete_join(now)
        return replies

    def _rebalance_deadline_passed(self, now: int) -> list[Reply]:
        """The join completes, unless members arrived during the initial delay of a group never formed: then
        it waits another delay, never past the rebalance timeout."""
        if self.initial_delay_remaining_ms > 0 and self.new_member_added:
            delay = min(self.initial_rebalance_delay_ms, self.initial_delay_remaining_ms)
            self.rebalance_deadline = now + delay
            self.initial_delay_remaining_ms -= delay
            self.new_member_added = False
            if delay > 0:
                return []
        return self._complete_join(now)

    def mark_dead(self, now: int) -> list[Reply]:
        """The group is deleted: held responses are answered COORDINATOR_NOT_AVAILABLE."""
        replies: list[Reply] = []
        for member in self.members.values():
            if member.awaiting_join:
                replies.append(JoinResult(member.member_id, COORDINATOR_NOT_AVAILABLE))
            if member.awaiting_sync:
                replies.append(SyncResult(member.member_id, COORDINATOR_NOT_AVAILABLE))
        self.members.clear()
        self.pending_members.clear()
        self.static_members.clear()
        self._transition(GroupState.DEAD, now)
        return replies
