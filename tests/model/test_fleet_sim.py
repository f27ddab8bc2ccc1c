"""The fleet in the simulator: N robots, N seeds of the trace, one shared planner."""

from __future__ import annotations

from pathlib import Path

import pytest

from forethought._cli import main
from forethought.commands._sim_fleet import fleet_sizes
from forethought.models import TransformersBackend
from forethought.policies import ConfigError
from forethought.sims import PROFILES, fleet_replay, load_scenario

SCENARIOS = Path(__file__).resolve().parents[2] / "sims" / "scenarios"

pytestmark = pytest.mark.model


def test_a_fleet_of_three_shares_one_planner(tiny_backend: TransformersBackend) -> None:
    scenario = load_scenario(SCENARIOS / "design-note.yaml")
    profile = PROFILES["design-note-gpu"]
    one = fleet_replay(scenario, tiny_backend, robots=1, profile=profile)
    three = fleet_replay(scenario, tiny_backend, robots=3, profile=profile)
    assert [r.seed for r in three.robots] == [48, 49, 50]  # N seeds of the generated trace
    assert [r.events for r in three.robots] == [12, 12, 12]
    assert three.events == 36
    assert three.branches > 0
    assert 0 <= three.used <= three.branches
    for run in (one, three):
        for robot in run.robots:
            assert robot.correct_in_time <= robot.answered_in_time <= robot.events
    # One model's time, shared: per robot it is the planner's time over N.
    assert three.planning_s_per_robot == pytest.approx(three.planner_busy_s / 3)
    # Deterministic in virtual time: the same fleet replays to the same figures.
    again = fleet_replay(scenario, tiny_backend, robots=1, profile=profile)
    assert (again.robots, again.branches, again.used) == (one.robots, one.branches, one.used)


def test_fleet_sizes_are_checked() -> None:
    assert fleet_sizes("1,4,16,64") == [1, 4, 16, 64]
    for bad in ("", "0", "x", "4,-1"):
        with pytest.raises(ConfigError, match="--fleet"):
            fleet_sizes(bad)


def test_plan_without_a_fleet_url_is_one_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", str(SCENARIOS / "design-note.yaml"), "--model", "x"]) == 2
    err = capsys.readouterr().err
    assert "--fleet" in err
    assert "nats://" in err


def test_robots_at_sites_of_their_own_share_no_state(tiny_backend: TransformersBackend) -> None:
    scenario = load_scenario(SCENARIOS / "design-note.yaml")
    profile = PROFILES["design-note-gpu"]
    shared = fleet_replay(scenario, tiny_backend, robots=3, profile=profile)
    apart = fleet_replay(scenario, tiny_backend, robots=3, profile=profile, states="disjoint")
    # design-note's events change no state: three robots sharing it share one state.
    assert shared.planned_states == 1
    # At sites of their own, the one planner covers each robot's state separately.
    assert apart.planned_states == 3
    assert apart.branches > shared.branches
    assert apart.events == shared.events == 36
