"""``forethought tree``: a snapshot's branches, or a spec's keys in one state."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import yaml

from forethought._cli import main
from forethought.commands._tree import run_tree
from forethought.policies import AgentSpec, ConfigError, PolicyNode, PolicyTree

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
        {"type": "person", "params": {"side": ["inside", "outside"]}, "deadline_ms": 300},
        {"type": "alarm", "deadline_ms": 200, "effects": {"mode": "alarm"}},
    ],
}


def _files(tmp_path: Path) -> tuple[Path, Path]:
    spec_path = tmp_path / "door.yaml"
    spec_path.write_text(yaml.safe_dump(SPEC))
    spec = AgentSpec.from_file(spec_path)
    state = spec.initial_state()
    space = spec.event_space()
    tree = PolicyTree()
    key = space.key("person", {"side": "inside"})
    assert key is not None
    fp = state.fingerprint_for("person")
    for created, (k, action) in enumerate([(key, {"action": "open"})]):
        tree.insert(PolicyNode(fp, k, action, '{"a":"open"}', 0.25, "tiny", 4, 0.1, 10.0 + created))
    alarmed = state.patched({"mode": "alarm"})
    other = space.key("person", {"side": "outside"})
    assert other is not None
    tree.insert(
        PolicyNode(
            alarmed.fingerprint_for("person"),
            other,
            {"action": "hold"},
            "{}",
            0.5,
            "tiny",
            4,
            0.1,
            14.0,
        )
    )
    snap = tmp_path / "tree.json"
    tree.save(snap, schema=spec.action_schema().fingerprint, model_id="tiny")
    return spec_path, snap


def test_a_snapshot_lists_every_branch_by_state(tmp_path: Path) -> None:
    _, snap = _files(tmp_path)
    out = io.StringIO()
    assert run_tree(snap, state=None, snapshot=None, out=out) == 0
    text = out.getvalue()
    assert "2 branches, model tiny" in text
    assert "person: side=inside" in text
    assert '{"action":"open"}' in text
    assert "4.0 s before the newest" in text  # created at 10 s, the newest at 14 s
    assert text.count("  state ") == 2


def test_a_spec_shows_its_keys_in_a_state_planned_or_not(tmp_path: Path) -> None:
    spec_path, snap = _files(tmp_path)
    out = io.StringIO()
    run_tree(spec_path, state=None, snapshot=snap, out=out)
    text = out.getvalue()
    assert "person: side=inside" in text
    assert '{"action":"open"}' in text
    assert "person: side=outside" in text
    assert "1 of 3 keys planned in this state" in text
    out = io.StringIO()
    run_tree(spec_path, state='{"mode": "alarm"}', snapshot=snap, out=out)
    text = out.getvalue()
    assert '"mode":"alarm"' in text
    assert '{"action":"hold"}' in text
    assert "1 of 3 keys planned in this state" in text
    out = io.StringIO()
    run_tree(spec_path, state=None, snapshot=None, out=out)
    assert "0 of 3 keys planned" in out.getvalue()
    assert out.getvalue().count("not planned") == 3


def test_tree_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec_path, snap = _files(tmp_path)
    with pytest.raises(ConfigError, match="--state"):
        run_tree(spec_path, state="[1]", snapshot=None, out=io.StringIO())
    assert main(["tree", str(snap), "--state", "{}"]) == 2
    assert capsys.readouterr().err.startswith("error: --state")
