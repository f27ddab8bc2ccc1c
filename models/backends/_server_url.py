"""Where a server is and how to talk to it, read from its URL (``--model``, ``--backend``)."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from forethought.policies import ConfigError

from .._model_source import DEFAULT_MODEL

__all__ = ["FAMILIES", "ServerTarget", "is_server_url", "parse_server_url"]

FAMILIES = ("llama-server", "vllm", "sglang", "openai")
"""The APIs a server URL may name with ``#api=``."""


@dataclass(frozen=True, slots=True)
class ServerTarget:
    """Where a server is and how to talk to it, as read from a URL."""

    base_url: str
    family: str
    model: str | None
    tokenizer: str


def parse_server_url(url: str) -> ServerTarget:
    """Read ``http[s]://host:port[/v1][#model=NAME&tokenizer=PATH&api=FAMILY]``.

    ``api`` defaults to ``openai`` (vLLM, SGLang) when the path ends in ``/v1``, else
    ``llama-server``; ``tokenizer`` (an alias, a model directory or a ``.gguf``) defaults to
    ``model`` when that names a local model, else to the embedded default's.
    """
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError("model", url, "a server URL is http(s)://host:port[/v1][#model=NAME]")
    options = dict(parse_qsl(parts.fragment))
    unknown = set(options) - {"model", "tokenizer", "api"}
    if unknown:
        raise ConfigError("model", url, f"unknown URL option(s) {sorted(unknown)}")
    path = parts.path.rstrip("/")
    family = options.get("api") or ("openai" if path.endswith("/v1") else "llama-server")
    if family not in FAMILIES:
        raise ConfigError("model", url, f"api must be one of {FAMILIES}")
    if path.endswith("/v1"):
        path = path[: -len("/v1")]
    base = urlunsplit((parts.scheme, parts.netloc, path, "", ""))
    model = options.get("model")
    tokenizer = options.get("tokenizer") or model or DEFAULT_MODEL
    return ServerTarget(base, family, model, tokenizer)


def is_server_url(model: str) -> bool:
    """True when ``model`` names a server rather than a local model."""
    return model.startswith(("http://", "https://"))
