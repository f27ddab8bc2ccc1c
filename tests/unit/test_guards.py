"""Guards (issue 47): no tier sends what a guard refuses; the default is the floor.

The property test draws guards, a tree branch, a score pick and a live answer at random and
asserts the one invariant: the action sent keeps every guard, or it is the default. The
backend is scripted (the property is the executor's, whatever the model); the grammar
narrowing the live tier relies on is tested against the real grammars in tests/model.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forethought.models import ScriptedBackend
from forethought.policies import (
    ActionSchema,
    EventSpace,
    GuardRule,
    GuardSet,
    PolicyNode,
    PolicyTree,
    WorldState,
    drop_guarded,
)
from forethought.policies._events import EventType
from forethought.policies._guards import compile_want, pattern_matches
from forethought.runtime import Event, ExecutorConfig, Tier
from forethought.runtime._executor import Executor

ACTION: dict[str, Any] = {
    "type": "object",
    "properties": {
        "mode": {"type": "string", "enum": ["go", "slow", "stop"]},
        "speed": {"type": "number", "minimum": 0, "maximum": 1},
        "lights": {"type": "boolean"},
    },
    "required": ["mode", "speed", "lights"],
    "additionalProperties": False,
}
SCHEMA = ActionSchema.from_json_schema(ACTION)
DEFAULT = {"mode": "stop", "speed": 0.0, "lights": True}
SPACE = EventSpace(
    [
        EventType(
            type="reading",
            deadline_ms=500,
            params={"zone": ["open", "people"], "distance": {"min": 0, "max": 2, "step": 0.5}},
        )
    ]
)

modes = st.sampled_from(["go", "slow", "stop"])
speeds = st.sampled_from([0.0, 0.1, 0.3, 0.5, 0.8, 1.0])
actions = st.fixed_dictionaries({"mode": modes, "speed": speeds, "lights": st.booleans()})
ranges = st.one_of(
    st.fixed_dictionaries({"min": speeds}),
    st.fixed_dictionaries({"max": speeds}),
    st.tuples(speeds, speeds).map(lambda p: {"min": min(p), "max": max(p)}),
)
field_wants = st.one_of(
    st.tuples(st.just("mode"), st.one_of(modes, st.lists(modes, min_size=1, max_size=2))),
    st.tuples(st.just("speed"), ranges),
    st.tuples(st.just("lights"), st.booleans()),
)
patterns = st.lists(field_wants, min_size=1, max_size=2).map(dict)
conditions = st.dictionaries(
    st.sampled_from(["zone", "distance", "state.people", "state.level"]),
    st.one_of(
        st.sampled_from(["open", "people", True, False, 1, 2]),
        st.fixed_dictionaries({"max": st.sampled_from([0.5, 1.0, 1.5])}),
    ),
    max_size=2,
)


@st.composite
def guard_rules(draw: st.DrawFn, i: int) -> GuardRule:
    kind = draw(st.sampled_from(["forbid", "allow"]))
    return GuardRule.model_validate(
        {
            "name": f"g{i}",
            "when": draw(conditions),
            kind: draw(st.lists(patterns, min_size=1, max_size=3)),
        }
    )


guard_sets = st.integers(1, 4).flatmap(lambda n: st.tuples(*(guard_rules(i) for i in range(n))))


def _node(state: WorldState, params: dict[str, Any], action: dict[str, Any]) -> PolicyNode:
    key = SPACE.key("reading", params)
    assert key is not None
    return PolicyNode(
        fingerprint=state.fingerprint_for("reading"),
        key=key,
        action=action,
        compact=SCHEMA.compact(SCHEMA.validate(action)),
        probability=1.0,
        model_id="test",
        tokens=0,
        gen_seconds=0.0,
        created_at=0.0,
    )


async def _decide(
    guards: GuardSet,
    state: WorldState,
    params: dict[str, Any],
    branch: dict[str, Any] | None,
    pick: int,
    live: dict[str, Any],
    tiers: tuple[bool, bool, bool],
    cands: list[dict[str, Any]] | None = None,
) -> tuple[Tier, dict[str, Any], Executor]:
    tree = PolicyTree()
    if branch is not None:
        tree.insert(_node(state, params, branch))
    backend = ScriptedBackend(score_s=0.001, live_s=0.001, prefill_s=0.0, step_s=0.0, pick=pick)
    backend.action = live
    config = ExecutorConfig(
        use_tree=tiers[0], use_score=tiers[1], use_live=tiers[2], max_candidates=64
    )
    async with backend:
        executor = Executor(
            space=SPACE,
            schema=SCHEMA,
            tree=tree,
            default_action=DEFAULT,
            description="a cart",
            backend=backend,
            config=config,
            guards=guards,
            candidates=cands,
        )
        loop = asyncio.get_running_loop()
        now = loop.time()
        event = Event("e1", "reading", params, arrived_at=now, deadline=now + 5.0)
        d = await executor.decide(event, state)
        return d.tier, d.action, executor


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rules=guard_sets,
    people=st.booleans(),
    level=st.sampled_from([1, 2, 3]),
    zone=st.sampled_from(["open", "people"]),
    distance=st.sampled_from([0.0, 0.4, 1.0, 1.7]),
    branch=st.one_of(st.none(), actions),
    pick=st.integers(0, 40),
    live=actions,
    tiers=st.tuples(st.booleans(), st.booleans(), st.booleans()),
    cands=st.lists(actions, min_size=1, max_size=8),
)
def test_the_action_sent_keeps_every_guard_or_is_the_default(
    rules: tuple[GuardRule, ...],
    people: bool,
    level: int,
    zone: str,
    distance: float,
    branch: dict[str, Any] | None,
    pick: int,
    live: dict[str, Any],
    tiers: tuple[bool, bool, bool],
    cands: list[dict[str, Any]],
) -> None:
    guards = GuardSet(rules)
    state = WorldState({"people": people, "level": level})
    params = {"zone": zone, "distance": distance}
    tier, action, executor = asyncio.run(
        _decide(guards, state, params, branch, pick % len(cands), live, tiers, cands)
    )
    refused = guards.refusal(action, params, state)
    assert refused is None or (tier is Tier.DEFAULT and action == DEFAULT), (tier, action, refused)
    # A tree branch a guard refuses is never the answer; it is counted once: dropped at load
    # (a guard that reads only the event) or refused at selection.
    if branch is not None and guards.refusal(branch, params, state) is not None:
        assert tier is not Tier.TREE
        counts = executor.stats.guards
        dropped = sum(counts.dropped.values())
        assert dropped <= 1
        assert counts.total("tree") == (1 - dropped if tiers[0] else 0)
    if tier is not Tier.DEFAULT:
        assert refused is None


def test_refusals_are_counted_by_tier_and_guard_and_the_next_tier_answers() -> None:
    guards = GuardSet(
        [
            GuardRule(name="no-go-near-people", when={"zone": "people"}, forbid=[{"mode": "go"}]),
            GuardRule(
                name="slow-near-people",
                when={"state.people": True},
                allow=[{"speed": {"max": 0.3}}],
            ),
        ]
    )
    state = WorldState({"people": True, "level": 1})
    params = {"zone": "people", "distance": 1.0}
    branch = {"mode": "slow", "speed": 0.8, "lights": False}  # breaks slow-near-people
    live = {"mode": "slow", "speed": 0.2, "lights": False}
    tier, action, executor = asyncio.run(
        _decide(guards, state, params, branch, 0, live, (True, False, True))
    )
    assert tier is Tier.LIVE
    assert action == live
    assert executor.stats.guards.refused == {"tree": {"slow-near-people": 1}}
    assert executor.stats.as_dict()["guards"]["refused"] == {"tree": {"slow-near-people": 1}}


def test_a_live_answer_the_narrowed_grammar_cannot_hold_falls_to_the_default() -> None:
    guards = GuardSet([GuardRule(name="never-go", forbid=[{"mode": "go"}])])
    state = WorldState({"people": False, "level": 1})
    params = {"zone": "open", "distance": 1.0}
    live = {"mode": "go", "speed": 0.2, "lights": False}
    tier, action, _ = asyncio.run(
        _decide(guards, state, params, None, 0, live, (True, False, True))
    )
    assert (tier, action) == (Tier.DEFAULT, DEFAULT)


def test_score_candidates_are_filtered_per_state_and_event() -> None:
    guards = GuardSet(
        [GuardRule(name="lights-on", when={"state.people": True}, allow=[{"lights": True}])]
    )
    readable = [
        {"mode": m, "speed": 0.0, "lights": lights}
        for m in ("go", "stop")
        for lights in (False, True)
    ]
    on = guards.applicable({}, WorldState({"people": True}))
    off = guards.applicable({}, WorldState({"people": False}))
    assert on == (0,)
    assert off == ()
    allowed = guards.allowed_candidates(readable, on)
    assert allowed == (1, 3)
    assert len(allowed) < len(readable)


def test_narrowing_removes_enum_values_and_narrows_bounds() -> None:
    guards = GuardSet(
        [
            GuardRule(name="no-go", forbid=[{"mode": "go"}]),
            GuardRule(name="slow", allow=[{"speed": {"max": 0.3}}]),
            GuardRule(name="not-fast", forbid=[{"speed": {"min": 0.25}}]),
        ]
    )
    narrowed = guards.narrowed(SCHEMA, (0, 1))
    assert narrowed is not None
    props = narrowed.portable()["properties"]
    assert props["mode"]["enum"] == ["slow", "stop"]
    assert props["speed"]["maximum"] == 0.3
    assert guards.narrowed(SCHEMA, (0, 1)) is narrowed  # cached per guard set
    assert guards.narrowed(SCHEMA, ()) is SCHEMA
    upper = guards.narrowed(SCHEMA, (2,))
    assert upper is not None
    assert upper.portable()["properties"]["speed"]["exclusiveMaximum"] == 0.25


def test_guards_that_cannot_compile_are_named() -> None:
    guards = GuardSet(
        [
            GuardRule(name="pair", forbid=[{"mode": "go", "lights": False}]),
            GuardRule(name="hole", forbid=[{"speed": {"min": 0.3, "max": 0.6}}]),
            GuardRule(name="either", allow=[{"mode": "stop"}, {"speed": 0.0}]),
            GuardRule(name="fine", forbid=[{"mode": ["go", "slow"]}]),
        ]
    )
    named = dict(guards.not_compilable(SCHEMA))
    assert set(named) == {"pair", "hole", "either"}
    assert "several fields" in named["pair"]
    assert "inside" in named["hole"]


def test_a_guard_leaving_no_value_leaves_no_grammar() -> None:
    guards = GuardSet([GuardRule(name="nothing", forbid=[{"mode": ["go", "slow", "stop"]}])])
    assert guards.narrowed(SCHEMA, (0,)) is None


def test_a_loaded_tree_loses_the_branches_a_guard_now_refuses() -> None:
    state = WorldState({"people": False, "level": 1})
    tree = PolicyTree()
    tree.insert(_node(state, {"zone": "people", "distance": 1.0}, {**DEFAULT, "mode": "go"}))
    tree.insert(_node(state, {"zone": "open", "distance": 1.0}, {**DEFAULT, "mode": "go"}))
    tree.insert(_node(state, {"zone": "people", "distance": 0.5}, DEFAULT))
    guards = GuardSet(
        [
            GuardRule(name="no-go-near-people", when={"zone": "people"}, forbid=[{"mode": "go"}]),
            GuardRule(name="state-bound", when={"state.people": True}, forbid=[{"mode": "slow"}]),
        ]
    )
    assert drop_guarded(tree, guards) == {"no-go-near-people": 1}
    assert len(tree) == 2


@pytest.mark.parametrize(
    ("rule", "problem"),
    [
        ({"name": "x", "forbid": [{"mode": "go"}], "allow": [{"mode": "stop"}]}, "exactly one"),
        ({"name": "x"}, "exactly one"),
        ({"name": "x", "forbid": []}, "at least one pattern"),
        ({"name": "x", "forbid": [{}]}, "at least one action field"),
        ({"name": "x", "when": {"zone": {"low": 1}}, "forbid": [{"mode": "go"}]}, "{min, max}"),
        ({"name": "x", "forbid": [{"speed": {"min": 2, "max": 1}}]}, "above max"),
    ],
)
def test_a_malformed_guard_names_its_problem(rule: dict[str, Any], problem: str) -> None:
    with pytest.raises(ValueError, match=re.escape(problem)):
        GuardRule.model_validate(rule)


scalars = st.one_of(
    st.booleans(),
    st.integers(-3, 3),
    st.sampled_from([0.0, 0.5, 1.0, -1.5, 2.25]),
    st.sampled_from(["go", "stop", ""]),
)
wants = st.one_of(
    scalars,
    st.lists(scalars, min_size=1, max_size=3),
    st.fixed_dictionaries({"min": st.integers(-2, 2)}),
    st.fixed_dictionaries({"max": st.sampled_from([0.5, 1, 2.0])}),
)


@settings(max_examples=500)
@given(value=scalars, want=wants)
def test_compiled_tests_agree_with_the_reference_matcher(value: Any, want: Any) -> None:
    assert compile_want(want)(value) is pattern_matches(value, want)


@pytest.mark.parametrize("outside", [{"min": 2}, {"max": -1}])
def test_a_forbidden_range_outside_the_fields_leaves_its_bounds(outside: dict[str, float]) -> None:
    """Narrowing only narrows: a guard forbidding speeds the field cannot take anyway must not
    replace its bounds (``maximum: 1`` became ``exclusiveMaximum: 2`` before)."""
    guards = GuardSet([GuardRule(name="far", forbid=[{"speed": outside}])])
    narrowed = guards.narrowed(SCHEMA, (0,))
    assert narrowed is not None
    speed = narrowed.portable()["properties"]["speed"]
    assert (speed.get("minimum"), speed.get("maximum")) == (0, 1)
    assert "exclusiveMaximum" not in speed
    assert "exclusiveMinimum" not in speed
