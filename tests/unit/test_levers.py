"""The planner levers' baseline: with the abstraction off, every state field is in every key."""

from __future__ import annotations

import pytest

from forethought.sims import load_scenario, shipped_scenarios
from forethought.sims.internals import without_abstraction


@pytest.mark.parametrize(
    "name", ["amr-night-shift", "recorded-amr", "ros2-range", "warehouse-amr", "inspection-drone"]
)
def test_without_abstraction_keys_every_field_of_the_state(name: str) -> None:
    scenario = next(load_scenario(p) for p in shipped_scenarios() if p.stem == name)
    state = dict(scenario.spec.state)
    abstraction = scenario.spec.state_abstraction()
    plain = without_abstraction(scenario).spec.state_abstraction()
    for event in scenario.spec.events:
        assert plain.view(state, event.type) == state  # every field, as given (unsnapped)
    # The scenario as shipped leaves something out of some key (the baseline must differ).
    assert any(abstraction.view(state, e.type) != state for e in scenario.spec.events)
