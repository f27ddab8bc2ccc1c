"""Reference waste: what a planner that knew the stream could expect to waste, on the same trace.

A planner's waste (branches never used, over branches written) means little alone: a stream
whose keys are many and evenly likely wastes branches whatever plans them. The reference is
the expected waste of a planner that knows

* the true event distribution: the generator's (type weights, the stationary mix where one
  type follows another, parameters uniform over their domains), or for a recorded or written
  trace the whole trace's empirical one (a scenario with both mixes them by their counts);
* which states the trace visits, and how many events each sees;

and plans, in every visited state, the likeliest keys until they hold the share of events our
planner's tree answered (its coverage). A key of probability ``p`` in a state that sees ``n``
events is used with chance ``1 - (1 - p)^n``; the reference waste is one minus the expected
used branches over the branches planned. It is an expectation over the stream, not a count on
the trace: it needs no replay and no model.

``coverage per branch`` (events the tree answered / branches written) is the other side of
the same ledger: what each branch bought.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from forethought.policies import EventKey, EventSpace

from ._records import StrategyRun
from ._scenario import Generate, Scenario

__all__ = [
    "WasteReference",
    "event_distribution",
    "reference_waste",
    "state_visits",
    "waste_figures",
]

_STATIONARY_STEPS = 500
"""Power-iteration steps for the type mix of a stream where one type follows another."""


@dataclass(frozen=True, slots=True)
class WasteReference:
    """The reference planner's expected ledger at one coverage."""

    coverage: float
    """The share of in-space events it was asked to answer (our tree's)."""
    mass: float
    """The share its keys hold (at least ``coverage``: keys come whole)."""
    planned: int
    """Branches it writes: its keys of each type, in every state that type was seen in."""
    used: float
    """Branches it expects an event to use."""

    @property
    def waste(self) -> float:
        """Expected never-used branches over planned (0 when it plans nothing)."""
        return 1.0 - self.used / self.planned if self.planned else 0.0


def _type_mix(space: EventSpace, gen: Generate) -> dict[str, float]:
    """The generator's long-run share of each type (follow rules included)."""
    names = list(space.types)
    raw = (
        {t: gen.weights.get(t, 0.0) for t in names}
        if gen.weights is not None
        else {t: space.types[t].weight for t in names}
    )
    total = sum(raw.values())
    base = {t: w / total for t, w in raw.items()} if total > 0 else dict.fromkeys(names, 0.0)
    if not gen.follow:
        return base
    share = dict(base)
    for _ in range(_STATIONARY_STEPS):
        nxt = dict.fromkeys(names, 0.0)
        for a, pa in share.items():
            rule = gen.follow.get(a, {})
            rest = 1.0 - sum(rule.values())
            for b in names:
                nxt[b] += pa * (rule.get(b, 0.0) + rest * base[b])
        share = nxt
    return share


def event_distribution(scenario: Scenario) -> dict[EventKey, float]:
    """The stream's true key distribution (in-space keys; sums to 1 unless none is)."""
    space = scenario.spec.event_space()
    counts: Counter[EventKey] = Counter()
    for ev in scenario.trace:
        key = space.key(ev.type, ev.params)
        if key is not None:
            counts[key] += 1
    written = sum(counts.values())
    gen = scenario.generate
    generated = gen.count if gen is not None else 0
    total = written + generated
    if total == 0:
        return {}
    out = {k: c / total for k, c in counts.items()}
    if gen is not None:
        mix = _type_mix(space, gen)
        per_type = Counter(k.type for k in space)
        for k in space:
            if mix[k.type] > 0:
                out[k] = out.get(k, 0.0) + generated / total * mix[k.type] / per_type[k.type]
    return out


def state_visits(scenario: Scenario) -> Counter[tuple[str, str]]:
    """Events seen per (event type, the state as that type sees it), as the agent tracks it."""
    space = scenario.spec.event_space()
    state = scenario.spec.initial_state()
    seen: Counter[tuple[str, str]] = Counter()
    for ev in scenario.events():
        if ev.state:
            state = state.patched(ev.state)
        for t in space.types:
            seen[t, state.fingerprint_for(t)] += 1
        key = space.key(ev.type, ev.params)
        if key is not None:
            state = state.after(space.types[key.type], key)
    return seen


def reference_waste(
    p: dict[EventKey, float], visits: Counter[tuple[str, str]], coverage: float
) -> WasteReference:
    """Plan the likeliest keys of ``p`` until they hold ``coverage``, in every visited state."""
    chosen: list[EventKey] = []
    mass = 0.0
    if coverage > 0:
        # Ties are broken by key order: keys of equal chance have equal expected use.
        for k in sorted(p, key=lambda k: (-p[k], k.type, repr(k))):
            if mass >= coverage - 1e-9 or p[k] <= 0:
                break
            chosen.append(k)
            mass += p[k]
    by_type: dict[str, list[EventKey]] = {}
    for k in chosen:
        by_type.setdefault(k.type, []).append(k)
    planned, used = 0, 0.0
    for (t, _), n in visits.items():
        mine = by_type.get(t, [])
        planned += len(mine)
        used += sum(1.0 - (1.0 - p[k]) ** n for k in mine)
    return WasteReference(coverage=coverage, mass=mass, planned=planned, used=used)


def waste_figures(scenario: Scenario, run: StrategyRun) -> dict[str, float | int | None]:
    """The reference waste and coverage per branch of a planning run (for its planner figures).

    Coverage is the share of in-space events the tree answered; the reference plans to reach
    the same share.
    """
    planned = run.planner
    tree = sum(r.tier == "tree" for r in run.records)
    # Hits on branches kept from the executor's own answers are not the planner's coverage.
    tree -= int(planned.get("answer_hits") or 0)
    in_space = sum(not r.out_of_space for r in run.records)
    coverage = tree / in_space if in_space else 0.0
    ref = reference_waste(event_distribution(scenario), state_visits(scenario), coverage)
    generated = int(planned.get("generated") or 0)
    return {
        "tree_coverage": coverage,
        "coverage_per_branch": tree / generated if generated else None,
        "reference_waste": ref.waste,
        "reference_planned": ref.planned,
        "reference_used": ref.used,
        "reference_mass": ref.mass,
    }
