"""Choosing the local engine, the trie grammar and its reading, and measured method costs.

No server here (tests/integration/test_managed_engine.py runs the real one): these are the rules.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="needs the local extra: pip install 'forethought[local]'")

from forethought.models import ManagedServerBackend, TransformersBackend
from forethought.models._engine import choose_engine
from forethought.models.backends._llama_binary import BUILD_COMMAND
from forethought.models.backends._trie_score import (
    BestScore,
    LoserBound,
    read_trie,
    trie_depth,
    trie_gbnf,
)
from forethought.planner._method_cost import MeasuredCosts
from forethought.policies import AgentSpec, ConfigError
from forethought.runtime import Agent, AgentConfig, EngineConfig


@pytest.fixture
def no_build(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A machine without our llama-server build."""
    monkeypatch.setenv("FORETHOUGHT_LLAMA_SERVER", str(tmp_path / "absent" / "llama-server"))


@pytest.fixture
def fake_build(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A file where the build would be (choosing never runs it)."""
    exe = tmp_path / "llama-server"
    exe.write_text("#!/bin/sh\nexit 1\n")
    monkeypatch.setenv("FORETHOUGHT_LLAMA_SERVER", str(exe))
    return exe


# -- the trie -------------------------------------------------------------------------------


def test_trie_grammar_shares_prefixes_and_allows_a_candidate_that_ends_early() -> None:
    grammar = trie_gbnf([[1, 2, 3], [1, 2, 4], [1, 5], [1, 2]])
    assert grammar == "root ::= <[1]> (<[2]> ((<[3]> | <[4]>))? | <[5]>)\n"
    assert trie_depth([[1, 2, 3], [1, 5]]) == 3
    with pytest.raises(ValueError, match="at least one token"):
        trie_gbnf([[1], []])


def test_reading_the_trie_is_exact_on_the_path_and_bounds_the_others() -> None:
    tails = [[10, 11, 12], [10, 13, 14], [20, 21]]
    path, lps = [10, 11, 12], [-0.1, -0.5, -0.2]
    tops = [{10: -0.1, 20: -2.5}, {11: -0.5, 13: -1.5}, {12: -0.2, 30: -3.0}]
    reading = read_trie(tails, path, lps, tops)
    assert reading.exact == (True, False, False)
    assert reading.scores[0] == pytest.approx(-0.8)
    assert reading.scores[1] == pytest.approx(-0.1 - 1.5)  # up to its branch: a bound
    assert reading.scores[2] == pytest.approx(-2.5)
    assert reading.unresolved() == []  # both bounds are below the winner's exact score
    # Exact so far: the path's tokens and the branch token, which its step's list has.
    assert reading.known == (3, 2, 1)
    assert reading.known_scores[1] == pytest.approx(-1.6)


def test_a_loser_that_ends_at_its_listed_branch_token_is_exact() -> None:
    reading = read_trie(
        [[10, 11, 12], [10, 13]],
        [10, 11, 12],
        [-0.1, -0.6, -2.0],
        [{10: -0.1}, {11: -0.6, 13: -0.7}, {12: -2.0}],
    )
    assert reading.exact == (True, True)
    assert reading.scores[1] == pytest.approx(-0.8)
    assert reading.unresolved() == []  # exact: nothing to read on


def test_a_loser_whose_bound_reaches_the_winner_is_unresolved() -> None:
    tails = [[10, 11, 12], [10, 13, 14]]
    # The greedy path took 11 (-0.6) over 13 (-0.7), then paid -2.0 more: 13 might win.
    reading = read_trie(
        tails, [10, 11, 12], [-0.1, -0.6, -2.0], [{10: -0.1}, {11: -0.6, 13: -0.7}, {12: -2.0}]
    )
    assert reading.scores[0] == pytest.approx(-2.7)
    assert reading.scores[1] == pytest.approx(-0.8)
    assert reading.unresolved() == [1]


def test_a_loser_within_the_margin_of_the_winner_is_unresolved() -> None:
    # The winner -0.8 exact, the loser bounded at -1.0: out of the running by 0.2 nat, unless
    # the server's scores drift by more than that between requests (the margin).
    reading = read_trie(
        [[10, 11], [10, 13, 14]], [10, 11], [-0.1, -0.7], [{10: -0.1}, {11: -0.7, 13: -0.9}]
    )
    assert reading.unresolved() == []
    assert reading.unresolved(margin=0.3) == [1]
    assert reading.unresolved(margin=0.1) == []
    with pytest.raises(ValueError, match="margin"):
        reading.unresolved(margin=-1)


def test_a_branch_token_outside_the_top_list_is_bounded_by_its_lowest() -> None:
    reading = read_trie([[1, 2], [1, 9]], [1, 2], [-0.1, -0.2], [{1: -0.1}, {2: -0.2, 3: -4.0}])
    assert reading.scores[1] == pytest.approx(-4.1)
    assert not reading.exact[1]
    # Only the shared token is exact; the branch token is the bound's own guess.
    assert reading.known[1] == 1
    assert reading.known_scores[1] == pytest.approx(-0.1)


def test_a_loser_read_on_stops_once_it_falls_below_the_best() -> None:
    best = BestScore(-3.0)
    bound = LoserBound(known=-1.0, length=4, best=best, margin=0.5)
    assert not bound.enough("", [-1.0])  # -2.0: could still win
    assert not bound.enough("", [-1.4])  # -3.4: within the margin of the best
    assert bound.enough("", [-0.2])  # -3.6: ruled out, one token still unread
    assert not bound.exact
    assert bound.score == pytest.approx(-3.6)
    assert best.value == -3.0


def test_a_loser_read_to_its_end_is_exact_and_may_become_the_best() -> None:
    best = BestScore(-3.0)
    bound = LoserBound(known=-1.0, length=2, best=best, margin=0.5)
    # One chunk may carry more log-probabilities than the loser has tokens left: extra ones
    # belong to no token of it (the server's end token).
    assert bound.enough("", [-0.5, -0.3, -9.0])
    assert bound.exact
    assert bound.score == pytest.approx(-1.8)
    assert best.value == pytest.approx(-1.8)
    with pytest.raises(ValueError, match="at least one token"):
        LoserBound(known=0.0, length=0, best=best, margin=0.5)


def test_reading_refuses_mismatched_lengths() -> None:
    with pytest.raises(ValueError, match="log-probabilities"):
        read_trie([[1]], [1], [], [{}])


# -- choosing the engine --------------------------------------------------------------------


@pytest.mark.usefixtures("fake_build")
def test_auto_picks_the_managed_server_for_the_embedded_gguf_on_a_cpu() -> None:
    choice = choose_engine("smollm2-135m", "auto", "cpu")
    assert choice.kind == "llama-server"
    assert choice.notice is None


@pytest.mark.usefixtures("fake_build")
def test_cuda_and_model_directories_stay_on_torch(tmp_path: Path) -> None:
    assert choose_engine("smollm2-135m", "auto", "cuda").kind == "torch"
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    assert choose_engine(str(folder), "auto", "cpu").kind == "torch"
    assert choose_engine("smollm2-135m", "torch", "cpu").kind == "torch"
    with pytest.raises(ConfigError, match=r"engine\.kind.*\.gguf"):
        choose_engine(str(folder), "llama-server", "cpu")


@pytest.mark.usefixtures("no_build")
def test_without_the_build_auto_runs_torch_and_says_how_to_build() -> None:
    choice = choose_engine("smollm2-135m", "auto", "cpu")
    assert choice.kind == "torch"
    assert choice.notice is not None
    assert BUILD_COMMAND in choice.notice
    with pytest.raises(ConfigError, match=r"engine\.kind.*not built.*scripts/setup --engine"):
        choose_engine("smollm2-135m", "llama-server", "cpu")
    with pytest.raises(ConfigError, match=r"engine\.kind"):
        choose_engine("smollm2-135m", "fast", "cpu")


SPEC = {
    "name": "engine-test",
    "description": "You steer a robot.",
    "action": {"type": "object", "properties": {"a": {"enum": ["stop", "go"]}}, "required": ["a"]},
    "default_action": {"a": "stop"},
    "events": [{"type": "obstacle", "deadline_ms": 800}],
}


@pytest.mark.usefixtures("no_build")
def test_the_agent_says_once_that_it_runs_torch(caplog: pytest.LogCaptureFixture) -> None:
    agent = Agent(AgentSpec.from_data(SPEC), config=AgentConfig.defaults(device="cpu"))
    with caplog.at_level(logging.WARNING, logger="forethought.agent"):
        live = agent._make_backend("smollm2-135m")
        planner = agent._make_backend("smollm2-135m")  # a second role asks again
    assert isinstance(live, TransformersBackend)
    assert isinstance(planner, TransformersBackend)
    said = [r for r in caplog.records if BUILD_COMMAND in r.getMessage()]
    assert len(said) == 1
    assert agent.engines == {"smollm2-135m": "torch"}


@pytest.mark.usefixtures("fake_build")
def test_the_agent_makes_the_managed_engine_with_its_settings() -> None:
    config = AgentConfig.defaults(device="cpu", engine=EngineConfig(slots=4, context=4096))
    agent = Agent(AgentSpec.from_data(SPEC), config=config)
    backend = agent._make_backend("smollm2-135m")
    assert isinstance(backend, ManagedServerBackend)
    assert backend.process.slots == 4
    assert backend.process.context == 4096
    assert backend.model_id == "smollm2-135m@llama-server"
    assert agent.engines == {"smollm2-135m": "llama-server"}


def test_engine_settings_are_checked_by_name() -> None:
    with pytest.raises(ConfigError, match="engine"):
        AgentConfig.defaults(engine={"kind": "fast"})
    with pytest.raises(ConfigError, match="engine"):
        AgentConfig.defaults(engine={"slots": 0})


# -- measured costs -------------------------------------------------------------------------


def test_measured_costs_are_medians_per_branch() -> None:
    # (A way with fewer than three rounds counts at its cheapest: one cold round misleads.)
    costs = MeasuredCosts(window=3)
    assert costs.get("score") is None
    costs.observe("generate", 0.8, 8)
    costs.observe("generate", 1.6, 8)
    costs.observe("generate", 0.0, 0)  # nothing written: not a measurement
    assert costs.get("generate") == pytest.approx(0.1)  # two rounds: the cheapest counts
    costs.observe("generate", 1.2, 8)
    assert costs.get("generate") == pytest.approx(0.15)  # three: their median
    for s in (0.5, 0.6, 0.7, 0.9):
        costs.observe("score", s, 1)
    assert costs.get("score") == pytest.approx(0.7)  # the last three only
    assert set(costs.as_dict()) == {"generate", "score"}


def test_auto_follows_what_each_method_measured() -> None:
    from forethought.models import ScriptedBackend
    from forethought.models._gate import ModelGate
    from forethought.planner import PlannerConfig
    from forethought.planner._forecaster import Forecaster
    from forethought.planner._planner import Planner
    from forethought.policies import PolicyTree, WorldState

    spec = AgentSpec.from_data(SPEC)
    space, schema = spec.event_space(), spec.action_schema()
    planner = Planner(
        backend=ScriptedBackend(),
        gate=ModelGate(),
        space=space,
        schema=schema,
        tree=PolicyTree(max_nodes=10),
        forecaster=Forecaster(space),
        description="d",
        state=WorldState({}),
        config=PlannerConfig(method="auto"),
        candidates=[schema.validate({"a": "stop"}), schema.validate({"a": "go"})],
    )
    predicted = planner.seconds_per_branch()
    cheaper = min(predicted, key=predicted.__getitem__)
    dearer = "generate" if cheaper == "score" else "score"
    assert planner.method() == cheaper
    # Measured on this backend, the predicted-cheaper way costs 100x what the other is predicted.
    planner.measured.observe(cheaper, predicted[dearer] * 100, 1)
    assert planner.method() == dearer
    assert planner.seconds_per_branch()[cheaper] == pytest.approx(predicted[dearer] * 100)


def test_a_way_that_lost_is_revisited_with_a_doubling_wait() -> None:
    costs = MeasuredCosts(revisit_branches=4)
    cost = {"generate": 0.5, "score": 0.05}
    assert costs.choose(cost) == "score"  # the cheapest
    for _ in range(3):
        costs.observe("score", 0.05, 1)
    assert costs.choose(cost) == "score"
    costs.observe("score", 0.05, 1)  # 4 branches written by scoring: generating is due
    assert costs.choose(cost) == "generate"
    assert costs.choose(cost) == "generate"  # until a round of it is measured
    costs.observe("generate", 4.0, 8)  # it lost again: the next revisit waits 8 branches
    for _ in range(7):
        assert costs.choose(cost) == "score"
        costs.observe("score", 0.05, 1)
    costs.observe("score", 0.05, 1)
    assert costs.choose(cost) == "generate"
    assert costs.choose({"generate": 0.01, "score": 0.05}) == "generate"  # it won: chosen
    assert costs.choose({"generate": 0.5}) == "generate"  # one way: nothing to revisit
