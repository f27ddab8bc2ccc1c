"""A replay as an MCAP recording, for Foxglove.

:func:`record_replay` writes a replay's events, decisions (one per event and strategy, the same
JSON as ``--decisions`` writes, byte for byte), states and planner timeline on the channels
:class:`~forethought.runtime.McapRecorder` declares. (Reading a recording as a trace is
:mod:`._mcap`.)
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import orjson

from forethought.runtime import McapRecorder

from ._records import StrategyRun
from ._scenario import Scenario

__all__ = ["record_replay"]


def record_replay(
    path: str | Path,
    scenario: Scenario,
    runs: Mapping[str, StrategyRun],
    *,
    chunk_size: int = 16_384,
) -> int:
    """Write a replay to ``path``; returns the number of messages written.

    Log times are the replay's own (nanoseconds from its start): events at their stimulus,
    decisions when they were made, planner samples at their time, each strategy's in turn.
    """
    events = scenario.events()
    space = scenario.spec.event_space()
    state = scenario.spec.initial_state()
    with McapRecorder(path, chunk_size=chunk_size) as rec:
        rec.write("/forethought/state", state.data, 0)
        for i, ev in enumerate(events):
            at = int(ev.at_ms * 1e6)
            rec.write(
                "/forethought/events",
                {
                    "id": str(i),
                    "type": ev.type,
                    "params": ev.params,
                    "deadline_ms": scenario.deadline_ms(ev),
                },
                at,
            )
            before = state.fingerprint
            if ev.state:
                state = state.patched(ev.state)
            key = space.key(ev.type, ev.params)
            if key is not None:
                state = state.after(space.types[key.type], key)
            if state.fingerprint != before:
                rec.write("/forethought/state", state.data, at)
        for name, run in runs.items():
            for r in run.records:
                t = int((r.at_ms + r.latency_ms) * 1e6)
                rec.write(
                    "/forethought/decisions",
                    orjson.dumps(r.as_json(), option=orjson.OPT_SORT_KEYS),
                    t,
                )
            for seconds, coverage, busy in run.timeline:
                rec.write(
                    "/forethought/planner",
                    {"strategy": name, "coverage": coverage, "busy_fraction": busy},
                    int(seconds * 1e9),
                )
        return rec.messages
