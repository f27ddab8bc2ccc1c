"""The CLI's first hour: a closed pipe, a missing file, a state no transition reaches, and a
replay's options (``--events`` with one profile, a bad profile refused before the model loads,
progress lines when standard error is not a terminal, where the wall-clock time went)."""

from __future__ import annotations

import io
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from forethought._cli import main
from forethought._progress import Bars
from forethought.commands._tree import run_tree
from forethought.policies import ConfigError
from forethought.sims import StrategyRun, shipped_scenarios
from forethought.testing import until_holds_blocking

SPEC = {
    "name": "door",
    "description": "A door controller.",
    "action": {
        "type": "object",
        "properties": {"action": {"enum": ["open", "close", "hold"]}},
        "required": ["action"],
    },
    "default_action": {"action": "hold"},
    "state": {"mode": "normal"},
    "events": [
        {
            "type": "person",
            "params": {"distance_m": {"min": 0, "max": 50, "step": 0.01}},
            "deadline_ms": 300,
        },
        {"type": "alarm", "deadline_ms": 200, "effects": {"mode": "alarm"}},
    ],
    "generate": {"count": 30, "mean_gap_ms": 1000},
}


def _spec(tmp_path: Path) -> Path:
    path = tmp_path / "door.yaml"
    path.write_text(yaml.safe_dump(SPEC))
    return path


def test_a_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    # 5,000 keys, 285 KB: far more than a pipe holds (64 KiB), so the writer meets the closed
    # end however far it got before the reader closed it (1,000 keys, 57 KB, fitted: the
    # writer could finish first and exit 0).
    proc = subprocess.Popen(
        [sys.executable, "-m", "forethought", "tree", str(_spec(tmp_path))],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().startswith(b"door: state")
    proc.stdout.close()  # what `| head -1` does
    _, err = proc.communicate(timeout=120)
    assert b"Traceback" not in err, err.decode()
    assert b"BrokenPipe" not in err
    assert proc.returncode == 141


@pytest.mark.parametrize(
    "argv",
    [
        ["check", "{missing}"],
        ["tree", "{missing}"],
        ["tree", "{spec}", "--snapshot", "{missing}"],
        ["sim", "{missing}"],
    ],
)
def test_a_missing_file_says_not_found(
    tmp_path: Path, argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    missing = str(tmp_path / "nope.yaml")
    args = [a.format(missing=missing, spec=_spec(tmp_path)) for a in argv]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "not found" in err
    assert "nope.yaml" in err
    assert "not a policy-tree snapshot" not in err


def test_tree_warns_on_a_state_no_transition_reaches(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = _spec(tmp_path)
    assert run_tree(spec, state='{"mode": "alarm"}', snapshot=None, out=io.StringIO()) == 0
    assert capsys.readouterr().err == ""  # the alarm's effect reaches it
    assert run_tree(spec, state='{"mode": "cleanup"}', snapshot=None, out=io.StringIO()) == 0
    err = capsys.readouterr().err
    assert "warning --state: no event effect leads" in err
    assert "declared: 'alarm', 'normal'" in err


def test_a_bad_profile_is_refused_before_the_model_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import forethought.commands._sim as sim

    def no_load(*args: object) -> None:
        raise AssertionError("the model was loaded before the profile was checked")

    monkeypatch.setattr(sim, "_load", no_load)
    for bad in ("gpu8b", "step_ms=8.6", "gpu-8b,step_ms=8.6"):
        with pytest.raises(ConfigError, match="--profile"):
            sim.run_sim(
                scenario_path=_spec(tmp_path),
                strategy="tree",
                clock="virtual",
                speed=1.0,
                profile=bad,
                model="unused",
                device="cpu",
                dtype="float32",
                json_path=None,
                decisions=None,
                report=None,
            )


def test_the_cli_refuses_a_misspelt_profile_with_a_suggestion(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["sim", str(_spec(tmp_path)), "--profile", "gpu8b"]) == 2
    assert "did you mean 'gpu-8b'?" in capsys.readouterr().err


def test_events_cuts_a_single_profile_replay(tmp_path: Path) -> None:
    from forethought.commands._sim import _scenario

    scenario = _scenario(_spec(tmp_path), None, None, 3, "step_ms=8.6,prefill_us_per_token=50")
    assert len(scenario.events()) == 3
    shipped = next(p for p in shipped_scenarios() if p.stem == "warehouse-amr")
    assert len(_scenario(shipped, None, None, 5, None).events()) == 5


def test_the_wall_clock_share_of_each_strategy() -> None:
    from forethought.commands._sim import wall_share

    runs = {
        "live-naive": StrategyRun("live-naive", records=[], wall_s=30.0),
        "tree": StrategyRun("tree", records=[], wall_s=10.0),
    }
    line = wall_share(runs)
    assert line == (
        "wall clock of the replay: live-naive 30.0 s (75 %), tree 10.0 s (25 %); total 40.0 s"
    )
    assert wall_share({"agent": StrategyRun("agent", records=[])}) == ""


def test_progress_prints_a_line_per_period_when_not_a_terminal(
    capsys: pytest.CaptureFixture[str],
) -> None:
    err: list[str] = []

    def printed(start: str) -> Callable[[], bool]:
        def seen() -> bool:
            err.extend(capsys.readouterr().err.splitlines())
            return any(line.startswith(start) for line in err)

        return seen

    with Bars(enabled=False, every_s=0.2) as bars:
        with bars.wait("loading m"):
            until_holds_blocking(printed("loading m: "), 10, "a line for the open wait")
        advance = bars.bar("replay", 2)
        advance(1)
        until_holds_blocking(printed("replay: 1/2 ("), 10, "a line for the open bar")
        advance(1)
        quick = bars.bar("quick", 1)
        quick(1)  # over before the first line: silent
    err += capsys.readouterr().err.splitlines()
    assert any(line.startswith("loading m: ") and line.endswith(" s") for line in err), err
    assert any(line.startswith("loading m: done in ") for line in err), err
    assert any(line.startswith("replay: 1/2 (") for line in err), err
    assert not [line for line in err if line.startswith("quick")]
