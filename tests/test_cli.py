import subprocess
import sys


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
