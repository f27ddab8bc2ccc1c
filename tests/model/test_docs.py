"""The docs say what the code does: generated pages are current, examples run as written.

The README's Python example runs verbatim on the embedded model and must print a tree answer;
the spec page's complete spec loads as a scenario and uses every field the spec format has;
the results pages, the README's headline and the configuration reference match their sources.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from forethought.models._model_load import LoadedModel
from forethought.policies import AgentSpec
from forethought.policies._events import EventType
from forethought.sims import TraceEvent, load_scenario
from forethought.sims._scenario import SCENARIO_KEYS, Drift, Generate

ROOT = Path(__file__).resolve().parents[2]


def _docs_pages() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_pages", ROOT / "scripts" / "docs_pages.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _fenced(path: Path, language: str) -> list[str]:
    text = path.read_text()
    return re.findall(rf"^```{language}\n(.*?)^```$", text, flags=re.MULTILINE | re.DOTALL)


def test_the_readme_is_short_and_speaks_of_the_project_not_its_history() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    pages = _docs_pages()
    before, _, rest = readme.partition(pages.BEGIN)
    _, _, after = rest.partition(pages.END)
    prose = before + after  # the generated headline names its commits, as results must
    assert not re.findall(r"\b[0-9a-f]{7,40}\b", prose), "a commit hash in the README"
    assert not re.findall(r"(?i)\bissue\s*#?\d+|#\d+\b", prose), "an issue reference"


def test_the_readme_links_into_the_docs_resolve() -> None:
    readme = (ROOT / "README.md").read_text()
    targets = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme)
    local = [t for t in targets if "://" not in t]
    assert len(local) >= 15
    missing = [t for t in local if not (ROOT / t).exists()]
    assert not missing


def test_generated_pages_are_current() -> None:
    assert _docs_pages().main(["--check"]) == 0, "run: .venv/bin/python scripts/docs_pages.py"


def test_the_readme_headline_is_the_matrix_json() -> None:
    pages = _docs_pages()
    data = json.loads((ROOT / "docs/results/matrix.json").read_text())
    block = pages.render_headline(data)
    assert block in (ROOT / "README.md").read_text()
    matrix_page = pages.render_matrix(data)
    for source in data["sources"]:  # the front door names no commit; the matrix page does
        assert source["commit"] not in block
        assert f"`{source['commit']}`" in matrix_page
    assert "docs/results/matrix.md" in block
    assert "`cpu-8b-q4`" in block  # ...and the profiles
    # The block follows the JSON: a changed figure changes the block.
    row = next(r for r in data["rows"] if r["profile"] == "cpu-8b-q4" and r["tree"] is not None)
    row["tree"]["correct_in_time"] = 12.5
    changed = pages.render_headline(data)
    assert changed != block
    assert "| 12.5 / " in changed


def test_every_results_json_names_its_provenance() -> None:
    for path in sorted((ROOT / "docs/results").glob("*.json")):
        data = json.loads(path.read_text())
        for field in ("title", "commit", "date", "machine", "profile", "rounds", "command"):
            assert data.get(field) not in (None, ""), f"{path.name}: no {field}"
        # "+dirty": measured on uncommitted changes to that commit, and said so; a result
        # gathered from several runs (the matrix) names each run's commit, comma-separated.
        one = r"[0-9a-f]{7,40}(\+dirty)?"
        assert re.fullmatch(rf"{one}(, {one})*", data["commit"]), path.name
        assert re.match(r"\d{4}-\d{2}-\d{2}", data["date"]), path.name
        page = path.parent / data.get("page", path.with_suffix(".md").name)
        assert page.exists(), f"{path.name} has no page"


def _nav_files(entries: Any) -> list[str]:
    out: list[str] = []
    for entry in entries:
        if isinstance(entry, str):
            out.append(entry)
        elif isinstance(entry, dict):
            for value in entry.values():
                out += _nav_files(value) if isinstance(value, list) else [value]
    return out


def test_every_docs_page_is_in_the_nav() -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    nav = _nav_files(config["nav"])
    pages = {str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md")}
    assert sorted(nav) == sorted(set(nav)), "a page twice in the nav"
    assert set(nav) == pages


def test_the_spec_page_example_loads_and_uses_every_field(tmp_path: Path) -> None:
    (block,) = [b for b in _fenced(ROOT / "docs/spec.md", "yaml") if "name: door-controller" in b]
    path = tmp_path / "door.yaml"
    path.write_text(block)
    scenario = load_scenario(path)
    assert scenario.spec.name == "door-controller"
    assert len(scenario.events()) == 105  # 5 traced + 100 generated
    assert len(scenario.graders) == 5

    data = yaml.safe_load(block)
    # Every field of the spec format appears somewhere in the example ("mcap" replaces the
    # trace with a recording, so it is described in prose instead; "world" makes a closed-loop
    # scenario, documented with its own example in the simulator guide).
    assert set(AgentSpec.model_fields) | (SCENARIO_KEYS - {"mcap", "world"}) == set(data)
    used_by_types = set().union(*(e.keys() for e in data["events"]))
    assert set(EventType.model_fields) | {"accept"} == used_by_types
    kinds = [type(d).__name__ for e in data["events"] for d in e.get("params", {}).values()]
    assert {"list", "dict"} <= set(kinds)  # categorical and numeric parameters
    used_by_trace = set().union(*(e.keys() for e in data["trace"]))
    assert set(TraceEvent.model_fields) - {"grader"} == used_by_trace
    assert set(Generate.model_fields) == set(data["generate"])
    used_by_drift = set().union(*(d.keys() for d in data["generate"]["drift"]))
    assert set(Drift.model_fields) == used_by_drift


@pytest.mark.smollm2
def test_the_readme_example_runs_as_written_and_answers_from_the_tree(
    smollm2_first_load: LoadedModel,
) -> None:
    (example,) = _fenced(ROOT / "README.md", "python")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", example],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0].startswith("the tree answers ")
    assert lines[1] == "covered: True"
    assert lines[2].startswith("Tier.TREE {'action': "), done.stdout
