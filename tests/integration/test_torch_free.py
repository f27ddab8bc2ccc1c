"""`pip install forethought` without the `local` extra runs an agent against a real llama-server.

A fresh venv gets the core dependencies only (read from pyproject.toml, from this machine's
configured package index) and the package with ``--no-deps``; the test asserts torch and
transformers are absent there, then runs ``forethought run SPEC --model URL`` and sends it
events over a real Mosquitto.

Creating that venv is the cost (about a minute), so it is cached under
``~/.cache/forethought/torch-free-venv-<hash of pyproject.toml>`` and reused by later runs until
pyproject.toml changes (delete the folder to rebuild it). Needs FORETHOUGHT_LLAMA_SERVER.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import textwrap
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from forethought.models._model_load import LoadedModel
from forethought.models._model_source import gguf_cache_dir, resolve_model
from forethought.testing import (
    LlamaServer,
    MosquittoBroker,
    llama_server_path,
    until_holds_blocking,
)

pytestmark = [pytest.mark.server, pytest.mark.smollm2]

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def server() -> Iterator[LlamaServer]:
    if llama_server_path() is None:
        pytest.skip("needs llama-server: set FORETHOUGHT_LLAMA_SERVER (scripts/test builds it)")
    with LlamaServer(slots=2) as s:
        yield s


def _torch_free_venv() -> Path:
    """The cached venv with the core dependencies only (built once per pyproject.toml)."""
    pyproject = (ROOT / "pyproject.toml").read_bytes()
    digest = hashlib.sha256(pyproject).hexdigest()[:12]
    venv = Path.home() / ".cache" / "forethought" / f"torch-free-venv-{digest}"
    python = venv / "bin" / "python"
    if not (venv / ".ready").is_file():
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        core = tomllib.loads(pyproject.decode())["project"]["dependencies"]
        subprocess.run([*_pip(python), *core], check=True, capture_output=True)
        (venv / ".ready").write_text("core dependencies installed\n")
    # The package itself, editable and without dependencies: points at this checkout each run.
    subprocess.run([*_pip(python), "--no-deps", "-e", str(ROOT)], check=True, capture_output=True)
    return python


def _pip(python: Path) -> list[str]:
    return [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]


def test_forethought_run_decides_on_a_server_without_torch(
    server: LlamaServer,
    smollm2_first_load: LoadedModel,
    model_cache: Path,
    broker: MosquittoBroker,
    tmp_path: Path,
) -> None:
    """The issue's words: a venv without torch, then ``forethought run SPEC --model URL``
    decides events (sent with ``forethought send`` over a real Mosquitto)."""
    python = _torch_free_venv()
    for module in ("torch", "transformers"):
        tried = subprocess.run(
            [str(python), "-c", f"import {module}"], capture_output=True, text=True, check=False
        )
        assert tried.returncode != 0, module
        assert f"No module named '{module}'" in tried.stderr
    # The GGUF's tokenizer is read from its converted folder (tokenizers and jinja2 only).
    tokenizer = gguf_cache_dir(Path(resolve_model("smollm2-135m").location), model_cache)
    spec = tmp_path / "spec.json"
    spec.write_bytes(
        orjson.dumps(
            {
                "name": "r",
                "description": "A test robot. On a ping, go.",
                "action": {
                    "type": "object",
                    "properties": {"a": {"enum": ["stop", "go"]}},
                    "required": ["a"],
                },
                "default_action": {"a": "stop"},
                "events": [{"type": "ping", "deadline_ms": 5000}],
            }
        )
    )
    cli = str(python.parent / "forethought")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    model = f"{server.url}#tokenizer={tokenizer}"
    agent = subprocess.Popen(
        [cli, "run", str(spec), "--model", model, "--mqtt", broker.url, "--agent-id", "tf"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    decisions: list[dict[str, Any]] = []
    model_tiers = {"score", "live", "tree"}

    def answered() -> bool:
        """One event sent; whether enough are decided."""
        assert agent.poll() is None, agent.communicate()[1].decode()[-3000:]
        reply = subprocess.run(
            [cli, "send", "ping", "--mqtt", broker.url, "--agent-id", "tf"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if reply.returncode == 0:  # else the agent is not up yet
            decisions.append(orjson.loads(reply.stdout.strip().splitlines()[-1]))
        # Until the model answers one (at most ten events): the first events after start may
        # come before a model call fits the deadline (the latency prior, a busy machine), and
        # those get the safe default by design. At least two, so a second event is decided too.
        return len(decisions) >= 2 and (
            len(decisions) >= 10 or bool(model_tiers & {d["tier"] for d in decisions})
        )

    try:
        until_holds_blocking(answered, 240, "the agent's answers", every_s=1.0)
    finally:
        agent.send_signal(signal.SIGTERM)
        out, err = agent.communicate(timeout=60)
    assert agent.returncode == 0, err.decode()[-3000:]
    for decision in decisions:
        assert decision["action"] in ({"a": "stop"}, {"a": "go"}), decision
    # The model answered at least once (score or live), not only the safe default.
    print(orjson.dumps(decisions).decode())  # shown on failure: each decision's skipped tiers
    tiers = {d["tier"] for d in decisions}
    assert model_tiers & tiers, (decisions, err.decode()[-3000:])
    assert orjson.loads(out.decode().strip().splitlines()[-1])["decisions"] == len(decisions)


def test_a_local_model_without_torch_names_the_fix(
    server: LlamaServer, smollm2_first_load: LoadedModel
) -> None:
    """The torch engine asked for in the torch-free venv: one ConfigError naming both fixes."""
    python = _torch_free_venv()
    code = textwrap.dedent(
        """
        from forethought import AgentConfig, ConfigError
        from forethought.runtime._backend_choice import backend_for

        config = AgentConfig.defaults()
        config = config.model_copy(
            update={"engine": config.engine.model_copy(update={"kind": "torch"})}
        )
        try:
            backend_for("smollm2-135m", config)
        except ConfigError as exc:
            print(exc)
        """
    )
    out = subprocess.run(
        [str(python), "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "torch and transformers are not installed" in out.stdout
    assert "pip install 'forethought[local]'" in out.stdout
    assert "--model URL" in out.stdout


def test_a_tokenizer_only_transformers_reads_names_the_fix(server: LlamaServer) -> None:
    """A Hugging Face id as the tokenizer, in the torch-free venv: ModelNotFound naming the
    local extra and the tokenizer-folder alternative, raised when the server is opened."""
    python = _torch_free_venv()
    code = textwrap.dedent(
        f"""
        import asyncio
        from forethought.models import ServerBackend
        from forethought.policies import ModelNotFound

        async def main():
            url = "{server.url}#tokenizer=HuggingFaceTB/SmolLM2-135M-Instruct"
            try:
                async with ServerBackend(url=url):
                    pass
            except ModelNotFound as exc:
                print(exc)

        asyncio.run(main())
        """
    )
    out = subprocess.run(
        [str(python), "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "pip install 'forethought[local]'" in out.stdout
    assert "URL#tokenizer=PATH" in out.stdout
