"""Every shell and Python block of README.md and docs/ runs as written, or says why not.

Blocks are extracted from the pages (```sh, ```bash, ```console, ```python) and each is, by
its key ``page#n`` (the n-th such block of the page):

* run here, as written, in a scratch folder holding the files the docs name (the check
  guide's ``door.yaml``, a tree snapshot, and ``sims/scenarios/warehouse-amr.yaml`` cut to a
  short scenario so a replay takes seconds, not minutes); where the block shows its output,
  the output must be the same, else its shape is asserted;
* run by another named test (``ELSEWHERE``);
* a synopsis with placeholders (``SYNOPSIS``): every flag it names must be one ``--help`` lists;
* not runnable here (``NOT_HERE``), each with its reason.

A new block fails :func:`test_every_block_is_run_here_or_marked` until it is classified, and a
mark whose block is gone fails it too.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from forethought.policies import AgentSpec, PolicyNode, PolicyTree
from forethought.testing import MosquittoBroker

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
_FENCE = re.compile(r"^```(sh|bash|console|python)\n(.*?)^```$", re.MULTILINE | re.DOTALL)


@dataclass(frozen=True, slots=True)
class Block:
    """One fenced block of a page."""

    key: str
    language: str
    text: str


def blocks() -> list[Block]:
    """Every shell and Python block of README.md and docs/ (results pages are generated)."""
    docs = sorted(p for p in (ROOT / "docs").rglob("*.md") if "results" not in p.parts)
    pages = [ROOT / "README.md", *docs]
    out = []
    for page in pages:
        name = page.relative_to(ROOT).as_posix()
        for i, m in enumerate(_FENCE.finditer(page.read_text())):
            out.append(Block(f"{name}#{i}", m.group(1), m.group(2)))
    return out


ELSEWHERE = {
    "README.md#1": "tests/model/test_docs.py::test_the_readme_example_runs_as_written_and_"
    "answers_from_the_tree runs it verbatim on the embedded model",
    "docs/getting-started.md#3": "the README's example (tests/model/test_docs.py), the same "
    "code: test_the_getting_started_example_is_the_readmes checks they do not differ",
    "docs/guides/fleet.md#0": "tests/integration/test_fleet_example.py runs these commands "
    "(nats-server, a worker, two agents) on free ports",
    "docs/guides/simulator.md#2": "tests/model/test_closed_loop_cli.py::test_the_documented_"
    "command_plays_minigrid_under_every_strategy reads it from the page and runs it",
    "docs/guides/simulator.md#3": "tests/unit/test_closed_loop.py::test_the_guides_world_in_"
    "code_runs_as_written executes it from the page and plays its world",
    "docs/guides/simulator.md#4": "the same calls on a scripted backend: tests/unit/"
    "test_closed_loop.py::test_the_guides_world_in_code_runs_as_written (the model's load is "
    "the README example's)",
    "docs/guides/simulator.md#5": "tests/unit/test_closed_loop.py::test_the_guides_gym_world_"
    "runs_as_written executes it from the page on MiniGrid",
    "docs/guides/ros2.md#0": "tests/integration/test_ros2_guide.py::test_the_recording_"
    "commands_run_as_written reads them from the page and runs them",
    "docs/guides/ros2.md#1": "tests/integration/test_ros2_guide.py::test_the_live_command_"
    "joins_a_ros2_graph runs it against a Zenoh router and a ROS 2 peer",
}
NOT_HERE = {
    "README.md#0": "scripts/main and scripts/test are whole jobs of their own (the main job, "
    "the whole suite): CI runs each as a job",
    "docs/getting-started.md#0": "the same two jobs as README.md#0",
    "docs/getting-started.md#1": "pip install from PyPI: no network in the test suite",
    "docs/getting-started.md#2": "builds llama.cpp from pinned sources once per machine "
    "(10-15 min on two cores): a set-up step; tests/unit/test_engine.py checks the agent names "
    "it when the build is missing",
    "docs/guides/security.md#0": "needs a TLS broker at broker:8883 and a password file in "
    "/run/secrets (tests/integration/test_mqtt_security.py covers the flags on its own PKI)",
    "docs/guides/security.md#1": "needs a Zenoh router with TLS at router.lan:7447 "
    "(tests/integration/test_zenoh.py covers the flags on its own PKI)",
    "docs/guides/testing.md#0": "a test module that needs its project's `spec` fixture: its "
    "imports are checked by test_the_testing_guides_imports_exist",
}
SYNOPSIS = {"docs/guides/simulator.md#0": "sim"}
NOT_HERE["docs/guides/ros2.md#2"] = (
    "serves a ROS 2 graph until cancelled (no end of its own): the same Ros2Bus and Agent are "
    "started against a router and a ROS 2 peer by tests/integration/test_ros2.py"
)


def test_every_block_is_run_here_or_marked() -> None:
    keys = {b.key for b in blocks()}
    marked = set(ELSEWHERE) | set(NOT_HERE) | set(SYNOPSIS)
    assert marked <= keys, f"marks for blocks that are gone: {marked - keys}"
    here = keys - marked
    assert here == set(RUN_HERE), f"unclassified blocks: {here - set(RUN_HERE)}"


RUN_HERE = {
    "docs/guides/check.md#0": "no model",
    "docs/guides/check.md#1": "no model",
    "docs/guides/check.md#2": "no model",
    "docs/guides/check.md#3": "no model",
    "docs/guides/check.md#4": "no model",
    "docs/guides/fleet.md#1": "no model",
    "docs/getting-started.md#4": "run + send on a broker",
    "docs/getting-started.md#5": "a replay",
    "docs/guides/simulator.md#1": "a replay",
    "docs/guides/guards.md#0": "no model",
    "docs/guides/guards.md#1": "no model",
}


def _block(key: str) -> Block:
    return next(b for b in blocks() if b.key == key)


def _env() -> dict[str, str]:
    return {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "HF_HUB_OFFLINE": "1"}


def _sh(command: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", command],
        cwd=cwd,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _console(block: Block) -> list[tuple[str, list[str]]]:
    """A console block as (command, the output lines shown after it)."""
    out: list[tuple[str, list[str]]] = []
    for line in block.text.splitlines():
        if line.startswith("$ "):
            out.append((line[2:], []))
        elif out:
            out[-1][1].append(line)
    return out


DOOR = {
    "name": "door",
    "description": "A door controller: open for people, close on alarm.",
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


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A scratch folder with the repository's sims/ and the check guide's draft door.yaml."""
    (tmp_path / "sims").symlink_to(ROOT / "sims")
    guide = (ROOT / "docs" / "guides" / "check.md").read_text()
    draft = re.search(r"^```yaml\n(.*?)^```$", guide, re.MULTILINE | re.DOTALL)
    assert draft is not None
    (tmp_path / "door.yaml").write_text(draft.group(1))
    return tmp_path


@pytest.mark.parametrize("key", ["docs/guides/check.md#0", "docs/guides/check.md#1"])
def test_check_prints_what_the_guide_shows(checkout: Path, key: str) -> None:
    for command, shown in _console(_block(key)):
        done = _sh(command, checkout)
        assert done.stdout.splitlines() == shown, (command, done.stdout, done.stderr)


def test_check_prices_under_figures_as_the_guide_writes_them(checkout: Path) -> None:
    (command,) = _block("docs/guides/check.md#2").text.strip().splitlines()
    done = _sh(command, checkout)
    assert done.returncode == 0, done.stderr
    assert "under step_ms=8.6,prefill_us_per_token=50 (step 8.6 ms, prefill 50 us/token" in (
        done.stdout
    )


def test_schema_writes_a_json_schema(checkout: Path) -> None:
    for command, shown in _console(_block("docs/guides/check.md#3")):
        assert shown == []
        assert _sh(command, checkout).returncode == 0
    schema = json.loads((checkout / "spec.schema.json").read_text())
    assert schema["$schema"].endswith("2020-12/schema")


def test_tree_reads_a_snapshot_and_a_spec(tmp_path: Path) -> None:
    (tmp_path / "door.yaml").write_text(yaml.safe_dump(DOOR))
    spec = AgentSpec.from_file(tmp_path / "door.yaml")
    state = spec.initial_state().patched({"mode": "alarm"})
    key = spec.event_space().key("person", {"side": "inside"})
    assert key is not None
    tree = PolicyTree()
    tree.insert(
        PolicyNode(
            state.fingerprint_for("person"), key, {"action": "hold"}, "{}", 0.5, "m", 4, 0.1, 1.0
        )
    )
    tree.save(tmp_path / "tree.json", schema=spec.action_schema().fingerprint, model_id="m")
    first, second = _console(_block("docs/guides/check.md#4"))
    done = _sh(first[0], tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("snapshot forethought.policy-tree/")
    done = _sh(second[0], tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # the alarm's effect reaches this state: no warning
    assert "person: side=inside" in done.stdout
    assert "1 of 3 keys planned in this state" in done.stdout


def test_the_fleet_permissions_example_prints_a_nats_account() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _block("docs/guides/fleet.md#1").text],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    users = json.loads(done.stdout)["accounts"]["FLEET"]["users"]
    assert [u["user"] for u in users] == ["planner", "r1"]


def test_the_getting_started_example_is_the_readmes() -> None:
    def code(text: str) -> list[str]:
        return [line.split("  #")[0].rstrip() for line in text.splitlines()]

    readme = _block("README.md#1").text
    assert code(_block("docs/getting-started.md#3").text) == code(readme)


def test_the_testing_guides_imports_exist() -> None:
    text = _block("docs/guides/testing.md#0").text
    imports = "\n".join(line for line in text.splitlines() if line.startswith(("from ", "import ")))
    subprocess.run([sys.executable, "-c", imports], check=True, timeout=120)


def test_the_simulator_synopsis_names_only_real_flags() -> None:
    for key, command in SYNOPSIS.items():
        helped = subprocess.run(
            [sys.executable, "-m", "forethought", command, "--help"],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        ).stdout
        flags = set(re.findall(r"(--[a-z][a-z-]*)", _block(key).text))
        assert flags, key
        assert flags <= set(re.findall(r"(--[a-z][a-z-]*)", helped)), key


@pytest.fixture
def short_checkout(tmp_path: Path) -> Path:
    """sims/scenarios/warehouse-amr.yaml as the docs name it, cut to its trace (5 events)."""
    data = yaml.safe_load((ROOT / "sims" / "scenarios" / "warehouse-amr.yaml").read_text())
    data.pop("generate")
    target = tmp_path / "sims" / "scenarios" / "warehouse-amr.yaml"
    target.parent.mkdir(parents=True)
    target.write_text(yaml.safe_dump(data, sort_keys=False))
    return tmp_path


@pytest.mark.timeout(1500)  # two model loads and replays on a busy 2-core machine
def test_the_replays_run_as_written_on_a_short_scenario(short_checkout: Path) -> None:
    """Both documented replays, on the embedded model (about a minute each on 2 cores)."""
    (quick,) = _block("docs/guides/simulator.md#1").text.strip().splitlines()
    done = _sh(quick, short_checkout, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "CORRECT IN TIME" in done.stdout
    assert re.search(r"^wall clock of the replay: tree [\d.]+ s \(\d+ %\)", done.stdout, re.M)
    (report,) = _block("docs/getting-started.md#5").text.strip().splitlines()
    done = _sh(report, short_checkout, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    header = done.stdout.splitlines()[1]
    assert header.split() == ["warehouse-amr", "live-naive", "live", "tree", "hybrid"]
    index = short_checkout / "build" / "sim" / "warehouse-amr" / "index.html"
    assert "Read " in index.read_text()  # the captions say what to read


def test_run_and_send_as_written_on_a_broker(
    tmp_path: Path, tiny_model_dir: Path, broker: MosquittoBroker
) -> None:
    """The getting-started bus example; the broker's port replaces 1883 (a free one), and
    ``FORETHOUGHT_MODEL`` points ``run`` at a tiny model so the test takes seconds."""
    run_cmd, *send_lines = _block("docs/getting-started.md#4").text.strip().splitlines()
    send_cmd = " ".join(line.rstrip("\\").strip() for line in send_lines)
    url = broker.url
    (tmp_path / "sims").symlink_to(ROOT / "sims")
    env = {**_env(), "FORETHOUGHT_MODEL": str(tiny_model_dir), "FORETHOUGHT_DEVICE": "cpu"}
    argv = shlex.split(run_cmd.replace("mqtt://127.0.0.1:1883", url))
    agent = subprocess.Popen(
        argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    lines: list[str] = []
    ready = threading.Event()

    def read() -> None:
        assert agent.stderr is not None
        for line in agent.stderr:
            lines.append(line)
            if "ready" in line:
                ready.set()

    reader = threading.Thread(target=read, name="agent-stderr", daemon=True)
    reader.start()
    try:
        assert ready.wait(300), "".join(lines)
        done = _sh(send_cmd.replace("mqtt://127.0.0.1:1883", url), tmp_path)
        assert done.returncode == 0, done.stderr
        reply = json.loads(done.stdout)
        assert reply["tier"] in ("tree", "score", "live", "default")
        assert isinstance(reply["skipped"], dict)
        if reply["tier"] == "default":
            assert reply["skipped"], "a default says why"
    finally:
        agent.send_signal(signal.SIGTERM)
        agent.communicate(timeout=60)
        reader.join(timeout=10)
    assert shutil.which("forethought", path=str(BIN)) is not None


def _shown_matches(shown: list[str], printed: list[str]) -> bool:
    """Whether ``printed`` is what a console block shows, a ``...`` line standing for any."""
    if not shown:
        return not printed
    if shown[0] == "...":
        return any(_shown_matches(shown[1:], printed[i:]) for i in range(len(printed) + 1))
    return bool(printed) and printed[0] == shown[0] and _shown_matches(shown[1:], printed[1:])


def test_the_guards_guide_shows_what_check_prints(checkout: Path) -> None:
    """Both console blocks of docs/guides/guards.md: the lab-door scenario with the default the
    page names (refused, with the guard, state and event), then as shipped (proved; the guard
    that cannot be compiled named)."""
    scenario = yaml.safe_load((ROOT / "sims" / "scenarios" / "lab-door.yaml").read_text())
    scenario["default_action"] = {"door": "close", "speed": "slow"}
    (checkout / "door.yaml").write_text(yaml.safe_dump(scenario, sort_keys=False))
    for key in ("docs/guides/guards.md#0", "docs/guides/guards.md#1"):
        for command, shown in _console(_block(key)):
            done = _sh(command, checkout)
            printed = done.stdout.splitlines()
            assert _shown_matches(shown, printed), (command, done.stdout, done.stderr)
