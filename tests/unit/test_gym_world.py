"""GymWorld on Farama's MiniGrid: the env steps with what took effect, the default on a miss.

A scripted backend answers (these tests are about the adapter's bookkeeping); the env is
MiniGrid's own, wrapped only to record the actions it was stepped with.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium
import minigrid  # noqa: F401 - registers MiniGrid's envs
import pytest

from forethought.models import ScriptedBackend
from forethought.sims import GymWorld, closed_loop_replay, load_scenario, minigrid_world
from forethought.sims._minigrid import MOVES

SCENARIO = Path(__file__).resolve().parents[2] / "sims/scenarios/closed_loop/minigrid-room.yaml"


class Recorder(gymnasium.Wrapper[Any, Any, Any, Any]):
    """MiniGrid as it is, keeping the actions it was stepped with."""

    def __init__(self, env: gymnasium.Env[Any, Any]) -> None:
        super().__init__(env)
        self.actions: list[int] = []

    def step(self, action: Any) -> Any:
        self.actions.append(int(action))
        return super().step(action)


def _world(steps: int) -> tuple[GymWorld, Recorder]:
    scenario = load_scenario(SCENARIO)
    world = minigrid_world(scenario.spec, {"max_steps": steps, "period_ms": 500})
    recorder = Recorder(gymnasium.make("MiniGrid-Empty-Random-6x6-v0", max_steps=steps))
    world.env = recorder
    return world, recorder


@pytest.mark.parametrize(
    ("live_s", "expected"),
    [(0.05, MOVES["left"]), (0.8, MOVES["wait"])],  # in time: left; 800 ms > 450: the default
)
def test_the_env_steps_with_what_took_effect(live_s: float, expected: int) -> None:
    world, recorder = _world(steps=6)
    runs = closed_loop_replay(
        load_scenario(SCENARIO),
        lambda: ScriptedBackend(live_s=live_s, action={"move": "left"}),
        lambda: world,
        strategies=("live-naive",),
        episodes=1,
    )
    (episode,) = runs["live-naive"].episodes
    assert episode.error is None
    assert recorder.actions == [expected] * 6  # one env step every 500 ms, to its step budget
    assert episode.outcome is not None
    assert episode.outcome.name == "out_of_steps"
    assert episode.duration_ms == pytest.approx(6 * 500.0)
    views = [(r.params["ahead"], r.params["goal"]) for r in episode.run.records]
    if expected == MOVES["wait"]:
        assert len(set(views)) == 1  # standing still: the same view every step
    else:
        assert len(set(views)) > 1  # turning: what comes next follows the action
