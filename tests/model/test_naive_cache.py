"""live-naive and the references decoded once, in batches: the same answers and charges."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import yaml

from forethought.models import LatencyProfile, TransformersBackend
from forethought.sims import load_scenario, replay, write_decisions
from forethought.sims._naive_cache import (
    decode_naive,
    decode_references,
    naive_prompts,
)

SPEC: dict[str, Any] = {
    "name": "t",
    "description": "A test robot.",
    "action": {"type": "object", "properties": {"a": {"enum": ["stop", "go"]}}, "required": ["a"]},
    "default_action": {"a": "stop"},
    "state": {"zone": "aisle"},
    "events": [
        {"type": "ping", "deadline_ms": 150, "params": {"d": {"min": 0, "max": 2, "step": 0.5}}},
        {"type": "block", "deadline_ms": 400, "effects": {"zone": "blocked"}},
    ],
}


class _NoMemo(dict):  # type: ignore[type-arg]
    """A memo that keeps nothing: every naive call is computed, one row at a time."""

    def __setitem__(self, key: Any, value: Any) -> None:
        pass


def _scenario(tmp_path: Path) -> Any:
    trace = [
        {
            "at_ms": 250 * i,
            "type": "block" if i == 3 else "ping",
            "params": {} if i == 3 else {"d": (i * 0.5) % 2.5},
        }
        for i in range(9)
    ]
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({**SPEC, "trace": trace}))
    return load_scenario(path)


def test_naive_prompts_follow_effects_and_are_distinct(tmp_path: Path) -> None:
    prompts = naive_prompts(_scenario(tmp_path))
    assert len(prompts) == len(set(prompts))
    contexts = {c for c, _ in prompts}
    assert len(contexts) == 2  # before and after the block's effect
    assert sum("blocked" in c for c, _ in prompts) >= 1


@pytest.mark.model
def test_batched_naive_answers_charge_what_computing_each_call_charges(
    tiny_backend: TransformersBackend, tmp_path: Path
) -> None:
    scenario = _scenario(tmp_path)
    profile = LatencyProfile(0.01, 0.0005, 0.02, 0.001, spread95=1.3)  # random draws
    memo: dict[Any, Any] = {}
    decoded = decode_naive(scenario, tiny_backend, memo, batch=4)
    assert decoded == len(naive_prompts(scenario)) == len(memo)
    assert decode_naive(scenario, tiny_backend, memo) == 0  # cached: nothing decoded again
    blobs = []
    for m in (_NoMemo(), memo):
        runs = replay(scenario, tiny_backend, strategies=("live-naive",), profile=profile, memo=m)
        path = tmp_path / "naive.jsonl"
        write_decisions(path, runs)
        blobs.append(path.read_bytes())
        assert runs["live-naive"].model["passes"] > 0
    assert blobs[0] == blobs[1]


@pytest.mark.model
def test_batched_references_equal_one_call_each(
    tiny_backend: TransformersBackend, tmp_path: Path
) -> None:
    from forethought.models import MonotonicClock

    scenario = _scenario(tmp_path)
    profile = LatencyProfile(0.01, 0.0005, 0.02, 0.001)
    runs = replay(scenario, tiny_backend, strategies=("live",), profile=profile)
    cache: dict[Any, Any] = {}
    n = decode_references(scenario, [runs], tiny_backend, cache, batch=3)
    assert n == len(cache) > 1
    one = tiny_backend.sharing(clock=MonotonicClock())
    schema = scenario.spec.action_schema()
    for (context, text), action in cache.items():
        g = one.generate_sync(context, [text], schema, deadline=math.inf)[0]
        assert action == (schema.readable(g.action) if g.action is not None else None)
