"""Random interleavings of joins (v4's two steps and older ones, static members among them), syncs (current
and stale generations, the leader's stored or failing), heartbeats, leaves and time passing, against the
group state machine (coordinator/group_metadata.py), with the held responses modelled as the coordinator
holds them.

Invariants, after every step:

* no held response is forgotten and none is answered twice: the members waiting on a JoinGroup (SyncGroup)
  response are exactly those the state machine marks awaiting one, and every reply goes to a member that
  was waiting;
* the states hold what Kafka's do: Empty has no members, Stable and CompletingRebalance no member awaiting
  a join, Stable and PreparingRebalance none awaiting a sync, PreparingRebalance a deadline;
* a group with members has one of them as leader, one without none; each instance id names the one member
  that has it; generations never go down.
"""

from __future__ import annotations

import itertools

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from compactlog.broker.error_codes import COORDINATOR_NOT_AVAILABLE, NONE
from compactlog.coordinator.group_metadata import GroupMetadata, GroupState
from compactlog.coordinator.member_metadata import JoinParams, JoinResult, Reply
from support import FakeClock

SESSION = 10_000
REBALANCE = 20_000
INSTANCES = st.sampled_from([None, None, "i1", "i2"])  # group.instance.id: most members have none
PROTOCOLS = st.sampled_from([(("range", b"r"),), (("range", b"r"), ("roundrobin", b"rr")), (("roundrobin", b""),)])


class GroupMembership(RuleBasedStateMachine):
    initial_rebalance_delay_ms = 0

    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.group = GroupMetadata("g", self.initial_rebalance_delay_ms, 1_000, self.clock())
        self.ids = itertools.count()
        self.known: list[str] = []  # every member id handed out, current or not
        self.instance: dict[str, str | None] = {}  # member id -> the instance id it joined with
        self.waiting_join: set[str] = set()
        self.waiting_sync: set[str] = set()
        self.generation = 0

    def deliver(self, replies: list[Reply]) -> None:
        for reply in replies:
            waiting = self.waiting_join if isinstance(reply, JoinResult) else self.waiting_sync
            assert reply.member_id in waiting, f"a reply to {reply.member_id}, which does not wait: {reply}"
            waiting.discard(reply.member_id)
            if isinstance(reply, JoinResult) and reply.member_id and reply.member_id not in self.known:
                self.known.append(reply.member_id)

    def member(self, data: st.DataObject) -> str:
        return data.draw(st.sampled_from(self.known)) if self.known else ""

    @rule(v4=st.booleans(), protocols=PROTOCOLS, instance=INSTANCES)
    def join_without_id(self, v4: bool, protocols: tuple[tuple[str, bytes], ...], instance: str | None) -> None:
        params = JoinParams("", instance, "c", "", REBALANCE, SESSION, "consumer", protocols, v4)
        member_id, replies = self.group.join(params, f"c-{next(self.ids)}", self.clock())
        self.instance[member_id] = instance
        self.waiting_join.add(member_id)
        self.deliver(replies)

    @rule(data=st.data(), protocols=PROTOCOLS)
    def join_with_id(self, data: st.DataObject, protocols: tuple[tuple[str, bytes], ...]) -> None:
        member_id = self.member(data)
        if not member_id or member_id in self.waiting_join:
            return  # a client does not send a second JoinGroup while its first waits
        params = JoinParams(member_id, self.instance.get(member_id), "c", "", REBALANCE, SESSION, "consumer",
                            protocols, True)
        held, replies = self.group.join(params, "unused", self.clock())
        self.waiting_join.add(held)
        self.deliver(replies)

    @rule(data=st.data(), stale=st.booleans(), stored=st.booleans())
    def sync(self, data: st.DataObject, stale: bool, stored: bool) -> None:
        member_id = self.member(data)
        if not member_id or member_id in self.waiting_sync or member_id in self.waiting_join:
            return
        generation = self.group.generation - (1 if stale else 0)
        assignments = {m: m.encode() for m in self.group.members}
        self.waiting_sync.add(member_id)
        replies, store = self.group.sync(member_id, self.instance.get(member_id), generation, None, None,
                                         assignments, self.clock())
        self.deliver(replies)
        if store:
            self.deliver(self.group.assignment_stored(generation, NONE if stored else COORDINATOR_NOT_AVAILABLE,
                                                      self.clock()))
            assert (self.group.state == GroupState.STABLE) == stored  # the leader's stored sync completes it

    @rule(data=st.data())
    def heartbeat(self, data: st.DataObject) -> None:
        member_id = self.member(data)
        if member_id:
            self.group.heartbeat(member_id, self.instance.get(member_id), self.group.generation, self.clock())

    @rule(data=st.data())
    def leave(self, data: st.DataObject) -> None:
        """A LeaveGroup, also of a member whose JoinGroup or SyncGroup waits (sent on another connection, as
        an admin client's removal of members is)."""
        member_id = self.member(data)
        if member_id:
            _, replies = self.group.leave(member_id, self.instance.get(member_id), self.clock())
            self.deliver(replies)

    @rule(ms=st.sampled_from([1, 1_000, SESSION, REBALANCE]))
    def time_passes(self, ms: int) -> None:
        self.clock.advance(ms)
        self.deliver(self.group.expire(self.clock()))

    @invariant()
    def held_responses_are_the_state_machines(self) -> None:
        members = self.group.members.values()
        assert self.waiting_join == {m.member_id for m in members if m.awaiting_join}
        assert self.waiting_sync == {m.member_id for m in members if m.awaiting_sync}

    @invariant()
    def states_hold_what_kafkas_do(self) -> None:
        group, members = self.group, list(self.group.members.values())
        if group.state == GroupState.EMPTY:
            assert not members
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            assert members and not any(m.awaiting_join for m in members)
        if group.state in (GroupState.STABLE, GroupState.PREPARING_REBALANCE):
            assert not any(m.awaiting_sync for m in members)
        if group.state == GroupState.PREPARING_REBALANCE:
            assert group.rebalance_deadline is not None and group.next_deadline() is not None
        assert (group.leader in group.members) if members else group.leader is None
        assert group.static_members == {m.group_instance_id: m.member_id for m in members
                                        if m.group_instance_id is not None}
        assert group.generation >= self.generation
        self.generation = group.generation


class GroupMembershipWithInitialDelay(GroupMembership):
    """The same with ``group.initial.rebalance.delay.ms`` (each Empty group's join waits it out)."""

    initial_rebalance_delay_ms = 3_000


GroupMembership.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
GroupMembershipWithInitialDelay.TestCase.settings = settings(max_examples=150, stateful_step_count=40,
                                                             deadline=None)
test_group_membership = GroupMembership.TestCase
test_group_membership_with_initial_delay = GroupMembershipWithInitialDelay.TestCase
