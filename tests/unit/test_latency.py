import random
import threading

import pytest

from forethought.models import LatencyModel, LatencyProfile


def test_fit_recovers_the_law_despite_outliers() -> None:
    rng = random.Random(1)
    model = LatencyModel()
    for _ in range(200):
        n = rng.randrange(8, 512)
        t = 0.02 + 0.0005 * n
        if rng.random() < 0.05:  # a stray slow pass: page fault, the other core busy
            t *= 4
        model.observe_prefill(n, t * rng.uniform(0.97, 1.03))
    for n in (16, 128, 400):
        want = 0.02 + 0.0005 * n
        got = model.prefill(n)
        assert got.p50 == pytest.approx(want, rel=0.06)
        assert got.p95 >= got.p50


def test_step_law_and_call_prediction() -> None:
    model = LatencyModel()
    for rows in (1, 2, 4, 8, 16) * 10:
        model.observe_step(rows, 0.050 + 0.003 * (rows - 1))
    assert model.step(1).p50 == pytest.approx(0.050, rel=0.02)
    assert model.step(16).p50 == pytest.approx(0.095, rel=0.02)
    for n in (10, 20, 40, 80) * 3:
        model.observe_prefill(n, 0.01 + 0.001 * n)
    call = model.call(prefill_tokens=40, steps=10)
    assert call.p50 == pytest.approx(0.05 + 10 * 0.05, rel=0.03)


def test_typical_steps_is_the_median_of_completed_actions() -> None:
    model = LatencyModel()
    assert model.typical_steps(default=7) == 7
    for s in (3, 4, 4, 5, 30):
        model.observe_action(s)
    assert model.typical_steps() == 4


def test_fixed_profile_ignores_observations() -> None:
    profile = LatencyProfile.from_figures(step_ms=8.6, prefill_us_per_token=50)
    model = LatencyModel(profile, fixed=True)
    before = model.step(1)
    model.observe_step(1, 5.0)
    assert model.step(1) == before
    assert model.step(1).p50 == pytest.approx(0.0086)
    assert model.call(prefill_tokens=0, steps=48).p50 == pytest.approx(0.0086 * 49, rel=1e-6)


def test_thread_safe_updates() -> None:
    model = LatencyModel()

    def feed() -> None:
        for i in range(300):
            model.observe_step(1 + i % 4, 0.05)
            model.step(2)

    threads = [threading.Thread(target=feed) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert model.samples[1] == 256  # the window keeps the most recent passes
    assert model.step(1).p50 == pytest.approx(0.05, rel=0.01)


def test_a_replayed_history_gives_the_same_fit() -> None:
    rng = random.Random(3)
    seen = LatencyModel()
    for _ in range(40):
        n = rng.randrange(8, 256)
        seen.observe_prefill(n, 0.03 + 0.0008 * n * rng.uniform(0.9, 1.2))
        rows = rng.choice((1, 4, 16))
        seen.observe_step(rows, 0.045 + 0.002 * (rows - 1) * rng.uniform(0.9, 1.2))
        seen.observe_action(rng.randrange(2, 9))
    history = seen.history()
    assert len(history.prefills) == 40
    assert len(history.steps) == 40
    again = LatencyModel()
    again.replay(history)
    assert again.history() == history
    assert again.profile() == seen.profile()
    assert again.typical_steps() == seen.typical_steps()
    for n, rows in ((16, 1), (200, 16)):
        assert again.call(n, 5, rows) == seen.call(n, 5, rows)
    assert again.observed == seen.observed == 80
