"""The test tiers' rule: nothing under tests/unit needs a model, a broker or a server.

``tests/conftest.py`` applies it to every collected test, so a heavy test put in the unit tier
fails collection instead of slowing ``pytest tests/unit`` down (or making it need a build).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

# What a unit test may not be marked with (pyproject.toml registers them).
HEAVY_MARKERS = frozenset({"model", "smollm2", "broker", "server", "fleet"})
# Fixtures that load a model (every model fixture depends on model_cache) or start a broker.
HEAVY_FIXTURES = frozenset({"model_cache", "broker"})


@dataclass(frozen=True)
class Collected:
    """What the rule reads of one collected test."""

    nodeid: str
    path: Path
    markers: frozenset[str]
    fixtures: frozenset[str]


def unit_tier_violations(tests: Iterable[Collected], unit_dir: Path) -> list[str]:
    """One line per test under ``unit_dir`` that is marked or fixtured as heavy."""
    out = []
    for t in tests:
        if not t.path.is_relative_to(unit_dir):
            continue
        heavy = sorted((t.markers & HEAVY_MARKERS) | (t.fixtures & HEAVY_FIXTURES))
        if heavy:
            out.append(f"{t.nodeid}: {', '.join(heavy)}")
    return out
