"""Which backend a model string means: an inference server's URL, or a local model on an engine.

A local model runs on the managed llama-server where the engine setting and the machine allow
(see ``models/_engine.py``), else on the in-process torch decoder (a thread
or a worker process). The agent and a fleet's planner worker choose the same way.

The torch decoder needs the ``local`` extra; without torch, asking for it is a ConfigError that
names both ways out (install the extra, or serve the model and pass its URL).
"""

from __future__ import annotations

import importlib.util

from forethought.models import ManagedServerBackend, ModelBackend, ProcessBackend, ServerBackend
from forethought.models.internals import EngineChoice, choose_engine, is_server_url
from forethought.policies import ConfigError

from ._config import AgentConfig

__all__ = ["backend_for"]


def backend_for(model: str, config: AgentConfig) -> tuple[ModelBackend, EngineChoice | None]:
    """The backend for ``model`` (alias, folder, .gguf, or server URL) under ``config``.

    With it, the engine chosen for a local model and why (None for a server URL): its
    ``notice``, when set, is for the caller to say once.
    """
    if is_server_url(model):
        server = ServerBackend(
            url=model,
            api_key=config.server.key(),
            ca_file=config.server.ca_file,
            timeout_s=config.server.timeout_s,
            poll_s=config.server.poll_s,
        )
        return server, None
    engine = config.engine
    choice = choose_engine(model, engine.kind, config.device)
    if choice.kind == "llama-server":
        managed = ManagedServerBackend(
            model=model,
            slots=engine.slots,
            context=engine.context,
            threads=engine.threads,
            timeout_s=config.server.timeout_s,
            poll_s=config.server.poll_s,
        )
        return managed, choice
    # Both come with the local extra; the core install has neither.
    missing = [name for name in ("torch", "transformers") if importlib.util.find_spec(name) is None]
    if missing:
        raise ConfigError(
            "model",
            model,
            f"the local model runs on torch and transformers ({choice.reason}) and "
            f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} not installed: "
            "pip install 'forethought[local]', or serve the model (llama-server, vLLM) and "
            "pass --model URL",
        )
    # Imported here, after the check: the module imports torch at its top.
    from forethought.models import TransformersBackend  # noqa: PLC0415

    kind = ProcessBackend if config.model_process else TransformersBackend
    local = kind(model=model, device=config.device, dtype=config.dtype, grammar=config.grammar)
    return local, choice
