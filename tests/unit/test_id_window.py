"""IdWindow: the event ids seen recently, bounded in time and in number."""

from __future__ import annotations

import pytest

from forethought.runtime._id_window import IdWindow


def test_an_id_is_held_for_its_window_from_its_first_sighting() -> None:
    ids = IdWindow(max_ids=10, window_s=5.0)
    ids.add("a", now=0.0)
    ids.add("a", now=3.0)  # held already: keeps its first time
    assert ids.seen_at("a") == 0.0
    ids.forget_old(4.9)
    assert "a" in ids
    ids.forget_old(5.0)
    assert "a" not in ids
    assert ids.seen_at("a") is None


def test_without_a_window_only_the_number_bounds_it() -> None:
    ids = IdWindow(max_ids=2)
    for i in range(3):
        ids.add(f"e{i}", now=0.0)
    ids.forget_old(1e9)
    assert len(ids) == 2
    assert "e0" not in ids
    assert ids.forgotten_early == 1


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [({"window_s": 0.0, "max_ids": 1}, "window_s"), ({"max_ids": 0}, "max_ids")],
)
def test_bad_bounds_are_refused_naming_the_field(kwargs: dict[str, float], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        IdWindow(**kwargs)  # type: ignore[arg-type]
