"""Choosing branches when a grid neighbour can answer for a key (issue 10: waste)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from forethought.planner._cover import BorrowAgreement, cover
from forethought.planner._lookahead import Pace
from forethought.policies import EventKey, EventSpace, PolicyNode, PolicyTree

SPACE = EventSpace.from_specs(
    [
        {
            "type": "parcel",
            "params": {"kg": {"min": 1, "max": 9, "step": 2}},
            "tolerance": {"kg": 2},
            "deadline_ms": 200,
        },
        {"type": "jam", "deadline_ms": 150},
    ]
)
FP = "state"


def kg(n: int) -> tuple[str, EventKey]:
    return FP, EventKey("parcel", (("kg", n),))


def node(key: EventKey, action: dict[str, Any]) -> PolicyNode:
    return PolicyNode(FP, key, action, "", 1.0, "m", 1, 0.0, 0.0)


def agreement_of(rate_same: bool, pairs: int) -> BorrowAgreement:
    """An agreement that has seen ``pairs`` neighbouring pairs, all alike or all different."""
    tree, agree = PolicyTree(), BorrowAgreement()
    for i in range(pairs):
        fp = f"s{i}"
        a, b = EventKey("parcel", (("kg", 1),)), EventKey("parcel", (("kg", 3),))
        tree.insert(PolicyNode(fp, a, {"lane": "north"}, "", 1.0, "m", 1, 0.0, 0.0))
        other = {"lane": "north"} if rate_same else {"lane": "south"}
        agree.observe(tree, SPACE, fp, b, other)
    return agree


def test_agreement_starts_undecided_and_learns_from_neighbouring_pairs() -> None:
    tree, agree = PolicyTree(), BorrowAgreement()
    assert agree.rate("parcel") == 0.5
    agree.observe(tree, SPACE, FP, kg(3)[1], {"lane": "north"})  # no neighbour yet
    assert agree.pairs("parcel") == 0
    tree.insert(node(kg(3)[1], {"lane": "north"}))
    agree.observe(tree, SPACE, FP, kg(5)[1], {"lane": "north"})  # kg 3 is a neighbour
    agree.observe(tree, SPACE, FP, kg(1)[1], {"lane": "south"})  # so it is of kg 1
    assert agree.pairs("parcel") == 2
    assert agree.rate("parcel") == pytest.approx(2 / 4)
    assert agreement_of(True, 20).rate("parcel") == pytest.approx(21 / 22)
    assert agreement_of(False, 20).rate("parcel") == pytest.approx(1 / 22)


def test_cover_takes_the_key_whose_neighbours_it_answers_first() -> None:
    need = {kg(n): 0.2 for n in (1, 3, 5, 7, 9)}
    order = cover(need, SPACE, agreement_of(True, 200))
    assert len(order) == 5  # every open branch comes back once
    first, gain = order[0]
    # kg 3, 5 and 7 each answer two neighbours; ties go to the first offered
    assert first == kg(3)
    assert gain == pytest.approx(0.2 + 0.2 * 2 * 201 / 202)
    # with neighbours that agree, kg 3 and kg 7 meet nearly all the need ...
    assert order[1][0] == kg(7)
    assert order[0][1] + order[1][1] == pytest.approx(1.0, rel=0.01)
    # ... and the other three almost none: a value floor leaves them out
    assert max(g for _, g in order[2:]) < 0.01


def test_cover_writes_every_key_where_neighbours_disagree() -> None:
    need = {kg(n): 0.2 for n in (1, 3, 5, 7, 9)}
    order = cover(need, SPACE, agreement_of(False, 200))
    met = sorted(g for _, g in order)
    assert met[0] > 0.19  # each branch still meets nearly all of its own need


def test_cover_without_tolerances_is_the_ranking_itself() -> None:
    need = {(FP, EventKey("jam", ())): 0.7, kg(1): 0.1, ("other", EventKey("jam", ())): 0.3}
    order = cover(need, SPACE, BorrowAgreement())
    assert [i for i, _ in order][:2] == [(FP, EventKey("jam", ())), ("other", EventKey("jam", ()))]
    # kg 1 has no open neighbour: its gain is its own need
    assert dict(order)[kg(1)] == pytest.approx(0.1)


def test_pace_late_is_the_poisson_chance_an_event_beats_its_batch() -> None:
    pace = Pace(gap_s=2.0, batch=2, batch_s=1.0)
    p = np.array([0.1, 0.5, 0.4])  # written in the order 0.5, 0.4 (first batch), 0.1 (second)
    late = pace.late(p, horizon=16)
    lam = np.array([2 * 1.0 / 2.0, 1.0 / 2.0, 1.0 / 2.0])
    assert late[0] == pytest.approx(1 - np.exp(-lam))
    assert late[1] == pytest.approx(1 - np.exp(-lam) * (1 + lam))
    assert (np.diff(late, axis=0) <= 0).all()  # a later event is less likely to beat it
    assert late.max(axis=1)[-1] >= 1e-3
    assert len(late) < 16
    # a planner slower than the horizon: every event there is late for every key
    assert Pace(gap_s=1.0, batch=1, batch_s=1e6).late(p, horizon=4) == pytest.approx(
        np.ones((4, 3))
    )
    assert math.isclose(float(Pace(gap_s=1.0, batch=8, batch_s=1e-6).late(p, 4).size), 0.0)


def test_pace_draws_arrivals_from_the_observed_gaps_so_a_burst_beats_the_batch() -> None:
    p = np.array([0.5, 0.3, 0.2])
    # Bursts of two: 150 ms inside a burst, 2.7 s between bursts (mean 1.425 s)
    bursty = (0.15, 2.7) * 8
    pace = Pace(gap_s=1.425, batch=3, batch_s=0.5, gaps=bursty)
    late = pace.late(p, horizon=16)
    # the first event after a state change comes inside the burst half the time: before the
    # batch ends at 0.5 s, where a Poisson stream of the same mean says 30 %
    assert late[0] == pytest.approx(np.full(3, 0.5))
    poisson = Pace(gap_s=1.425, batch=3, batch_s=0.5).late(p, horizon=16)
    assert poisson[0] == pytest.approx(np.full(3, 1 - math.exp(-0.5 / 1.425)))
    # two bursts' worth of gaps never fit in 0.5 s unless both are short: a quarter
    assert late[1] == pytest.approx(np.full(3, 0.25))
    # evenly spaced events that come after the batch is written are never late
    steady = Pace(gap_s=1.0, batch=3, batch_s=0.5, gaps=(1.0,) * 8)
    assert steady.late(p, horizon=16).size == 0


def test_pace_keeps_the_poisson_stream_until_enough_gaps_are_seen() -> None:
    p = np.array([0.6, 0.3, 0.1])
    few = Pace(gap_s=1.0, batch=1, batch_s=0.4, gaps=(0.1,) * 7)
    assert few.late(p, 8) == pytest.approx(Pace(gap_s=1.0, batch=1, batch_s=0.4).late(p, 8))
    enough = Pace(gap_s=1.0, batch=1, batch_s=0.4, gaps=(0.1,) * 8)
    assert enough.late(p, 8)[0] == pytest.approx(np.ones(3))  # a 0.1 s gap beats every batch
