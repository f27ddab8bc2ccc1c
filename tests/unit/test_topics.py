"""Topics, and the buses made from their configuration sections."""

from __future__ import annotations

import pytest
from extras import needs

from forethought.policies import ConfigError
from forethought.runtime import MqttBus, MqttConfig, Topics, ZenohBus, ZenohConfig


def test_every_name_is_under_the_agents_prefix() -> None:
    t = Topics("r7")
    assert t.event("clear") == "forethought/r7/events/clear"
    assert t.events_filter == "forethought/r7/events/#"
    assert t.events_key == "forethought/r7/events/**"
    assert (t.actions, t.errors, t.status) == (
        "forethought/r7/actions",
        "forethought/r7/errors",
        "forethought/r7/status",
    )
    assert t.reply("x") == "forethought/r7/replies/x"
    assert t.reply("x").startswith(t.replies_prefix)
    assert (t.decide, t.alive, t.health) == (
        "forethought/r7/decide",
        "forethought/r7/alive",
        "forethought/r7/health",
    )


def test_an_mqtt_bus_from_its_config_section() -> None:
    cfg = MqttConfig(url="mqtt://127.0.0.1:1", agent_id="a1", queue_size=3, events_filter="x/#")
    bus = MqttBus.from_config(cfg)
    assert (bus.url, bus.agent_id, bus.events_filter) == ("mqtt://127.0.0.1:1", "a1", "x/#")
    assert bus.actions_topic == Topics("a1").actions
    given = MqttBus.from_config(cfg, url="mqtt://127.0.0.1:2", agent_id="a2")
    assert (given.url, given.agent_id) == ("mqtt://127.0.0.1:2", "a2")
    with pytest.raises(ConfigError, match=r"mqtt\.url"):
        MqttBus.from_config(MqttConfig())


def test_a_zenoh_bus_from_its_config_section() -> None:
    needs("zenoh", "zenoh")
    cfg = ZenohConfig(connect=["tcp/127.0.0.1:1"], agent_id="z1", queue_size=3)
    bus = ZenohBus.from_config(cfg)
    assert bus.agent_id == "z1"
    assert bus.decide_key == Topics("z1").decide
    assert ZenohBus.from_config(cfg, agent_id="z2").health_key == Topics("z2").health
