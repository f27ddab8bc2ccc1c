"""The waste a planner could not beat without knowing the trace, per shipped scenario.

    .venv/bin/python scripts/waste_reference.py

A reference planner that knows the stream's true event distribution *and which states the
trace will visit* plans, in every visited state, every key with non-zero probability (the
streams are uniform within a type, so no smaller set reaches 90 % of the mass). Its waste --
planned branches no event used, over planned -- is what a planner pays for not knowing which
keys come; ours pays that plus its speculation about states that did not come.

Where a type declares a ``tolerance`` the executor serves a key from a grid neighbour, so a
second figure plans, per visited state, a smallest neighbour cover instead of every key
(greedy: the key whose neighbourhood holds the most keys not yet answered, until every key
is) and counts a planned key used when it or a neighbour it serves was asked for.

A third figure is the reference every replay reports (``forethought.sims._waste.reference_waste``),
here at 90 % coverage: knowing the true distribution and how many events each state will see,
it plans in every state the likeliest keys until they hold 90 % of the stream's mass and
expects key k, of probability p, to be used with chance 1 - (1 - p)^n in a state that sees n
events.
"""

from __future__ import annotations

from collections import defaultdict

from forethought.policies import EventKey, EventSpace
from forethought.sims import load_scenario, shipped_scenarios
from forethought.sims._waste import event_distribution, reference_waste, state_visits


def _cover(space: EventSpace, keys: list[EventKey]) -> list[EventKey]:
    """A small set of keys that answers every key in ``keys`` itself or as a grid neighbour."""
    near = {k: {k, *(n for n, _ in space.neighbours(k) if n in keys)} for k in keys}
    left, out = set(keys), []
    while left:
        best = max(keys, key=lambda k: len(near[k] & left))
        out.append(best)
        left -= near[best]
    return out


def _served(space: EventSpace, key: EventKey, planned: set[EventKey]) -> EventKey | None:
    """The planned branch the executor would serve ``key`` from: itself, else its nearest
    planned neighbour."""
    if key in planned:
        return key
    return next((n for n, _ in space.neighbours(key) if n in planned), None)


def main() -> None:
    """Print one line per shipped scenario."""
    for path in shipped_scenarios():
        sc = load_scenario(path)
        space = sc.spec.event_space()
        gen = sc.generate
        weights = {t: spec.weight for t, spec in space.types.items()}
        if gen is not None and gen.weights is not None:
            weights = {t: gen.weights.get(t, 0.0) for t in space.types}
        possible = [k for k in space if weights[k.type] > 0]
        used: defaultdict[str, set[EventKey]] = defaultdict(set)
        visited: defaultdict[str, set[str]] = defaultdict(set)
        state = sc.spec.initial_state()
        answered = n = 0
        for ev in sc.events():
            if ev.state:
                state = state.patched(ev.state)
            n += 1
            key = space.key(ev.type, ev.params)
            if key is None:
                continue
            fp = state.fingerprint_for(key.type)
            used[fp].add(key)
            visited[key.type].add(fp)
            answered += weights[key.type] > 0
            state = state.after(space.types[key.type], key)
        planned = sum(len(visited[k.type]) for k in possible)
        hits = sum(k in used[fp] for k in possible for fp in visited[k.type])
        # the same, planning a neighbour cover per visited state and type
        by_type: defaultdict[str, list[EventKey]] = defaultdict(list)
        for k in possible:
            by_type[k.type].append(k)
        c_planned = c_hits = 0
        for t, keys in by_type.items():
            chosen = set(_cover(space, keys))
            for fp in visited[t]:
                served = {_served(space, k, chosen) for k in used[fp] if k.type == t}
                c_planned += len(chosen)
                c_hits += len(served & chosen)
        ref = reference_waste(event_distribution(sc), state_visits(sc), 0.9)
        print(
            f"{sc.name:<18} {n:>4} events {len(space):>3} keys: answers {answered / n:6.1%}, "
            f"waste {1 - hits / max(planned, 1):6.1%} ({hits}/{planned}), "
            f"with neighbours {1 - c_hits / max(c_planned, 1):6.1%} ({c_hits}/{c_planned}), "
            f"likeliest {ref.mass:.0%} of the mass, expected "
            f"{ref.waste:6.1%} ({ref.used:.1f}/{ref.planned})"
        )


if __name__ == "__main__":
    main()
