"""The group state machine's transitions (coordinator/group_metadata.py), on a FakeClock's milliseconds."""

from __future__ import annotations

from compactlog.broker.error_codes import (
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
from compactlog.coordinator.group_metadata import GroupMetadata, GroupState
from compactlog.coordinator.member_metadata import JoinParams, JoinResult, SyncResult, select_protocol
from support import FakeClock

SESSION = 10_000
REBALANCE = 30_000


def params(member_id: str = "", *, instance: str | None = None, protocols: tuple[tuple[str, bytes], ...] = (
        ("range", b"r"), ("roundrobin", b"rr")), v4: bool = False, protocol_type: str = "consumer") -> JoinParams:
    return JoinParams(member_id, instance, "client", "", REBALANCE, SESSION, protocol_type, protocols, v4)


def group(clock: FakeClock, delay: int = 0, max_size: int = 100) -> GroupMetadata:
    return GroupMetadata("g", delay, max_size, clock())


def joined(replies: list, member_id: str) -> JoinResult:
    found = [r for r in replies if isinstance(r, JoinResult) and r.member_id == member_id]
    assert len(found) == 1, replies
    return found[0]


def synced(replies: list, member_id: str) -> SyncResult:
    found = [r for r in replies if isinstance(r, SyncResult) and r.member_id == member_id]
    assert len(found) == 1, replies
    return found[0]


def stable_pair(clock: FakeClock) -> GroupMetadata:
    """A Stable group of members a (the leader) and b, generation 2, assignments b"A" and b"B"."""
    g = group(clock)
    _, replies = g.join(params(), "a", clock())
    assert joined(replies, "a").generation == 1
    g.sync("a", None, 1, None, None, {"a": b"x"}, clock())
    g.assignment_stored(1, NONE, clock())
    _, replies = g.join(params(), "b", clock())  # a new member: a must rejoin
    assert replies == [] and g.state == GroupState.PREPARING_REBALANCE
    _, replies = g.join(params("a"), "unused", clock())
    assert {joined(replies, m).generation for m in "ab"} == {2}
    assert joined(replies, "a").members and not joined(replies, "b").members  # only the leader gets them
    held, store = g.sync("b", None, 2, None, None, {}, clock())
    assert held == [] and not store
    replies, store = g.sync("a", None, 2, "consumer", "range", {"a": b"A", "b": b"B"}, clock())
    assert replies == [] and store
    replies = g.assignment_stored(2, NONE, clock())
    assert synced(replies, "b").assignment == b"B" and synced(replies, "a").assignment == b"A"
    assert g.state == GroupState.STABLE
    return g


def test_a_first_member_makes_generation_1_and_leads():
    clock = FakeClock()
    g = group(clock)
    member_id, replies = g.join(params(), "a", clock())
    assert member_id == "a"
    result = joined(replies, "a")
    assert (result.error, result.generation, result.leader, result.protocol) == (NONE, 1, "a", "range")
    assert result.members == (("a", None, b"r"),)
    assert g.state == GroupState.COMPLETING_REBALANCE


def test_join_v4_without_member_id_gets_one_and_must_rejoin_with_it():
    clock = FakeClock()
    g = group(clock)
    _member_id, replies = g.join(params(v4=True), "client-1", clock())
    assert joined(replies, "client-1").error == MEMBER_ID_REQUIRED
    assert g.state == GroupState.EMPTY and g.pending_members
    _, replies = g.join(params("client-1", v4=True), "unused", clock())
    assert joined(replies, "client-1").error == NONE and "client-1" in g.members


def test_a_pending_member_id_expires_after_the_session_timeout():
    clock = FakeClock()
    g = group(clock)
    g.join(params(v4=True), "p", clock())
    clock.advance(SESSION)
    g.expire(clock())
    _, replies = g.join(params("p", v4=True), "unused", clock())
    assert joined(replies, "p").error == UNKNOWN_MEMBER_ID


def test_the_rebalance_waits_for_every_known_member_to_rejoin():
    clock = FakeClock()
    g = stable_pair(clock)
    _, replies = g.join(params("a"), "unused", clock())  # the leader rejoins: a rebalance
    assert replies == [] and g.state == GroupState.PREPARING_REBALANCE
    assert g.heartbeat("b", None, 2, clock()) == REBALANCE_IN_PROGRESS
    _, replies = g.join(params("b"), "unused", clock())
    assert joined(replies, "a").generation == joined(replies, "b").generation == 3


def test_members_that_do_not_rejoin_by_the_rebalance_timeout_are_removed():
    clock = FakeClock()
    g = stable_pair(clock)
    g.join(params("a"), "unused", clock())
    clock.advance(REBALANCE - 1)
    g.heartbeat("b", None, 2, clock())  # b stays alive but does not rejoin
    assert g.expire(clock()) == []
    clock.advance(1)
    replies = g.expire(clock())
    assert joined(replies, "a").generation == 3 and list(g.members) == ["a"]


def test_the_initial_delay_holds_a_new_group_and_extends_while_members_arrive():
    clock = FakeClock()
    g = group(clock, delay=3000)
    _, replies = g.join(params(), "a", clock())
    assert replies == [] and g.state == GroupState.PREPARING_REBALANCE
    clock.advance(2000)
    assert g.join(params(), "b", clock())[1] == []  # every member joined, but the delay holds
    clock.advance(1000)
    assert g.expire(clock()) == []  # b arrived during the delay: waits another delay
    clock.advance(3000)
    replies = g.expire(clock())
    assert joined(replies, "a").generation == 1 and joined(replies, "b").generation == 1


def test_without_an_initial_delay_an_empty_groups_join_completes_at_once_despite_pending_member_ids():
    clock = FakeClock()
    g = group(clock, delay=0)
    g.join(params(v4=True), "a", clock())
    g.join(params(v4=True), "b", clock())  # b was sent its id and has not come back with it yet
    _, replies = g.join(params("a", v4=True), "unused", clock())
    assert joined(replies, "a").generation == 1 and list(g.members) == ["a"]  # Kafka's InitialDelayedJoin(0)
    assert g.state == GroupState.COMPLETING_REBALANCE and "b" in g.pending_members
    g.sync("a", None, 1, None, None, {"a": b"A"}, clock())
    _, replies = g.join(params("b", v4=True), "unused", clock())  # b's join starts the next rebalance
    assert synced(replies, "a").error == REBALANCE_IN_PROGRESS and g.state == GroupState.PREPARING_REBALANCE


def test_only_a_group_never_formed_extends_its_initial_delay_for_new_members():
    clock = FakeClock()
    g = group(clock, delay=3000)
    g.join(params(), "a", clock())
    clock.advance(3000)
    assert joined(g.expire(clock()), "a").generation == 1
    g.leave("a", None, clock())
    assert g.state == GroupState.EMPTY and g.generation == 2
    g.join(params(), "b", clock())  # an Empty group again: the initial delay holds it
    clock.advance(2000)
    assert g.join(params(), "c", clock())[1] == []
    clock.advance(1000)  # c arrived during the delay, but the group had a generation: no second delay
    replies = g.expire(clock())
    assert joined(replies, "b").generation == joined(replies, "c").generation == 3


def test_the_initial_delay_never_passes_the_rebalance_timeout():
    clock = FakeClock()
    g = group(clock, delay=REBALANCE * 2)
    g.join(params(), "a", clock())
    clock.advance(REBALANCE)
    assert joined(g.expire(clock()), "a").error == NONE


def test_protocols_are_chosen_by_vote_among_those_all_support():
    clock = FakeClock()
    g = group(clock)
    g.join(params(protocols=(("sticky", b""), ("range", b""), ("roundrobin", b""))), "a", clock())
    g.join(params(protocols=(("sticky", b""), ("range", b""))), "b", clock())
    g.join(params(protocols=(("roundrobin", b""), ("range", b""), ("sticky", b""))), "c", clock())
    assert select_protocol(g.members.values()) == "sticky"  # 2 votes to 1; roundrobin is not common
    del g.members["b"]
    assert select_protocol(g.members.values()) == "sticky"  # a tie: the protocol voted for first


def test_a_member_without_a_common_protocol_is_inconsistent():
    clock = FakeClock()
    g = stable_pair(clock)
    _, replies = g.join(params(protocols=(("other", b""),)), "c", clock())
    assert joined(replies, "").error == INCONSISTENT_GROUP_PROTOCOL
    _, replies = g.join(params(protocol_type="connect"), "c", clock())
    assert joined(replies, "").error == INCONSISTENT_GROUP_PROTOCOL


def test_sync_checks_member_and_generation():
    clock = FakeClock()
    g = stable_pair(clock)
    assert synced(g.sync("zz", None, 2, None, None, {}, clock())[0], "zz").error == UNKNOWN_MEMBER_ID
    assert synced(g.sync("b", None, 1, None, None, {}, clock())[0], "b").error == ILLEGAL_GENERATION
    assert synced(g.sync("b", None, 2, None, "roundrobin", {}, clock())[0], "b").error == \
        INCONSISTENT_GROUP_PROTOCOL
    assert synced(g.sync("b", None, 2, None, None, {}, clock())[0], "b").assignment == b"B"  # Stable: at once


def test_a_rebalance_answers_held_syncs_with_rebalance_in_progress():
    clock = FakeClock()
    g = group(clock)
    g.join(params(), "a", clock())
    g.join(params(), "b", clock())
    g.join(params("a"), "unused", clock())  # generation 1 is a and b
    g.join(params("b"), "unused", clock())
    generation = g.generation
    assert generation == 2
    assert g.sync("b", None, generation, None, None, {}, clock())[0] == []
    replies = g.join(params(), "c", clock())[1]  # c joins before the leader synced
    assert synced(replies, "b").error == REBALANCE_IN_PROGRESS
    assert synced(g.sync("b", None, generation, None, None, {}, clock())[0], "b").error == REBALANCE_IN_PROGRESS


def test_a_failed_store_answers_the_held_syncs_with_its_error():
    clock = FakeClock()
    g = group(clock)
    g.join(params(), "a", clock())
    assert g.sync("a", None, 1, None, None, {"a": b"x"}, clock())[1]
    replies = g.assignment_stored(1, COORDINATOR_NOT_AVAILABLE, clock())
    assert synced(replies, "a").error == COORDINATOR_NOT_AVAILABLE and g.state == GroupState.COMPLETING_REBALANCE


def test_heartbeats_by_state():
    clock = FakeClock()
    g = stable_pair(clock)
    assert g.heartbeat("b", None, 2, clock()) == NONE
    assert g.heartbeat("b", None, 1, clock()) == ILLEGAL_GENERATION
    assert g.heartbeat("nobody", None, 2, clock()) == UNKNOWN_MEMBER_ID
    g.leave("a", None, clock())
    g.leave("b", None, clock())
    assert g.state == GroupState.EMPTY
    assert g.heartbeat("b", None, 2, clock()) == UNKNOWN_MEMBER_ID


def test_a_member_missing_its_session_timeout_is_removed_and_the_group_rebalances():
    clock = FakeClock()
    g = stable_pair(clock)
    clock.advance(SESSION - 1)
    g.heartbeat("a", None, 2, clock())
    clock.advance(1)
    assert g.expire(clock()) == []
    assert "b" not in g.members and g.state == GroupState.PREPARING_REBALANCE
    _, replies = g.join(params("a"), "unused", clock())
    assert joined(replies, "a").generation == 3 and joined(replies, "a").members == (("a", None, b"r"),)


def test_a_member_whose_join_is_held_does_not_time_out():
    clock = FakeClock()
    g = stable_pair(clock)
    g.join(params("a"), "unused", clock())
    clock.advance(SESSION * 2)  # a waits on its JoinGroup; b neither heartbeats nor rejoins
    replies = g.expire(clock())
    assert joined(replies, "a").error == NONE and list(g.members) == ["a"]


def test_leave_starts_a_rebalance_and_the_last_leave_empties_the_group():
    clock = FakeClock()
    g = stable_pair(clock)
    assert g.leave("b", None, clock()) == (NONE, [])
    assert g.state == GroupState.PREPARING_REBALANCE
    assert g.leave("b", None, clock())[0] == UNKNOWN_MEMBER_ID
    error, _replies = g.leave("a", None, clock())
    assert error == NONE and g.state == GroupState.EMPTY and g.generation == 3


def test_offset_commits_by_membership():
    clock = FakeClock()
    g = group(clock)
    assert g.validate_offset_commit("", None, -1) == NONE  # a simple consumer on an empty group
    g = stable_pair(clock)
    assert g.validate_offset_commit("", None, -1) == UNKNOWN_MEMBER_ID
    assert g.validate_offset_commit("b", None, 2) == NONE
    assert g.validate_offset_commit("b", None, 1) == ILLEGAL_GENERATION
    g.join(params("a"), "unused", clock())
    assert g.validate_offset_commit("b", None, 2) == NONE  # still allowed while preparing
    g.join(params("b"), "unused", clock())
    assert g.validate_offset_commit("b", None, 3) == REBALANCE_IN_PROGRESS


def test_a_static_member_rejoining_takes_its_place_without_a_rebalance():
    clock = FakeClock()
    g = group(clock)
    g.join(params(instance="i1"), "a", clock())
    g.sync("a", "i1", 1, None, None, {"a": b"A"}, clock())
    g.assignment_stored(1, NONE, clock())
    _member_id, replies = g.join(params(instance="i1"), "a2", clock())  # restarted: no member id
    result = joined(replies, "a2")
    assert (result.error, result.generation, g.state) == (NONE, 1, GroupState.STABLE)
    assert result.leader == "a2" and result.skip_assignment  # the leader keeps the stored assignment
    assert synced(g.sync("a2", "i1", 1, None, None, {}, clock())[0], "a2").assignment == b"A"
    assert g.heartbeat("a", "i1", 1, clock()) == FENCED_INSTANCE_ID  # the old incarnation is fenced
    _, replies = g.join(params("a", instance="i1"), "unused", clock())
    assert joined(replies, "a").error == FENCED_INSTANCE_ID


def test_the_group_max_size_refuses_more_members():
    clock = FakeClock()
    g = group(clock, max_size=1)
    g.join(params(), "a", clock())
    assert joined(g.join(params(), "b", clock())[1], "b").error == GROUP_MAX_SIZE_REACHED


def test_a_dead_group_answers_coordinator_not_available():
    clock = FakeClock()
    g = group(clock, delay=1000)
    g.join(params(), "a", clock())
    replies = g.mark_dead(clock())
    assert joined(replies, "a").error == COORDINATOR_NOT_AVAILABLE
    assert joined(g.join(params(), "b", clock())[1], "").error == COORDINATOR_NOT_AVAILABLE
