"""The health report: on the agent, over HTTP (JSON and Prometheus), on the retained MQTT status.

A real model (the tiny random Llama) plans; a planner fault is injected into its real results
so the report has something true to say about failure. The HTTP endpoint is read with httpx,
the Prometheus text with prometheus-client's own parser, the status topic by a real client
subscribing after the fact (so it gets the retained copy).
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiomqtt
import httpx
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.reliability.specs import FAULTS_SPEC
from forethought import Agent, AgentConfig, AgentSpec
from forethought._cli import main
from forethought.models import TransformersBackend
from forethought.planner import PlannerConfig
from forethought.policies import ConfigError
from forethought.runtime import HealthConfig, MqttBus
from forethought.runtime.transports._mqtt import payload_bytes
from forethought.testing import FaultyBackend, MosquittoBroker, until_holds

SPEC = AgentSpec.from_data(FAULTS_SPEC)


def _config(**health: Any) -> AgentConfig:
    return AgentConfig.defaults(
        planner=PlannerConfig(
            batch_size=2, horizon=1, min_rate=0.0, cost_weight=0.0, learn=False,
            method="generate", max_new_tokens=16, retry_base_s=3.0,
        ),
        health=HealthConfig(**health),
    )  # fmt: skip


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


async def _until(cond: Any, within: float = 30.0) -> None:
    await until_holds(cond, within, "the planner's health")  # no event to wait on


async def test_health_over_http_says_what_is_wrong_and_when_it_is_right_again(
    tiny_backend: TransformersBackend,
) -> None:
    faulty = FaultyBackend(tiny_backend)
    agent = Agent(SPEC, backend=faulty, config=_config(port=0, prometheus=True))
    async with agent, httpx.AsyncClient() as http:
        assert agent.planner is not None
        assert agent.health_endpoint is not None
        base = f"http://127.0.0.1:{agent.health_endpoint.port}"
        await _until(lambda: agent.planner is not None and agent.planner.health.status == "ok")
        for i in range(5):
            await agent.decide({"id": f"e{i}", "type": "clear"})

        r = await http.get(f"{base}/health")
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["status"] == "ok"
        assert body["reasons"] == []
        assert body["counters"]["decisions"] == 5
        assert body["planner"]["status"] == "ok"
        assert body["tree"]["nodes"] == len(agent.tree)
        assert body["model"]["live_call_p95_ms"] > 0

        m = await http.get(f"{base}/metrics")
        assert m.status_code == 200
        assert m.headers["content-type"].startswith("text/plain; version=0.0.4")
        samples = _samples(m.text)
        per_tier = {
            dict(labels)["tier"]: v
            for (name, labels), v in samples.items()
            if name == "forethought_decisions_total"
        }
        assert sum(per_tier.values()) == 5
        assert samples[("forethought_healthy", (("agent", "faults"),))] == 1.0
        assert samples[("forethought_tree_nodes", (("agent", "faults"),))] == len(agent.tree)

        # A planner fault: the report turns degraded, names it, and the metrics agree.
        failures = agent.planner.health.failures
        faulty.arm("exception")
        agent.update_state({"shift": 1})  # new work, so the planner calls the model
        await _until(lambda: agent.planner is not None and agent.planner.health.failures > failures)
        r = await http.get(f"{base}/health")
        assert r.status_code == 503
        body = r.json()
        assert body["status"] == "degraded"
        assert any("planner backing off" in why and "OSError" in why for why in body["reasons"])
        samples = _samples((await http.get(f"{base}/metrics")).text)
        assert samples[("forethought_planner_backing_off", (("agent", "faults"),))] == 1.0
        assert samples[("forethought_planner_failures_total", (("agent", "faults"),))] >= 1

        # ... and back to ok on its own after the backoff.
        await _until(lambda: agent.planner is not None and agent.planner.health.status == "ok")
        r = await http.get(f"{base}/health")
        assert r.status_code == 200
        assert r.json()["planner"]["recoveries"] >= 1

        assert (await http.get(f"{base}/nope")).status_code == 404
        assert (await http.post(f"{base}/health")).status_code == 405


async def test_without_prometheus_there_is_no_metrics_path(
    tiny_backend: TransformersBackend,
) -> None:
    async with Agent(SPEC, backend=tiny_backend, config=_config(port=0)) as agent:
        assert agent.health_endpoint is not None
        async with httpx.AsyncClient() as http:
            base = f"http://127.0.0.1:{agent.health_endpoint.port}"
            assert (await http.get(f"{base}/metrics")).status_code == 404
            assert (await http.get(f"{base}/health")).status_code in (200, 503)


async def test_a_port_in_use_fails_the_start_naming_the_setting(
    tiny_backend: TransformersBackend,
) -> None:
    async with Agent(SPEC, backend=tiny_backend, config=_config(port=0)) as first:
        assert first.health_endpoint is not None
        taken = first.health_endpoint.port
        with pytest.raises(ConfigError, match=r"health\.port") as info:
            async with Agent(SPEC, backend=tiny_backend, config=_config(port=taken)):
                pass
        assert str(taken) in str(info.value)


@pytest.mark.broker
async def test_the_retained_status_carries_the_report(
    broker: MosquittoBroker, agent_id: str, tiny_backend: TransformersBackend
) -> None:
    bus = MqttBus(url=broker.url, agent_id=agent_id, reconnect_min_s=0.05, keepalive=2)
    agent = Agent(SPEC, backend=tiny_backend, bus=bus, config=_config(interval_s=0.2))
    topic = f"forethought/{agent_id}/status"
    async with agent:
        await bus.wait_connected(10)
        await agent.decide({"id": "x1", "type": "clear"})
        # A refresh after the decision is out: the broker retains it.
        async with aiomqtt.Client("127.0.0.1", broker.port, identifier=f"{agent_id}-w") as c:
            await c.subscribe(topic, qos=1)
            async with asyncio.timeout(10):
                async for m in c.messages:
                    if orjson.loads(payload_bytes(m)).get("counters", {}).get("decisions"):
                        break
        # A client that subscribes now gets the retained copy: what a dashboard sees first.
        async with aiomqtt.Client("127.0.0.1", broker.port, identifier=f"{agent_id}-late") as c:
            await c.subscribe(topic, qos=1)
            async with asyncio.timeout(10):
                message = await anext(aiter(c.messages))
        assert message.retain
        body = orjson.loads(payload_bytes(message))
        assert body["online"] is True
        assert body["agent"] == agent_id
        assert body["counters"]["decisions"] >= 1
        assert body["bus"]["connected"] is True
        assert body["status"] in ("ok", "degraded")
        assert (body["status"] == "degraded") == bool(body["reasons"]), body
    async with aiomqtt.Client("127.0.0.1", broker.port, identifier=f"{agent_id}-after") as c:
        await c.subscribe(topic, qos=1)
        async with asyncio.timeout(10):
            message = await anext(aiter(c.messages))
    assert orjson.loads(payload_bytes(message)) == {"online": False}


def test_metrics_without_a_port_is_one_clear_line(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["run", "sims/scenarios/warehouse-amr.yaml", "--metrics", "--mqtt", "mqtt://x:1"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("error: ")
    assert "--health-port" in err
    assert "Traceback" not in err
