"""The fleet on a real 3-node NATS JetStream cluster started on free ports.

Workers plan with the tiny random-weight Llama; agents decide from their local trees. Each
test starts its own cluster (its nodes are killed and restarted).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from fleet_support import (
    EVENTS,
    agents,
    bucket,
    bucket_holding,
    settled,
    tiny,
    wait_for,
    worker,
)

from forethought.models import ScriptedBackend
from forethought.policies._events import EventKey
from forethought.runtime import Agent, FleetConfig, Tier
from forethought.runtime.fleet._record import decode_key
from forethought.testing import NatsCluster

pytestmark = [pytest.mark.model, pytest.mark.fleet]


@pytest.fixture
def cluster() -> NatsCluster:
    with NatsCluster(size=3) as c:
        yield c


def fleet_of(cluster: NatsCluster, name: str) -> FleetConfig:
    return FleetConfig(url=cluster.url, name=name, replicas=3, claim_ttl_s=10)


def holds(agent: Agent) -> set[tuple[str, object]]:
    return {(n.fingerprint, n.key) for n in agent.tree.nodes()}


class Decider:
    """Decides the events in a loop, as a robot would, recording each decision's tier."""

    def __init__(self, robots: list[Agent]) -> None:
        self.robots = robots
        self.tiers: list[Tier] = []
        self.task: asyncio.Task[None] | None = None

    async def run(self) -> None:
        n = 0
        while True:
            for robot in self.robots:
                event = dict(EVENTS[n % len(EVENTS)], id=f"{robot.config.fleet.robot}-{n}")
                self.tiers.append((await robot.decide(event)).tier)
            n += 1
            await asyncio.sleep(0.02)

    def __enter__(self) -> Decider:
        self.task = asyncio.ensure_future(self.run())
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.task is not None
        self.task.cancel()

    def since(self, start: int) -> list[Tier]:
        return self.tiers[start:]


async def test_two_workers_plan_each_key_once_and_three_agents_get_them(
    cluster: NatsCluster, tiny_model_dir: Path
) -> None:
    fleet = fleet_of(cluster, "once")
    w1, w2 = (worker(fleet.model_copy(update={"url": u}), tiny(tiny_model_dir), f"w{i}")
              for i, u in enumerate(cluster.urls[:2]))  # fmt: skip
    async with w1, w2, agents(fleet, cluster.urls, [ScriptedBackend() for _ in range(3)]) as robots:
        await wait_for(lambda: w1.stats.states + w2.stats.states >= 3, 20, "robots' states")
        await settled([w1, w2])
        stored = await bucket(cluster.url, fleet)
        assert len(stored) >= 5  # the initial state's five keys at least
        # Each key written once, by one worker, which planned it once.
        assert set(stored.values()) == {1}
        assert not set(w1.wrote) & set(w2.wrote)
        assert len(w1.wrote) + len(w2.wrote) == len(stored)
        assert w1.planner.stats.branches + w2.planner.stats.branches == len(stored)
        assert w1.stats.already_written == w2.stats.already_written == 0
        for robot in robots:
            await wait_for(lambda r=robot: holds(r) >= set(stored), 10, "the agent's copy")
        decisions = [await r.decide(dict(e, id=f"{i}-{j}")) for i, r in enumerate(robots)
                     for j, e in enumerate(EVENTS)]  # fmt: skip
        assert [d.tier for d in decisions] == [Tier.TREE] * len(decisions)
        assert all(r.fleet is not None and r.fleet.stats.refused == 0 for r in robots)


async def test_a_node_killed_mid_run_loses_no_branch_and_agents_keep_deciding(
    cluster: NatsCluster, tiny_model_dir: Path
) -> None:
    fleet = fleet_of(cluster, "kill")
    w1 = worker(fleet.model_copy(update={"url": cluster.urls[0]}), tiny(tiny_model_dir), "w1")
    w2 = worker(fleet.model_copy(update={"url": cluster.urls[2]}), tiny(tiny_model_dir), "w2")
    async with agents(fleet, cluster.urls, [ScriptedBackend() for _ in range(3)]) as robots:
        with Decider(robots) as decider:
            async with w1, w2:
                await wait_for(lambda: len(w1.wrote) + len(w2.wrote) >= 1, 30, "a first branch")
                cluster.kill(1)  # one node, while the workers plan and the agents decide
                during = len(decider.tiers)
                await wait_for(
                    lambda: (
                        len(decider.since(during)) >= 3 * 10 and Tier.TREE in decider.since(during)
                    ),
                    30,
                    "decisions while the node is down",
                )
                decided_while_down = decider.since(during)
                cluster.start(1)
                await settled([w1, w2])
                wrote = {decode_key(k) for k in set(w1.wrote) | set(w2.wrote)}
                # Read once it holds every write (the node back may answer before catching up).
                stored = await bucket_holding(cluster.url, fleet, wrote, 30)
                # No branch lost: every write the cluster acknowledged is still there, once.
                assert wrote == set(stored)
                assert set(stored.values()) == {1}
                for robot in robots:
                    await wait_for(lambda r=robot: holds(r) >= set(stored), 15, "a full copy")
    # The agents decided throughout: every event while the node was down got a decision,
    # and the tree answered them (the local tree needs no node).
    assert len(decided_while_down) >= 3 * 10
    assert Tier.TREE in decided_while_down


async def test_all_nodes_down_agents_keep_deciding_plan_alone_and_resync(
    cluster: NatsCluster, tiny_model_dir: Path
) -> None:
    fleet = fleet_of(cluster, "down")
    w = worker(fleet, tiny(tiny_model_dir), "w1", horizon=2)
    backends = [tiny(tiny_model_dir), tiny(tiny_model_dir)]
    async with w, agents(fleet, cluster.urls, backends, plan=True) as robots:
        await settled([w])
        before = await bucket(cluster.url, fleet)
        for robot in robots:
            await wait_for(lambda r=robot: holds(r) >= set(before), 10, "the first copy")
        with Decider(robots) as decider:
            cluster.kill()
            await wait_for(lambda: not any(r.fleet.connected for r in robots), 5, "the outage")
            start = len(decider.tiers)
            # Cut off, robot 0 enters a state the fleet has not planned: it plans it alone.
            robots[0].update_state({"zone": "dock"})

            def planned_alone() -> set[tuple[str, EventKey]]:
                return {(n.fingerprint, n.key) for n in robots[0].tree.nodes()} - set(before)

            await wait_for(
                lambda: len(decider.since(start)) >= 2 * 100 and bool(planned_alone()),
                120,
                "deciding on, and robot 0 planning alone",
            )
            while_down = decider.since(start)
            own = planned_alone()
            cluster.start()
            # Back: robot 0's branches are offered, written once, and robot 1 catches up.
            # A 3-node cluster re-elects its JetStream leaders and the clients reconnect with
            # backoff before an offer can flow: on a loaded 2-core machine that took over 30 s.
            offered = robots[0].fleet
            assert offered is not None
            await wait_for(lambda: offered.stats.offered >= len(own), 90, "the offers sent")
            await bucket_holding(cluster.url, fleet, own, 30)
            await settled([w])
            # Read again once it holds all (a node still catching up can answer empty).
            after = await bucket_holding(cluster.url, fleet, own | set(before), 30)
            await wait_for(lambda: holds(robots[1]) >= set(after), 15, "robot 1's resync")
    assert len(while_down) >= 2 * 100  # about 50 events a second per robot for 10 s
    assert Tier.TREE in while_down
    assert own, "robot 0 planned nothing while cut off"
    assert own <= set(after)
    assert set(after.values()) == {1}
    assert robots[1].fleet.stats.resyncs >= 2


async def test_an_agent_plans_alone_only_once_cut_off_never_before_its_first_connect(
    tiny_model_dir: Path,
) -> None:
    server = NatsCluster(size=1)  # not started: the agent starts before its fleet
    fleet = FleetConfig(url=server.url, name="late", replicas=1, claim_ttl_s=10)
    try:
        async with agents(fleet, server.urls, [tiny(tiny_model_dir)], plan=True) as (robot,):
            assert robot.fleet is not None
            assert robot.planner is not None
            # Starting, not cut off: the fleet's workers will plan its branches.
            await wait_for(lambda: robot.planner.sleeping, 60, "the planner at rest")
            await asyncio.sleep(1.0)
            assert not robot.fleet.cut_off
            assert robot.planner.stats.branches == 0
            assert len(robot.tree) == 0
            server.start()
            await wait_for(lambda: robot.fleet.connected, 15, "the first connection")
            server.kill()
            await wait_for(lambda: robot.fleet.cut_off, 10, "the outage")
            # Cut off after it had the fleet: now it plans its own state alone.
            await wait_for(lambda: robot.planner.stats.branches >= 1, 60, "planning alone")
            assert len(robot.tree) >= 1
    finally:
        server.stop()
