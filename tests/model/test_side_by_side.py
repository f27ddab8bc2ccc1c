"""The main job: one scenario under several profiles, strategies side by side, re-run exact."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from forethought._progress import Bars
from forethought.commands._sim_side_by_side import first_events, run_side_by_side, verdict
from forethought.models import TransformersBackend
from forethought.policies import ConfigError
from forethought.sims import STRATEGIES, load_scenario


def _fig(live: float, tree: float, hybrid: float) -> dict[str, dict[str, Any]]:
    return {
        "live": {"correct_in_time": live},
        "tree": {"correct_in_time": tree},
        "hybrid": {"correct_in_time": hybrid},
    }


def test_the_verdict_is_worded_from_the_figures() -> None:
    fast = verdict("fast", _fig(0.85, 0.845, 0.85), 45)
    assert "a good live caller suffices" in fast
    assert "live 85.0 %, tree 84.5 %, hybrid 85.0 %" in fast
    slow = verdict("slow", _fig(0.05, 0.70, 0.72), 110)
    assert "the tree pays" in slow
    assert "(hybrid best)" in slow
    ahead = verdict("odd", _fig(0.9, 0.5, 0.6), 45)
    assert "live is ahead" in ahead


SPEC: dict[str, Any] = {
    "name": "t",
    "description": "A test robot.",
    "action": {"type": "object", "properties": {"a": {"enum": ["stop", "go"]}}, "required": ["a"]},
    "default_action": {"a": "stop"},
    "state": {"zone": "aisle"},
    "events": [
        {"type": "ping", "deadline_ms": 300, "params": {"d": [1, 2]}, "accept": [{"a": "go"}]},
        {"type": "block", "deadline_ms": 900, "effects": {"zone": "blocked"}},
    ],
    "generate": {"seed": 2, "count": 40, "mean_gap_ms": 700},
}


def test_first_events_cuts_the_scenario(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(SPEC))
    scenario = load_scenario(path)
    cut = first_events(scenario, 6)
    assert cut.events() == scenario.events()[:6]
    assert first_events(scenario, None) is scenario
    with pytest.raises(ConfigError, match="--events"):
        first_events(scenario, 0)


@pytest.mark.model
def test_two_profiles_side_by_side_print_the_same_bytes_twice(
    tiny_backend: TransformersBackend, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(SPEC))
    scenario = first_events(load_scenario(path), 10)
    outputs = []
    for i in range(2):
        out = tmp_path / f"run{i}.json"
        with Bars(enabled=False) as bars:
            runs = run_side_by_side(
                scenario,
                tiny_backend,
                ["cpu-2core-smollm2", "cpu-8b-q4"],
                json_path=out,
                model="tiny",
                bars=bars,
            )
        printed = capsys.readouterr().out
        outputs.append((printed.replace(str(out), "JSON"), out.read_bytes()))
        assert set(runs) == {"cpu-2core-smollm2", "cpu-8b-q4"}
        for by_strategy in runs.values():
            assert tuple(by_strategy) == STRATEGIES
            assert all(len(r.records) == 10 for r in by_strategy.values())
    assert outputs[0] == outputs[1]
    printed = outputs[0][0]
    for name in STRATEGIES:
        assert f"\n{name} " in printed
    assert printed.count("cpu-8b-q4 (110 ms/token)") == 1
    assert printed.count("cpu-2core-smollm2 (45 ms/token)") == 1
