"""The server backend against a real llama-server serving the embedded SmolLM2 GGUF.

scripts/test builds llama-server once (cached) and exports FORETHOUGHT_LLAMA_SERVER; each test
here starts servers of its own on free ports. Protocol edge cases (a malformed body, a 4xx)
use httpx's MockTransport, never as the proof that the backend works.
"""

from __future__ import annotations

import asyncio
import math
import tempfile
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import httpx
import orjson
import pytest

from forethought.models import CancelSignal, GenerationStatus, ServerBackend, TransformersBackend
from forethought.models._model_load import LoadedModel
from forethought.models._prompt import Prompt, state_text
from forethought.models.backends._call_prediction import live_call
from forethought.models.backends._server import _TRIE_MARGIN_NAT
from forethought.policies import (
    ActionSchema,
    ConfigError,
    EventSpace,
    PolicyTree,
    ServerRejected,
    ServerReplyError,
    ServerUnavailable,
    WorldState,
)
from forethought.runtime import Decision, Event, ExecutorConfig, Tier
from forethought.runtime._executor import Executor
from forethought.testing import LlamaServer, llama_server_path, until, until_holds

pytestmark = [pytest.mark.server, pytest.mark.smollm2]

DRIFT_NAT = _TRIE_MARGIN_NAT / 2
"""How far one request's log-likelihood may move from another's for the same tokens: llama.cpp's
drift between a cold and a cached prompt and between batches (0.13-0.305 nat measured, see
``_trie_score``), with room: half the margin a trie bound is read with, so a loser the drift
could lift to the winner is always scored again."""
CONTEXT = 'You control a warehouse robot.\n\nCurrent state: {"zone": "aisle"}'
LONG_NOTE = ActionSchema.from_json_schema(
    {
        "type": "object",
        "properties": {"note": {"type": "string", "minLength": 400, "maxLength": 400}},
        "required": ["note"],
    }
)


@pytest.fixture(scope="module")
def server(smollm2_first_load: LoadedModel) -> Iterator[LlamaServer]:
    if llama_server_path() is None:
        pytest.fail("llama-server is not built: scripts/test builds it (see README)")
    with LlamaServer(slots=4) as s:
        yield s


async def _idle(url: str, timeout_s: float = 5.0) -> float:
    """Seconds until no slot of the server is processing."""
    async with httpx.AsyncClient() as client:

        async def idle() -> bool:
            slots = (await client.get(f"{url}/slots")).json()
            return not any(s["is_processing"] for s in slots)

        return await until_holds(idle, timeout_s, "every slot idle")


async def _processing(url: str, timeout_s: float = 30.0) -> float:
    """Seconds until a slot of the server is processing: a call is being decoded."""
    async with httpx.AsyncClient() as client:

        async def busy() -> bool:
            slots = (await client.get(f"{url}/slots")).json()
            return any(s["is_processing"] for s in slots)

        return await until_holds(busy, timeout_s, "a slot processing")


async def test_generate_batch_and_prefix_cache(
    server: LlamaServer, robot_schema: ActionSchema
) -> None:
    async with ServerBackend(url=server.url) as backend:
        assert backend.stats.healthy
        await backend.prepare(robot_schema)
        loop = asyncio.get_running_loop()
        events = ["obstacle at 0.5 m", "path clear", "battery low", "human waving"]
        gens = await backend.generate(CONTEXT, events, robot_schema, deadline=loop.time() + 60)
        assert [g.status for g in gens] == [GenerationStatus.DONE] * 4
        for g in gens:
            assert g.action is not None
            robot_schema.validate(robot_schema.readable(g.action))
            assert " " not in g.text  # the compact grammar: no whitespace at all
        # The same state again: the server's slots hold the shared prefix, so only the event
        # part is prefilled.
        (again,) = await backend.generate(
            CONTEXT, ["path clear"], robot_schema, deadline=loop.time() + 60
        )
        assert again.ok
        assert again.prefill_tokens < again.prompt_tokens // 2
        assert backend.latency.model.samples[1] > 0  # inter-token gaps were observed
        assert backend.model_id.endswith(server.url)


async def test_the_action_opening_goes_with_the_prompt_as_the_model_spells_it(
    server: LlamaServer, robot_schema: ActionSchema
) -> None:
    """The opening every action starts with (``{"a":"``, its key compacted) is sent after the
    prompt, spelled as the model's tokenizer spells the whole action, and the server decodes
    only the rest, under the grammar of what follows the opening; each is read until its
    closing brace, not until the end token the server would sample one step later."""
    events = ["obstacle at 0.5 m", "path clear", "battery low", "human waving"]
    async with ServerBackend(url=server.url, poll_s=0) as backend:
        await backend.prepare(robot_schema)
        sent = backend.grammar(robot_schema)
        forced = list(sent.forced)
        assert backend.prompts.decode(forced) == '{"a":"'
        assert sent.gbnf.startswith("root ::= action-after")  # the grammar of the rest
        closed_before = backend.stats.read_to_close
        opened = await backend.generate(CONTEXT, events, robot_schema, deadline=math.inf)
        # Each read until its closing brace, without waiting a step for the server's end.
        assert backend.stats.read_to_close - closed_before == len(events)
        for g in opened:
            assert g.ok, g
            assert g.text.startswith('{"a":"')
            assert g.forced_tokens == len(forced)
            assert backend.prompts.encode_action(g.text)[: len(forced)] == forced


async def test_a_state_never_sent_starts_the_background_call_at_once(
    server: LlamaServer, robot_schema: ActionSchema
) -> None:
    """On a server, a live call in a state never sent is predicted to prefill the state's whole
    prompt, so in a tight budget it is not started. Nothing else would send that prompt: the
    executor starts its latency measurement at once (before, only after ``measure_after_s``
    without a measurement), which prefills it, and the next event in the state is predicted to
    prefill only its own tokens and is started."""
    space = EventSpace.from_specs([{"type": "obstacle", "deadline_ms": 500, "params": {}}])
    state = WorldState({"zone": "dock 7"})
    async with ServerBackend(url=server.url, poll_s=0) as backend:
        await backend.prepare(robot_schema)
        ex = Executor(
            space=space,
            schema=robot_schema,
            tree=PolicyTree(),
            default_action={"action": "stop"},
            description="test robot",
            backend=backend,
            # Measurements never count as stale here: only the cold prompt starts the call.
            config=ExecutorConfig(use_tree=False, use_score=False, measure_after_s=3600),
        )
        context = state_text("test robot", state.to_json())
        prefix, own = backend.prompts.encode(Prompt(context, "obstacle"), robot_schema)
        opening = len(backend.grammar(robot_schema).forced)
        assert len(prefix) > len(own) + opening  # the state's prefix is most of the prompt
        lat, steps = backend.latency, backend.latency.typical_steps()
        assert not backend.prompt_cached(context, robot_schema)
        # Predicted to prefill the whole prompt: behaviour, read off the same latency model
        # (a ratio of measured speeds is what a loaded machine does not keep).
        cold = backend.predict_live(context, "obstacle", robot_schema).p95
        assert cold == lat.live(len(prefix) + len(own) + opening, steps).p95

        async def decide(name: str, budget: float) -> Decision:
            now = asyncio.get_running_loop().time()
            event = Event(name, "obstacle", {}, arrived_at=now, deadline=now + budget)
            return await ex.decide(event, state)

        first = await decide("1", cold * 0.99)
        assert first.tier is Tier.DEFAULT
        assert any(t == "live" and "does not fit" in why for t, why in first.skipped)
        measuring = ex._measuring
        assert measuring is not None  # started at once, measurements fresh as they are
        async with asyncio.timeout(60):  # "the background call did not finish" otherwise
            await asyncio.shield(measuring)
        assert backend.prompt_cached(context, robot_schema)  # the background call sent it
        # Now predicted to prefill only the event's own tokens (and the action's opening),
        # on whatever the background call measured; a budget above that starts the call.
        warm = backend.predict_live(context, "obstacle", robot_schema).p95
        assert warm == lat.live(len(own) + opening, lat.typical_steps()).p95
        margin = ExecutorConfig().margin_ms / 1e3  # the default, as configured above
        second = await decide("2", warm * 1.5 + margin + 0.05)
        assert not any("does not fit" in why for _, why in second.skipped), second.skipped
        await ex.aclose()


async def test_scores_agree_with_the_in_process_model(
    server: LlamaServer, robot_schema: ActionSchema, smollm2_first_load: LoadedModel
) -> None:
    local = TransformersBackend(model="smollm2-135m", device="cpu", dtype="float32")
    local.load(warm_up=False)
    candidates = [robot_schema.validate({"action": a}) for a in ("stop", "slow", "go", "dock")]
    event = "obstacle at 0.5 m"
    ours = local.score_sync(CONTEXT, event, candidates, robot_schema, deadline=math.inf)
    # One request per candidate: every score exact. The first request for this prompt
    # prefills it afresh, later ones reuse its cached KV values, which llama.cpp computed in
    # other batches: the scores move by up to ~0.15 nat between the two (see _trie_score), then
    # not at all. So the prompt is cached first, and the comparison is between cached reads.
    async with ServerBackend(url=server.url, trie_scoring=False) as backend:
        cold = await backend.score(CONTEXT, event, candidates, robot_schema, deadline=math.inf)
        theirs = await backend.score(CONTEXT, event, candidates, robot_schema, deadline=math.inf)
    assert cold.scores is not None
    assert ours.scores is not None
    assert theirs.scores is not None
    # The server runs the Q4_1 weights with quantized activations; we run them dequantized in
    # fp32. Measured here: differences of a few hundredths of a nat per candidate.
    for a, b in zip(ours.scores, theirs.scores, strict=True):
        assert abs(a - b) < 0.5, (ours.scores, theirs.scores)
    assert theirs.best == ours.best
    # One request over the candidates' trie: the same winner, its score exact, the losers'
    # upper bounds of theirs. The bounds come from another request than the exact scores, so
    # they hold up to llama.cpp's drift between requests (the four exact requests above share
    # a batch; the trie request decodes alone): 0.13-0.305 nat measured (_trie_score), 0.11
    # seen here in CI. A bound is read with a margin (_TRIE_MARGIN_NAT) larger than that.
    async with ServerBackend(url=server.url) as backend:
        trie = await backend.score(CONTEXT, event, candidates, robot_schema, deadline=math.inf)
    assert trie.scores is not None
    assert trie.best == theirs.best
    # Exact, but read by another request, possibly from another slot than the four above: a
    # cold read there moved the winner's score by 0.235 nat in a clean-clone run, inside the
    # drift between requests that the bounds below are held to as well.
    assert trie.scores[trie.best] == pytest.approx(theirs.scores[theirs.best], abs=DRIFT_NAT)
    for bound, exact in zip(trie.scores, theirs.scores, strict=True):
        assert bound >= exact - DRIFT_NAT
    # The drift between a cold and a cached read stays inside the margin a trie bound is read
    # with, so a loser within it is scored again rather than ruled out.
    for a, b in zip(cold.scores, theirs.scores, strict=True):
        assert abs(a - b) < DRIFT_NAT


async def test_deadline_closes_the_stream_and_frees_the_slot(server: LlamaServer) -> None:
    async with ServerBackend(url=server.url, poll_s=0) as backend:
        loop = asyncio.get_running_loop()
        await _idle(server.url)
        deadline = loop.time() + 0.4
        (g,) = await backend.generate(
            "", ["write a long note"], LONG_NOTE, deadline=deadline, max_new_tokens=600
        )
        returned = loop.time()
        assert g.status is GenerationStatus.DEADLINE
        assert g.action is None
        assert returned <= deadline + 0.02
        # The cut stream closes after the call returned, not on the caller's time (closing
        # takes milliseconds, which were past the deadline); it counts as in flight until shut.
        assert backend._closing
        assert backend._in_flight == 1
        await asyncio.gather(*backend._closing)
        # The count goes down in the close's done-callback, which runs after the close.
        await until_holds(lambda: not backend._closing, 5, "the close's done-callback")
        assert not backend._closing
        assert backend._in_flight == 0
        freed = await _idle(server.url)
        assert freed < 1.0, f"slot freed {freed * 1e3:.0f} ms after the stream was closed"
        assert backend.stats.cut == 1


async def test_cancel_signal_stops_a_batch(server: LlamaServer) -> None:
    async with ServerBackend(url=server.url, poll_s=0) as backend:
        loop = asyncio.get_running_loop()
        cancel = CancelSignal()
        loop.call_later(0.3, cancel.cancel)
        gens = await backend.generate(
            "", ["a", "b"], LONG_NOTE, deadline=math.inf, cancel=cancel, max_new_tokens=600
        )
        assert [g.status for g in gens] == [GenerationStatus.CANCELLED] * 2
        await _idle(server.url)


async def test_a_call_that_cannot_fit_is_not_sent(
    server: LlamaServer, robot_schema: ActionSchema
) -> None:
    async with ServerBackend(url=server.url, poll_s=0) as backend:
        await backend.prepare(robot_schema)
        sent = backend.stats.requests
        loop = asyncio.get_running_loop()
        # Half the smallest first-token p95 from now: not passed yet (a deadline of 1 ms
        # could pass before the call reads the clock), but surely too short for the call.
        first = backend.latency.prefill(1).p95
        assert first > 0.004
        (g,) = await backend.generate(
            CONTEXT, ["obstacle"], robot_schema, deadline=loop.time() + first / 2
        )
        assert g.status is GenerationStatus.NOT_STARTED
        assert backend.stats.requests == sent


async def test_busy_slots_make_the_queue_term(smollm2_first_load: LoadedModel) -> None:
    with LlamaServer(slots=1, context=2048) as one:
        async with ServerBackend(url=one.url, poll_s=0.05) as backend:
            await backend.prepare(LONG_NOTE)
            async with httpx.AsyncClient() as client:
                # Someone else's long request holds the only slot.
                body = {"prompt": "Once upon a time", "n_predict": 400, "ignore_eos": True}
                other = asyncio.create_task(client.post(f"{one.url}/completion", json=body))
                await until(lambda: backend.latency.queue_wait_s > 0, 5.0)
                assert backend.stats.busy_slots == 1
                assert backend.latency.queue_wait_s > 0
                other.cancel()


async def test_server_killed_mid_call_then_restarted(
    smollm2_first_load: LoadedModel, robot_schema: ActionSchema
) -> None:
    with LlamaServer(slots=2, context=4096) as srv:
        async with ServerBackend(url=srv.url, poll_s=0) as backend:
            await backend.prepare(robot_schema)
            loop = asyncio.get_running_loop()
            call = asyncio.create_task(
                backend.generate("", ["x"], LONG_NOTE, deadline=math.inf, max_new_tokens=600)
            )
            await _processing(srv.url)
            srv.stop()
            with pytest.raises(ServerUnavailable):
                await call
            assert not backend.stats.healthy
            with pytest.raises(ServerUnavailable):
                await backend.generate(CONTEXT, ["x"], robot_schema, deadline=loop.time() + 30)
            srv.start()
            (g,) = await backend.generate(
                CONTEXT, ["path clear"], robot_schema, deadline=loop.time() + 30
            )
            assert g.ok
            assert backend.stats.healthy


async def test_a_grammar_the_server_rejects_is_a_typed_error(
    server: LlamaServer, robot_schema: ActionSchema
) -> None:
    async with ServerBackend(url=server.url, poll_s=0) as backend:
        written = backend.grammar(robot_schema)  # as if our writer erred:
        backend._grammars[robot_schema.fingerprint] = replace(written, gbnf="root ::= (")
        loop = asyncio.get_running_loop()
        with pytest.raises(ServerRejected, match="grammar") as info:
            await backend.generate(CONTEXT, ["x"], robot_schema, deadline=loop.time() + 30)
        assert info.value.status == 400
        assert not info.value.retryable


# -- protocol edge cases on httpx's own test double -------------------------------------------


def _mock(handler) -> httpx.MockTransport:  # type: ignore[no-untyped-def]
    return httpx.MockTransport(handler)


def _health_ok(request: httpx.Request) -> httpx.Response | None:
    if request.url.path == "/health":
        return httpx.Response(200, json={"status": "ok"})
    if request.url.path == "/slots":
        return httpx.Response(200, json=[{"id": 0, "n_ctx": 2048, "is_processing": False}])
    return None


@pytest.mark.parametrize(
    ("reply", "error"),
    [
        (httpx.Response(400, json={"error": {"message": "bad grammar"}}), ServerRejected),
        (httpx.Response(500, text="boom"), ServerReplyError),
        (httpx.Response(503, json={"error": {"message": "loading"}}), ServerUnavailable),
        (httpx.Response(200, text="data: {not json\n\n"), ServerReplyError),
        (httpx.Response(200, text="data: [1, 2]\n\n"), ServerReplyError),
        (httpx.Response(200, text='data: {"content": "{", "tokens": [90]}\n\n'), ServerUnavailable),
        (httpx.Response(200, text='data: {"error": {"message": "oom"}}\n\n'), ServerReplyError),
    ],
    ids=["400", "500", "503", "malformed", "not-object", "truncated", "error-event"],
)
async def test_protocol_faults_are_typed(
    reply: httpx.Response,
    error: type[Exception],
    robot_schema: ActionSchema,
    smollm2_first_load: LoadedModel,
) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return _health_ok(request) or reply

    backend = ServerBackend(url="http://stub:1", poll_s=0, transport=_mock(handler))
    async with backend:
        loop = asyncio.get_running_loop()
        with pytest.raises(error):
            await backend.generate(CONTEXT, ["x"], robot_schema, deadline=loop.time() + 5)
        assert backend.stats.errors[error.__name__] == 1


def _stream(tokens: list[int], lps: list[float], tops: list[dict[int, float]]) -> str:
    events = [
        {
            "content": "",
            "tokens": [t],
            "completion_probabilities": [
                {
                    "id": t,
                    "logprob": lp,
                    "top_logprobs": [{"id": k, "logprob": v} for k, v in top.items()],
                }
            ],
            "stop": False,
        }
        for t, lp, top in zip(tokens, lps, tops, strict=True)
    ]
    events.append({"content": "", "tokens": [], "stop": True, "stop_type": "eos"})
    return "".join(f"data: {orjson.dumps(e).decode()}\n\n" for e in events)


async def test_a_streamed_request_asks_llama_server_to_close_its_connection(
    smollm2_first_load: LoadedModel,
) -> None:
    """llama-server closes a connection after a streamed answer while announcing keep-alive.

    A client that reuses it at once races that close and fails with "disconnected without
    sending a response" (measured on a real server: the 3rd to 5th back-to-back streamed
    request on one connection, e.g. the trie request then its exact rescoring). So every
    streamed request to llama-server asks for ``Connection: close``.
    """
    seen: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        known = _health_ok(request)
        if known is not None:
            return known
        seen.append(request.headers.get("connection"))
        return httpx.Response(200, text=_stream([1], [-0.1], [{}]))

    backend = ServerBackend(url="http://stub:1", poll_s=0, transport=_mock(handler))
    async with backend:
        await backend.warm_up()
    assert seen == ["close"] * 4


def _trie_stub(
    tails: list[list[int]], bodies: list[dict[str, object]], loser_lps: list[float]
) -> httpx.MockTransport:
    """A llama-server whose trie's greedy path is ``first`` (-0.1, then -5 in all), with
    ``second`` listed at the branch (-0.2); ``second``'s own request streams ``loser_lps``."""

    def handler(request: httpx.Request) -> httpx.Response:
        known = _health_ok(request)
        if known is not None:
            return known
        body = orjson.loads(request.content)
        bodies.append(body)
        first, second = tails
        if body.get("n_probs") == 32:
            n = len(first)
            lps = [-0.1] + [-5.0 / (n - 1)] * (n - 1) if n > 1 else [-5.0]
            tops = [{first[0]: lps[0], second[0]: -0.2}] + [{t: -0.1} for t in first[1:]]
            if first[0] == second[0]:
                raise AssertionError("the tails share their first token")
            return httpx.Response(200, text=_stream(first, lps, tops))
        forced = [int(t) for t in body["grammar"].split("<[")[1:] for t in [t.split("]")[0]]]
        # Read on from its branch: the branch token (its log-prob came with the trie) goes
        # with the prompt, only the rest is forced, and the forced tokens are favoured.
        assert forced == second[1:]
        assert body["prompt"][-1] == second[0]
        assert sorted(t for t, _ in body["logit_bias"]) == sorted(set(forced))
        one_each = [{"content": "", "tokens": [t]} for t in forced]
        for chunk, lp in zip(one_each, loser_lps, strict=True):
            chunk["completion_probabilities"] = [{"id": chunk["tokens"][0], "logprob": lp}]
        events = [*one_each, {"content": "", "stop": True, "stop_type": "limit"}]
        text = "".join(f"data: {orjson.dumps(e).decode()}\n\n" for e in events)
        return httpx.Response(200, text=text)

    return _mock(handler)


_MOVE = {
    "type": "object",
    "properties": {"action": {"enum": ["stop", "slow"]}, "speed": {"type": "number"}},
    "required": ["action", "speed"],
}
"""An action with a few tokens after its name, for a loser to be read on."""


async def _trie_score(*, falls: bool) -> tuple[ServerBackend, list[dict[str, object]], list[float]]:
    """Score two moves on the stub; ``falls``: the loser's first token read on costs -6.0 and
    each one after -9.0 (else its rest costs -0.3 in all)."""
    from forethought.models._decode_run import split_candidates

    schema = ActionSchema.from_json_schema(_MOVE)
    cands = [schema.validate({"action": a, "speed": 0.25}) for a in ("stop", "slow")]
    tails: list[list[int]] = []
    bodies: list[dict[str, object]] = []
    lps: list[float] = []
    backend = ServerBackend(url="http://stub:1", poll_s=0, transport=_trie_stub(tails, bodies, lps))
    async with backend:
        full = [backend.prompts.encode_action(schema.compact(c)) for c in cands]
        tails.extend(split_candidates(full)[1])
        assert len(tails[1]) > 2, "the loser needs tokens to read on"
        rest = len(tails[1]) - 1
        lps.extend([-6.0] + [-9.0] * (rest - 1) if falls else [-0.3 / rest] * rest)
        scores = await backend.score(CONTEXT, "x", cands, schema, deadline=math.inf)
    assert scores.scores is not None
    return backend, bodies, list(scores.scores)


@pytest.mark.usefixtures("smollm2_first_load")
async def test_a_trie_loser_that_might_win_is_read_on_to_its_exact_score() -> None:
    """The greedy path through the trie is not always the best candidate: the bound says when."""
    backend, bodies, scores = await _trie_score(falls=False)
    assert len(bodies) == 2  # the trie, then the one candidate whose bound reached the winner
    assert backend.stats.trie_rescored == 1
    assert backend.stats.trie_ruled_out == 0
    assert scores[0] == pytest.approx(-5.1)
    assert scores[1] == pytest.approx(-0.2 - 0.3)  # read to its end: exact, and the best


@pytest.mark.usefixtures("smollm2_first_load")
async def test_a_loser_read_on_is_stopped_once_it_cannot_win() -> None:
    """Its request is closed as soon as its running sum falls below the best by the margin."""
    # -0.2 at the branch, then -6.0: below the winner's -5.1 by more than 1 nat, with tokens
    # still to come, which the stub would stream at -9 each were they read.
    backend, bodies, scores = await _trie_score(falls=True)
    assert len(bodies) == 2
    assert backend.stats.trie_rescored == 1
    assert backend.stats.trie_ruled_out == 1
    assert scores[0] == pytest.approx(-5.1)
    assert scores[1] == pytest.approx(-6.2)  # an upper bound: the -9 was never read


def test_server_urls_are_checked() -> None:
    with pytest.raises(ConfigError, match="model"):
        ServerBackend(url="ftp://x")
    with pytest.raises(ConfigError, match="unknown URL option"):
        ServerBackend(url="http://h:1#colour=red")
    b = ServerBackend(url="http://gpu-box:8000/v1#model=qwen2.5-7b&tokenizer=smollm2-135m")
    assert b.family == "openai"
    assert b.model_id == "qwen2.5-7b@http://gpu-box:8000"
    body = orjson.loads(
        orjson.dumps(
            b._api.completion(
                [1, 2],
                grammar='root ::= "a"',
                max_tokens=8,
                logprobs=False,
                background=True,
                model="qwen2.5-7b",
            )
        )
    )
    assert body["structured_outputs"] == {"grammar": 'root ::= "a"'}
    assert body["model"] == "qwen2.5-7b"


# -- two models, one agent --------------------------------------------------------------------

SPEC = {
    "name": "two-models",
    "description": "You steer a warehouse robot. Answer with the safest action.",
    "action": {
        "type": "object",
        "properties": {"a": {"enum": ["stop", "slow", "go"]}, "s": {"type": "number"}},
        "required": ["a"],
    },
    "default_action": {"a": "stop"},
    "state": {"zone": "aisle"},
    "events": [
        {"type": "obstacle", "params": {"side": ["left", "right"]}, "deadline_ms": 800},
        {"type": "clear", "deadline_ms": 1000},
        {"type": "human", "params": {"distance": [1, 2, 3]}, "deadline_ms": 800},
    ],
}


async def _until(check, timeout_s: float) -> None:  # type: ignore[no-untyped-def]
    await until_holds(check, timeout_s, "the condition")


async def test_planner_on_the_server_live_in_process_survives_a_server_restart(
    smollm2_first_load: LoadedModel, tiny_backend: TransformersBackend
) -> None:
    from forethought import Agent, AgentConfig, AgentSpec

    spec = AgentSpec.from_data(SPEC)
    schema = spec.action_schema()
    with LlamaServer(slots=2, context=4096) as srv:
        remote = ServerBackend(url=srv.url, poll_s=0.2)
        agent = Agent(spec, backend=tiny_backend, planner_backend=remote, config=AgentConfig())
        async with agent:
            assert agent.planner is not None
            assert agent.models() == {
                "tree": remote.model_id,
                "score": tiny_backend.model_id,
                "live": tiny_backend.model_id,
            }
            await _until(lambda: agent.planner.stats.branches >= 4, 120)
            nodes = list(agent.tree.nodes())
            assert nodes
            assert {n.model_id for n in nodes} == {remote.model_id}

            decided: list[dict[str, object]] = []

            async def burst(n: int) -> None:
                for i in range(n):
                    kind = ("obstacle", "clear", "human")[i % 3]
                    params = {"obstacle": {"side": "left"}, "human": {"distance": 2}}.get(kind, {})
                    ident = f"e{len(decided)}"
                    event = {"id": ident, "type": kind, "params": params, "deadline_ms": 300}
                    d = await agent.decide(event)
                    schema.validate(d.action)  # never an invalid action
                    decided.append(d.action)
                    await asyncio.sleep(0.05)

            await burst(6)
            before = agent.planner.stats.branches
            srv.stop()  # the planner's server dies mid-run
            agent.update_state({"zone": "blocked"})  # a new state: the planner has work
            await burst(12)
            await _until(lambda: sum(agent.planner.stats.errors.values()) > 0, 30)
            assert agent.stats()["servers"]["planner"]["healthy"] is False
            srv.start()  # same port: the backend reconnects, the planner's backoff retries
            await _until(lambda: agent.planner.stats.branches > before, 120)
            await burst(6)
            # Healthy again: said by the next request or the next read of /slots (poll_s), so
            # a straggling failure from before the restart does not have the last word.
            await _until(lambda: agent.stats()["servers"]["planner"]["healthy"] is True, 10)
        assert len(decided) == 24
        assert agent.executor is not None
        assert agent.executor.stats.invalid == 0


def test_a_scenario_replays_with_the_planner_on_the_server(
    smollm2_first_load: LoadedModel, server: LlamaServer
) -> None:
    from forethought.sims import load_scenario, metrics, replay, shipped_scenarios

    path = next(p for p in shipped_scenarios() if p.name == "design-note.yaml")
    scenario = load_scenario(path)
    local = TransformersBackend(model="smollm2-135m", device="cpu", dtype="float32")
    local.load()
    runs = replay(
        scenario,
        local,
        strategies=("tree",),
        clock="real",
        speed=2.0,
        planner_source=lambda: ServerBackend(url=server.url),
    )
    m = metrics(runs["tree"])
    assert m["models"]["tree"].endswith(server.url)
    assert m["models"]["live"] == "smollm2-135m"
    assert m["planner"]["branches"] > 0
    assert m["tiers"]["tree"] > 0


async def test_an_api_key_is_required_and_never_shown(
    smollm2_first_load: LoadedModel, robot_schema: ActionSchema
) -> None:
    from pydantic import SecretStr

    with LlamaServer(slots=1, context=2048, api_key="s3cret-key") as srv:
        async with ServerBackend(url=srv.url, poll_s=0) as anonymous:
            with pytest.raises(ServerRejected) as info:
                await anonymous.prepare(robot_schema)
            assert info.value.status == 401
        keyed = ServerBackend(url=srv.url, poll_s=0, api_key=SecretStr("s3cret-key"))
        async with keyed:
            await keyed.prepare(robot_schema)
            loop = asyncio.get_running_loop()
            (g,) = await keyed.generate(CONTEXT, ["x"], robot_schema, deadline=loop.time() + 30)
            assert g.ok
            assert "s3cret" not in repr(keyed.stats_dict()) + repr(keyed.__dict__.get("_api_key"))


@pytest.mark.vllm
async def test_against_a_real_vllm(robot_schema: ActionSchema) -> None:
    """Runs only where FORETHOUGHT_VLLM_URL names a vLLM server (README: the recipe)."""
    import os

    url = os.environ.get("FORETHOUGHT_VLLM_URL")
    if not url:
        pytest.skip("set FORETHOUGHT_VLLM_URL=http://host:port/v1#model=NAME&tokenizer=PATH")
    async with ServerBackend(url=url, poll_s=0) as backend:
        await backend.prepare(robot_schema)
        loop = asyncio.get_running_loop()
        gens = await backend.generate(
            CONTEXT, ["obstacle", "path clear"], robot_schema, deadline=loop.time() + 60
        )
        assert all(g.ok for g in gens)
        candidates = [robot_schema.validate({"action": a}) for a in ("stop", "go")]
        scores = await backend.score(
            CONTEXT, "obstacle", candidates, robot_schema, deadline=loop.time() + 60
        )
        assert scores.scores is not None


def test_a_server_that_dies_at_start_is_reported_as_dead_not_slow(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a stand-in that dies the way an unusable CPU feature killed the real one: by a signal
    exe = tmp_path / "llama-server"
    exe.write_text("#!/bin/sh\necho loading model\nkill -SEGV $$\n")
    exe.chmod(0o755)
    monkeypatch.setenv("FORETHOUGHT_LLAMA_SERVER", str(exe))
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF")
    server = LlamaServer(model=str(gguf), slots=1)
    t0 = time.monotonic()
    try:
        with pytest.raises(ConfigError, match=r"exited with status -11 before answering /health"):
            server.start(timeout_s=30.0)
        assert time.monotonic() - t0 < 10.0  # not after the whole timeout
    finally:
        server.close()
    # as a context manager, a failed start leaves no log behind, open or on disk (it left an
    # open one: a ResourceWarning that failed whichever test ran when it was collected)
    logs = Path(tempfile.gettempdir())
    before = set(logs.glob("llama-server-*.log"))
    with (
        pytest.raises(ConfigError, match="exited with status -11"),
        LlamaServer(model=str(gguf), slots=1),
    ):
        pass
    assert set(logs.glob("llama-server-*.log")) - before == set()


async def test_a_live_prediction_counts_the_state_only_until_it_was_sent(
    server: LlamaServer, robot_schema: ActionSchema
) -> None:
    """Before a call in a state, a live call is predicted to prefill the whole prompt; after
    one, only the event's own tokens and the action's opening, which the server indeed
    prefilled (its timings say)."""
    async with ServerBackend(url=server.url, poll_s=0) as backend:
        await backend.prepare(robot_schema)
        lat = backend.latency
        steps = lat.typical_steps()
        prefix, event = backend.prompts.encode(Prompt(CONTEXT, "battery low"), robot_schema)
        own = [*event, *backend.grammar(robot_schema).forced]
        assert len(own) > len(event)  # the opening goes with the prompt
        cold = backend.predict_live(CONTEXT, "battery low", robot_schema)
        assert cold == live_call(lat.prefill(len(prefix) + len(own)), lat.step(1), steps)
        loop = asyncio.get_running_loop()
        (g,) = await backend.generate(
            CONTEXT, ["path clear"], robot_schema, deadline=loop.time() + 60
        )
        assert g.ok
        warm = backend.predict_live(CONTEXT, "battery low", robot_schema)
        steps = lat.typical_steps()
        assert warm == live_call(lat.prefill(len(own)), lat.step(1), steps)
        (h,) = await backend.generate(
            CONTEXT, ["battery low"], robot_schema, deadline=loop.time() + 60
        )
        assert h.ok
        assert h.prefill_tokens <= len(own)  # the server had the state cached, as predicted
        other = backend.predict_live(CONTEXT + " It is night.", "battery low", robot_schema)
        assert other.p50 > warm.p50  # a state never sent: prefilled whole
