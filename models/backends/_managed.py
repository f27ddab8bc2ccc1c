"""ManagedServerBackend: the local model on a llama-server of the agent's own.

Composition, not a new client: a :class:`ServerProcess` (start, watch, restart, stop the
server on a private socket) and a :class:`ServerBackend` (prompts tokenized here, our compact
grammar, streamed calls cut at their deadline, typed errors) talking to it. While the server is
down (killed, crashed, restarting) a call fails at once with a
:class:`~forethought.policies.ServerUnavailable`: the executor falls to its next tier and the
planner backs off, exactly as with a remote server that went away; the supervisor has it back
within about a model load.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Self

from pydantic import BaseModel

from forethought.policies import ActionSchema, ConfigError, NotStarted

from .._backend import CancelSignal, Generation, Scores
from .._latency import LatencyModel, Prediction
from .._model_source import DEFAULT_MODEL, resolve_model
from ..grammar._bounds import OutputBounds
from ._llama_binary import BUILD_COMMAND, llama_server_path
from ._server import ServerBackend
from ._server_latency import ServerLatency
from ._server_process import ServerProcess

__all__ = ["ManagedServerBackend"]


class ManagedServerBackend:
    """A ModelBackend on a supervised llama-server serving ``model`` (a GGUF).

    Args:
        model: an alias or a ``.gguf`` path (default: the embedded SmolLM2-135M).
        exe: the ``llama-server`` executable (default: our cached build).
        slots: the server's parallel slots; the planner's batch rows decode together in them.
        context: the server's total context, shared by the slots.
        threads: decoding threads (None: llama.cpp's default, one per core).
        timeout_s: the longest a call with no deadline may take.
        poll_s: how often the server's slots are read for the queue term.
        bounds: the grammar's limits on numbers, strings and arrays.

    """

    def __init__(
        self,
        *,
        model: str = DEFAULT_MODEL,
        exe: Path | None = None,
        slots: int = 8,
        context: int = 8192,
        threads: int | None = None,
        timeout_s: float = 60.0,
        poll_s: float = 1.0,
        bounds: OutputBounds | None = None,
    ) -> None:
        exe = exe or llama_server_path()
        if exe is None:
            raise ConfigError(
                "engine.kind", "llama-server", f"llama-server is not built: run {BUILD_COMMAND}"
            )
        source = resolve_model(model)
        if source.kind != "gguf":
            raise ConfigError(
                "model",
                model,
                "the llama-server engine serves a .gguf file; set engine.kind = 'torch' for a "
                "model directory or a Hugging Face id",
            )
        self._model_name = model
        self._process = ServerProcess(
            exe=exe, gguf=source.location, slots=slots, context=context, threads=threads
        )
        self._options: dict[str, Any] = {"timeout_s": timeout_s, "poll_s": poll_s}
        self._bounds = bounds
        self._latency = LatencyModel()
        self._server: ServerBackend | None = None

    # -- lifecycle ----------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        await self._process.start()
        try:
            server = ServerBackend(
                url=f"http://engine#tokenizer={self._model_name}&api=llama-server",
                bounds=self._bounds,
                latency=self._latency,
                transport=self._process.transport(),
                # The process runs with LRU slots and the RAM prompt cache (ServerProcess).
                shared_prefill=True,
                **self._options,
            )
            await server.__aenter__()
        except BaseException:
            await self._process.stop()
            raise
        self._server = server
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        server, self._server = self._server, None
        try:
            if server is not None:
                await server.__aexit__(*exc_info)
        finally:
            await self._process.stop()

    # -- what it is ---------------------------------------------------------------------------

    @property
    def server(self) -> ServerBackend:
        """The server backend talking to the managed server; NotStarted outside ``async with``."""
        if self._server is None:
            raise NotStarted("ManagedServerBackend")
        return self._server

    @property
    def process(self) -> ServerProcess:
        """The supervised server process (its pid, restarts, log)."""
        return self._process

    @property
    def model_id(self) -> str:
        """``NAME@llama-server``: the same weights as the torch engine's, other numerics."""
        return f"{self._model_name}@llama-server"

    @property
    def latency(self) -> ServerLatency:
        """Predicted call times (the server's queue included once started)."""
        if self._server is not None:
            return self._server.latency
        return ServerLatency(self._latency)

    # -- calls --------------------------------------------------------------------------------

    async def prepare(self, schema: ActionSchema) -> None:
        """Write the grammar and time one call (a server that is down is logged, not fatal)."""
        await self.server.prepare(schema)

    def predict_live(self, context: str, event: str, schema: ActionSchema) -> Prediction:
        """A live call's predicted time (:meth:`ServerBackend.predict_live`)."""
        return self.server.predict_live(context, event, schema)

    def prompt_cached(self, context: str, schema: ActionSchema) -> bool:
        """Whether the state's prompt was sent lately (:meth:`ServerBackend.prompt_cached`)."""
        return self.server.prompt_cached(context, schema)

    async def generate(
        self,
        context: str,
        events: Sequence[str],
        schema: ActionSchema,
        *,
        deadline: float,
        cancel: CancelSignal | None = None,
        max_new_tokens: int = 64,
    ) -> list[Generation]:
        """One action per event; each row one request, decoded together in the slots."""
        return await self.server.generate(
            context, events, schema, deadline=deadline, cancel=cancel, max_new_tokens=max_new_tokens
        )

    async def score(
        self,
        context: str,
        event: str,
        candidates: Sequence[BaseModel],
        schema: ActionSchema,
        *,
        deadline: float,
        cancel: CancelSignal | None = None,
    ) -> Scores:
        """The candidates' log-likelihoods (one request over their token trie)."""
        return await self.server.score(
            context, event, candidates, schema, deadline=deadline, cancel=cancel
        )

    def stats_dict(self) -> dict[str, Any]:
        """The server backend's counters plus the supervisor's."""
        out = self.server.stats_dict() if self._server is not None else {}
        st = self._process.stats
        out["engine"] = {
            "kind": "llama-server (managed)",
            "pid": self._process.pid,
            "starts": st.starts,
            "restarts": st.restarts,
            "deaths": list(st.deaths),
            "back_s": [round(s, 3) for s in st.back_s],
        }
        return out
