"""Fleet security on a real nats-server: TLS, one user per role, an agent refused a write."""

from __future__ import annotations

import contextlib
from pathlib import Path

import nats
import nats.errors
import pytest
from conftest import Pki
from fleet_support import bucket, settled, spec, wait_for, worker

from forethought.models import ScriptedBackend
from forethought.planner import PlannerConfig
from forethought.policies import EventKey, PolicyNode
from forethought.runtime import Agent, AgentConfig, FleetConfig, fleet_permissions
from forethought.runtime.fleet._record import BranchRecord, prompt_hash
from forethought.testing import NatsCluster, NatsUser, until_holds

pytestmark = pytest.mark.fleet

PASSWORDS = {"planner": "planner-secret", "r0": "robot-secret"}


@pytest.fixture
def secured(pki: Pki) -> NatsCluster:
    users = [
        NatsUser("planner", PASSWORDS["planner"], fleet_permissions("sec", "planner")),
        NatsUser("r0", PASSWORDS["r0"], fleet_permissions("sec", "agent", robot="r0")),
    ]
    with NatsCluster(size=1, users=users, tls=(pki.cert, pki.key)) as c:
        yield c


def as_user(cluster: NatsCluster, pki: Pki, user: str, tmp_path: Path) -> FleetConfig:
    secret = tmp_path / f"{user}.password"
    secret.write_text(PASSWORDS[user] + "\n")
    return FleetConfig(
        url=cluster.url, name="sec", replicas=1, robot=user if user != "planner" else "robot",
        user=user, password_file=secret, ca_file=pki.ca,
    )  # fmt: skip


async def test_an_agent_reads_the_tree_over_tls_and_is_refused_a_branch_write(
    secured: NatsCluster, pki: Pki, tmp_path: Path
) -> None:
    assert secured.url.startswith("tls://")
    planner = as_user(secured, pki, "planner", tmp_path)
    robot = as_user(secured, pki, "r0", tmp_path)
    w = worker(planner, ScriptedBackend(action={"a": "slow"}, step_s=0.001), "w1")
    config = AgentConfig(fleet=robot, planner=PlannerConfig(enabled=False))
    async with w, Agent(spec(), backend=ScriptedBackend(), config=config) as agent:
        # The agent's credential may publish its state (the worker sees it) and watch the tree.
        await wait_for(lambda: w.stats.states >= 1, 10, "the robot's state")
        await settled([w], quiet_s=0.5)
        stored = await bucket(secured.url, planner)
        assert stored
        await wait_for(lambda: len(agent.tree) >= len(stored), 10, "the agent's copy")

        # The same credential writing a branch: the server refuses it.
        refusals: list[str] = []

        async def error(exc: Exception) -> None:
            refusals.append(str(exc))

        options = robot.connect_options()
        nc = await nats.connect(**options, error_cb=error)
        try:
            kv = await nc.jetstream(timeout=1.0).key_value(robot.names.tree)
            node = PolicyNode("f" * 16, EventKey("clear"), {"a": "go"}, '{"a":"go"}', 0.5,
                              "forged", 0, 0.0, 0.0)  # fmt: skip
            record = BranchRecord.of(
                node, prompt=prompt_hash(spec().description, spec().action_schema().fingerprint),
                writer="r0",
            )  # fmt: skip
            with pytest.raises((nats.errors.TimeoutError, nats.errors.NoRespondersError)):
                await kv.put(record.key, record.encode())

            def refused() -> bool:
                return any(
                    "permissions violation for publish" in r.lower()
                    and "$kv.ft-sec-tree." in r.lower()
                    for r in refusals
                )

            with contextlib.suppress(AssertionError):  # the assertion below shows what came
                await until_holds(refused, 10, "the server's refusal")
        finally:
            await nc.close()
        assert refused(), refusals
        assert ("f" * 16, EventKey("clear")) not in await bucket(secured.url, planner)
        assert agent.tree.lookup("f" * 16, EventKey("clear")) is None


async def test_a_wrong_password_is_refused(secured: NatsCluster, pki: Pki, tmp_path: Path) -> None:
    robot = as_user(secured, pki, "r0", tmp_path).model_copy(update={"password_file": None})
    options = robot.connect_options()
    options["password"] = "wrong"
    with pytest.raises(nats.errors.Error, match=r"[Aa]uthorization"):
        await nats.connect(**options, allow_reconnect=False, max_reconnect_attempts=0)
