import random

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from forethought.planner._forecaster import Forecaster
from forethought.policies import EventSpace


def make_space(n: int) -> EventSpace:
    return EventSpace.from_specs([{"type": f"e{i}", "deadline_ms": 500} for i in range(n)])


def test_priors_follow_weights() -> None:
    space = EventSpace.from_specs(
        [
            {"type": "a", "deadline_ms": 1, "weight": 3},
            {"type": "b", "deadline_ms": 1, "weight": 1},
        ]
    )
    f = Forecaster(space)
    top = f.top("s", 2)
    assert [k.type for k, _ in top] == ["a", "b"]
    assert top[0][1] == pytest.approx(0.75)


def test_learns_a_markov_chain_to_near_the_best_possible_accuracy() -> None:
    rng = np.random.default_rng(3)
    n = 8
    space = make_space(n)
    keys = space.keys()
    # A chain with structure: each event has one or two likely successors.
    P = rng.dirichlet(np.full(n, 0.3), size=n)
    # Best possible top-1 accuracy = sum_s pi(s) * max_t P(s, t), pi the stationary law.
    w, v = np.linalg.eig(P.T)
    pi = np.real(v[:, np.argmin(np.abs(w - 1))])
    pi /= pi.sum()
    best = float((pi * P.max(axis=1)).sum())
    f = Forecaster(space)
    s = 0
    hits = []
    for _ in range(1500):
        nxt = int(rng.choice(n, p=P[s]))
        guess = f.top("state", 1)[0][0]
        hits.append(guess == keys[nxt])
        f.observe(keys[nxt], "state")
        s = nxt
    late = float(np.mean(hits[500:]))
    assert late >= best - 0.05, (late, best)


def test_state_conditioned_counts_help_when_data_allows() -> None:
    space = make_space(4)
    k = space.keys()
    f = Forecaster(space)
    for _ in range(50):
        f.observe(k[0], "dock")
        f.observe(k[3], "aisle")
    # No usable previous-key signal: both follow each other equally.
    assert f.top("dock", 1, use_previous=False)[0][0] == k[0]
    assert f.top("aisle", 1, use_previous=False)[0][0] == k[3]


def test_out_of_space_events_are_ignored() -> None:
    space = make_space(3)
    f = Forecaster(space)
    f.observe(space.keys()[1], "s")
    f.observe(None, "s")
    assert f.previous == space.keys()[1]
    assert f.observed == 1


def test_coverage_sums_the_answered_mass() -> None:
    space = make_space(4)
    f = Forecaster(space)
    keys = space.keys()
    assert f.coverage("s", lambda k: False) == 0.0
    assert f.coverage("s", lambda k: True) == pytest.approx(1.0)
    assert f.coverage("s", lambda k: k in keys[:2]) == pytest.approx(0.5)
    assert sum(p for _, p in f.top("s", 4)) == pytest.approx(1.0)
    random.seed(0)


@given(
    st.lists(
        st.tuples(st.integers(0, 9), st.sampled_from(["s1", "s2"]), st.booleans()),
        min_size=1,
        max_size=60,
    )
)
def test_counting_at_the_next_read_learns_what_counting_at_once_learns(
    steps: list[tuple[int, str, bool]],
) -> None:
    """Observations are counted when the distribution is next read; what it then says is
    what a forecaster counting each observation at once says, reads interleaved anyhow."""
    space = EventSpace.from_specs(
        [
            {"type": "a", "deadline_ms": 1, "params": {"n": [0, 1, 2, 3]}},
            {"type": "b", "deadline_ms": 1, "weight": 2, "params": {"n": [0, 1, 2]}},
            {"type": "c", "deadline_ms": 1, "params": {"n": [0, 1, 2]}},
        ]
    )
    keys = space.keys()
    later, at_once = Forecaster(space), Forecaster(space)
    for index, state, read in steps:
        later.observe(keys[index], state)
        at_once.observe(keys[index], state)
        at_once.distribution(state)  # a read after every observation: each counted at once
        if read:
            np.testing.assert_array_equal(later.distribution(state), at_once.distribution(state))
    for state in ("s1", "s2"):
        np.testing.assert_array_equal(later.distribution(state), at_once.distribution(state))
        np.testing.assert_array_equal(
            later.type_distribution(state, use_previous=False),
            at_once.type_distribution(state, use_previous=False),
        )
    assert later.previous == at_once.previous == keys[steps[-1][0]]
