"""One door per layer: another layer reaches a layer through its ``__init__`` or its internals.

Each layer's ``internals`` module (pyproject's "one-door-per-layer" contract forbids the
other way in) re-exports the names the other layers use and the ``__init__`` keeps out of the
public API. Each name resolves to its definition and carries a docstring; importing the door
loads nothing it was not asked for; and a name is offered by one door only.
"""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest
from extras import needs
from test_public_surface import _docstring

DOORS = [
    "forethought.internals",
    "forethought.policies.internals",
    "forethought.models.internals",
    "forethought.planner.internals",
    "forethought.runtime.internals",
    "forethought.sims.internals",
]
# (module, extra) a door's names need to resolve: the local decoder's, the fleet's.
NEEDS = {
    "forethought.models.internals": [("torch", "local"), ("llguidance", "local")],
    "forethought.runtime.internals": [("nats", "fleet")],
}


def _layer(door: str) -> str:
    return door.rpartition(".")[0]


@pytest.mark.parametrize("door", DOORS)
def test_every_internal_name_resolves_to_its_definition_and_has_a_docstring(door: str) -> None:
    for module, extra in NEEDS.get(door, []):
        needs(module, extra)
    internals = importlib.import_module(door)
    assert sorted(internals.__all__) == sorted(internals._WHERE)
    undocumented = []
    for name in internals.__all__:
        defining = importlib.import_module(internals._WHERE[name], _layer(door))
        assert getattr(internals, name) is getattr(defining, name), name
        if not (_docstring(door, name) or "").strip():
            undocumented.append(name)
    assert not undocumented, f"{door}: no docstring on {undocumented}"


@pytest.mark.parametrize("door", DOORS)
def test_a_name_is_offered_by_one_door_only(door: str) -> None:
    # A name the layer's __init__ exports is imported from there: internals holds the rest.
    internals = importlib.import_module(door)
    public = set(importlib.import_module(_layer(door)).__all__)
    assert not set(internals.__all__) & public


@pytest.mark.parametrize("door", DOORS)
def test_opening_a_door_loads_nothing_behind_it(door: str) -> None:
    # Importing the door costs its layer's package and itself: a name loads on first use.
    code = (
        "import importlib, sys\n"
        f"importlib.import_module({_layer(door)!r})\n"
        "before = set(sys.modules)\n"
        f"importlib.import_module({door!r})\n"
        "print(sorted(set(sys.modules) - before))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True
    ).stdout.strip()
    assert out == repr([door])


def test_a_door_refuses_a_name_it_does_not_offer() -> None:
    import forethought.models.internals as internals

    with pytest.raises(AttributeError, match="no attribute 'MonotonicClock'"):
        _ = internals.MonotonicClock  # public: forethought.models offers it
