"""The executor tests' spec, state and helpers (shared by the unit and model tiers)."""

from __future__ import annotations

import asyncio
from typing import Any

from forethought.policies import ActionSchema, EventSpace, PolicyNode, PolicyTree, WorldState
from forethought.runtime import Event, ExecutorConfig
from forethought.runtime._executor import Executor
from forethought.sims._vloop import run_virtual

__all__ = ["ACTION", "SPACE", "STATE", "decide", "make", "put"]

ACTION = {
    "type": "object",
    "properties": {
        "a": {"enum": ["stop", "slow", "go"]},
        "v": {"type": "number", "minimum": 0, "maximum": 2},
    },
    "required": ["a"],
}
SPACE = [
    {
        "type": "obstacle",
        "deadline_ms": 100,
        "params": {"d": {"min": 0.5, "max": 2.0, "step": 0.5}},
        "tolerance": {"d": 0.5},
    },
    {"type": "clear", "deadline_ms": 1000},
]
STATE = WorldState({"zone": "aisle"})


def make(backend: Any = None, tree: PolicyTree | None = None, **cfg: Any) -> Executor:
    schema = ActionSchema.from_json_schema(ACTION)
    if backend is not None:
        run_virtual(backend.__aenter__())  # a scripted backend's start touches no loop
    return Executor(
        space=EventSpace.from_specs(SPACE),
        schema=schema,
        tree=PolicyTree() if tree is None else tree,
        default_action={"a": "stop"},
        description="test robot",
        backend=backend,
        config=ExecutorConfig(**{"margin_ms": 5.0, **cfg}),
    )


def put(tree: PolicyTree, space: EventSpace, etype: str, params: dict, action: dict) -> None:
    key = space.key(etype, params)
    assert key is not None
    tree.insert(PolicyNode(STATE.fingerprint, key, action, "{}", 0.5, "m", 3, 0.1, 0.0))


def decide(ex: Executor, **event: Any) -> Any:
    async def go() -> Any:
        loop = asyncio.get_running_loop()
        ev = Event(arrived_at=loop.time(), **{"params": {}, **event})
        return await ex.decide(ev, STATE)

    return run_virtual(go())
