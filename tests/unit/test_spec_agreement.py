"""One source of truth for the spec: ``check``, the loader, the JSON Schema and docs/spec.md agree.

Every key list derives from the models of record (:mod:`forethought.policies._spec_fields`);
these tests fail when any of the four knows a field another does not, and when the spec page's
annotated example stops passing ``check`` or stops using every field.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from forethought.commands._check import check_file
from forethought.policies import AgentSpec, ConfigError, check_spec
from forethought.policies._spec_check import _REQUIRED
from forethought.policies._spec_fields import (
    EVENT_EXTRA_KEYS,
    event_keys,
    required_spec_keys,
    spec_keys,
)
from forethought.sims import load_scenario
from forethought.sims._file_schema import spec_file_schema
from forethought.sims._scenario import SCENARIO_KEYS

ROOT = Path(__file__).resolve().parents[2]
SPEC_PAGE = ROOT / "docs" / "spec.md"


def _annotated_example() -> dict[str, Any]:
    block = re.search(r"^```yaml\n(.*?)^```$", SPEC_PAGE.read_text(), re.MULTILINE | re.DOTALL)
    assert block is not None, "docs/spec.md has no yaml block"
    data = yaml.safe_load(block.group(1))
    assert isinstance(data, dict)
    return data


def _table(heading: str) -> dict[str, str]:
    """The ``| `field` | required | meaning |`` rows under ``heading``: field -> required."""
    text = SPEC_PAGE.read_text()
    start = text.index(f"\n## {heading}\n")
    section = text[start + 1 :]
    following = section.find("\n## ", 1)
    section = section[: following if following > 0 else None]
    rows = re.findall(r"^\| `([a-z_]+)` \| (yes|no) \|", section, flags=re.MULTILINE)
    return dict(rows)


def test_the_schema_knows_exactly_the_fields_of_the_loader() -> None:
    schema = spec_file_schema()
    assert set(schema["properties"]) == set(spec_keys()) | SCENARIO_KEYS
    assert set(schema["required"]) == set(required_spec_keys())
    event = schema["$defs"]["EventType"]
    assert set(event["properties"]) == set(event_keys())


def test_the_reference_tables_list_exactly_the_fields_of_the_loader() -> None:
    top = _table("Top-level fields")
    assert set(top) == set(spec_keys()), "docs/spec.md's top-level table vs SpecFields"
    assert {k for k, req in top.items() if req == "yes"} == set(required_spec_keys())
    events = _table("Event types")
    assert set(events) == set(event_keys()), "docs/spec.md's event table vs EventType"
    assert {k for k, req in events.items() if req == "yes"} == {"type", "deadline_ms"}


def test_check_has_an_example_for_every_required_key() -> None:
    assert set(_REQUIRED) == set(required_spec_keys())


def test_the_annotated_example_uses_every_field_and_passes_check(tmp_path: Path) -> None:
    data = _annotated_example()
    assert set(spec_keys()) <= set(data), set(spec_keys()) - set(data)
    used = {k for ev in data["events"] for k in ev}
    assert used == set(event_keys()), set(event_keys()) ^ used
    path = tmp_path / "door.yaml"
    path.write_text(SPEC_PAGE.read_text().split("```yaml\n", 1)[1].split("```", 1)[0])
    result = check_file(path)
    assert [p.line() for p in result.problems if p.severity == "error"] == []
    assert result.cost is not None
    scenario = load_scenario(path)  # the loader takes what check passed
    assert scenario.spec.events[0].latest_only is True


@pytest.mark.parametrize("key", event_keys())
def test_check_and_the_loader_agree_on_each_event_key(key: str) -> None:
    data = _annotated_example()
    header = {k: v for k, v in data.items() if k in spec_keys()}
    problems = check_spec(header)
    assert not [p for p in problems if p.path.endswith(f".{key}") and "unknown" in p.problem]
    if key not in EVENT_EXTRA_KEYS:  # the loader is given the agent's keys only
        stripped = copy.deepcopy(header)
        for ev in stripped["events"]:
            for extra in EVENT_EXTRA_KEYS:
                ev.pop(extra, None)
        AgentSpec.from_data(stripped)


@pytest.mark.parametrize("where", ["top", "event"])
def test_an_unknown_key_is_refused_by_check_and_the_loader_alike(where: str) -> None:
    header = {k: v for k, v in _annotated_example().items() if k in spec_keys()}
    for ev in header["events"]:
        ev.pop("accept", None)
    if where == "top":
        header["lateset_only"] = True
    else:
        header["events"][0]["lateset_only"] = True
    unknown = [p for p in check_spec(header) if "unknown key" in p.problem]
    assert [p.path.rsplit(".", 1)[-1] for p in unknown] == ["lateset_only"]
    if where == "event":
        assert "did you mean 'latest_only'?" in unknown[0].fix
    with pytest.raises(ConfigError, match="lateset_only"):
        AgentSpec.from_data(header)
