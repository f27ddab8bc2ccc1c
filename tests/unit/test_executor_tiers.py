"""Executor tiers on a scripted backend, in virtual time: exact deadline arithmetic.

No model here: the tiers that run one (on a tiny real model, charged by a fixed profile) are
in tests/model/test_executor.py.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest
from executor_support import SPACE, STATE, decide, make, put

from forethought.models import Prediction, ScriptedBackend
from forethought.policies import ActionSchema, EventSpace, InvalidAction, PolicyNode, PolicyTree
from forethought.runtime import Event, Tier
from forethought.runtime._capabilities import SupportsLivePrediction
from forethought.sims._vloop import run_virtual


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


def test_a_score_tier_turned_off_says_so_not_that_the_space_is_not_enumerable() -> None:
    backend = ScriptedBackend(action={"a": "go"})
    ex = make(backend, use_score=False)
    assert ex.candidates is not None  # the space is enumerable: only the tier is off
    d = decide(ex, id="e", type="clear")
    assert ("score", "disabled") in d.skipped
    assert ("score", "action space not enumerable") not in d.skipped
