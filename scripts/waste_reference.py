"""The waste a planner could not beat without knowing the trace, per shipped scenario.

    .venv/bin/python scripts/waste_reference.py

A reference planner that knows the stream's true event distribution *and which states the
trace will visit* plans, in every visited state, every key with non-zero probability (the
streams are uniform within a type, so no smaller set reaches 90 % of the mass). Its waste --
planned branches no event used, over planned -- is what a planner pays for not knowing which
keys come; ours pays that plus its speculation about states that did not come.
"""

from __future__ import annotations

from collections import defaultdict

from forethought.policies import EventKey
from forethought.sims import load_scenario, shipped_scenarios


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
        print(
            f"{sc.name:<18} {n:>4} events {len(space):>3} keys: answers {answered / n:6.1%}, "
            f"waste {1 - hits / max(planned, 1):6.1%} ({hits}/{planned})"
        )


if __name__ == "__main__":
    main()
