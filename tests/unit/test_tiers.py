"""The unit tier's guard: a test there marked or fixtured as heavy is named, others are not."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from tiers import Collected, unit_tier_violations

UNIT = Path("/repo/tests/unit")


def collected(path: str, markers: Iterable[str] = (), fixtures: Iterable[str] = ()) -> Collected:
    return Collected(
        f"{path}::test_x", Path("/repo") / path, frozenset(markers), frozenset(fixtures)
    )


def test_a_heavy_marker_or_fixture_under_unit_is_named() -> None:
    tests = [
        collected("tests/unit/test_a.py", markers={"model", "parametrize"}),
        collected("tests/unit/test_b.py", fixtures={"broker", "tmp_path"}),
        collected("tests/unit/test_c.py", fixtures={"model_cache"}),
        collected("tests/unit/test_d.py", markers={"parametrize"}, fixtures={"tmp_path"}),
    ]
    assert unit_tier_violations(tests, UNIT) == [
        "tests/unit/test_a.py::test_x: model",
        "tests/unit/test_b.py::test_x: broker",
        "tests/unit/test_c.py::test_x: model_cache",
    ]


def test_heavy_tests_in_the_other_tiers_are_theirs() -> None:
    tests = [
        collected("tests/model/test_a.py", markers={"model", "smollm2"}, fixtures={"model_cache"}),
        collected("tests/integration/test_b.py", markers={"broker", "server", "fleet"}),
    ]
    assert unit_tier_violations(tests, UNIT) == []
