"""Which backend a model string means: an inference server's URL, or a model run in-process."""

from __future__ import annotations

from forethought.planner import (
    ModelBackend,
    ProcessBackend,
    ServerBackend,
    TransformersBackend,
    is_server_url,
)

from ._config import AgentConfig

__all__ = ["backend_for"]


def backend_for(model: str, config: AgentConfig) -> ModelBackend:
    """The backend for ``model`` (alias, folder, .gguf, or server URL) under ``config``."""
    if is_server_url(model):
        return ServerBackend(
            url=model,
            api_key=config.server.key(),
            ca_file=config.server.ca_file,
            timeout_s=config.server.timeout_s,
            poll_s=config.server.poll_s,
        )
    kind = ProcessBackend if config.model_process else TransformersBackend
    return kind(model=model, device=config.device, dtype=config.dtype, grammar=config.grammar)
