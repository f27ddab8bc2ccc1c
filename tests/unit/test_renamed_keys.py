"""Renamed settings: the new key works, the old one is read for one release with a warning.

``executor.probe_after_s`` became ``executor.measure_after_s`` (issue 45: *probe* is only the
MQTT bus's liveness check; the executor's background call is a latency measurement), and
``Agent.health_server`` became ``Agent.health_endpoint`` (*server* is only a model server).
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from forethought import Agent, AgentSpec
from forethought.models import ScriptedBackend
from forethought.policies import ConfigError
from forethought.runtime import AgentConfig, ExecutorConfig


def test_the_new_key_sets_the_measurement_delay_and_warns_nothing() -> None:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert ExecutorConfig(measure_after_s=0.5).measure_after_s == 0.5
        config = AgentConfig.defaults(executor={"measure_after_s": 3.0})
    assert config.executor.measure_after_s == 3.0
    assert ExecutorConfig().measure_after_s == 2.0
    assert [w for w in seen if issubclass(w.category, FutureWarning)] == []


SAID = (
    "executor.probe_after_s was renamed executor.measure_after_s: write measure_after_s "
    "(the old name is read until the next release)"
)


def test_the_old_key_is_read_as_the_new_one_with_a_warning() -> None:
    with pytest.warns(FutureWarning) as seen:
        first = AgentConfig.defaults(executor={"probe_after_s": 3.0})
    with pytest.warns(FutureWarning):
        second = ExecutorConfig.model_validate({"probe_after_s": 0.25})
    assert first.executor.measure_after_s == 3.0
    assert second.measure_after_s == 0.25
    assert {str(w.message) for w in seen if issubclass(w.category, FutureWarning)} == {SAID}


def test_the_old_key_is_read_from_a_toml_file_and_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    toml = tmp_path / "agent.toml"
    toml.write_text("[executor]\nprobe_after_s = 7.5\n")
    with pytest.warns(FutureWarning, match="probe_after_s was renamed"):
        assert AgentConfig.load(toml).executor.measure_after_s == 7.5
    monkeypatch.setenv("FORETHOUGHT_EXECUTOR__PROBE_AFTER_S", "4")
    with pytest.warns(FutureWarning, match="probe_after_s was renamed"):
        assert AgentConfig.load(None).executor.measure_after_s == 4.0


def test_the_old_key_is_still_checked_as_the_new_one() -> None:
    with (
        pytest.warns(FutureWarning, match="probe_after_s was renamed"),
        pytest.raises(ConfigError, match=r"executor\.measure_after_s"),
    ):
        AgentConfig.defaults(executor={"probe_after_s": 0})


def test_both_keys_at_once_is_an_error_naming_both() -> None:
    with pytest.raises(ConfigError, match=r"probe_after_s was renamed .*measure_after_s"):
        AgentConfig.defaults(executor={"probe_after_s": 1.0, "measure_after_s": 2.0})


def test_the_old_health_attribute_reads_the_endpoint_with_a_warning() -> None:
    spec = AgentSpec.from_data(
        {
            "name": "renamed",
            "description": "A test robot.",
            "action": {"type": "object", "properties": {"a": {"enum": ["stop"]}}},
            "default_action": {"a": "stop"},
            "events": [{"type": "ping", "deadline_ms": 500}],
        }
    )
    agent = Agent(spec, backend=ScriptedBackend(action={"a": "stop"}))
    with pytest.warns(FutureWarning, match=r"Agent\.health_server is now Agent\.health_endpoint"):
        assert agent.health_server is agent.health_endpoint
