import subprocess
import sys
from pathlib import Path


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "forethought", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_help_lists_bench() -> None:
    out = run("--help")
    assert out.returncode == 0
    assert "bench" in out.stdout


def test_unknown_model_is_one_clear_line_without_traceback() -> None:
    out = run("bench", "--quick", "--model", "/no/such/model.gguf")
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    assert out.stderr.strip().startswith("error: model:")
    assert "/no/such/model.gguf" in out.stderr


def test_sim_with_a_broken_scenario_is_one_clear_line(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "bad.yaml"
    path.write_text("name: x\n")
    out = run("sim", str(path))
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    assert str(path) in out.stderr
    assert "description" in out.stderr


def test_send_with_bad_params_is_one_clear_line() -> None:
    out = run("send", "ping", "--mqtt", "mqtt://127.0.0.1:1", "--params", "[1")
    assert out.returncode == 2
    assert out.stderr.strip().startswith("error: --params")


def test_matrix_replays_every_profile_into_one_table(tmp_path, tiny_model_dir) -> None:  # type: ignore[no-untyped-def]
    import orjson
    import yaml

    scenario = {
        "name": "m",
        "description": "A test robot.",
        "action": {
            "type": "object",
            "properties": {"a": {"enum": ["stop", "go"]}},
            "required": ["a"],
        },
        "default_action": {"a": "stop"},
        "events": [{"type": "ping", "deadline_ms": 300, "accept": [{"a": "go"}]}],
        "trace": [{"at_ms": 500 * i, "type": "ping"} for i in range(1, 4)],
    }
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(scenario))
    out_json = tmp_path / "matrix.json"
    for profile in ("gpu-8b", "cpu-8b-q4"):
        done = run(
            "sim",
            str(path),
            "--matrix",
            "--profile",
            profile,
            "--model",
            str(tiny_model_dir),
            "--device",
            "cpu",
            "--dtype",
            "float32",
            "--json",
            str(out_json),
        )
        assert done.returncode == 0, done.stderr
        rows = orjson.loads(out_json.read_bytes())["rows"]
        assert {r["strategy"] for r in rows} == {"live-naive", "live", "tree", "hybrid"}
        assert {r["profile"] for r in rows} == {profile}
        assert all(0.0 <= r["correct_in_time"] <= r["answered_in_time"] <= 1.0 for r in rows)
        assert "correct_in_time" in done.stdout


def test_a_busy_machine_is_refused_a_measured_profile(tiny_backend) -> None:  # type: ignore[no-untyped-def]
    import pytest

    from forethought.policies import ConfigError
    from forethought.sims import measure_profile

    quiet = measure_profile(tiny_backend, rounds=3, max_spread=100.0)
    assert quiet.step_base_s > 0
    assert quiet.prefill_per_token_s >= 0
    with pytest.raises(ConfigError, match="busy"):  # no two rounds are ever exactly equal
        measure_profile(tiny_backend, rounds=3, max_spread=1.0)


def _ping_spec(tmp_path: Path) -> Path:
    """A one-type spec for ``forethought run`` (a ping with a 300 ms deadline)."""
    import orjson

    spec = tmp_path / "spec.json"
    spec.write_bytes(
        orjson.dumps(
            {
                "name": "r",
                "description": "A test robot.",
                "action": {"type": "object", "properties": {"a": {"enum": ["stop", "go"]}}},
                "default_action": {"a": "stop"},
                "events": [{"type": "ping", "deadline_ms": 300}],
            }
        )
    )
    return spec


def test_run_with_an_unreachable_broker_ends_with_one_error_line(tmp_path, tiny_model_dir) -> None:  # type: ignore[no-untyped-def]

    spec = _ping_spec(tmp_path)
    config = tmp_path / "agent.toml"
    config.write_text(
        f'model = "{tiny_model_dir}"\n[planner]\nenabled = false\n[mqtt]\nconnect_timeout_s = 1\n'
    )
    out = run("run", str(spec), "--mqtt", "mqtt://127.0.0.1:1", "--config", str(config))
    assert out.returncode == 2, out.stderr
    assert "ready" not in out.stderr  # ready only once connected
    errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert errors == [
        "error: mqtt: no broker answered within 1 s (mqtt.connect_timeout_s; 0 keeps retrying) "
        "(got 'mqtt://127.0.0.1:1')"
    ], out.stderr
    assert "Traceback" not in out.stderr
    assert "WARNING" not in out.stderr  # the retries before it are not a wall of warnings


def test_a_server_engine_on_virtual_time_is_one_clear_line() -> None:
    scenario = Path(__file__).parents[2] / "sims" / "scenarios" / "warehouse-amr.yaml"
    out = run("sim", str(scenario), "--strategy", "live", "--engine", "llama-server")
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    assert out.stderr.strip().startswith("error: --engine")
    assert "--clock real" in out.stderr


def test_run_reports_each_start_step_before_ready(tmp_path, tiny_model_dir, broker) -> None:  # type: ignore[no-untyped-def]
    """Not on a terminal, each start step is a line as it begins and one as it ends (with its
    duration), in the order the agent starts; ready comes after the bus, coverage after it."""
    import os
    import re
    import signal
    import threading

    import orjson

    spec = _ping_spec(tmp_path)
    config = tmp_path / "agent.toml"
    config.write_text(f'model = "{tiny_model_dir}"\ndevice = "cpu"\n')
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "forethought", "run", str(spec), "--mqtt", broker.url]
    proc = subprocess.Popen(
        [*cmd, "--agent-id", "steps", "--config", str(config)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: list[str] = []
    covered = threading.Event()

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line.rstrip("\n"))
            if "the tree answers" in line:
                covered.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert covered.wait(180), "\n".join(lines)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
        reader.join(timeout=10)
    assert proc.returncode == 0, "\n".join(lines)
    assert orjson.loads(out.strip().splitlines()[-1])["decisions"] == 0  # stdout: the report

    said = [line for line in lines if line.startswith("forethought: ")]
    steps = [
        f"model {tiny_model_dir}: loading on torch",
        "warm-up: compiling the action grammar",
        f"bus: connecting to {broker.url}",
    ]
    where = []
    for step in steps:
        begun = [i for i, line in enumerate(said) if line.startswith(f"forethought: {step}")]
        assert len(begun) == 2, (step, said)  # one line as it begins, one as it ends
        assert said[begun[0]].endswith(" ..."), said[begun[0]]
        assert re.search(r": done in \d+\.\d s$", said[begun[1]]), said[begun[1]]
        where += begun
    ready = next(i for i, line in enumerate(said) if " ready on " in line)
    coverage = next(i for i, line in enumerate(said) if "the tree answers" in line)
    assert where == sorted(where)  # in the order the agent starts
    assert where[-1] < ready < coverage
