"""Server families: how one completion request and its streamed answer look on the wire.

:class:`ServerBackend` speaks to every server the same way -- token ids in, a streamed
completion out, one request per row -- and an adapter translates for one family:

* :class:`LlamaServerAPI` -- llama.cpp's ``llama-server`` native ``/completion``: our GBNF
  grammar, ``cache_prompt``, ``n_probs`` (the raw-softmax log-probability of each sampled
  token, which is how a token-literal grammar scores a candidate), ``/slots`` for queue depth;
* :class:`OpenAICompletionsAPI` -- vLLM's (and SGLang's) ``/v1/completions``: the grammar in
  ``structured_outputs``, ``priority`` for background work, candidates scored from
  ``prompt_logprobs`` in one request each.

An adapter only builds bodies and reads chunks; it does no I/O, so it is tested on plain dicts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = ["Chunk", "LlamaServerAPI", "OpenAICompletionsAPI", "ServerAPI", "make_api"]

_FAVOUR_BIAS = 50.0
"""Added to a favoured token's logit, so a favoured token is nearly always the first pick.
Correctness does not rest on it: the grammar decides, the bias only saves its full pass."""


@dataclass(slots=True)
class Chunk:
    """What one streamed event carried."""

    tokens: list[int] = field(default_factory=list)
    text: str = ""
    logprobs: list[float] = field(default_factory=list)
    """Log-probability of each token in ``tokens`` (when asked for)."""
    tops: list[dict[int, float]] = field(default_factory=list)
    """Per token: the step's most likely tokens and their log-probabilities (``n_probs``)."""
    done: bool = False
    finish: str | None = None
    """``eos`` (the model or grammar ended it), ``limit`` (ran out of tokens) or ``word``."""
    prompt_tokens_processed: int | None = None
    """Prompt tokens the server computed (not served from its prefix cache), when reported."""
    error: str | None = None


class ServerAPI(Protocol):
    """One server family's request bodies and stream chunks."""

    family: str
    completion_path: str
    health_path: str
    closes_streams: bool
    """Whether the server closes a connection after a streamed answer (the client then must not
    reuse it: see :class:`LlamaServerAPI`)."""

    def completion(
        self,
        prompt: Sequence[int],
        *,
        grammar: str | None,
        max_tokens: int,
        logprobs: bool,
        background: bool,
        model: str | None,
        favour: Sequence[int] = (),
    ) -> dict[str, Any]:
        """The body of a streamed, greedy completion of ``prompt`` (token ids).

        ``favour``: tokens that the grammar will pick (a candidate's, forced). A server that
        tries its sampler's first pick against the grammar before masking the whole vocabulary
        is asked to rank them first, so that check passes; the grammar still decides, and the
        log-probabilities returned are the model's own.
        """
        ...

    def read(self, data: Mapping[str, Any]) -> Chunk:
        """One streamed JSON event, read."""
        ...

    def busy_slots(self, body: Any) -> tuple[int, int] | None:
        """(busy, total) from the server's status body, or None when it has no such thing."""
        ...

    @property
    def status_path(self) -> str | None:
        """Where queue depth is read (None: not available)."""
        ...


class LlamaServerAPI:
    """llama.cpp's ``llama-server`` (``/completion``, ``/slots``)."""

    family = "llama-server"
    completion_path = "/completion"
    health_path = "/health"
    status_path: str | None = "/slots"
    closes_streams = True
    """llama-server answers a streamed request with ``Keep-Alive: timeout=5, max=100``, then
    closes the connection after the last chunk. A client that reuses it at once (the next
    request of a sequence) races that close and gets "disconnected without sending a response"
    (seen on the 3rd to 5th back-to-back streamed request on one connection); so a streamed
    request asks for ``Connection: close``, which costs nothing the server did not already
    take away."""

    def completion(
        self,
        prompt: Sequence[int],
        *,
        grammar: str | None,
        max_tokens: int,
        logprobs: bool,
        background: bool,
        model: str | None,
        favour: Sequence[int] = (),
    ) -> dict[str, Any]:
        """A greedy, streamed ``/completion`` body with the prompt as token ids."""
        body: dict[str, Any] = {
            "prompt": list(prompt),
            "n_predict": max_tokens,
            "stream": True,
            "cache_prompt": True,
            "return_tokens": True,
            # The prompt's timings with the first token, not only with the last: a call read
            # until its action closed (:mod:`._action_end`) never sees the last chunk, and
            # the prefill law learns from what the server computed.
            "timings_per_token": True,
            # Greedy, as in-process: argmax over the grammar-masked logits, nothing else. A
            # negative temperature also makes n_probs the plain softmax of the raw logits,
            # which is what a candidate's score is.
            "temperature": -1.0,
            "samplers": ["top_k"],
            "top_k": 1,
            "repeat_penalty": 1.0,
        }
        if grammar is not None:
            body["grammar"] = grammar
        if logprobs:
            body["n_probs"] = 1
        if favour:
            # llama.cpp samples first and checks that one token against the grammar; only a
            # rejected pick makes it run the grammar over the whole vocabulary (about 49k
            # tokens, each decoded to text: most of a forced step's time with 7 rows in a
            # batch). A bias is a sampler: it moves neither the n_probs log-probabilities,
            # which are read from the raw logits, nor the grammar's choice, since every token
            # the grammar allows at a forced step gets the same bias.
            body["logit_bias"] = [[t, _FAVOUR_BIAS] for t in sorted(set(favour))]
        return body

    def read(self, data: Mapping[str, Any]) -> Chunk:
        """A ``/completion`` stream event (``content``, ``tokens``, ``stop``, probabilities)."""
        if "error" in data:
            return Chunk(done=True, error=_message(data["error"]))
        tokens = [int(t) for t in data.get("tokens") or []]
        probs = data.get("completion_probabilities") or []
        logprobs = [float(p["logprob"]) for p in probs if "logprob" in p]
        tops = [
            {int(t["id"]): float(t["logprob"]) for t in p.get("top_logprobs") or [] if "id" in t}
            for p in probs
            if "logprob" in p
        ]
        done = bool(data.get("stop", False))
        chunk = Chunk(
            tokens=tokens, text=str(data.get("content", "")), logprobs=logprobs, tops=tops
        )
        timings = data.get("timings")
        if isinstance(timings, Mapping) and "prompt_n" in timings:
            chunk.prompt_tokens_processed = int(timings["prompt_n"])
        if done:
            chunk.done = True
            chunk.finish = str(data.get("stop_type", "eos"))
        return chunk

    def busy_slots(self, body: Any) -> tuple[int, int] | None:
        """(processing, total) from ``/slots``."""
        if not isinstance(body, list):
            return None
        busy = sum(1 for s in body if isinstance(s, Mapping) and s.get("is_processing"))
        return busy, len(body)


class OpenAICompletionsAPI:
    """vLLM's or SGLang's OpenAI-compatible ``/v1/completions``."""

    family = "openai"
    completion_path = "/v1/completions"
    health_path = "/health"
    status_path: str | None = None
    closes_streams = False

    def __init__(self, *, priority: bool = True) -> None:
        self._priority = priority

    def completion(
        self,
        prompt: Sequence[int],
        *,
        grammar: str | None,
        max_tokens: int,
        logprobs: bool,
        background: bool,
        model: str | None,
        favour: Sequence[int] = (),
    ) -> dict[str, Any]:
        """A greedy, streamed ``/v1/completions`` body.

        ``favour`` is not sent: these servers score from the prompt's log-probabilities,
        with no grammar to speed up.

        Scoring (``logprobs``) asks for the prompt's own log-probabilities and one token: the
        candidate is the prompt's tail, so no grammar is needed and the server computes it in
        one prefill.
        """
        body: dict[str, Any] = {
            "prompt": list(prompt),
            "max_tokens": max(max_tokens, 1),
            "temperature": 0.0,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        del favour  # no grammar on the scoring path here: nothing to speed up
        if model is not None:
            body["model"] = model
        if grammar is not None and not logprobs:
            body["structured_outputs"] = {"grammar": grammar}
        if logprobs:
            body["prompt_logprobs"] = 0
            body["max_tokens"] = 1
        if self._priority:
            # vLLM serves lower values first when started with --scheduling-policy priority.
            body["priority"] = 10 if background else 0
        return body

    def read(self, data: Mapping[str, Any]) -> Chunk:
        """A ``/v1/completions`` stream event."""
        if "error" in data or data.get("object") == "error":
            return Chunk(done=True, error=_message(data.get("error", data)))
        chunk = Chunk()
        for choice in data.get("choices") or []:
            chunk.text += str(choice.get("text", ""))
            for entry in choice.get("prompt_logprobs") or []:
                if isinstance(entry, Mapping) and entry:
                    best = next(iter(entry.values()))
                    chunk.logprobs.append(float(best.get("logprob", 0.0)))
            if choice.get("finish_reason") is not None:
                reason = choice["finish_reason"]
                chunk.finish = "limit" if reason == "length" else "eos"
        usage = data.get("usage")
        if isinstance(usage, Mapping):
            chunk.done = True
            chunk.finish = chunk.finish or "eos"
        return chunk

    def busy_slots(self, body: Any) -> tuple[int, int] | None:
        """Not available from these servers' JSON API."""
        return None


def _message(err: Any) -> str:
    return str(err.get("message", err) if isinstance(err, Mapping) else err)


def make_api(family: str) -> ServerAPI:
    """The adapter for ``family``: ``llama-server``, ``vllm``, ``sglang`` or ``openai``."""
    if family == "llama-server":
        return LlamaServerAPI()
    if family in ("vllm", "sglang", "openai"):
        return OpenAICompletionsAPI(priority=family == "vllm")
    raise ValueError(family)
