"""ActedIds: the actuator's dedupe by event id, bounded in time and in size."""

from __future__ import annotations

import pytest

from forethought.runtime import ActedIds


def test_an_id_is_acted_on_once_within_the_window() -> None:
    acted = ActedIds(window_s=10.0)
    assert acted.first("e1", now=0.0)
    assert not acted.first("e1", now=3.0)
    assert acted.first("e2", now=4.0)
    assert not acted.first("e1", now=9.5)
    assert acted.stats.first == 2
    assert acted.stats.repeats == 2
    assert acted.stats.repeat_gap_max_s == pytest.approx(9.5)
    assert "e1" in acted
    assert len(acted) == 2


def test_ids_older_than_the_window_are_forgotten() -> None:
    acted = ActedIds(window_s=10.0)
    acted.first("e1", now=0.0)
    acted.first("e2", now=6.0)
    # At 12 s only e1 is past the window: a late repeat of it counts as new, e2 still not.
    assert acted.first("e1", now=12.0)
    assert not acted.first("e2", now=12.0)
    assert len(acted) == 2  # e2 and the new e1; the old e1 went
    assert acted.stats.forgotten_early == 0


def test_past_max_ids_the_oldest_is_forgotten_early_and_counted() -> None:
    acted = ActedIds(window_s=60.0, max_ids=2)
    for i, t in enumerate((0.0, 1.0, 2.0)):
        assert acted.first(f"e{i}", now=t)
    assert len(acted) == 2
    assert acted.stats.forgotten_early == 1
    assert "e0" not in acted
    # The bound broke the promise for e0: a repeat of it is acted on again, and the count
    # above is what says so.
    assert acted.first("e0", now=3.0)


@pytest.mark.parametrize(
    ("kwargs", "field"), [({"window_s": 0.0}, "window_s"), ({"max_ids": 0}, "max_ids")]
)
def test_bad_bounds_are_refused_naming_the_field(kwargs: dict[str, float], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        ActedIds(**kwargs)  # type: ignore[arg-type]
