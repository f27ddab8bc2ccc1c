"""A live call's prediction on a server: its steps' spread added as a sum's, its prompt's
uncached part counted from the prefixes sent (forethought.models.backends._call_prediction)."""

from __future__ import annotations

import math

import pytest

from forethought.models import Prediction
from forethought.models.backends._call_prediction import SentPrefixes, live_call

PREFILL = Prediction(0.050, 0.080)
STEP = Prediction(0.0175, 0.025)


def test_the_median_is_the_medians_added() -> None:
    got = live_call(PREFILL, STEP, 13)
    assert got.p50 == pytest.approx(0.050 + 13 * 0.0175)


def test_the_steps_spread_grows_with_the_root_of_their_number() -> None:
    """13 steps whose p95 is 7.5 ms above their median: the call's p95 is the prefill's p95,
    13 medians and sqrt(13) x 7.5 ms; the p95s added would say 13 x 7.5 ms."""
    got = live_call(PREFILL, STEP, 13)
    assert got.p95 == pytest.approx(0.080 + 13 * 0.0175 + math.sqrt(13) * 0.0075)
    summed = PREFILL + Prediction(13 * STEP.p50, 13 * STEP.p95)
    assert summed.p95 - got.p95 == pytest.approx((13 - math.sqrt(13)) * 0.0075)


def test_one_step_is_the_p95s_added() -> None:
    summed, got = PREFILL + STEP, live_call(PREFILL, STEP, 1)
    assert (got.p50, got.p95) == pytest.approx((summed.p50, summed.p95))


def test_no_steps_is_the_prefill() -> None:
    assert live_call(PREFILL, STEP, 0) == PREFILL


def test_a_step_law_with_no_spread_adds_none() -> None:
    flat = Prediction(0.02, 0.02)
    assert live_call(PREFILL, flat, 10).p95 == pytest.approx(0.080 + 10 * 0.02)


def test_a_new_state_is_prefilled_whole_and_a_sent_one_only_for_its_event() -> None:
    sent = SentPrefixes(keep=2)
    state_a, state_b, state_c, own = [1, 2, 3, 4], [1, 2, 5, 6], [7, 8, 9], [10, 11]
    assert sent.uncached(state_a, own) == 6
    sent.sent(state_a)
    assert sent.uncached(state_a, own) == 2
    assert sent.uncached(state_b, own) == 6  # a shared opening is not the state
    sent.sent(state_b)
    sent.sent(state_a)  # sent again: the most recent now
    sent.sent(state_c)  # the least recently sent (b) is forgotten
    assert sent.uncached(state_a, own) == 2
    assert sent.uncached(state_b, own) == 6
    assert sent.uncached(state_c, own) == 2


def test_keep_must_be_positive() -> None:
    with pytest.raises(ValueError, match="keep must be at least 1"):
        SentPrefixes(keep=0)
