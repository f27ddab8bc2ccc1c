"""ServerBackend: a :class:`ModelBackend` on an inference server (llama-server, vLLM, SGLang).

We do not write a server; we use one well. Prompts are rendered and tokenized here, with the
model's own tokenizer, so every call in a state sends the same prefix ids and the server's
prefix cache hits; the grammar is our compact GBNF (:mod:`._gbnf`), with bounded numbers and
strings. Each row of a batch is one streamed request, sent together: the server batches them
across its slots.

Deadlines over a network:

* the latency model is fitted from what the client sees -- time to first token (round trip,
  queue wait and the uncached prefill together) and the gaps between streamed tokens -- and a
  queue term read from the server's ``/slots`` (:attr:`ServerBackend.latency`);
* a call whose p95 does not fit its deadline is not sent (``NOT_STARTED``);
* a call is streamed, and at the deadline (or on cancel) the stream is closed: the server sees
  the client go and frees the slot, where a request left to time out keeps computing;
* a refused connection, a reset, a 4xx or 5xx, a body that is not the protocol: each is a
  :class:`~forethought.policies.ServerError` subclass, and nothing half-done is returned.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, Self

import orjson
from pydantic import BaseModel, SecretStr

from forethought.policies import (
    ActionForm,
    ActionSchema,
    ConfigError,
    DeadlinePassed,
    InvalidAction,
    NotStarted,
    PromptTooLong,
    ServerError,
    ServerRejected,
    ServerReplyError,
    ServerUnavailable,
)

from .._backend import CancelSignal, Generation, GenerationStatus, Scores
from .._cancellation import wait_cancelled
from .._clock import Clock, LoopClock, MonotonicClock
from .._decode_run import split_candidates
from .._latency import LatencyModel, Prediction
from .._model_source import resolve_model
from .._prompt import Prompt, PromptEncoder
from ..grammar._bounds import OutputBounds, max_output_chars
from ..grammar._gbnf import token_gbnf
from ._action_end import ActionEnd
from ._action_grammar import ActionGrammar, action_grammar
from ._call_prediction import SentPrefixes
from ._server_api import Chunk, ServerAPI, make_api
from ._server_latency import ServerLatency
from ._server_url import parse_server_url
from ._trie_score import BestScore, LoserBound, TrieReading, read_trie, trie_depth, trie_gbnf

if TYPE_CHECKING:
    import httpx

__all__ = ["ServerBackend"]

log = logging.getLogger("forethought.server")

_TOP = 32
"""Top log-probabilities returned per step of a trie score: enough to bound every sibling."""
_TRIE_MARGIN_NAT = 1.0
"""A trie loser whose upper bound comes this close to the winner is scored exactly: about three
times the largest drift measured between a cold and a cached prompt (0.145 and 0.305 nat on two
prompts, :mod:`._trie_score`). A wider margin costs only an exact request for a close loser."""
_MARGIN_S = 0.002
"""Return this long before a deadline, so the caller still has time to use the answer."""


@dataclass(slots=True)
class ServerStats:
    """What the backend did and how the server behaved."""

    requests: int = 0
    not_started: int = 0
    cut: int = 0
    """Streams closed at the deadline or on cancel."""
    trie_rescored: int = 0
    """Candidates a trie score had to read on (their bound from the trie reached the best)."""
    trie_ruled_out: int = 0
    """Of those, the ones whose request was stopped once their running sum fell below the
    best (their score an upper bound); the others were read to their end (exact)."""
    shared_prefills: int = 0
    """Batches whose shared prefix was prefilled once for all their rows."""
    read_to_close: int = 0
    """Actions read until their closing brace, one decode step before the server's end."""
    errors: dict[str, int] = field(default_factory=dict)
    healthy: bool = False
    last_error: str | None = None
    busy_slots: int | None = None
    slots: int | None = None


@dataclass(slots=True)
class _Stream:
    """One request's progress, readable after it was cut."""

    tokens: list[int] = field(default_factory=list)
    text: str = ""
    logprobs: list[float] = field(default_factory=list)
    tops: list[dict[int, float]] = field(default_factory=list)
    finish: str | None = None
    processed: int | None = None
    prefill_observed: bool = False
    started_at: float = 0.0
    last_chunk_at: float = 0.0
    read_enough: bool = False
    """Stopped by its reader (:class:`_StreamEnd`): the caller has all it needs, though the
    connection may still be closing."""
    first_token_at: float | None = None
    finished_at: float = 0.0


class _StreamEnd(Protocol):
    """Reads a stream as it comes and says when the caller has all it needs from it.

    :class:`ActionEnd` stops at an action's closing brace; :class:`LoserBound` stops a
    scoring request once its candidate cannot win.
    """

    def enough(self, text: str, logprobs: Sequence[float]) -> bool:
        """Read one chunk's text and log-probabilities; True once nothing more is needed."""
        ...


class ServerBackend:
    """An inference server as a ModelBackend.

    Construction only validates; ``async with`` opens the HTTP client, loads the tokenizer,
    checks the server and starts the queue poller.

    Args:
        url: the server, ``http://host:port`` (llama-server) or ``http://host:port/v1`` (vLLM,
            SGLang), with optional ``#model=NAME&tokenizer=PATH&api=FAMILY``.
        api_key: sent as ``Authorization: Bearer``; set with ``FORETHOUGHT_*`` or a file,
            never on a command line.
        ca_file: the CA that signs an ``https`` server's certificate (None: system store).
        timeout_s: the longest any request may take when its deadline is unbounded.
        poll_s: how often ``/slots`` is read for the queue term and the health flag (0: never).
        bounds: the grammar's limits on numbers, strings and arrays.
        clock: the clock deadlines are on (default: the loop's that starts the backend).
        latency: a latency model to use (default: a fresh one).
        trie_scoring: on llama-server, score candidates in one request over their token trie
            (False: one request per candidate, every score exact).
        shared_prefill: on llama-server, prefill a batch's shared prefix once and let the
            server copy it to the rows' slots (:meth:`_share_prefix`). Only for a server that
            picks slots by LRU and keeps its RAM prompt cache (``--slot-prompt-similarity 0``,
            ``--cache-ram``, ``--cache-idle-slots``): the managed engine's.

    """

    def __init__(
        self,
        *,
        url: str,
        api_key: SecretStr | None = None,
        ca_file: Path | None = None,
        timeout_s: float = 60.0,
        poll_s: float = 1.0,
        bounds: OutputBounds | None = None,
        clock: Clock | None = None,
        latency: LatencyModel | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        trie_scoring: bool = True,
        shared_prefill: bool = False,
    ) -> None:
        self._target = parse_server_url(url)
        self._trie_scoring = trie_scoring
        self._shared_prefill = shared_prefill and self._target.family == "llama-server"
        if timeout_s <= 0:
            raise ConfigError("timeout_s", timeout_s, "must be positive")
        if poll_s < 0:
            raise ConfigError("poll_s", poll_s, "must be 0 (off) or positive")
        self._source = resolve_model(self._target.tokenizer)
        self._api: ServerAPI = make_api(self._target.family)
        self._url = url
        self._api_key = api_key
        self._ca_file = ca_file
        self._timeout_s = timeout_s
        self._poll_s = poll_s
        self._bounds = bounds or OutputBounds()
        self._given_clock = clock
        self._clock: Clock | None = None
        self._model = latency or LatencyModel()
        self._latency = ServerLatency(self._model)
        self._transport = transport
        self._client: httpx.AsyncClient | None = None
        self._prompts: PromptEncoder | None = None
        self._grammars: dict[str, ActionGrammar] = {}
        self._poller: asyncio.Task[None] | None = None
        self._in_flight = 0
        self._closing: set[asyncio.Future[Any]] = set()
        self._n_ctx: int | None = None
        self._prefixes = SentPrefixes()
        self.stats = ServerStats()

    # -- lifecycle ----------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        loop = asyncio.get_running_loop()
        self._clock = self._given_clock or LoopClock(loop)
        if self._prompts is None:
            # The tokenizer (tokenizers, jinja2; never transformers for a tokenizer folder) is
            # imported where a server is opened, not when the model layer is: importing
            # forethought.models stays light (tests/unit/test_architecture.py).
            from .._tokenizer import load_tokenizer  # noqa: PLC0415

            tokenizer = await asyncio.to_thread(load_tokenizer, self._source)
            self._prompts = PromptEncoder(tokenizer)
        headers = {}
        if self._api_key is not None:
            headers["Authorization"] = f"Bearer {self._api_key.get_secret_value()}"
        verify: Any = str(self._ca_file) if self._ca_file is not None else True
        # httpx is imported where a server is used: importing it loads its command line's
        # click, rich and pygments too (a third of a second of every `forethought check`).
        import httpx  # noqa: PLC0415

        self._client = httpx.AsyncClient(
            base_url=self._target.base_url,
            headers=headers,
            timeout=httpx.Timeout(self._timeout_s, connect=min(self._timeout_s, 5.0)),
            limits=httpx.Limits(max_connections=64, max_keepalive_connections=16),
            transport=self._transport,
            verify=verify,
        )
        await self.check()
        if self._poll_s > 0 and self._api.status_path is not None:
            self._poller = asyncio.create_task(self._poll(), name="forethought.server.poll")
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        while self._closing:  # streams cut at a deadline, still closing
            await asyncio.gather(*self._closing, return_exceptions=True)
        poller, self._poller = self._poller, None
        if poller is not None:
            poller.cancel()
            await wait_cancelled(poller)
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()
        self._clock = None

    async def check(self) -> bool:
        """Ask the server whether it is up (``/health``) and read its context size.

        Never raises: a server that is down now may be up by the next call, and the planner
        and executor fall through until it is.
        """
        import httpx  # noqa: PLC0415 - see __aenter__

        try:
            response = await self.client.get(self._api.health_path, timeout=5.0)
            self.stats.healthy = response.status_code == 200
            if self.stats.healthy and self._n_ctx is None and self._api.status_path:
                slots = await self.client.get(self._api.status_path, timeout=5.0)
                body = slots.json() if slots.status_code == 200 else None
                if isinstance(body, list) and body and isinstance(body[0], dict):
                    self._n_ctx = int(body[0].get("n_ctx", 0)) or None
                    self.stats.slots = len(body)
        except (httpx.HTTPError, ValueError) as exc:
            self.stats.healthy = False
            self.stats.last_error = repr(exc)
        return self.stats.healthy

    async def _poll(self) -> None:
        import httpx  # noqa: PLC0415 - see __aenter__

        path = self._api.status_path
        assert path is not None
        while True:
            await asyncio.sleep(self._poll_s)
            try:
                response = await self.client.get(path, timeout=max(self._poll_s, 1.0))
                ok = response.status_code == 200
                read = self._api.busy_slots(response.json()) if ok else None
            except (httpx.HTTPError, ValueError):
                ok, read = False, None
            # The newest word on the server's health: a request that failed on a connection
            # from before a restart, answered after a newer one succeeded, said "down" last.
            self.stats.healthy = ok
            self._queue(read)

    def _queue(self, read: tuple[int, int] | None) -> None:
        """Update the queue term from (busy, total) slots."""
        if read is None:
            return
        busy, total = read
        self.stats.busy_slots, self.stats.slots = busy, total
        others = max(busy - self._in_flight, 0)
        typical = self._model.call(32, self._model.typical_steps()).p50
        # Every slot taken by someone else: a new request waits about one call for a slot.
        self._latency.queue_wait_s = typical if total and others >= total else 0.0

    # -- properties ---------------------------------------------------------------------------

    @property
    def client(self) -> httpx.AsyncClient:
        """The HTTP client; raises NotStarted outside ``async with``."""
        if self._client is None:
            raise NotStarted("ServerBackend")
        return self._client

    @property
    def model_id(self) -> str:
        """``NAME@URL`` (the served model's name when given, else the tokenizer's)."""
        return f"{self._target.model or self._source.name}@{self._target.base_url}"

    @property
    def family(self) -> str:
        """The server family: ``llama-server``, ``vllm``, ``sglang`` or ``openai``."""
        return self._target.family

    @property
    def latency(self) -> ServerLatency:
        """Predicted call times, round trip and queue included."""
        return self._latency

    @property
    def prompts(self) -> PromptEncoder:
        """The prompt encoder of the model's tokenizer."""
        if self._prompts is None:
            raise NotStarted("ServerBackend")
        return self._prompts

    def _now(self) -> float:
        return (self._clock or MonotonicClock()).now()

    # -- calls --------------------------------------------------------------------------------

    def grammar(self, schema: ActionSchema) -> ActionGrammar:
        """The opening and the compact GBNF of ``schema``'s actions (cached)."""
        found = self._grammars.get(schema.fingerprint)
        if found is None:
            # Only llama-server takes token ids after the prompt and a grammar together.
            with_opening = self._target.family == "llama-server"
            found = action_grammar(self.prompts, schema, self._bounds, with_opening=with_opening)
            self._grammars[schema.fingerprint] = found
        return found

    async def prepare(self, schema: ActionSchema) -> None:
        """Write the grammar and time one action, so the first fit check knows the server.

        A server that is down or refuses is logged and left for later: the agent still
        starts and decides from its tree and its other tiers.
        """
        self.grammar(schema)
        try:
            await self.warm_up()
            await self.generate("", ["calibration"], schema, deadline=math.inf)
        except ServerRejected:
            raise  # the server cannot use our grammar or prompt: that will not heal
        except ServerError as exc:
            log.warning("server %s not ready: %s", self._target.base_url, exc)

    async def warm_up(self) -> None:
        """Seed the latency law: uncached prompts of a few lengths, a few tokens each.

        Time to first token is round trip + prefill; without several lengths the fit of its
        slope (and so of its intercept, the round trip) rests on one or two points.
        """
        vocab = 1000
        for n in (16, 64, 160, 32):
            prompt = [(7919 * i + n) % vocab + 100 for i in range(n)]  # not cached anywhere
            body = self._api.completion(
                prompt,
                grammar=None,
                max_tokens=4,
                logprobs=False,
                background=True,
                model=self._target.model,
            )
            await self._run_all([body], math.inf, None)

    def _admit(self, deadline: float, prompt_tokens: int, max_new_tokens: int) -> None:
        now = self._now()
        if now >= deadline:
            raise DeadlinePassed(deadline, now)
        if self._n_ctx is not None and prompt_tokens + max_new_tokens > self._n_ctx:
            raise PromptTooLong(prompt_tokens + max_new_tokens, self._n_ctx)

    def predict_live(self, context: str, event: str, schema: ActionSchema) -> Prediction:
        """What a live call for ``event`` in ``context`` is predicted to take, end to end.

        For the prompt this call would send: the event's own tokens when the state was sent
        lately (its prefix is in the server's cache), the whole prompt when not; the laws'
        p95 with its steps' spread added as a sum's (:mod:`._call_prediction`).
        """
        prefix, own = self.prompts.encode(Prompt(context, event), schema)
        uncached = self._prefixes.uncached(prefix, [*own, *self.grammar(schema).forced])
        return self._latency.live(uncached, self._latency.typical_steps())

    def prompt_cached(self, context: str, schema: ActionSchema) -> bool:
        """Whether the state's prompt prefix was sent lately (the server most likely holds it)."""
        prefix, _ = self.prompts.encode(Prompt(context, ""), schema)
        return prefix in self._prefixes

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
        """One action per event: one streamed request each, sent together."""
        if not events:
            return []
        grammar = self.grammar(schema)
        encoded = [self.prompts.encode(Prompt(context, e), schema) for e in events]
        prompts = [[*prefix, *own, *grammar.forced] for prefix, own in encoded]
        longest = max(len(p) for p in prompts)
        # Never more tokens than the bounded grammar can spell (each is >= 1 character).
        chars = max_output_chars(schema.json_schema(ActionForm.COMPACT), self._bounds)
        max_new_tokens = min(max_new_tokens, chars) if chars is not None else max_new_tokens
        self._admit(deadline, longest, max_new_tokens)
        started = self._now()
        # As in-process, a call starts when its first pass fits (here: the first token, round
        # trip and queue included) and is cut at the deadline; whether a whole action fits is
        # the caller's question (the executor asks it of the latency model before calling).
        forced = len(grammar.forced)
        predicted = self._latency.prefill(sum(len(o) + forced for _, o in encoded))
        if started + predicted.p95 > deadline:
            self.stats.not_started += len(events)
            return [self._not_started(len(p) - forced, started) for p in prompts]
        background = math.isinf(deadline)
        self._prefixes.sent(encoded[0][0])
        if self._shared_prefill and len(prompts) > 1:
            cut = await self._share_prefix(encoded[0][0], deadline, cancel)
            if cut is not None:
                return [self._unsent(len(p) - forced, self._now(), cut) for p in prompts]
        bodies = [
            self._api.completion(
                p,
                grammar=grammar.gbnf,
                max_tokens=max_new_tokens,
                logprobs=False,
                background=background,
                model=self._target.model,
            )
            for p in prompts
        ]
        ends = None
        if self._target.family == "llama-server":
            ends = [ActionEnd() for _ in prompts]
            for end in ends:
                end.feed(grammar.opening)
        streams = await self._run_all(bodies, deadline, cancel, ends)
        self.stats.read_to_close += sum(s.read_enough for s, _ in streams)
        return [
            self._to_generation(schema, grammar, s, status, len(p) - forced, len(encoded[0][0]))
            for p, (s, status) in zip(prompts, streams, strict=True)
        ]

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
        """Each candidate's log-likelihood: its tokens' log-probabilities summed.

        On llama-server, in one request over the candidates' token trie, and a short request
        for each loser that might still win: the winner's score is exact, a loser's exact or
        an upper bound below it (:mod:`._trie_score`).
        """
        if not candidates:
            raise ConfigError("candidates", list(candidates), "at least one candidate is needed")
        prefix, own = self.prompts.encode(Prompt(context, event), schema)
        full = [self.prompts.encode_action(schema.compact(schema.validate(c))) for c in candidates]
        # As in-process: the tokens all candidates share go with the prompt and only the tails
        # are scored (the same quantity, so scores compare across backends).
        shared, ids = split_candidates(full)
        own = [*own, *shared]
        self._admit(deadline, len(prefix) + len(own) + max(len(i) for i in ids), 0)
        started = self._now()
        longest = max(len(i) for i in ids)
        trie = self._trie_scoring and self._target.family == "llama-server"
        # llama-server: one request over the candidates' trie (one prefill, the trie's depth in
        # steps); OpenAI-style servers: one request per candidate, its prompt log-probabilities.
        predicted = self._latency.call(len(own), longest, 1 if trie else len(ids))
        if started + predicted.p95 > deadline:
            self.stats.not_started += 1
            return Scores(GenerationStatus.NOT_STARTED, None, started, started)
        self._prefixes.sent(prefix)
        if trie:
            totals = await self._score_trie(prefix + own, ids, deadline, cancel)
        else:
            totals = await self._score_each(prefix + own, ids, deadline, cancel)
        finished = self._now()
        if isinstance(totals, GenerationStatus):
            return Scores(totals, None, started, finished)
        return Scores(GenerationStatus.DONE, tuple(totals), started, finished)

    async def _score_trie(
        self,
        prompt: list[int],
        ids: list[list[int]],
        deadline: float,
        cancel: CancelSignal | None,
    ) -> list[float] | GenerationStatus:
        """One greedy request over the trie; a loser that might still win is read on."""
        body = self._api.completion(
            prompt,
            grammar=trie_gbnf(ids),
            max_tokens=trie_depth(ids),
            logprobs=True,
            background=math.isinf(deadline),
            model=None,
        )
        body["n_probs"] = _TOP
        ((stream, status),) = await self._run_all([body], deadline, cancel)
        if status is not GenerationStatus.DONE:
            return status
        if len(stream.logprobs) != len(stream.tokens) or len(stream.tops) != len(stream.tokens):
            raise ServerReplyError(
                self._target.base_url,
                f"trie scoring returned {len(stream.logprobs)} log-probabilities for "
                f"{len(stream.tokens)} tokens",
            )
        reading = read_trie(ids, stream.tokens, stream.logprobs, stream.tops)
        totals = list(reading.scores)
        if not any(reading.exact):
            raise ServerReplyError(
                self._target.base_url, "trie scoring's greedy path is none of the candidates"
            )
        again = reading.unresolved(_TRIE_MARGIN_NAT)
        if again:
            if self._shared_prefill:
                # The trie request left the prompt in its slot: publish it, so the requests
                # reading losers on start from it instead of prefilling it again each.
                cut = await self._publish(prompt, deadline, cancel)
                if cut is not None:
                    return cut
            best = BestScore(max(t for t, e in zip(totals, reading.exact, strict=True) if e))
            read = await self._read_on(prompt, ids, again, reading, best, deadline, cancel)
            if isinstance(read, GenerationStatus):
                return read
            for i, bound in zip(again, read, strict=True):
                totals[i] = bound.score
            self.stats.trie_ruled_out += sum(not b.exact for b in read)
        self.stats.trie_rescored += len(again)
        return totals

    async def _read_on(
        self,
        prompt: list[int],
        ids: list[list[int]],
        losers: list[int],
        reading: TrieReading,
        best: BestScore,
        deadline: float,
        cancel: CancelSignal | None,
    ) -> list[LoserBound] | GenerationStatus:
        """Read each loser on from where the trie left it, until it is scored or ruled out.

        A loser's tokens whose log-probabilities the trie returned go with the prompt; the
        rest are forced, one request per loser, all sent together. Each request is stopped
        as soon as its running sum falls below the best exact score by more than the margin
        (:class:`LoserBound`), which frees its slot and shrinks the server's batch.
        """
        bodies, bounds = [], []
        for i in losers:
            known, tail = reading.known[i], ids[i]
            bodies.append(self._forced_body(prompt + tail[:known], tail[known:], deadline))
            bounds.append(
                LoserBound(
                    known=reading.known_scores[i],
                    length=len(tail) - known,
                    best=best,
                    margin=_TRIE_MARGIN_NAT,
                )
            )
        streams = await self._run_all(bodies, deadline, cancel, bounds)
        statuses = [status for _, status in streams]
        if any(s is not GenerationStatus.DONE for s in statuses):
            return next(s for s in statuses if s is not GenerationStatus.DONE)
        for tail, bound, (stream, _) in zip((ids[i] for i in losers), bounds, streams, strict=True):
            if not bound.exact and not stream.read_enough:
                raise ServerReplyError(
                    self._target.base_url,
                    f"scoring returned {len(stream.logprobs)} log-probabilities for "
                    f"{len(tail)} tokens",
                )
        return bounds

    def _forced_body(self, prompt: list[int], tail: list[int], deadline: float) -> dict[str, Any]:
        """A llama-server request that writes exactly ``tail``, with each token's log-prob."""
        return self._api.completion(
            prompt,
            grammar=token_gbnf(tail),
            max_tokens=len(tail),
            logprobs=True,
            background=math.isinf(deadline),
            model=None,
            favour=tail,
        )

    async def _score_each(
        self,
        prompt: list[int],
        ids: list[list[int]],
        deadline: float,
        cancel: CancelSignal | None,
    ) -> list[float] | GenerationStatus:
        """One request per candidate: its exact tokens forced, their log-probs summed."""
        family = self._target.family
        bodies = []
        for tail in ids:
            if family == "llama-server":
                body = self._forced_body(prompt, tail, deadline)
            else:
                body = self._api.completion(
                    prompt + tail,
                    grammar=None,
                    max_tokens=1,
                    logprobs=True,
                    background=math.isinf(deadline),
                    model=self._target.model,
                )
            bodies.append(body)
        streams = await self._run_all(bodies, deadline, cancel)
        statuses = [status for _, status in streams]
        if any(s is not GenerationStatus.DONE for s in statuses):
            return next(s for s in statuses if s is not GenerationStatus.DONE)
        totals = []
        for tail, (stream, _) in zip(ids, streams, strict=True):
            # llama-server: one log-prob per forced token; OpenAI-style: the prompt's, of
            # which the candidate is the tail.
            lps = stream.logprobs[-len(tail) :]
            if len(lps) != len(tail):
                raise ServerReplyError(
                    self._target.base_url,
                    f"scoring returned {len(lps)} log-probabilities for {len(tail)} tokens",
                )
            totals.append(sum(lps))
        return totals

    # -- one prefill per state ----------------------------------------------------------------

    async def _share_prefix(
        self, prefix: list[int], deadline: float, cancel: CancelSignal | None
    ) -> GenerationStatus | None:
        """Prefill ``prefix`` once, so every row of a batch starts from it (None: done).

        Rows sent together each land in a slot of their own, and each slot would prefill the
        whole shared prefix again: on a CPU that is most of a batch (8 rows of a 151-token
        prompt: 8 x 143 tokens prefilled, about three quarters of the batch's time). So one
        request prefills the prefix alone, and :meth:`_publish` puts that slot in the server's
        RAM prompt cache, from which every row's slot loads it (a copy of its KV values) and
        prefills only its own tokens.
        """
        status = await self._one_token(prefix, deadline, cancel)
        if status is not GenerationStatus.DONE:
            return status
        self.stats.shared_prefills += 1
        return await self._publish(prefix, deadline, cancel)

    async def _publish(
        self, prompt: list[int], deadline: float, cancel: CancelSignal | None
    ) -> GenerationStatus | None:
        """Have the server copy its idle slots (the one holding ``prompt``) to its RAM cache.

        llama-server saves idle slots to its prompt cache when it starts a task
        (``--cache-idle-slots``), after picking that task's slot; a slot picked by LRU first
        loads the cache entry that shares the most with its prompt (an entry is moved out when
        loaded, and saved again from its idle slot at the next start). So the slot that just
        prefilled is in the cache only once another task has started: this one-token request,
        whose token no prompt of ours starts with, so it takes nothing from the cache.
        """
        token = 0 if prompt[0] != 0 else 1
        status = await self._one_token([token], deadline, cancel)
        return None if status is GenerationStatus.DONE else status

    async def _one_token(
        self, prompt: list[int], deadline: float, cancel: CancelSignal | None
    ) -> GenerationStatus:
        """One request that reads ``prompt`` and writes one free token (a task on the server)."""
        body = self._api.completion(
            prompt,
            grammar=None,
            max_tokens=1,
            logprobs=False,
            background=math.isinf(deadline),
            model=self._target.model,
        )
        ((_, status),) = await self._run_all([body], deadline, cancel)
        return status

    # -- the wire -----------------------------------------------------------------------------

    async def _run_all(
        self,
        bodies: list[dict[str, Any]],
        deadline: float,
        cancel: CancelSignal | None,
        ends: Sequence[_StreamEnd] | None = None,
    ) -> list[tuple[_Stream, GenerationStatus]]:
        """Send every body at once; close them all at the deadline or on cancel.

        ``ends``: one reader per body, which stops reading its stream once it has enough.
        """
        loop = asyncio.get_running_loop()
        streams = [_Stream() for _ in bodies]
        stop = asyncio.Event()
        if cancel is not None:

            def wake() -> None:
                loop.call_soon_threadsafe(stop.set)

            cancel.on_cancel(wake)
        rows = len(bodies)
        self._in_flight += rows
        readers: Sequence[_StreamEnd | None] = ends if ends is not None else [None] * rows
        tasks = [
            asyncio.create_task(self._stream(b, s, rows, end), name="forethought.server.request")
            for b, s, end in zip(bodies, streams, readers, strict=True)
        ]
        stopper: asyncio.Task[Any] = asyncio.create_task(
            stop.wait(), name="forethought.server.stop"
        )
        # The loop's clock and this backend's are the same clock unless one was injected.
        budget = None if math.isinf(deadline) else max(deadline - _MARGIN_S - self._now(), 0.0)
        budget = min(budget, self._timeout_s) if budget is not None else self._timeout_s
        try:
            pending: set[asyncio.Task[Any]] = set(tasks)
            end = loop.time() + budget
            while pending and not stop.is_set():
                left = end - loop.time()
                if left <= 0:
                    break
                _, pending = await asyncio.wait(
                    pending | {stopper}, timeout=left, return_when=asyncio.FIRST_COMPLETED
                )
                pending.discard(stopper)
                failed = [t for t in tasks if t.done() and t.exception() is not None]
                if failed:
                    raise failed[0].exception()  # type: ignore[misc]
        finally:
            stopper.cancel()
            for t in tasks:
                t.cancel()
            # Closing a cut stream frees its server slot, and takes a few ms (2-4 seen on a
            # 2-core CPU): spent here, that is past the deadline the caller gave. So the
            # streams close in the background, and the rows count as in flight until they have.
            self._close_later(tasks, rows)
        cut = GenerationStatus.CANCELLED if stop.is_set() else GenerationStatus.DEADLINE
        out = []
        for s, t in zip(streams, tasks, strict=True):
            broken = t.done() and (t.cancelled() or t.exception() is not None)
            # A stream read as far as its reader needed is complete even while its connection
            # is still closing (its task not yet done) when the deadline comes.
            finished = not broken and (t.done() or s.read_enough)
            if not finished:
                self.stats.cut += 1
                s.finished_at = self._now()
            out.append((s, GenerationStatus.DONE if finished else cut))
        return out

    def _close_later(self, tasks: list[asyncio.Task[None]], rows: int) -> None:
        """Let cancelled stream tasks finish closing in the background; then count them out."""
        closing = asyncio.gather(*tasks, return_exceptions=True)
        self._closing.add(closing)

        def closed(future: asyncio.Future[Any]) -> None:
            self._closing.discard(future)
            self._in_flight -= rows

        closing.add_done_callback(closed)

    async def _stream(
        self, body: dict[str, Any], s: _Stream, rows: int, end: _StreamEnd | None = None
    ) -> None:
        """One streamed request, read into ``s`` as it comes; errors typed.

        With ``end``, reading stops once it says the caller has enough (closing the stream
        frees the server's slot).
        """
        import httpx  # noqa: PLC0415 - see __aenter__ (already loaded: a dict lookup)

        endpoint = f"{self._target.base_url}{self._api.completion_path}"
        self.stats.requests += 1
        s.started_at = s.last_chunk_at = self._now()
        try:
            headers = {"Content-Type": "application/json"}
            if self._api.closes_streams:
                headers["Connection"] = "close"
            async with self.client.stream(
                "POST", self._api.completion_path, content=orjson.dumps(body), headers=headers
            ) as response:
                if response.status_code >= 400:
                    raw = await response.aread()
                    raise self._http_error(endpoint, response.status_code, raw)
                async for line in response.aiter_lines():
                    if not line.startswith("data:"):
                        continue
                    payload = line[5:].strip()
                    if payload == "[DONE]":
                        break
                    try:
                        data = orjson.loads(payload)
                    except orjson.JSONDecodeError:
                        raise ServerReplyError(endpoint, f"not JSON: {payload[:120]!r}") from None
                    if not isinstance(data, dict):
                        raise ServerReplyError(endpoint, f"not a JSON object: {payload[:120]!r}")
                    if self._observe(s, self._api.read(data), rows, end):
                        break
        except httpx.TimeoutException as exc:
            raise self._count(ServerUnavailable(endpoint, f"timed out: {exc!r}")) from None
        except (httpx.TransportError, httpx.StreamError) as exc:
            raise self._count(ServerUnavailable(endpoint, f"connection failed: {exc!r}")) from None
        except ServerError as exc:
            raise self._count(exc) from None
        if s.finish is None:
            raise self._count(ServerUnavailable(endpoint, "stream ended before the answer"))
        # Read as far as needed, the answer was complete before its connection closed.
        s.finished_at = s.finished_at if s.read_enough else self._now()
        self.stats.healthy = True

    def _observe(self, s: _Stream, chunk: Chunk, rows: int, end: _StreamEnd | None) -> bool:
        """Read one chunk into ``s`` and the latency law; True when the answer is complete."""
        now, last = self._now(), s.last_chunk_at
        s.last_chunk_at = now
        if chunk.error is not None:
            raise ServerReplyError(self._target.base_url, f"server error: {chunk.error[:200]}")
        if chunk.tokens or chunk.text:
            if s.first_token_at is None:
                s.first_token_at = now
            else:
                # Each later chunk is one decode step of the server's batch.
                batch = min(rows, self.stats.slots or rows)
                self._model.observe_step(batch, (now - last) / max(len(chunk.tokens), 1))
        s.tokens.extend(chunk.tokens)
        s.text += chunk.text
        s.logprobs.extend(chunk.logprobs)
        s.tops.extend(chunk.tops)
        if s.processed is None:
            s.processed = chunk.prompt_tokens_processed
        if chunk.done:
            s.finish = chunk.finish
        if s.first_token_at is not None and s.processed is not None and not s.prefill_observed:
            s.prefill_observed = True
            # A request that had to wait for a slot measured the queue, not the prefill: the
            # queue term comes from the server's slots instead.
            waited = self.stats.slots is not None and rows > self.stats.slots
            if not waited:
                self._model.observe_prefill(s.processed, s.first_token_at - s.started_at)
        # The last chunk too may carry tokens its reader needs to see.
        enough = end is not None and end.enough(chunk.text, chunk.logprobs)
        if chunk.done:
            return True
        if enough:
            s.finish = "enough"
            s.read_enough = True
            s.finished_at = now
            return True
        return False

    def _http_error(self, endpoint: str, status: int, raw: bytes) -> ServerError:
        try:
            body = orjson.loads(raw)
            err = body.get("error", body) if isinstance(body, dict) else body
            message = str(err.get("message", err) if isinstance(err, dict) else err)
        except orjson.JSONDecodeError:
            message = raw.decode("utf-8", "replace")
        message = message[:300]
        if 400 <= status < 500 and status not in (408, 429):
            return ServerRejected(endpoint, message, status=status)
        if status in (408, 429, 503):
            return ServerUnavailable(endpoint, message, status=status)
        return ServerReplyError(endpoint, message, status=status)

    def _count(self, exc: ServerError) -> ServerError:
        kind = type(exc).__name__
        self.stats.errors[kind] = self.stats.errors.get(kind, 0) + 1
        self.stats.last_error = str(exc)
        if isinstance(exc, ServerUnavailable):
            self.stats.healthy = False
        return exc

    def _not_started(self, prompt_tokens: int, at: float) -> Generation:
        return self._unsent(prompt_tokens, at, GenerationStatus.NOT_STARTED)

    def _unsent(self, prompt_tokens: int, at: float, status: GenerationStatus) -> Generation:
        """A row never sent: refused up front, or cut while its batch's prefix was prefilled."""
        return Generation(
            status=status,
            action=None,
            text="",
            prompt_tokens=prompt_tokens,
            prefill_tokens=0,
            output_tokens=0,
            forced_tokens=0,
            started_at=at,
            first_token_at=None,
            finished_at=at,
        )

    def _to_generation(
        self,
        schema: ActionSchema,
        grammar: ActionGrammar,
        s: _Stream,
        status: GenerationStatus,
        prompt_tokens: int,
        prefix_tokens: int,
    ) -> Generation:
        # llama-server returns token ids (decoded as in-process); OpenAI-style servers text.
        forced = list(grammar.forced)
        text = self.prompts.decode([*forced, *s.tokens]) if s.tokens or forced else s.text
        action = None
        if status is GenerationStatus.DONE:
            if s.finish == "limit":
                status = GenerationStatus.LENGTH
            else:
                try:
                    action = schema.parse(text, ActionForm.COMPACT)
                    self._model.observe_action(len(s.tokens))  # the steps it decoded
                except InvalidAction:
                    status = GenerationStatus.INVALID
        return Generation(
            status=status,
            action=action,
            text=text,
            prompt_tokens=prompt_tokens,
            prefill_tokens=(
                prompt_tokens + len(forced) - prefix_tokens if s.processed is None else s.processed
            ),
            output_tokens=len(forced) + len(s.tokens),
            forced_tokens=len(forced),
            started_at=s.started_at,
            first_token_at=s.first_token_at,
            finished_at=s.finished_at or self._now(),
        )

    def stats_dict(self) -> dict[str, Any]:
        """Counters and health, for reports and the health topic."""
        st = self.stats
        return {
            "family": self.family,
            "url": self._target.base_url,
            "healthy": st.healthy,
            "requests": st.requests,
            "not_started": st.not_started,
            "cut": st.cut,
            "trie_rescored": st.trie_rescored,
            "trie_ruled_out": st.trie_ruled_out,
            "shared_prefills": st.shared_prefills,
            "read_to_close": st.read_to_close,
            "errors": dict(st.errors),
            "last_error": st.last_error,
            "busy_slots": st.busy_slots,
            "slots": st.slots,
            "queue_wait_s": self._latency.queue_wait_s,
        }
