"""Which backend a model string means: an inference server's URL, or a local model on an engine.

A local model runs on the managed llama-server where the engine setting and the machine allow
(see :func:`forethought.planner.choose_engine`), else on the in-process torch decoder (a thread
or a worker process). The agent and a fleet's planner worker choose the same way.
"""

from __future__ import annotations

from forethought.models import (
    EngineChoice,
    ManagedServerBackend,
    ModelBackend,
    ProcessBackend,
    ServerBackend,
    TransformersBackend,
    choose_engine,
    is_server_url,
)

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
    kind = ProcessBackend if config.model_process else TransformersBackend
    local = kind(model=model, device=config.device, dtype=config.dtype, grammar=config.grammar)
    return local, choice
