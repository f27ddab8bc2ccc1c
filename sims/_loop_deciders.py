"""How each strategy decides one event of a closed-loop episode.

live-naive queues FIFO on one model and runs each verbose call to completion (its state
follows the events' patches and effects, as in :mod:`._replay`); live, tree and hybrid ask the
configured :class:`Agent`. Both record the event's line on the strategy's run and return what
they decided; the episode loop (:mod:`._closed_loop`) decides what reaches the world, and when.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from forethought.models import ModelBackend
from forethought.models.internals import state_text
from forethought.runtime import Agent

from ._replay import CallMemo, _naive_call, _Strategy, decide_and_record
from ._trace_event import TraceEvent

__all__ = ["Decided", "NaiveDecider", "agent_decide"]


@dataclass(frozen=True, slots=True)
class Decided:
    """A strategy's decision: the action, the tier that wrote it, and whether in time."""

    action: dict[str, Any]
    tier: str
    met: bool


class NaiveDecider:
    """live-naive in closed loop: one model, FIFO, the verbose call run to completion."""

    def __init__(self, st: _Strategy, backend: ModelBackend, memo: CallMemo) -> None:
        self.st, self.backend, self.memo = st, backend, memo
        spec = st.scenario.spec
        self.schema = spec.action_schema()
        self.default = self.schema.readable(self.schema.validate(spec.default_action))
        self.state = spec.initial_state()
        self.space = spec.event_space()
        self.lock = asyncio.Lock()

    async def decide(self, i: int, ev: TraceEvent, stimulus: float) -> Decided:
        loop = asyncio.get_running_loop()
        async with self.lock:
            if ev.state:
                self.state = self.state.patched(ev.state)
            key = self.space.key(ev.type, ev.params)
            text = key.describe() if key is not None else ev.describe()
            spec = self.st.scenario.spec
            context = state_text(spec.description, self.state.to_json())
            g = await _naive_call(self.st, self.backend, self.memo, context, text, self.schema)
            action = self.schema.readable(g.action) if g.action is not None else self.default
            done = loop.time()
            met = done <= stimulus + self.st.scenario.deadline_ms(ev) / 1e3 + 1e-9
            tier = "live" if g.ok else "default"
            self.st.record(
                i,
                ev,
                latency_s=done - stimulus,
                tier=tier,
                action=action,
                met=met,
                context=context,
                event_text=text,
                state=self.state.data,
                out_of_space=key is None,
            )
            if key is not None and self.space.types[key.type].effects:
                self.state = self.state.after(self.space.types[key.type], key)
            return Decided(action, tier, met)


async def agent_decide(
    st: _Strategy, agent: Agent, i: int, ev: TraceEvent, stimulus: float
) -> Decided:
    d, _ = await decide_and_record(st, agent, i, ev, stimulus)
    return Decided(d.action, d.tier.value, d.met)
