"""The shipped lab-door scenario: guard refusals by tier in the replay's figures and lines.

A scripted model (the replay's logic is the subject, not the model) that prefers the second
action it may write: under no guard that is ``{open, normal}``. The tree keys distances on a
0.5 m grid, so a reading of 0.8 m (the speed guard applies) finds the branch for 1.0 m (it did
not): the tree's answer is refused and the score tier answers with a slow one.
"""

from __future__ import annotations

from pathlib import Path

from forethought.models import ScriptedBackend
from forethought.sims import load_scenario, metrics, replay, table

SCENARIO = Path(__file__).resolve().parents[2] / "sims" / "scenarios" / "lab-door.yaml"


def test_the_lab_door_replay_counts_guard_refusals_by_tier_and_guard() -> None:
    scenario = load_scenario(SCENARIO)
    guards = scenario.spec.guard_set()
    runs = replay(
        scenario,
        lambda: ScriptedBackend(
            score_s=0.02, live_s=0.05, pick=1, action={"door": "open", "speed": "normal"}
        ),
        strategies=("tree", "hybrid"),
    )
    for run in runs.values():
        m = metrics(run)
        refused = m["guard_refusals"]
        guarded = [r for r in run.records if r.guarded]
        # Each refusal is on a record, and that record's answer came from a later tier.
        assert sum(sum(g.values()) for g in refused.values()) == sum(
            len(r.guarded) for r in guarded
        )
        order = ["tree", "score", "live", "default"]
        for r in guarded:
            assert r.as_json()["guarded"][0]["tier"] == r.guarded[0][0]
            assert order.index(r.tier) > max(order.index(t) for t, _ in r.guarded)
        # No record's action breaks a guard that reads only the event (state ones are
        # covered by the executor's own tests: the record does not keep the state).
        for r in run.records:
            params_only = [g for g in guards.guards if not any(s for s, _, _ in g.when)]
            for g in params_only:
                assert not g.applies(r.params, {}) or g.permits(r.action), (r.index, r.action)
    hybrid = metrics(runs["hybrid"])
    assert hybrid["guard_refusals"]["tree"]["slow-near-people"] >= 1
    assert "slow-near-people" in table(scenario, runs)
