"""R6 (issue 12): a stateful model of the agent under virtual time, driven by Hypothesis.

Rules send events (with repeated ids), patch the state, let time pass (the planner works),
swap tree branches in, cancel a caller mid-decision, and make the model crash, hang or write
invalid output. After every step the invariants hold: exactly one decision per event id (a
repeat gets the first one back), no decision claims ``met`` after its deadline, every action
validates, the tree version only increases, and a cancelled caller loses no event (the id is
still decided once, when asked again). asyncio's debug mode is on throughout.

The model is a scripted backend: the properties are the agent's bookkeeping, not the model's.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from virtual_time import elapse

from forethought.models import ScriptedBackend, ScriptMode
from forethought.planner import PlannerConfig
from forethought.policies import AgentSpec, PolicyNode
from forethought.runtime import Agent, AgentConfig, Decision
from forethought.sims._vloop import VirtualTimeLoop

SPEC = {
    "name": "states",
    "description": "You steer a warehouse robot. Answer with the safest action.",
    "action": {
        "type": "object",
        "properties": {
            "a": {"enum": ["stop", "slow", "go"]},
            "v": {"type": "number", "minimum": 0, "maximum": 2},
        },
        "required": ["a"],
    },
    "default_action": {"a": "stop"},
    "state": {"zone": "aisle", "battery": 0.8},
    "state_grids": {"battery": {"min": 0, "max": 1, "step": 0.1}},
    "events": [
        {"type": "obstacle", "params": {"side": ["left", "right"]}, "deadline_ms": 150},
        {"type": "clear", "deadline_ms": 400, "effects": {"zone": "aisle"}},
        {"type": "dock", "deadline_ms": 1000, "effects": {"zone": "dock"}},
    ],
}
EVENTS = [("obstacle", {"side": "left"}), ("obstacle", {"side": "right"}), ("clear", {}),
          ("dock", {})]  # fmt: skip


class AgentMachine(RuleBasedStateMachine):
    """One agent on one virtual-time loop, stepped rule by rule."""

    def __init__(self) -> None:
        super().__init__()
        self.loop = VirtualTimeLoop()
        self.loop.set_debug(True)
        self.backend = ScriptedBackend(score_s=0.03, live_s=0.12, prefill_s=0.01, step_s=0.005)
        config = AgentConfig.defaults(planner=PlannerConfig(batch_size=2))
        self.agent = Agent(AgentSpec.model_validate(SPEC), backend=self.backend, config=config)
        self.run(self.agent.__aenter__())
        self.decided: dict[str, Decision] = {}
        self.cancelled: set[str] = set()
        self.version = self.agent.tree.version
        self.counter = 0

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def teardown(self) -> None:
        with contextlib.suppress(Exception):
            self.run(self.agent.__aexit__(None, None, None))
        self.loop.run_until_complete(self.loop.shutdown_asyncgens())
        self.loop.close()

    def _payload(self, which: int, event_id: str) -> dict[str, Any]:
        kind, params = EVENTS[which]
        return {"id": event_id, "type": kind, "params": params}

    def _check(self, decision: Decision) -> None:
        first = self.decided.setdefault(decision.event_id, decision)
        assert decision == first, "a repeated id got another decision"
        if decision.met:
            assert decision.latency_s <= decision.budget_s + 1e-9
        self.agent.schema.validate(decision.action)

    @rule(which=st.integers(0, 3), reuse=st.booleans())
    def send(self, which: int, reuse: bool) -> None:
        if reuse and self.decided:
            event_id = sorted(self.decided)[which % len(self.decided)]
        else:
            self.counter += 1
            event_id = f"e{self.counter}"
        self._check(self.run(self.agent.decide(self._payload(which, event_id))))

    @rule(n=st.integers(2, 5), which=st.integers(0, 3))
    def burst(self, n: int, which: int) -> None:
        ids = []
        for _ in range(n):
            self.counter += 1
            ids.append(f"b{self.counter}")

        async def go() -> list[Decision]:
            calls = [
                self.agent.decide(self._payload((which + i) % 4, e)) for i, e in enumerate(ids)
            ]
            return list(await asyncio.gather(*calls))

        for d in self.run(go()):
            self._check(d)

    @rule(level=st.floats(0, 1), zone=st.sampled_from(["aisle", "dock", "yard"]))
    def patch_state(self, level: float, zone: str) -> None:
        async def go() -> None:  # on the loop, as the runtime's callers are
            self.agent.update_state({"battery": level, "zone": zone})

        self.run(go())

    @rule(ms=st.integers(1, 800))
    def let_time_pass(self, ms: int) -> None:
        self.run(elapse(ms / 1e3))

    @rule(which=st.integers(0, 3), action=st.sampled_from(["stop", "slow", "go"]))
    def swap_a_branch_in(self, which: int, action: str) -> None:
        kind, params = EVENTS[which]
        key = self.agent.space.key(kind, params)
        assert key is not None
        fp = self.agent.state.fingerprint_for(kind)
        node = PolicyNode(fp, key, {"a": action}, f'{{"a":"{action}"}}', 0.5, "m", 3, 0.1, 0.0)
        self.agent.tree.insert(node)

    @rule(which=st.integers(0, 3), after_ms=st.integers(0, 200))
    def cancel_a_caller(self, which: int, after_ms: int) -> None:
        self.counter += 1
        event_id = f"c{self.counter}"

        async def go() -> None:
            task = asyncio.ensure_future(self.agent.decide(self._payload(which, event_id)))
            await elapse(after_ms / 1e3)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                self._check(await task)

        self.run(go())
        self.cancelled.add(event_id)

    @precondition(lambda self: bool(self.cancelled))
    @rule()
    def ask_a_cancelled_id_again(self) -> None:
        """Nothing is lost: a cancelled caller's event is decided when asked again."""
        event_id = self.cancelled.pop()
        self._check(self.run(self.agent.decide(self._payload(2, event_id))))

    @rule(mode=st.sampled_from(list(ScriptMode)), score=st.booleans())
    def model_behaves(self, mode: ScriptMode, score: bool) -> None:
        if score:  # scoring has no output to spoil: it answers, crashes or hangs
            scoring = (ScriptMode.OK, ScriptMode.RAISE, ScriptMode.HANG)
            self.backend.score_mode = mode if mode in scoring else ScriptMode.OK
        else:
            self.backend.live_mode = mode

    @invariant()
    def the_tree_version_only_increases(self) -> None:
        version = self.agent.tree.version
        assert version >= self.version
        self.version = version

    @invariant()
    def the_agent_is_still_serving(self) -> None:
        assert self.agent.ready.is_set()


# The long run:
# FORETHOUGHT_R6_RUNS=200 FORETHOUGHT_R6_STEPS=50 pytest tests/unit/test_agent_states.py
AgentMachine.TestCase.settings = settings(
    max_examples=int(os.environ.get("FORETHOUGHT_R6_RUNS", "30")),
    stateful_step_count=int(os.environ.get("FORETHOUGHT_R6_STEPS", "30")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@pytest.mark.filterwarnings("error::RuntimeWarning")  # a never-awaited coroutine fails the run
class TestAgentStates(AgentMachine.TestCase):
    """30 runs x 30 steps in the suite; 200 x 50 in the long run."""
