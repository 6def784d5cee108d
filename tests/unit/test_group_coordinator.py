"""The async group coordinator (coordinator/group_coordinator.py) on a real GroupMetadataManager and store, time
from a FakeClock: held JoinGroup and SyncGroup responses, the group stored before the assignment goes out,
session timeouts through ``tick``, loading after a restart, offsets, deletion."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from kafka.protocol.consumer import ConsumerProtocolSubscription

from compactlog.broker.error_codes import (
    COORDINATOR_NOT_AVAILABLE,
    GROUP_ID_NOT_FOUND,
    GROUP_SUBSCRIBED_TO_TOPIC,
    ILLEGAL_GENERATION,
    INVALID_SESSION_TIMEOUT,
    NON_EMPTY_GROUP,
    NONE,
    UNKNOWN_MEMBER_ID,
)
from compactlog.coordinator.group_coordinator import GroupCoordinator
from compactlog.coordinator.group_metadata import GroupState
from compactlog.coordinator.group_metadata_manager import GroupMetadataManager, OffsetAndMetadata
from compactlog.coordinator.member_metadata import JoinParams
from compactlog.server_config import server_config
from compactlog.store import open_store
from support import FakeClock

SESSION = 10_000
SUBSCRIPTION = bytes(ConsumerProtocolSubscription(version=0, topics=["t"], user_data=None).encode())


async def run(fn: Callable[..., Any], *args: Any) -> Any:
    return fn(*args)


def coordinator(tmp_path, clock: FakeClock, **configs: object) -> GroupCoordinator:
    config = server_config({"group.initial.rebalance.delay.ms": 0, "offsets.topic.num.partitions": 3, **configs})
    store = open_store(tmp_path, clock)
    if "t" not in store.topics():
        store.create_topic("t", 2)
    groups = GroupCoordinator(GroupMetadataManager(store, config), config, run, clock)
    groups.load()
    return groups


def params(member_id: str = "", session: int = SESSION) -> JoinParams:
    return JoinParams(member_id, None, "client", "", 30_000, session, "consumer", (("range", SUBSCRIPTION),), False)


async def stable_pair(groups: GroupCoordinator) -> tuple[str, str]:
    """Two members, a the leader, synced at generation 2 with assignments b"A" and b"B"."""
    a = await groups.join("g", params())
    first_b = asyncio.ensure_future(groups.join("g", params()))
    await asyncio.sleep(0)
    assert not first_b.done()  # held until a rejoins
    a2 = await groups.join("g", params(a.member_id))
    b = await first_b
    assert a2.generation == b.generation == 2 and a2.leader == a.member_id and len(a2.members) == 2
    b_sync = asyncio.ensure_future(groups.sync("g", b.member_id, None, 2, None, None, {}))
    await asyncio.sleep(0)
    assert not b_sync.done()  # held until the leader's assignment is stored
    a_sync = await groups.sync("g", a.member_id, None, 2, None, None, {a.member_id: b"A", b.member_id: b"B"})
    assert a_sync.assignment == b"A" and (await b_sync).assignment == b"B"
    return a.member_id, b.member_id


def test_joins_and_syncs_are_held_and_the_group_is_stored_before_the_assignment(tmp_path) -> None:
    async def scenario() -> None:
        clock = FakeClock()
        groups = coordinator(tmp_path, clock)
        a, b = await stable_pair(groups)
        stored = groups.manager.group("g")
        assert stored is not None and stored.generation == 2 and stored.leader == a
        assert {m.member_id: m.assignment for m in stored.members} == {a: b"A", b: b"B"}
        assert groups.heartbeat("g", b, None, 2) == NONE
        assert groups.heartbeat("g", b, None, 1) == ILLEGAL_GENERATION

    asyncio.run(scenario())


def test_a_member_past_its_session_timeout_is_removed_on_a_tick(tmp_path) -> None:
    async def scenario() -> None:
        clock = FakeClock()
        groups = coordinator(tmp_path, clock)
        a, b = await stable_pair(groups)
        clock.advance(SESSION - 1)
        assert groups.heartbeat("g", a, None, 2) == NONE
        await groups.tick(clock())
        assert b in groups.groups["g"].members  # not yet
        clock.advance(1)
        await groups.tick(clock())
        assert list(groups.groups["g"].members) == [a]
        assert groups.groups["g"].state == GroupState.PREPARING_REBALANCE
        rejoined = await groups.join("g", params(a))
        assert rejoined.generation == 3 and [m[0] for m in rejoined.members] == [a]

    asyncio.run(scenario())


def test_the_last_member_leaving_stores_the_empty_group(tmp_path) -> None:
    async def scenario() -> None:
        clock = FakeClock()
        groups = coordinator(tmp_path, clock)
        a, b = await stable_pair(groups)
        assert await groups.leave("g", [(b, None), ("nobody", None)]) == [NONE, UNKNOWN_MEMBER_ID]
        assert await groups.leave("g", [(a, None)]) == [NONE]
        stored = groups.manager.group("g")
        assert stored is not None and stored.generation == 3 and stored.members == ()

    asyncio.run(scenario())


def test_a_restarted_coordinator_loads_groups_without_their_members(tmp_path) -> None:
    async def first() -> str:
        groups = coordinator(tmp_path, clock)
        a, _ = await stable_pair(groups)
        assert await groups.commit_offsets("g", a, None, 2, {("t", 0): OffsetAndMetadata(7)}) == NONE
        groups.manager.store.close()
        return a

    async def second(a: str) -> None:
        groups = coordinator(tmp_path, clock)
        group = groups.groups["g"]
        assert (group.state, group.generation, group.members) == (GroupState.EMPTY, 2, {})
        assert groups.manager.committed("g")[("t", 0)].offset == 7
        assert groups.heartbeat("g", a, None, 2) == UNKNOWN_MEMBER_ID  # members start over
        assert await groups.commit_offsets("g", a, None, 2, {("t", 0): OffsetAndMetadata(8)}) == UNKNOWN_MEMBER_ID
        assert await groups.commit_offsets("g", "", None, -1, {("t", 0): OffsetAndMetadata(9)}) == NONE
        assert groups.manager.committed("g")[("t", 0)].offset == 9
        rejoined = await groups.join("g", params())
        assert rejoined.generation == 3  # generations go on from the stored one

    clock = FakeClock()
    member = asyncio.run(first())
    asyncio.run(second(member))


def test_offsets_of_an_empty_group_expire_on_the_retention_check_and_the_group_goes(tmp_path) -> None:
    async def scenario() -> None:
        clock = FakeClock()
        groups = coordinator(tmp_path, clock, **{"offsets.retention.minutes": 1,
                                                 "offsets.retention.check.interval.ms": 1000})
        assert await groups.commit_offsets("simple", "", None, -1, {("t", 0): OffsetAndMetadata(3)}) == NONE
        clock.advance(59_000)
        await groups.tick(clock())
        assert groups.manager.committed("simple")
        clock.advance(1_000)
        await groups.tick(clock())
        assert groups.manager.committed("simple") == {}
        assert "simple" not in groups.groups  # no members, no offsets: forgotten, as Kafka does

    asyncio.run(scenario())


def test_deleting_groups_and_offsets(tmp_path) -> None:
    async def scenario() -> None:
        clock = FakeClock()
        groups = coordinator(tmp_path, clock)
        a, _ = await stable_pair(groups)
        await groups.commit_offsets("g", a, None, 2, {("t", 0): OffsetAndMetadata(5), ("u", 0): OffsetAndMetadata(1)})
        error, errors = await groups.delete_offsets("g", [("t", 0), ("u", 0)])
        assert error == NONE and errors == {("t", 0): GROUP_SUBSCRIBED_TO_TOPIC, ("u", 0): NONE}
        assert set(groups.manager.committed("g")) == {("t", 0)}
        assert await groups.delete_groups(["g", "missing"]) == {"g": NON_EMPTY_GROUP, "missing": GROUP_ID_NOT_FOUND}
        for member in list(groups.groups["g"].members):
            await groups.leave("g", [(member, None)])
        assert await groups.delete_groups(["g"]) == {"g": NONE}
        assert "g" not in groups.groups and groups.manager.committed("g") == {} and groups.manager.group("g") is None

    asyncio.run(scenario())


@pytest.mark.parametrize("session", [5_999, 1_800_001])
def test_a_session_timeout_outside_the_brokers_bounds_is_refused(tmp_path, session: int) -> None:
    groups = coordinator(tmp_path, FakeClock())
    assert asyncio.run(groups.join("g", params(session=session))).error == INVALID_SESSION_TIMEOUT


def test_a_group_that_cannot_be_stored_answers_coordinator_not_available_and_stays_unsynced(tmp_path) -> None:
    async def scenario() -> None:
        clock = FakeClock()
        groups = coordinator(tmp_path, clock)
        joined = await groups.join("g", params())
        groups.manager.store.close()  # every write now fails (StoreClosedError)
        synced = await groups.sync("g", joined.member_id, None, 1, None, None, {joined.member_id: b"A"})
        assert (synced.error, synced.assignment) == (COORDINATOR_NOT_AVAILABLE, b"")
        assert groups.groups["g"].state == GroupState.COMPLETING_REBALANCE

    asyncio.run(scenario())


def test_each_state_a_group_enters_is_logged_at_info(tmp_path, caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> None:
        groups = coordinator(tmp_path, FakeClock())
        with caplog.at_level("INFO", logger="compactlog.groups"):
            await stable_pair(groups)
        lines = [r.getMessage() for r in caplog.records if r.levelname == "INFO"]
        # a state entered and left within one request (Empty, PreparingRebalance of the first join) is not
        assert lines == ["group g: CompletingRebalance, generation 1, 1 members",
                         "group g: PreparingRebalance, generation 1, 2 members",
                         "group g: CompletingRebalance, generation 2, 2 members",
                         "group g: Stable, generation 2, 2 members"]

    asyncio.run(scenario())
