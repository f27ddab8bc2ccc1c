"""Fidelity: the share of emitted actions equal to the model's own, deadline-free answer.

For every distinct (state, event) a replay decided, one reference generation runs with no
deadline (compact, constrained, on a backend of its own), cached; a strategy's fidelity is the
share of its events whose emitted action equals that reference. A tree answer borrowed from a
neighbouring key, a scored candidate, a default: each shows here when it differs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from forethought.models import MonotonicClock

from ._records import StrategyRun
from ._scenario import Scenario

if TYPE_CHECKING:
    # The local model (torch): only named in annotations, so the sims import without it.
    from forethought.models import TransformersBackend

__all__ = ["add_references"]


def add_references(
    scenario: Scenario,
    runs: Mapping[str, StrategyRun],
    backend: TransformersBackend,
    cache: dict[tuple[str, str], dict[str, Any] | None] | None = None,
) -> int:
    """Fill each run's ``reference``; returns how many references there are.

    ``cache`` keeps the references between replays of the same scenario and model.
    """
    ref = backend.sharing(clock=MonotonicClock())
    schema = scenario.spec.action_schema()
    ref.prepare_sync(schema)
    cache = {} if cache is None else cache
    for run in runs.values():
        for r in run.records:
            key = (r.context, r.event_text)
            if key not in cache:
                g = ref.generate_sync(r.context, [r.event_text], schema, deadline=math.inf)[0]
                cache[key] = schema.readable(g.action) if g.action is not None else None
            action = cache[key]
            if action is not None:
                run.reference[r.index] = action
    return len(cache)
