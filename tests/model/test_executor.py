"""Executor tiers on a scripted backend, in virtual time: exact deadline arithmetic."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest

from forethought.models import LatencyProfile, Prediction, ScriptedBackend, TransformersBackend
from forethought.models._prompt import Prompt, state_context
from forethought.policies import ActionSchema, InvalidAction
from forethought.policies._events import EventSpace
from forethought.policies._state import WorldState
from forethought.policies._tree import PolicyNode, PolicyTree
from forethought.runtime import Decision, Event, ExecutorConfig, Tier
from forethought.runtime._capabilities import SupportsLivePrediction
from forethought.runtime._executor import Executor
from forethought.sims._charged import ChargedClock
from forethought.sims._vloop import VirtualTimeLoop, run_virtual

ACTION = {
    "type": "object",
    "properties": {
        "a": {"enum": ["stop", "slow", "go"]},
        "v": {"type": "number", "minimum": 0, "maximum": 2},
    },
    "required": ["a"],
}
SPACE = [
    {
        "type": "obstacle",
        "deadline_ms": 100,
        "params": {"d": {"min": 0.5, "max": 2.0, "step": 0.5}},
        "tolerance": {"d": 0.5},
    },
    {"type": "clear", "deadline_ms": 1000},
]
STATE = WorldState({"zone": "aisle"})


def make(backend: Any = None, tree: PolicyTree | None = None, **cfg: Any) -> Executor:
    schema = ActionSchema.from_json_schema(ACTION)
    if backend is not None:
        run_virtual(backend.__aenter__())  # a scripted backend's start touches no loop
    return Executor(
        space=EventSpace.from_specs(SPACE),
        schema=schema,
        tree=PolicyTree() if tree is None else tree,
        default_action={"a": "stop"},
        description="test robot",
        backend=backend,
        config=ExecutorConfig(**{"margin_ms": 5.0, **cfg}),
    )


def put(tree: PolicyTree, space: EventSpace, etype: str, params: dict, action: dict) -> None:
    key = space.key(etype, params)
    assert key is not None
    tree.insert(PolicyNode(STATE.fingerprint, key, action, "{}", 0.5, "m", 3, 0.1, 0.0))


def decide(ex: Executor, **event: Any) -> Any:
    async def go() -> Any:
        loop = asyncio.get_running_loop()
        ev = Event(arrived_at=loop.time(), **{"params": {}, **event})
        return await ex.decide(ev, STATE)

    return run_virtual(go())


def test_tree_hit_is_immediate() -> None:
    tree = PolicyTree()
    put(tree, EventSpace.from_specs(SPACE), "obstacle", {"d": 1.0}, {"a": "slow", "v": 0.5})
    backend = ScriptedBackend()
    d = decide(make(backend, tree), id="e1", type="obstacle", params={"d": 1.1})
    assert d.tier is Tier.TREE
    assert d.action == {"a": "slow", "v": 0.5}
    assert d.latency_s == 0.0
    assert d.budget_s == pytest.approx(0.095)
    assert d.met
    assert not d.approximate
    assert backend.calls == []


def test_nearest_neighbour_within_tolerance_is_flagged_approximate() -> None:
    tree = PolicyTree()
    put(tree, EventSpace.from_specs(SPACE), "obstacle", {"d": 1.5}, {"a": "go"})
    d = decide(make(None, tree), id="e1", type="obstacle", params={"d": 1.0})
    assert d.tier is Tier.TREE
    assert d.approximate
    far = decide(make(None, tree), id="e2", type="obstacle", params={"d": 0.5})
    assert far.tier is Tier.DEFAULT  # 1.0 away: beyond the 0.5 tolerance


@pytest.mark.parametrize(
    ("deadline_ms", "law", "charged", "tier", "latency"),
    [
        # law = (prefill base, prefill per token, step); the score tier is predicted at
        # prefill(32 event + 12 candidate tokens), live at prefill(32) + 8 steps.
        (100, (0.05, 0.0, 0.02), 0.05, Tier.SCORE, 0.05),  # fits the 95 ms budget
        (100, (0.0949, 0.0, 0.02), 0.0949, Tier.SCORE, 0.0949),  # 0.1 ms inside: fits
        (100, (0.0951, 0.0, 0.02), 0.0951, Tier.DEFAULT, 0.0),  # 0.1 ms over: skipped
        (235, (0.02, 0.005, 0.005), 0.2, Tier.LIVE, 0.2),  # score 235 ms, live 220 ms
        (40, (0.05, 0.0, 0.001), 0.05, Tier.DEFAULT, 0.0),  # nothing fits 35 ms
    ],
)
def test_tier_choice_follows_the_budget(
    deadline_ms: float, law: tuple[float, float, float], charged: float, tier: Tier, latency: float
) -> None:
    base, per_token, step = law
    backend = ScriptedBackend(
        score_s=charged,
        live_s=charged,
        prefill_s=base,
        prefill_per_token_s=per_token,
        step_s=step,
        pick=1,
        action={"a": "go", "v": 1.0},
    )
    ex = make(backend)
    assert ex.candidates is not None
    assert len(ex.candidates) == 3
    d = decide(ex, id="e", type="obstacle", params={"d": 1.0}, deadline=deadline_ms / 1e3)
    assert d.tier is tier, d.skipped
    assert d.latency_s == pytest.approx(latency)
    assert d.met
    if tier is Tier.SCORE:
        assert d.action == {"a": "slow"}
    if tier is Tier.LIVE:
        assert d.action == {"a": "go", "v": 1.0}


def test_deadline_arithmetic_uses_the_types_deadline_and_margin() -> None:
    ex = make(None, margin_ms=20)
    d = decide(ex, id="e", type="clear")
    assert d.budget_s == pytest.approx(0.98)
    oos = decide(ex, id="f", type="unknown_type")
    assert oos.budget_s == pytest.approx(0.98)  # default_deadline_ms 1000 - 20
    assert oos.out_of_space
    assert oos.tier is Tier.DEFAULT


def test_out_of_space_never_uses_the_tree_but_gets_an_action() -> None:
    tree = PolicyTree()
    put(tree, EventSpace.from_specs(SPACE), "obstacle", {"d": 2.0}, {"a": "go"})
    backend = ScriptedBackend(pick=2)
    d = decide(make(backend, tree), id="e", type="obstacle", params={"d": 9.0}, deadline=1.0)
    assert d.out_of_space
    assert d.tier is Tier.SCORE
    assert d.action == {"a": "go"}
    assert ("tree", "out of space") in d.skipped


@pytest.mark.parametrize("mode", ["raise", "hang"])
def test_a_model_that_raises_or_hangs_still_answers_by_the_deadline(mode: str) -> None:
    backend = ScriptedBackend(
        score_s=0.01, live_s=0.01, step_s=0.001, score_mode=mode, live_mode=mode
    )
    d = decide(make(backend), id="e", type="obstacle", params={"d": 1.0}, deadline=0.1)
    assert d.tier is Tier.DEFAULT
    assert d.met
    assert d.latency_s <= 0.095 + 1e-9
    assert d.action == {"a": "stop"}
    if mode == "hang":
        assert ("score", "timed out at the budget") in d.skipped


@pytest.mark.parametrize("mode", ["invalid", "cut"])
def test_invalid_or_cut_live_output_falls_to_the_default(mode: str) -> None:
    backend = ScriptedBackend(score_s=1.0, prefill_s=1.0, live_s=0.05, step_s=0.001, live_mode=mode)
    d = decide(make(backend), id="e", type="obstacle", params={"d": 1.0}, deadline=0.5)
    assert d.tier is Tier.DEFAULT
    assert d.met


def test_invalid_tree_action_is_never_emitted() -> None:
    tree = PolicyTree()
    put(tree, EventSpace.from_specs(SPACE), "obstacle", {"d": 1.0}, {"a": "fly"})
    ex = make(None, tree)  # the executor's tree admits valid actions only: this one goes
    assert len(tree) == 0
    assert ex.stats.invalid == 1
    d = decide(ex, id="e", type="obstacle", params={"d": 1.0})
    assert d.tier is Tier.DEFAULT
    assert d.action == {"a": "stop"}
    with pytest.raises(InvalidAction):  # and one inserted later never enters
        put(tree, EventSpace.from_specs(SPACE), "obstacle", {"d": 1.0}, {"a": "fly"})
    assert len(tree) == 0


def test_exactly_one_decision_per_event_id() -> None:
    backend = ScriptedBackend(score_s=0.05, pick=2)
    ex = make(backend)

    async def go() -> list[Any]:
        loop = asyncio.get_running_loop()
        ev = Event("same", "obstacle", {"d": 1.0}, arrived_at=loop.time(), deadline=1.0)
        first, second = await asyncio.gather(ex.decide(ev, STATE), ex.decide(ev, STATE))
        third = await ex.decide(Event("same", "clear", {}, arrived_at=loop.time()), STATE)
        return [first, second, third]

    a, b, c = run_virtual(go())
    assert a is b is c
    assert backend.calls == ["score"]
    assert ex.stats.duplicates == 2
    assert ex.stats.decisions == 1


async def _live_only_stream(
    backend: Any, schema: ActionSchema, n: int, *, every_s: float, budget_s: float
) -> list[Decision]:
    """``n`` obstacle events, one every ``every_s``, decided by the live tier alone (probes on
    after 0.5 s without a measurement); the executor closed after."""
    loop = asyncio.get_running_loop()
    ex = Executor(
        space=EventSpace.from_specs(SPACE),
        schema=schema,
        tree=PolicyTree(),
        default_action={"a": "stop"},
        description="test robot",
        backend=backend,
        config=ExecutorConfig(use_tree=False, use_score=False, probe_after_s=0.5),
    )
    decisions = []
    for i in range(n):
        await asyncio.sleep(every_s)
        now = loop.time()
        event = Event(str(i), "obstacle", {"d": 1.0}, arrived_at=now, deadline=now + budget_s)
        decisions.append(await ex.decide(event, STATE))
    await ex.aclose()
    return decisions


@pytest.mark.model
def test_a_live_tier_shut_out_in_a_slow_moment_is_measured_again(
    tiny_backend: TransformersBackend,
) -> None:
    """A p95 learned in a slow moment must not keep the live tier off once the model is fast.

    The model's first measurements come from a busy moment (the passes took 100x their usual
    time), so the live tier's p95 does not fit a 200 ms budget and it is not started. A tier
    that is never started is never measured: unless the executor measures the model again,
    the tier stays off for good while every call would now fit many times over. Virtual time,
    a real (tiny) model charged by a fixed profile: deterministic.
    """
    profile = LatencyProfile(0.01, 0.0002, 0.01, 0.0005, spread95=1.1)

    async def main() -> list[Decision]:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, VirtualTimeLoop)
        backend = tiny_backend.sharing(clock=ChargedClock(loop, profile, seed=3))
        async with backend:
            lat = backend.latency
            for tokens in (150, 20):  # what a calibration in a busy moment leaves behind
                lat.observe_prefill(tokens, 1.0 + tokens * 0.02)
            for _ in range(2):
                lat.observe_step(1, 1.0)
            return await _live_only_stream(
                backend, ActionSchema.from_json_schema(ACTION), 240, every_s=0.25, budget_s=0.2
            )

    decisions = run_virtual(main())

    def shut_out(d: Decision) -> bool:
        return any(tier == "live" and "does not fit" in why for tier, why in d.skipped)

    assert shut_out(decisions[0])  # the slow moment's p95 kept the tier off at first
    assert not any(shut_out(d) for d in decisions[-20:])  # measured again, it starts again
    assert all(d.met for d in decisions)


@pytest.mark.model
def test_a_state_prompt_too_long_to_prefill_in_any_budget_is_prefilled_in_the_background(
    tiny_backend: TransformersBackend,
) -> None:
    """A live tier the model refuses before any pass must not stay off for good.

    Prefill here costs 4 ms a token: the state's prompt (about 100 tokens) takes longer to
    prefill than the 300 ms an event allows, while an event's own tokens after it, cached,
    take about 100 ms. Nothing on the event path ever prefills the state's prompt (each call
    is refused before its first pass, so nothing is measured either): unless the executor
    prefills it in the background, no event is ever answered live. Virtual time, a real
    (tiny) model charged by a fixed profile: deterministic.
    """
    profile = LatencyProfile(0.01, 0.004, 0.01, 0.0005, spread95=1.1)
    schema = ActionSchema.from_json_schema(ACTION)

    async def main() -> tuple[list[Decision], int]:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, VirtualTimeLoop)
        backend = tiny_backend.sharing(clock=ChargedClock(loop, profile, seed=3))
        async with backend:
            await backend.prepare(schema)  # what the agent does: calibrates on a short prompt
            prompt, _ = backend.prompts.encode(
                Prompt(state_context("test robot", STATE.to_json()), "-"), schema
            )
            decisions = await _live_only_stream(backend, schema, 40, every_s=0.5, budget_s=0.3)
        return decisions, len(prompt)

    decisions, prompt_tokens = run_virtual(main())
    assert 0.01 + 0.004 * prompt_tokens > 0.3  # the state's prompt alone does not fit
    assert decisions[0].tier is Tier.DEFAULT
    assert ("live", "not_started") in decisions[0].skipped
    live = [d for d in decisions if d.tier is Tier.LIVE]
    assert len(live) >= 30, [d.skipped for d in decisions]
    assert all(d.tier is Tier.LIVE for d in decisions[-10:])
    assert all(d.met for d in decisions)


def test_a_live_answer_is_kept_so_the_next_such_event_is_a_tree_hit() -> None:
    # The law of the tier-choice case above where only live fits (score 235 ms, live 220 ms).
    backend = ScriptedBackend(
        score_s=0.2,
        live_s=0.2,
        prefill_s=0.02,
        prefill_per_token_s=0.005,
        step_s=0.005,
        action={"a": "go", "v": 1.0},
    )
    tree = PolicyTree()
    ex = make(backend, tree)
    first = decide(ex, id="e1", type="obstacle", params={"d": 1.0}, deadline=0.235)
    assert first.tier is Tier.LIVE, first.skipped
    space = EventSpace.from_specs(SPACE)
    key = space.key("obstacle", {"d": 1.0})
    assert key is not None
    node = tree.lookup(STATE.fingerprint_for("obstacle"), key)
    assert node is not None, (list(tree.nodes()), key, ex.stats)
    assert node.origin == "answered"
    assert node.action == first.action
    assert ex.stats.answers_kept == 1
    calls = len(backend.calls)
    second = decide(ex, id="e2", type="obstacle", params={"d": 1.0}, deadline=0.235)
    assert second.tier is Tier.TREE
    assert second.action == first.action
    assert len(backend.calls) == calls  # no model call for it
    # The waste figures judge the planner's own work: the kept answer's hit counts apart.
    assert tree.used == 0
    assert tree.answer_hits == 1


@pytest.mark.parametrize("setting", [{"use_tree": False}, {"keep_answers": False}])
def test_answers_are_not_kept_without_the_tree_tier_or_when_turned_off(
    setting: dict[str, bool],
) -> None:
    backend = ScriptedBackend(pick=1, score_s=0.01)
    tree = PolicyTree()
    ex = make(backend, tree, **setting)
    for i in range(2):
        d = decide(ex, id=f"e{i}", type="obstacle", params={"d": 1.0}, deadline=0.5)
        assert d.tier is Tier.SCORE, d.skipped
    assert len(tree) == 0
    assert ex.stats.answers_kept == 0


def test_a_kept_answer_survives_a_snapshot_as_answered(tmp_path: Any) -> None:
    backend = ScriptedBackend(pick=1, score_s=0.01)
    tree = PolicyTree()
    decide(make(backend, tree), id="e", type="obstacle", params={"d": 1.0}, deadline=0.5)
    (node,) = tree.nodes()
    row = node.to_row()
    assert PolicyNode.from_row(row) == node
    assert PolicyNode.from_row(row[:11]).origin == "planned"  # rows written before the field


class _PredictingBackend(ScriptedBackend):
    """A scripted backend that predicts its live calls itself, as a server backend does."""

    def __init__(self, live_p95_s: float, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.live_p95_s = live_p95_s
        self.asked: list[tuple[str, str]] = []

    def predict_live(self, context: str, event: str, schema: ActionSchema) -> Prediction:
        self.asked.append((context, event))
        return Prediction(self.live_p95_s / 2, self.live_p95_s)

    def prompt_cached(self, context: str, schema: ActionSchema) -> bool:
        return True  # the prediction above is all there is to it


@pytest.mark.parametrize(("live_p95_s", "started"), [(0.1, True), (0.5, False)])
def test_a_backend_that_predicts_its_live_calls_is_asked_for_this_event(
    live_p95_s: float, started: bool
) -> None:
    """The fit check of the live tier uses the backend's own prediction for this event's
    prompt when it offers one (SupportsLivePrediction), not the laws for a guessed size.

    The laws here say a live call takes 0.05 + 32 x 0.005 s to prefill plus 8 steps of 0.02 s
    (370 ms: no fit in 235 ms); the backend predicts 100 ms (it fits) or 500 ms (it does not).
    """
    backend = _PredictingBackend(
        live_p95_s,
        live_s=0.05,
        prefill_s=0.05,
        prefill_per_token_s=0.005,
        step_s=0.02,
        action={"a": "go", "v": 1.0},
    )
    assert isinstance(backend, SupportsLivePrediction)
    ex = make(backend, use_score=False)
    d = decide(ex, id="e1", type="obstacle", params={"d": 1.0}, deadline=0.235)
    assert len(backend.asked) == 1
    context, event = backend.asked[0]
    assert "aisle" in context  # the state's rendering
    assert "obstacle" in event
    if started:
        assert d.tier is Tier.LIVE, d.skipped
        assert d.met
    else:
        assert d.tier is Tier.DEFAULT
        (why,) = [why for tier, why in d.skipped if tier == "live"]
        assert re.fullmatch(r"p95 500 ms > budget 2\d\d ms: does not fit", why), why
        assert d.payload()["skipped"]["live"] == why  # the reason goes out on the wire
