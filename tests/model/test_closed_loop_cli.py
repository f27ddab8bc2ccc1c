"""Closed loop on the embedded model: the guide's command, a world nobody here wrote, determinism.

The command is read from docs/guides/simulator.md and run as written (plus ``--json``), so
the documented command is the one that works: MiniGrid (Farama's, through the gymnasium
adapter) under every strategy.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import orjson
import pytest

from forethought._cli import main
from forethought.models._model_load import LoadedModel
from forethought.sims import STRATEGIES

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "guides" / "simulator.md"

pytestmark = pytest.mark.smollm2


def _documented() -> list[str]:
    (command,) = re.findall(
        r"^forethought sim sims/scenarios/closed_loop/minigrid-room\.yaml.*$",
        GUIDE.read_text(),
        re.MULTILINE,
    )
    return shlex.split(command)[1:]


def _played(argv: list[str], out: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    monkeypatch.chdir(ROOT)  # the documented paths are relative to the repository
    assert main([*argv, "--json", str(out)]) == 0
    data: dict[str, Any] = orjson.loads(out.read_bytes())
    return data


def test_the_documented_command_plays_minigrid_under_every_strategy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, smollm2_first_load: LoadedModel
) -> None:
    data = _played(_documented(), tmp_path / "run.json", monkeypatch)
    assert set(data["strategies"]) == set(STRATEGIES)
    for name, run in data["strategies"].items():
        assert run["world"] == "MiniGrid-Empty-Random-6x6-v0"
        (episode,) = run["episodes"]
        assert episode["error"] is None, name
        assert episode["outcome"] in ("goal", "out_of_steps")
        events = [m for m in episode["timeline"] if m["kind"] == "event"]
        actions = [m for m in episode["timeline"] if m["kind"] == "action"]
        assert len(episode["decisions"]) == len(events) >= 2
        # every event's action reached the env (the last may be cut by the episode's end)
        assert len(events) - 1 <= len(actions) <= len(events)
        # each observation after the first follows the action the env stepped with
        assert all(m["cause"] is not None for m in events[1:])
        score = run["score"]
        assert score["episodes"] == 1
        assert score["success_rate"] + score["failure_rate"] == 1.0


def test_a_seed_replays_byte_for_byte(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, smollm2_first_load: LoadedModel
) -> None:
    argv = [*_documented(), "--strategy", "hybrid", "--seed", "5"]
    first = _played(argv, tmp_path / "a.json", monkeypatch)
    again = _played(argv, tmp_path / "b.json", monkeypatch)
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()
    assert first == again
    (episode,) = first["strategies"]["hybrid"]["episodes"]
    assert episode["seed"] == 5
