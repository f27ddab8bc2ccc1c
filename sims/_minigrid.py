"""The adapter's shipped example: a MiniGrid room (Farama's ``minigrid``) through GymWorld.

The agent sees what a robot's perception would report of MiniGrid's egocentric 7x7 view: the
cell in front (``ahead``: empty, wall, goal) and where the goal is, if in view (``goal``:
ahead, left, right, unseen). It answers ``{move: left|right|forward|wait}``; ``wait`` is the
env's no-op (``done``, which ends nothing in these rooms) and the spec's default, so a missed
step stands still and the env's step budget runs down. Reaching the goal is a success (the
env's reward, ``1 - 0.9 * steps / max_steps``, is the score); running out of steps a failure.

Needs the ``gym`` extra (gymnasium and minigrid), imported when a world is made.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from forethought.policies import AgentSpec, ConfigError

from ._gym import GymWorld, Observed
from ._world import Outcome

__all__ = ["MOVES", "minigrid_action", "minigrid_observe", "minigrid_world"]

MOVES = {"left": 0, "right": 1, "forward": 2, "wait": 6}
"""The spec's ``move`` -> MiniGrid's action index (6 is ``done``: a no-op in these rooms)."""
_EMPTY, _WALL, _GOAL = 1, 2, 8  # minigrid.core.constants.OBJECT_TO_IDX
_ME, _FRONT = (3, 6), (3, 5)  # the agent's cell and the one in front, in its own view


def minigrid_observe(obs: Mapping[str, Any], info: Mapping[str, Any]) -> Observed:
    """One ``view`` event: what is ahead, and where the goal is if it is in view."""
    image = obs["image"]
    front = int(image[_FRONT][0])
    ahead = "goal" if front == _GOAL else "empty" if front == _EMPTY else "wall"
    goal = "unseen"
    for x in range(image.shape[0]):
        for y in range(image.shape[1]):
            if int(image[x, y, 0]) == _GOAL:
                dx = x - _ME[0]
                goal = "ahead" if dx == 0 else "left" if dx < 0 else "right"
    return Observed(events=[("view", {"ahead": ahead, "goal": goal})])


def minigrid_action(action: Mapping[str, Any]) -> int:
    """The agent's ``{move: ...}`` as MiniGrid's action index."""
    return MOVES[str(action["move"])]


def _outcome(terminated: bool, truncated: bool, total: float) -> Outcome:
    if terminated and total > 0:
        return Outcome("goal", 0.0, success=True)
    return Outcome("out_of_steps", 0.0, failure=True)


def minigrid_world(spec: AgentSpec, options: Mapping[str, Any]) -> GymWorld:
    """A scenario's ``world: {python: "forethought.sims:minigrid_world", options: {...}}``.

    Options: ``env`` (a MiniGrid id, default ``MiniGrid-Empty-Random-6x6-v0``), ``max_steps``
    (the env's step budget, default 24), ``period_ms`` (default 500), ``start_ms`` (default 0).
    """
    try:
        import gymnasium  # noqa: PLC0415 - the optional `gym` extra
        import minigrid  # noqa: F401, PLC0415 - importing it registers its envs
    except ImportError as exc:
        raise ConfigError(
            "world.python",
            "minigrid_world",
            f"needs the gym extra: pip install 'forethought[gym]' ({exc})",
        ) from None
    unknown = sorted(set(options) - {"env", "max_steps", "period_ms", "start_ms"})
    if unknown:
        raise ConfigError("world.options", unknown, "choose env, max_steps, period_ms, start_ms")
    env_id = str(options.get("env", "MiniGrid-Empty-Random-6x6-v0"))
    env = gymnasium.make(env_id, max_steps=int(options.get("max_steps", 24)))
    return GymWorld(
        name=env_id,
        env=env,
        observe=minigrid_observe,
        action=minigrid_action,
        default_action=spec.default_action,
        period_ms=float(options.get("period_ms", 500.0)),
        start_ms=float(options.get("start_ms", 0.0)),
        outcome=_outcome,
    )
