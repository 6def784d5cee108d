"""The group coordinator of ``compactlog serve`` (Kafka's classic ``GroupCoordinator``): every group's
:class:`~.group_metadata.GroupMetadata` and the responses held for its members, on the server's event loop.

The decisions are the state machine's; this module holds each member's JoinGroup and SyncGroup response as a
future until the state machine addresses a reply to that member, persists the group and the offsets through
the :class:`~.group_metadata_manager.GroupMetadataManager` (its blocking calls in the broker's storage threads),
and runs the deadlines: a tick on the loop every :data:`TICK_S` calls :meth:`GroupCoordinator.expire` with the
injectable clock's time (ms), and the offsets' expiry every ``offsets.retention.check.interval.ms``.

Rules, as Kafka's:

* a group's metadata (generation, protocol, leader, members with their assignments) is stored after every
  completed SyncGroup of a leader, before any member gets its assignment, and when a rebalance leaves the
  group empty; at start every stored group is loaded with its generation but no members: members start
  over, as on a Kafka coordinator failover (their old ids answer UNKNOWN_MEMBER_ID and they rejoin);
* an offset commit is acknowledged only once the manager has made it durable;
* a group exists while it has members or committed offsets; deleting one needs it empty (NON_EMPTY_GROUP).

Logged on ``compactlog.groups``, as Kafka's coordinator logs its groups: at INFO the state a group is in after
a request or a deadline changed it (with its generation and member count); at DEBUG every JoinGroup, SyncGroup
and Heartbeat and every held response answered: the broker's half of a rebalance's timeline.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from ..broker.error_codes import (
    COORDINATOR_NOT_AVAILABLE,
    GROUP_ID_NOT_FOUND,
    GROUP_SUBSCRIBED_TO_TOPIC,
    INVALID_GROUP_ID,
    INVALID_SESSION_TIMEOUT,
    NON_EMPTY_GROUP,
    NONE,
    UNKNOWN_MEMBER_ID,
)
from ..errors import CompactLogError
from ..server_config import ServerConfig
from .group_metadata import UNKNOWN_MEMBER, GroupMetadata, GroupState
from .group_metadata_manager import (
    GroupMetadataManager,
    GroupSnapshot,
    MemberSnapshot,
    OffsetAndMetadata,
    TopicPartition,
)
from .member_metadata import JoinParams, JoinResult, Reply, SyncResult
from .offset_expiry import subscribed_topics

__all__ = ["TICK_S", "GroupCoordinator", "snapshot"]

log = logging.getLogger("compactlog.groups")
# How often (seconds of the event loop) the coordinator looks for deadlines that passed.
TICK_S = 0.05
Runner = Callable[..., Awaitable[Any]]


class GroupCoordinator:
    """Every group of this broker; :meth:`start` loads them and starts the tick, :meth:`stop` ends it."""

    def __init__(self, manager: GroupMetadataManager, config: ServerConfig, run: Runner,
                 clock: Callable[[], int]) -> None:
        self.manager = manager
        self.config = config
        self._run = run  # a blocking call in the broker's storage threads
        self._clock = clock
        self.groups: dict[str, GroupMetadata] = {}
        self._joins: dict[tuple[str, str], asyncio.Future[JoinResult]] = {}
        self._syncs: dict[tuple[str, str], asyncio.Future[SyncResult]] = {}
        self._tick: asyncio.Task[None] | None = None
        self._next_offsets_expiry = 0
        self._logged_states: dict[str, GroupState] = {}  # each group's state as last logged

    # -- life cycle ------------------------------------------------------------------------------------------

    def load(self) -> None:
        """Load every stored group (blocking: before the broker serves)."""
        now = self._clock()
        for group_id, group in self.manager.load().items():
            metadata = self._new_group(group_id, now)
            if group.snapshot is not None:
                metadata.generation = group.snapshot.generation
                metadata.protocol_type = group.snapshot.protocol_type
        self._next_offsets_expiry = now + self.config.offsets_retention_check_interval_ms

    async def start(self) -> None:
        """Start the deadlines' tick on the running loop."""
        self._tick = asyncio.get_running_loop().create_task(self._ticks())

    async def stop(self) -> None:
        if self._tick is not None:
            self._tick.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._tick
            self._tick = None

    async def _ticks(self) -> None:
        while True:
            await asyncio.sleep(TICK_S)
            try:
                await self.tick(self._clock())
            except Exception:  # logged; the next tick tries again, so that no group's deadlines stop
                log.exception("group coordinator tick failed")

    async def tick(self, now: int) -> None:
        """What is due at ``now``: members' and joins' deadlines, and every
        ``offsets.retention.check.interval.ms`` the expiry of committed offsets."""
        await self.expire(now)
        if now >= self._next_offsets_expiry:
            self._next_offsets_expiry = now + self.config.offsets_retention_check_interval_ms
            await self._run(self.manager.expire_offsets, now, self.is_empty)
            await self._remove_forgotten_groups(now)

    async def _remove_forgotten_groups(self, now: int) -> None:
        """Kafka's cleanup after an expiry: a group with no members and no offsets left is dead and forgotten
        (its metadata gets a tombstone), as if deleted."""
        empty = [g.group_id for g in self.groups.values() if g.state == GroupState.EMPTY and g.is_empty]
        without_offsets = await self._run(_without_offsets, self.manager, empty)
        for group_id in without_offsets:
            group = self.groups.get(group_id)
            if group is not None and group.state == GroupState.EMPTY and group.is_empty:  # nobody came meanwhile
                await self._forget(group, now)

    async def _forget(self, group: GroupMetadata, now: int) -> None:
        """The group is dead: its held responses answered, gone from memory, its metadata given a tombstone."""
        self._deliver(group.group_id, group.mark_dead(now))
        del self.groups[group.group_id]
        self._logged_states.pop(group.group_id, None)
        await self._run(self.manager.delete_group, group.group_id)

    async def expire(self, now: int) -> None:
        """Run every group's deadlines due at ``now`` and answer what they decide."""
        for group in list(self.groups.values()):
            deadline = group.next_deadline()
            if deadline is not None and deadline <= now:
                was = group.state
                self._deliver(group.group_id, group.expire(now))
                await self._store_if_emptied(group, was)

    def group_for_commit(self, group_id: str) -> GroupMetadata:
        """The group an offset commit names, created empty when not known, as Kafka creates it."""
        group = self.groups.get(group_id)
        return group if group is not None else self._new_group(group_id, self._clock())

    def is_empty(self, group_id: str) -> bool:
        """Whether a group has no members (its offsets may expire); a group not known here has none."""
        group = self.groups.get(group_id)
        return group is None or group.is_empty

    # -- replies ---------------------------------------------------------------------------------------------

    def _new_group(self, group_id: str, now: int) -> GroupMetadata:
        group = GroupMetadata(group_id, self.config.group_initial_rebalance_delay_ms, self.config.group_max_size,
                              now)
        self.groups[group_id] = group
        return group

    def _deliver(self, group_id: str, replies: Iterable[Reply]) -> None:
        group = self.groups.get(group_id)
        if group is not None and group.state != self._logged_states.get(group_id):
            # Kafka's INFO lines of a group's life: each state it enters, with its generation and members
            self._logged_states[group_id] = group.state
            log.info("group %s: %s, generation %d, %d members", group_id, group.state.value, group.generation,
                     len(group.members))
        for reply in replies:
            log.debug("group %s: answering %s", group_id, reply)
            waiters: dict[tuple[str, str], Any] = self._joins if isinstance(reply, JoinResult) else self._syncs
            future = waiters.pop((group_id, reply.member_id), None)
            if future is not None and not future.done():
                future.set_result(reply)

    def _hold(self, waiters: dict[tuple[str, str], asyncio.Future[Any]], group_id: str, member_id: str,
              superseded: Reply) -> asyncio.Future[Any]:
        """A future for a member's held response; a response the member was still waiting for is answered
        ``superseded`` (the member sent the request again)."""
        old = waiters.get((group_id, member_id))
        if old is not None and not old.done():
            old.set_result(superseded)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        waiters[(group_id, member_id)] = future
        return future

    async def _store_if_emptied(self, group: GroupMetadata, was: GroupState) -> None:
        """Kafka stores a group whose rebalance left it without members (its generation went up)."""
        if group.state == GroupState.EMPTY and was != GroupState.EMPTY:
            try:
                await self._run(self.manager.store_group, snapshot(group))
            except CompactLogError:  # logged: the stored generation lags, and nobody waits on it
                log.exception("group %s: storing its empty state failed", group.group_id)

    # -- JoinGroup, SyncGroup, Heartbeat, LeaveGroup -----------------------------------------------------------

    async def join(self, group_id: str, params: JoinParams) -> JoinResult:
        if not group_id:
            return JoinResult(params.member_id, INVALID_GROUP_ID)
        if not self.config.group_min_session_timeout_ms <= params.session_timeout_ms \
                <= self.config.group_max_session_timeout_ms:
            return JoinResult(params.member_id, INVALID_SESSION_TIMEOUT)
        now = self._clock()
        group = self.groups.get(group_id)
        if group is None:
            if params.member_id != UNKNOWN_MEMBER:
                return JoinResult(params.member_id, UNKNOWN_MEMBER_ID)
            group = self._new_group(group_id, now)
        log.debug("group %s: JoinGroup of member %r (%s)", group_id, params.member_id, group.state.value)
        was = group.state
        new_member_id = f"{params.client_id}-{uuid.uuid4()}"
        member_id, replies = group.join(params, new_member_id, now)
        future = self._hold(self._joins, group_id, member_id, JoinResult(member_id, UNKNOWN_MEMBER_ID))
        self._deliver(group_id, replies)
        await self._store_if_emptied(group, was)
        result: JoinResult = await future
        return result

    async def sync(self, group_id: str, member_id: str, group_instance_id: str | None, generation: int,
                   protocol_type: str | None, protocol: str | None, assignments: Mapping[str, bytes]) -> SyncResult:
        group = self.groups.get(group_id)
        if group is None:
            return SyncResult(member_id, UNKNOWN_MEMBER_ID)
        log.debug("group %s: SyncGroup of member %r, generation %d (%s)", group_id, member_id, generation,
                  group.state.value)
        replies, store = group.sync(member_id, group_instance_id, generation, protocol_type, protocol, assignments,
                                    self._clock())
        future = self._hold(self._syncs, group_id, member_id, SyncResult(member_id, UNKNOWN_MEMBER_ID))
        self._deliver(group_id, replies)
        if store:
            try:
                await self._run(self.manager.store_group, snapshot(group))
                error = NONE
            except CompactLogError:  # Kafka's answer to a failed group write: find the coordinator and retry
                log.exception("group %s: storing generation %d failed", group_id, generation)
                error = COORDINATOR_NOT_AVAILABLE
            self._deliver(group_id, group.assignment_stored(generation, error, self._clock()))
        result: SyncResult = await future
        return result

    def heartbeat(self, group_id: str, member_id: str, group_instance_id: str | None, generation: int) -> int:
        group = self.groups.get(group_id)
        if group is None:
            return UNKNOWN_MEMBER_ID
        error = group.heartbeat(member_id, group_instance_id, generation, self._clock())
        log.debug("group %s: Heartbeat of member %r, generation %d: error %d", group_id, member_id, generation, error)
        return error

    async def leave(self, group_id: str, members: list[tuple[str, str | None]]) -> list[int]:
        """Each leaving (member id, instance id)'s error code."""
        group = self.groups.get(group_id)
        if group is None:
            return [UNKNOWN_MEMBER_ID] * len(members)
        was = group.state
        errors = []
        for member_id, instance_id in members:
            error, replies = group.leave(member_id, instance_id, self._clock())
            self._deliver(group_id, replies)
            errors.append(error)
        await self._store_if_emptied(group, was)
        return errors

    # -- offsets ---------------------------------------------------------------------------------------------

    async def commit_offsets(self, group_id: str, member_id: str, group_instance_id: str | None, generation: int,
                             offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> int:
        """An OffsetCommit's error code for all its partitions; NONE once the offsets are durable."""
        if not group_id:
            return INVALID_GROUP_ID
        group = self.groups.get(group_id)
        if group is None:
            if generation >= 0 or member_id != UNKNOWN_MEMBER:
                return UNKNOWN_MEMBER_ID  # no such member: the group has none
            group = self._new_group(group_id, self._clock())
        error = group.validate_offset_commit(member_id, group_instance_id, generation)
        if error != NONE:
            return error
        group.renew(member_id, self._clock())
        if offsets:
            await self._run(self.manager.store_offsets, group_id, offsets)
        return NONE

    async def delete_offsets(self, group_id: str,
                             partitions: list[TopicPartition]) -> tuple[int, dict[TopicPartition, int]]:
        """OffsetDelete: the group's error and each partition's; the offsets of a topic that a member of the
        group subscribes to stay (GROUP_SUBSCRIBED_TO_TOPIC)."""
        group = self.groups.get(group_id)
        if group is None or group.state == GroupState.DEAD:
            return GROUP_ID_NOT_FOUND, {}
        if group.members and group.protocol_type != "consumer":
            return NON_EMPTY_GROUP, {}  # another protocol's subscriptions cannot be read
        subscribed = subscribed_topics(snapshot(group)) if group.members else set()
        errors = {tp: GROUP_SUBSCRIBED_TO_TOPIC if subscribed is None or tp[0] in subscribed else NONE
                  for tp in partitions}
        deletable = [tp for tp, error in errors.items() if error == NONE]
        if deletable:
            await self._run(self.manager.delete_offsets, group_id, deletable)
        return NONE, errors

    async def delete_groups(self, group_ids: list[str]) -> dict[str, int]:
        """DeleteGroups: each group's error code; a deleted group's metadata and offsets get tombstones."""
        results: dict[str, int] = {}
        for group_id in group_ids:
            group = self.groups.get(group_id)
            if not group_id:
                results[group_id] = INVALID_GROUP_ID
            elif group is None or group.state == GroupState.DEAD:
                results[group_id] = GROUP_ID_NOT_FOUND
            elif not group.is_empty:
                results[group_id] = NON_EMPTY_GROUP
            else:
                await self._forget(group, self._clock())
                results[group_id] = NONE
        return results


def snapshot(group: GroupMetadata) -> GroupSnapshot:
    """What the manager stores of a group (Kafka's GroupMetadataValue)."""
    protocol = group.protocol or ""
    members = tuple(MemberSnapshot(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                                   m.rebalance_timeout_ms, m.session_timeout_ms, m.metadata(protocol), m.assignment)
                    for m in group.members.values())
    return GroupSnapshot(group.group_id, group.protocol_type or "", group.generation, group.protocol, group.leader,
                         group.current_state_timestamp, members)


def _without_offsets(manager: GroupMetadataManager, group_ids: list[str]) -> list[str]:
    return [group_id for group_id in group_ids if not manager.committed(group_id)]
