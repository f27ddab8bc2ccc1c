import math

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from forethought.policies import ConfigError, EventKey, EventSpace, InvalidState, WorldState
from forethought.policies._events import _Domain, _find
from forethought.policies.internals import Grid

SPECS = [
    {
        "type": "obstacle",
        "params": {
            "side": ["left", "right", "front"],
            "distance_m": {"min": 0.25, "max": 2.0, "step": 0.25},
        },
        "deadline_ms": 600,
        "weight": 3,
        "effects": {"zone": "blocked"},
        "tolerance": {"distance_m": 0.25},
    },
    {
        "type": "battery_low",
        "params": {"level": {"min": 0.05, "max": 0.3, "step": 0.05}},
        "deadline_ms": 2000,
        "effects": {"battery": "$level"},
    },
    {"type": "path_clear", "deadline_ms": 1000},
    {"type": "mode", "params": {"auto": [True, False], "n": [1, 2]}, "deadline_ms": 500},
]


@pytest.fixture(scope="module")
def space() -> EventSpace:
    return EventSpace.from_specs(SPECS)


def test_keys_enumerate_the_space(space: EventSpace) -> None:
    assert len(space) == 3 * 8 + 6 + 1 + 4
    assert sum(space.prior(k) for k in space) == pytest.approx(1.0)
    obstacle = space.key("obstacle", {"side": "left", "distance_m": 0.5})
    assert obstacle is not None
    assert space.prior(obstacle) == pytest.approx(3 / 6 / 24)


@pytest.mark.parametrize(
    ("params", "want"),
    [
        ({"side": "left", "distance_m": 0.6}, 0.5),
        ({"side": "left", "distance_m": 0.63}, 0.75),
        ({"side": "left", "distance_m": 0.25}, 0.25),
        ({"side": "left", "distance_m": 2.0}, 2.0),
        ({"side": "left", "distance_m": 1}, 1.0),
    ],
)
def test_snapping_to_the_nearest_grid_value(space: EventSpace, params: dict, want: float) -> None:
    key = space.key("obstacle", params)
    assert key is not None
    assert key.param("distance_m") == want
    assert key.describe() == f"obstacle: distance_m={want} side=left"


def test_grid_values_have_no_float_drift(space: EventSpace) -> None:
    key = space.key("battery_low", {"level": 0.15000000001})
    assert key is not None
    assert key.param("level") == 0.15
    assert key in set(space.keys())


@pytest.mark.parametrize(
    ("etype", "params"),
    [
        ("teleport", {}),
        ("obstacle", {"side": "up", "distance_m": 1.0}),
        ("obstacle", {"side": "left", "distance_m": 2.01}),
        ("obstacle", {"side": "left", "distance_m": 0.2}),
        ("obstacle", {"side": "left"}),
        ("obstacle", {"side": "left", "distance_m": 1.0, "extra": 1}),
        ("obstacle", {"side": "left", "distance_m": "near"}),
        ("obstacle", {"side": "left", "distance_m": float("nan")}),
        ("mode", {"auto": 1, "n": 1}),
        ("mode", {"auto": True, "n": True}),
    ],
)
def test_out_of_space(space: EventSpace, etype: str, params: dict) -> None:
    assert space.key(etype, params) is None


def test_keys_are_hashable_values(space: EventSpace) -> None:
    a = space.key("obstacle", {"distance_m": 0.5, "side": "left"})
    b = space.key("obstacle", {"side": "left", "distance_m": 0.52})
    assert a == b
    assert hash(a) == hash(b)
    assert EventKey.from_json(a.as_json()) == a  # type: ignore[union-attr]


def test_neighbours_within_tolerance(space: EventSpace) -> None:
    key = space.key("obstacle", {"side": "front", "distance_m": 1.0})
    assert key is not None
    near = [k.param("distance_m") for k, _ in space.neighbours(key)]
    assert sorted(near) == [0.75, 1.25]
    edge = space.key("obstacle", {"side": "front", "distance_m": 2.0})
    assert [k.param("distance_m") for k, _ in space.neighbours(edge)] == [1.75]  # type: ignore[arg-type]
    no_tol = space.key("battery_low", {"level": 0.1})
    assert list(space.neighbours(no_tol)) == []  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("specs", "field", "needle"),
    [
        (
            [{"type": "a", "params": {"x": []}, "deadline_ms": 1}],
            "events[0].params",
            "empty domain",
        ),
        (
            [{"type": "a", "params": {"x": {"min": 0, "max": 1, "step": 0.3}}, "deadline_ms": 1}],
            "events[0].params",
            "'x': Value error, step 0.3 does not divide",
        ),
        (
            [{"type": "a", "deadline_ms": 1}, {"type": "a", "deadline_ms": 2}],
            "events[1].type",
            "declared twice",
        ),
        (
            [{"type": "a", "params": {"x": [1]}, "deadline_ms": 1, "effects": {"s": "$y"}}],
            "events[0]",
            "$y",
        ),
        ([{"type": "a"}], "events[0].deadline_ms", "required"),
        ([{"type": "a", "deadline_ms": -5}], "events[0].deadline_ms", "greater than 0"),
        ([], "events", "non-empty"),
    ],
)
def test_bad_specs_name_the_field(specs: list, field: str, needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        EventSpace.from_specs(specs)
    assert info.value.field.startswith(field), info.value.field
    assert needle in str(info.value)


def test_fingerprint_is_stable_across_dict_order() -> None:
    a = WorldState({"zone": "aisle", "battery": 0.8, "pose": {"x": 1, "y": 2}})
    b = WorldState({"pose": {"y": 2, "x": 1}, "battery": 0.8, "zone": "aisle"})
    assert a.fingerprint == b.fingerprint
    assert a.fingerprint != WorldState({"zone": "dock", "battery": 0.8}).fingerprint


def test_fingerprint_covers_only_the_chosen_fields() -> None:
    a = WorldState({"zone": "aisle", "clock": 1}, fields=["zone"])
    b = WorldState({"zone": "aisle", "clock": 2}, fields=["zone"])
    assert a.fingerprint == b.fingerprint
    assert a != b


def test_effects_give_the_next_state(space: EventSpace) -> None:
    state = WorldState({"zone": "aisle", "battery": 0.8})
    low = space.key("battery_low", {"level": 0.1})
    assert low is not None
    after = state.after(space.types["battery_low"], low)
    assert after.data == {"zone": "aisle", "battery": 0.1}
    clear = space.key("path_clear")
    assert state.after(space.types["path_clear"], clear) is state  # type: ignore[arg-type]


def test_bad_states_are_refused() -> None:
    with pytest.raises(InvalidState, match="JSON object"):
        WorldState([1, 2])  # type: ignore[arg-type]
    with pytest.raises(InvalidState, match="larger than"):
        WorldState({"blob": "x" * 100}, max_bytes=50)
    with pytest.raises(InvalidState, match="JSON-serialisable"):
        WorldState({"f": object()})
    with pytest.raises(InvalidState):
        WorldState({"a": 1}).patched("nope")  # type: ignore[arg-type]


# A mixed list domain: texts, numbers (an int equal to a float), bools beside 1 and 0.
MIXED: list = ["left", "right", 1, 2.5, True, False, "1", 0]


@given(
    st.one_of(
        st.sampled_from(MIXED),
        st.text(max_size=3),
        st.integers(-2, 3),
        st.floats(allow_nan=True, allow_infinity=True),
        st.booleans(),
        st.none(),
    )
)
def test_a_list_domain_matches_as_the_scan_does(value: object) -> None:
    """The decision path's lookup for text values gives what the full scan gives, always."""
    assert _Domain.of(MIXED).match(value) == _find(MIXED, value)
    assert type(_Domain.of(MIXED).match(value)) is type(_find(MIXED, value))


@given(
    st.floats(0.0, 2.5)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.integers(-5, 15)
    | st.booleans()
)
def test_a_grid_domain_snaps_to_the_nearest_value_or_refuses(value: float) -> None:
    """Against its own reference: the nearest of the grid's values, None outside the range."""
    grid = Grid(min=0.25, max=2.0, step=0.25)
    got = _Domain.of(grid).match(value)
    x = float(value)
    if isinstance(value, bool) or not math.isfinite(x) or not 0.25 - 1e-9 <= x <= 2.0 + 1e-9:
        assert got is None
        return
    values = grid.values()
    near = sorted(abs(v - x) for v in values)
    assume(near[1] - near[0] > 1e-9)  # halfway between two values: either is right
    assert got == min(values, key=lambda v: abs(v - x))
