"""A fleet in the simulator: N robots on one spec, one shared planner on one model.

Each robot replays its own seed of the scenario's generated trace (robot ``i``: the
scenario's ``generate.seed + i``; a scenario without a generated stream gives every robot the
same fixed trace) on one virtual-time loop, deciding from its own local tree by the ``tree``
strategy: a tree answer, or the declared default. One planner on one model plans for the
whole fleet, as a fleet worker does: it looks ahead from every robot's state, weighted by the
robots in it, and learns from every robot's events; each branch it writes is inserted into
every robot's tree at once (the shared bucket, with propagation taken as instant on the
simulated time scale: the fleet benchmark measures it on a real cluster).

With ``states="disjoint"`` the robots' states never overlap: robot ``i`` works at a site of its
own (its state carries ``site: i``), so no branch planned for one robot serves another. That is
where sharing stops paying: the one planner's work grows with N instead of being shared by N.

A simulation, so it lives in the simulator layer, not in the fleet's room
(``forethought.runtime.fleet``): it shares the planner, not the NATS tree.

Reported per robot and for the fleet: events answered in time by the tree and correct in time
(a default is never a hit), the planner's waste (branches no robot ever used over branches
written), and planning time per robot (the shared planner's charged model time over N).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal

from forethought.models import LatencyModel, LatencyProfile
from forethought.models.internals import ModelGate
from forethought.planner import PlannerConfig
from forethought.planner.internals import Forecaster, Planner
from forethought.policies import ConfigError, EventKey, PolicyNode, PolicyTree, WorldState
from forethought.runtime import Agent, AgentConfig, Event, ExecutorConfig, Tier

from ._charged import ChargedClock
from ._scenario import Scenario
from ._trace_event import TraceEvent
from ._vloop import VirtualTimeLoop, run_virtual

if TYPE_CHECKING:
    from forethought.models import TransformersBackend
    from forethought.planner.internals import Branch

__all__ = ["SITE_FIELD", "FleetRun", "FleetStates", "RobotRun", "fleet_replay"]

FleetStates = Literal["shared", "disjoint"]
"""Whether the robots share the scenario's states or each works in states of its own."""

SITE_FIELD = "site"
"""The state field that sets robots apart with ``states="disjoint"`` (robot ``i``: ``i``)."""


@dataclass(frozen=True, slots=True)
class RobotRun:
    """One robot's replay."""

    robot: int
    seed: int
    events: int
    answered_in_time: int
    """Events the tree answered before their deadline."""
    correct_in_time: int
    """Of those, the ones the scenario grades correct."""
    graded: int
    """Events the scenario grades at all (the denominator of correctness)."""


@dataclass(frozen=True, slots=True)
class FleetRun:
    """A fleet's replay: its robots and the shared planner's figures."""

    robots: tuple[RobotRun, ...]
    branches: int
    """Branches the shared planner wrote."""
    used: int
    """Of those, the ones at least one robot's event was answered by."""
    planner_busy_s: float
    """The shared planner's model time (charged, virtual seconds)."""
    wall_s: float
    planned_states: int = 0
    """The states the branches were planned in (the robots' states the planner covered)."""

    @property
    def size(self) -> int:
        """N, the robots."""
        return len(self.robots)

    @property
    def events(self) -> int:
        """Events over the fleet."""
        return sum(r.events for r in self.robots)

    @property
    def answered_in_time(self) -> float:
        """The fleet's share of events the tree answered in time."""
        return sum(r.answered_in_time for r in self.robots) / max(self.events, 1)

    @property
    def correct_in_time(self) -> float:
        """The fleet's share of graded events answered correctly in time."""
        graded = sum(r.graded for r in self.robots)
        return sum(r.correct_in_time for r in self.robots) / max(graded, 1)

    @property
    def waste(self) -> float:
        """Branches no robot used, over branches written."""
        return (self.branches - self.used) / self.branches if self.branches else 0.0

    @property
    def planning_s_per_robot(self) -> float:
        """The shared planner's model time divided among the robots."""
        return self.planner_busy_s / max(self.size, 1)


class _SharedTree:
    """The simulator's fleet: robots' states as the planner's origins, writes to every tree."""

    def __init__(self, robots: list[Agent]) -> None:
        self._robots = robots

    def origins(self, own: WorldState) -> Sequence[tuple[WorldState, float]]:
        counts: dict[str, tuple[WorldState, float]] = {}
        for robot in self._robots:
            held = counts.get(robot.state.fingerprint)
            counts[robot.state.fingerprint] = (robot.state, 1.0 + (held[1] if held else 0.0))
        return list(counts.values()) or [(own, 1.0)]

    def taken(self, fingerprint: str, key: EventKey) -> bool:
        return False  # one planner: nobody else holds a branch

    async def claim(self, branches: Sequence[Branch]) -> list[Branch]:
        return list(branches)

    def written(self, node: PolicyNode) -> None:
        for robot in self._robots:
            robot.tree.insert(node)


def _set_apart(scenario: Scenario, agents: list[Agent]) -> None:
    """Give each robot a site of its own; refuse a spec whose fingerprints would ignore it."""
    for i, agent in enumerate(agents):
        agent.update_state({SITE_FIELD: i})
    if len({a.state.fingerprint for a in agents}) < len(agents):
        raise ConfigError(
            "states",
            "disjoint",
            f"scenario {scenario.name!r} keys its states by fields that leave out "
            f"{SITE_FIELD!r}, so robots at different sites share states: use states=shared",
        )


def _trace(scenario: Scenario, robot: int) -> tuple[int, list[TraceEvent]]:
    gen = scenario.generate
    if gen is None:
        return scenario.seed, scenario.events()
    seed = gen.seed + robot
    seeded = scenario.model_copy(update={"generate": gen.model_copy(update={"seed": seed})})
    return seed, seeded.events()


async def _fleet(
    scenario: Scenario,
    backend: TransformersBackend,
    robots: int,
    profile: LatencyProfile,
    planner_config: PlannerConfig,
    states: FleetStates,
) -> FleetRun:
    loop = asyncio.get_running_loop()
    assert isinstance(loop, VirtualTimeLoop)  # fleet_replay runs it on one
    spec = scenario.spec
    clock = ChargedClock(loop, profile, seed=scenario.seed)
    latency = LatencyModel(profile, fixed=True)
    robot_config = AgentConfig.defaults(
        executor=ExecutorConfig(use_tree=True, use_score=False, use_live=False),
        planner=PlannerConfig(enabled=False),
    )
    agents = [
        Agent(spec, backend=backend.sharing(clock=clock, latency=latency), config=robot_config)
        for _ in range(robots)
    ]
    shared = _SharedTree(agents)
    schema, space = spec.action_schema(), spec.event_space()
    forecaster = Forecaster(space)
    planner_backend = backend.sharing(clock=clock, latency=latency)
    tree = PolicyTree(check=schema.validate)
    async with planner_backend:
        await planner_backend.prepare(schema)
        planner = Planner(
            backend=planner_backend,
            gate=ModelGate(),
            space=space,
            schema=schema,
            tree=tree,
            forecaster=forecaster,
            description=spec.description,
            state=spec.initial_state(),
            config=planner_config,
            live_tiers=False,
            fleet=shared,
        )
        for agent in agents:
            await agent.__aenter__()
        try:
            if states == "disjoint":
                _set_apart(scenario, agents)
            task = asyncio.create_task(planner.run(), name="sim.fleet.planner")
            t0 = loop.time()
            runs = await asyncio.gather(
                *(_robot(scenario, i, a, planner, forecaster, t0) for i, a in enumerate(agents))
            )
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        finally:
            for agent in agents:
                await agent.__aexit__(None, None, None)
    used = sum(any(a.tree.was_used(n.fingerprint, n.key) for a in agents) for n in tree.nodes())
    planned = len({n.fingerprint for n in tree.nodes()})
    return FleetRun(tuple(runs), planner.stats.branches, used, planner.stats.busy_s, 0.0, planned)


async def _robot(
    scenario: Scenario,
    index: int,
    agent: Agent,
    planner: Planner,
    forecaster: Forecaster,
    t0: float,
) -> RobotRun:
    loop = asyncio.get_running_loop()
    seed, events = _trace(scenario, index)
    answered = correct = graded = 0
    for i, ev in enumerate(events):
        stimulus = t0 + ev.at_ms / 1e3
        await asyncio.sleep(max(0.0, stimulus + scenario.perception_s(ev) - loop.time()))
        state = agent.state if not ev.state else agent.state.patched(ev.state)
        event = Event(
            f"{index}-{i}",
            ev.type,
            dict(ev.params),
            arrived_at=loop.time(),
            deadline=stimulus + scenario.deadline_ms(ev) / 1e3,
            state=ev.state,
        )
        d = await agent.decide(event)
        hit = d.tier == Tier.TREE and d.met
        grade = scenario.grade(ev, d.action, state.data)
        answered += hit
        graded += grade is not None
        correct += hit and grade is True
        forecaster.observe(d.key, state.fingerprint)  # the fleet's demand: every robot's events
        planner.wake()
    return RobotRun(index, seed, len(events), answered, correct, graded)


def fleet_replay(
    scenario: Scenario,
    backend: TransformersBackend,
    *,
    robots: int,
    profile: LatencyProfile,
    planner: PlannerConfig | None = None,
    states: FleetStates = "shared",
) -> FleetRun:
    """Replay ``robots`` robots of ``scenario`` with one shared planner, in virtual time.

    ``states``: ``shared`` (every robot in the scenario's states) or ``disjoint`` (each robot
    at a site of its own, so no two robots' states overlap).
    """
    if robots < 1:
        raise ValueError(f"robots: {robots} (at least 1)")
    t0 = time.perf_counter()
    config = planner or PlannerConfig()
    run = run_virtual(_fleet(scenario, backend, robots, profile, config, states))
    return replace(run, wall_s=time.perf_counter() - t0)
