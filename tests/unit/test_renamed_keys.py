"""Renamed settings: the new key works, the old one is read for one release with a warning.

``executor.probe_after_s`` became ``executor.measure_after_s`` (issue 45: *probe* is only the
MQTT bus's liveness check; the executor's background call is a latency measurement).
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from forethought.policies import ConfigError
from forethought.runtime import AgentConfig, ExecutorConfig


@pytest.fixture(autouse=True)
def _nothing_warned_yet(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts as a fresh process would: no old key warned about."""
    monkeypatch.setattr("forethought.runtime._renamed_keys._WARNED", set())


def _said(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "forethought.config"]


def test_the_new_key_sets_the_measurement_delay_and_warns_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="forethought.config"):
        assert ExecutorConfig(measure_after_s=0.5).measure_after_s == 0.5
        config = AgentConfig.defaults(executor={"measure_after_s": 3.0})
    assert config.executor.measure_after_s == 3.0
    assert ExecutorConfig().measure_after_s == 2.0
    assert _said(caplog) == []


def test_the_old_key_is_read_as_the_new_one_with_one_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="forethought.config"):
        first = AgentConfig.defaults(executor={"probe_after_s": 3.0})
        second = ExecutorConfig.model_validate({"probe_after_s": 0.25})
    assert first.executor.measure_after_s == 3.0
    assert second.measure_after_s == 0.25
    (said,) = _said(caplog)  # once per process, however often it is read
    assert "executor.probe_after_s was renamed executor.measure_after_s" in said
    assert "write measure_after_s" in said


def test_the_old_key_is_read_from_a_toml_file_and_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    toml = tmp_path / "agent.toml"
    toml.write_text("[executor]\nprobe_after_s = 7.5\n")
    assert AgentConfig.load(toml).executor.measure_after_s == 7.5
    monkeypatch.setenv("FORETHOUGHT_EXECUTOR__PROBE_AFTER_S", "4")
    assert AgentConfig.load(None).executor.measure_after_s == 4.0


def test_the_old_key_is_still_checked_as_the_new_one() -> None:
    with pytest.raises(ConfigError, match=r"executor\.measure_after_s"):
        AgentConfig.defaults(executor={"probe_after_s": 0})


def test_both_keys_at_once_is_an_error_naming_both() -> None:
    with pytest.raises(ConfigError, match=r"probe_after_s was renamed .*measure_after_s"):
        AgentConfig.defaults(executor={"probe_after_s": 1.0, "measure_after_s": 2.0})
